//! How many connections the box holds open: `max_connections` in all (by default all the descriptors but
//! [`descriptors::RESERVED`]) and `max_connections_per_client` from one address. A connection over either
//! is answered at once with a 503 and closed, before any of it is read, so a flood of idle connections
//! costs the box one descriptor for a moment each and never the jobs' descriptors.
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::descriptors;
use crate::api::address_counts::AddressCounts;
use crate::error_codes as codes;

pub struct ConnectionLimits {
    /// `max_connections`; 0: the descriptor limit less the reserve.
    configured_total: u64,
    /// 0: no share per address.
    per_client: u64,
    open: Mutex<AddressCounts>,
}

/// Why a connection was refused: the answer's message.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    Total { limit: u64 },
    ClientShare { limit: u64 },
}

/// One open connection, counted until it is dropped.
pub struct ConnectionSlot {
    limits: Arc<ConnectionLimits>,
    client: IpAddr,
}

impl ConnectionLimits {
    pub fn new(max_connections: u32, max_connections_per_client: u32) -> Arc<ConnectionLimits> {
        Arc::new(ConnectionLimits { configured_total: max_connections.into(), per_client: max_connections_per_client.into(), open: Default::default() })
    }

    /// The connections the box holds at most now.
    pub fn total_limit(&self) -> u64 {
        let by_descriptors = descriptors::soft_limit().saturating_sub(descriptors::RESERVED).max(1);
        match self.configured_total {
            0 => by_descriptors,
            configured => configured.min(by_descriptors),
        }
    }

    /// A slot for a new connection from `client`, or why there is none.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnectionSlot, Refusal> {
        let limit = self.total_limit();
        let mut open = self.lock();
        if open.total() >= limit {
            return Err(Refusal::Total { limit });
        }
        if self.per_client > 0 && open.held(client) >= self.per_client {
            return Err(Refusal::ClientShare { limit: self.per_client });
        }
        open.add(client);
        Ok(ConnectionSlot { limits: self.clone(), client })
    }

    fn lock(&self) -> MutexGuard<'_, AddressCounts> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.limits.lock().release(self.client);
    }
}

impl Refusal {
    /// The whole answer, written before the connection is closed: a plain HTTP/1.1 503 with the API's error
    /// body, so a client sees the code and the message, not a reset.
    pub fn response(&self) -> Vec<u8> {
        let message = match self {
            Refusal::Total { limit } => format!("the box holds {limit} connections already (max_connections); try again shortly"),
            Refusal::ClientShare { limit } => {
                format!("this address holds {limit} connections already, its share (max_connections_per_client); close some, or reuse one")
            }
        };
        let body = serde_json::json!({"error": {"code": codes::TOO_MANY_CONNECTIONS, "message": message}}).to_string();
        format!(
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 5\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_per_address_and_a_total_then_slots_free_on_drop() {
        let limits = ConnectionLimits::new(3, 2);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = limits.admit(a).unwrap();
        let _second = limits.admit(a).unwrap();
        assert_eq!(limits.admit(a).err(), Some(Refusal::ClientShare { limit: 2 }));
        let _third = limits.admit(b).unwrap();
        assert_eq!(limits.admit(b).err(), Some(Refusal::Total { limit: 3 }));
        drop(first);
        assert!(limits.admit(b).is_ok());
    }
}
