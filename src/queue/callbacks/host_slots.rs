//! How many webhook tries go to one receiver host at once. Tries ran one at a time, oldest first, so ten
//! jobs whose receiver never answered held another job's webhook for eight and a half minutes; now they
//! run side by side, and a slow host holds at most its own share of them.
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Tries in flight per host.
#[derive(Clone, Default)]
pub struct HostSlots {
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

/// One try's place at its host, given back when dropped.
pub struct HostSlot {
    slots: HostSlots,
    host: String,
}

impl HostSlots {
    /// A place for a try at `host` when fewer than `per_host` are in flight there; `None` otherwise.
    pub fn take(&self, host: &str, per_host: usize) -> Option<HostSlot> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = in_flight.entry(host.to_string()).or_default();
        if *count >= per_host {
            return None;
        }
        *count += 1;
        Some(HostSlot { slots: self.clone(), host: host.to_string() })
    }
}

impl Drop for HostSlot {
    fn drop(&mut self) {
        let mut in_flight = self.slots.in_flight.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = in_flight.get_mut(&self.host) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.host);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_holds_at_most_its_share_and_gets_places_back() {
        let slots = HostSlots::default();
        let first = slots.take("slow.lan", 2).unwrap();
        let _second = slots.take("slow.lan", 2).unwrap();
        assert!(slots.take("slow.lan", 2).is_none(), "a third try at a host with two in flight");
        assert!(slots.take("fast.lan", 2).is_some(), "another host waits on none of them");
        drop(first);
        assert!(slots.take("slow.lan", 2).is_some(), "a finished try gives its place back");
    }
}
