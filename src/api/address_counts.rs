//! How many of something (connections, event streams, upload places) each address holds, and all of them
//! together: the one tally behind every per-address share. An address that holds none has no entry, so the
//! map holds only the addresses holding something now.
use std::collections::HashMap;
use std::net::IpAddr;

#[derive(Debug, Default)]
pub struct AddressCounts {
    held: HashMap<IpAddr, u64>,
    total: u64,
}

impl AddressCounts {
    /// What `addr` holds now.
    pub fn held(&self, addr: IpAddr) -> u64 {
        self.held.get(&addr).copied().unwrap_or(0)
    }

    /// What every address holds together.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn add(&mut self, addr: IpAddr) {
        *self.held.entry(addr).or_insert(0) += 1;
        self.total += 1;
    }

    /// One fewer held by `addr` (nothing when it holds none).
    pub fn release(&mut self, addr: IpAddr) {
        if let Some(count) = self.held.get_mut(&addr) {
            *count -= 1;
            self.total -= 1;
            if *count == 0 {
                self.held.remove(&addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_address_and_in_all_and_forgets_an_address_at_none() {
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut counts = AddressCounts::default();
        counts.add(a);
        counts.add(a);
        counts.add(b);
        assert_eq!((counts.held(a), counts.held(b), counts.total()), (2, 1, 3));
        counts.release(b);
        counts.release(b);
        assert_eq!((counts.held(b), counts.total()), (0, 2));
        assert!(!counts.held.contains_key(&b));
    }
}
