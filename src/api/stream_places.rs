//! Open `/events` streams: each holds a connection for as long as its job runs (hours), so they have a share
//! of their own, `max_event_streams_per_client` per address and half the box's connections in all, leaving
//! the rest for requests that end. Over either the stream is refused with 429 `too-many-streams`.
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::address_counts::AddressCounts;
use super::error::ApiError;

#[derive(Clone)]
pub struct StreamPlaces {
    inner: Arc<Places>,
}

struct Places {
    /// 0: no share per address.
    per_client: u64,
    total: u64,
    open: Mutex<AddressCounts>,
}

/// One open stream, counted until it is dropped (with the stream).
pub struct StreamPlace {
    places: Arc<Places>,
    client: IpAddr,
}

impl StreamPlaces {
    pub fn new(per_client: u32, total: u64) -> StreamPlaces {
        StreamPlaces { inner: Arc::new(Places { per_client: per_client.into(), total: total.max(1), open: Default::default() }) }
    }

    pub fn take(&self, client: IpAddr) -> Result<StreamPlace, ApiError> {
        let places = &self.inner;
        let mut open = places.lock();
        if places.per_client > 0 && open.held(client) >= places.per_client {
            return Err(ApiError::TooManyStreams(format!(
                "this address has {} event streams open, its share (max_event_streams_per_client); close one, or poll GET /v1/jobs/{{id}}",
                places.per_client
            )));
        }
        if open.total() >= places.total {
            return Err(ApiError::TooManyStreams(format!("the box has {} event streams open, all it keeps; poll GET /v1/jobs/{{id}} meanwhile", places.total)));
        }
        open.add(client);
        Ok(StreamPlace { places: places.clone(), client })
    }
}

impl Places {
    fn lock(&self) -> MutexGuard<'_, AddressCounts> {
        self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for StreamPlace {
    fn drop(&mut self) {
        self.places.lock().release(self.client);
    }
}
