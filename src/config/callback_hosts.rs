//! `callback_hosts`: where webhooks may go. A token must not be able to make the box knock on any door of
//! the LAN, so a `callback_url` names a host listed here (by name, IP address or CIDR block), and a listed
//! name must not resolve to the box itself or to link-local addresses (cloud metadata) unless an address
//! entry allows that address.
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq)]
enum Rule {
    /// A host name, lower case.
    Name(String),
    /// An address block; a single address is a block of its full length.
    Block { base: IpAddr, prefix: u8 },
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallbackHosts(Vec<Rule>);

impl CallbackHosts {
    /// The config's list; each entry a host name, an IP address or `address/prefix`.
    pub fn parse(entries: &[String]) -> Result<CallbackHosts, String> {
        entries.iter().map(|entry| parse_rule(entry.trim())).collect::<Result<_, _>>().map(CallbackHosts)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a URL's host is listed: a name by name, an address by a block that holds it.
    pub fn allows_host(&self, host: &url::Host<&str>) -> bool {
        match host {
            url::Host::Domain(name) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                self.0.iter().any(|rule| matches!(rule, Rule::Name(listed) if *listed == name))
            }
            url::Host::Ipv4(ip) => self.holds(IpAddr::V4(*ip)),
            url::Host::Ipv6(ip) => self.holds(IpAddr::V6(*ip)),
        }
    }

    /// Whether a listed name may be reached at `ip`: an address block allows it, or it is not one of the
    /// addresses a name should never lead to (this box, link-local, unspecified, multicast).
    pub fn allows_resolved(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        if self.holds(ip) {
            return true;
        }
        let link_local = match ip {
            IpAddr::V4(v4) => v4.is_link_local() || v4.is_broadcast(),
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
        };
        !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || link_local)
    }

    fn holds(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|rule| match rule {
            Rule::Block { base, prefix } => in_block(ip, *base, *prefix),
            Rule::Name(_) => false,
        })
    }
}

fn parse_rule(entry: &str) -> Result<Rule, String> {
    if entry.is_empty() {
        return Err("an empty entry".into());
    }
    if let Some((address, prefix)) = entry.split_once('/') {
        let base: IpAddr = address.parse().map_err(|_| format!("`{entry}`: `{address}` is not an IP address"))?;
        let most = if base.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= most).ok_or_else(|| format!("`{entry}`: the prefix is 0 to {most}"))?;
        return Ok(Rule::Block { base, prefix });
    }
    if let Ok(ip) = entry.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        let prefix = if ip.is_ipv4() { 32 } else { 128 };
        return Ok(Rule::Block { base: ip, prefix });
    }
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
    if entry.chars().all(name_char) {
        return Ok(Rule::Name(entry.trim_end_matches('.').to_ascii_lowercase()));
    }
    Err(format!("`{entry}` is not a host name, an IP address or a CIDR block (no scheme, port or path)"))
}

fn in_block(ip: IpAddr, base: IpAddr, prefix: u8) -> bool {
    let (ip, base, bits) = match (ip, base.to_canonical()) {
        (IpAddr::V4(ip), IpAddr::V4(base)) => (u128::from(u32::from(ip)), u128::from(u32::from(base)), 32u32),
        (IpAddr::V6(ip), IpAddr::V6(base)) => (u128::from(ip), u128::from(base), 128u32),
        _ => return false,
    };
    let shift = bits - u32::from(prefix);
    shift >= bits || (ip >> shift) == (base >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(entries: &[&str]) -> CallbackHosts {
        CallbackHosts::parse(&entries.iter().map(|e| e.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn names_addresses_and_blocks() {
        let list = hosts(&["Hooks.lan", "10.1.0.0/16", "::1"]);
        assert!(list.allows_host(&url::Host::Domain("hooks.lan")));
        assert!(!list.allows_host(&url::Host::Domain("other.lan")));
        assert!(list.allows_host(&url::Host::Ipv4("10.1.200.3".parse().unwrap())));
        assert!(!list.allows_host(&url::Host::Ipv4("10.2.0.1".parse().unwrap())));
        assert!(list.allows_host(&url::Host::Ipv6("::1".parse().unwrap())));
        assert!(hosts(&["0.0.0.0/0"]).allows_host(&url::Host::Ipv4("192.168.1.9".parse().unwrap())));
        assert!(CallbackHosts::parse(&["http://x".into()]).is_err());
        assert!(CallbackHosts::parse(&["10.0.0.0/33".into()]).is_err());
    }

    #[test]
    fn a_listed_name_may_not_lead_to_the_box_itself_unless_an_address_allows_it() {
        let list = hosts(&["hooks.lan"]);
        assert!(list.allows_resolved("192.168.1.20".parse().unwrap()));
        for forbidden in ["127.0.0.1", "::1", "169.254.169.254", "0.0.0.0", "::ffff:127.0.0.1"] {
            assert!(!list.allows_resolved(forbidden.parse().unwrap()), "{forbidden}");
        }
        assert!(hosts(&["hooks.lan", "127.0.0.1"]).allows_resolved("127.0.0.1".parse().unwrap()));
    }
}
