//! Where the box's API listens, known to every process of it: an API process records its listening address
//! in the store before it serves (every address of its machine too when it listens on all of them) and again
//! every minute, and the webhook sender of any process, a worker's too, and the API at submission read them:
//! a webhook into the box's own API would act on the box as nobody (no token).
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::jobs::{JobStore, StoreError};

/// An API's addresses are recorded again this often...
const REFRESH: Duration = Duration::from_secs(60);
/// ...and count for this long after (an API gone for longer is not one any more; a refresh that fails for a
/// few minutes, in a database outage, does not make it forgotten).
const COUNTED: Duration = Duration::from_secs(600);

/// Records where this process's API listens, and keeps the record fresh while the process runs.
pub async fn record(store: Arc<dyn JobStore>, listen: SocketAddr) -> Result<(), StoreError> {
    let addresses: Vec<String> = addresses_of(listen, &machine_addresses()).iter().map(SocketAddr::to_string).collect();
    store.api_listening(&addresses).await?;
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REFRESH).await;
            if let Err(e) = store.api_listening(&addresses).await {
                tracing::warn!(error = %e, "cannot record where the API listens; trying again in a minute");
            }
        }
    });
    Ok(())
}

/// The addresses the box's APIs listen on.
pub async fn known(store: &dyn JobStore) -> Result<Vec<SocketAddr>, StoreError> {
    Ok(store.api_addresses(COUNTED).await?.iter().filter_map(|address| address.parse().ok()).collect())
}

/// The API address of `apis` a connection to `target` would reach, if any.
pub fn api_at(target: SocketAddr, apis: &[SocketAddr]) -> Option<SocketAddr> {
    apis.iter().copied().find(|api| reaches(target, *api, is_local))
}

/// Whether a connection to `target` reaches an API listening on `api`: the same port, and the address it
/// listens on, a loopback or unspecified address (taken to be the API's machine, wherever the sender runs),
/// or, when it listens on all addresses, any address of the sender's machine (`local`).
fn reaches(target: SocketAddr, api: SocketAddr, local: impl Fn(IpAddr) -> bool) -> bool {
    if target.port() != api.port() {
        return false;
    }
    let (ip, api_ip) = (target.ip().to_canonical(), api.ip().to_canonical());
    ip == api_ip || ip.is_loopback() || ip.is_unspecified() || (api_ip.is_unspecified() && local(ip))
}

/// Whether `ip` is an address of this machine: one a socket can be bound to.
fn is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// What an API listening on `listen` records: that address, and when it is unspecified (all addresses),
/// each of `machine`'s on its port, so that a worker on another machine knows them.
fn addresses_of(listen: SocketAddr, machine: &[IpAddr]) -> Vec<SocketAddr> {
    let mut all = vec![listen];
    if listen.ip().is_unspecified() {
        all.extend(machine.iter().map(|ip| SocketAddr::new(*ip, listen.port())));
    }
    all.dedup();
    all
}

/// The addresses of this machine's network interfaces (none when they cannot be read).
fn machine_addresses() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list of nodes, each read here before freeifaddrs
    // releases the list; an address is read as the structure its family names.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return found;
        }
        let mut node = list;
        while !node.is_null() {
            let address = (*node).ifa_addr;
            if !address.is_null() {
                match i32::from((*address).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*(address as *const libc::sockaddr_in);
                        found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*(address as *const libc::sockaddr_in6);
                        found.push(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            node = (*node).ifa_next;
        }
        libc::freeifaddrs(list);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_api_is_reached_on_its_port_at_its_address_loopback_or_any_local_one_when_it_listens_on_all() {
        let nowhere = |_: IpAddr| false;
        let here = |ip: IpAddr| ip == "192.168.1.5".parse::<IpAddr>().unwrap();
        assert!(reaches(at("10.0.0.2:8080"), at("10.0.0.2:8080"), nowhere));
        assert!(!reaches(at("10.0.0.2:9000"), at("10.0.0.2:8080"), nowhere), "another port");
        assert!(!reaches(at("10.0.0.3:8080"), at("10.0.0.2:8080"), here));
        for loopback in ["127.0.0.1:8080", "127.9.9.9:8080", "[::1]:8080", "0.0.0.0:8080", "[::ffff:127.0.0.1]:8080"] {
            assert!(reaches(at(loopback), at("10.0.0.2:8080"), nowhere), "{loopback}");
        }
        assert!(reaches(at("192.168.1.5:8080"), at("0.0.0.0:8080"), here), "listening on all: this machine's address");
        assert!(reaches(at("192.168.1.5:8080"), at("[::]:8080"), here));
        assert!(!reaches(at("192.168.1.6:8080"), at("0.0.0.0:8080"), here), "another machine");
        assert_eq!(api_at(at("10.0.0.2:8080"), &[at("10.0.0.9:8080"), at("10.0.0.2:8080")]), Some(at("10.0.0.2:8080")));
        assert_eq!(api_at(at("10.0.0.2:8081"), &[at("10.0.0.2:8080")]), None);
    }

    #[test]
    fn an_api_on_all_addresses_records_each_of_its_machine() {
        let machine: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), "192.168.1.5".parse().unwrap(), "fe80::1".parse().unwrap()];
        assert_eq!(addresses_of(at("127.0.0.1:8080"), &machine), [at("127.0.0.1:8080")]);
        assert_eq!(addresses_of(at("0.0.0.0:8080"), &machine), [at("0.0.0.0:8080"), at("127.0.0.1:8080"), at("192.168.1.5:8080"), at("[fe80::1]:8080")]);
        assert!(machine_addresses().iter().any(IpAddr::is_loopback), "this machine's interfaces: {:?}", machine_addresses());
    }
}
