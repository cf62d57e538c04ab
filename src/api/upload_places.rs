//! Who may send a body now, and how slowly. `max_concurrent_uploads` places in all, at most
//! `max_uploads_per_client` of them held by one address (8 clients trickling a byte every 2 s once held
//! every place for a whole test), and a body slower than `min_upload_rate_kib_s` over a window of
//! [`RATE_WINDOW`] is cut (408 `upload-too-slow`): the idle timeout alone cuts only silence.
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The client's address, put on every request by the connection loop (`server::listen`).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

/// A body must carry `min_upload_rate_kib_s` KiB per second, averaged over this long.
pub const RATE_WINDOW: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub struct UploadPlaces {
    all: Arc<Semaphore>,
    per_client: Arc<Mutex<HashMap<IpAddr, u32>>>,
    per_client_limit: u32,
}

/// Why no place was given.
pub enum NoPlace {
    /// Every place is taken.
    Full,
    /// This address holds its share already.
    ClientShare { limit: u32 },
}

/// A place, given back when dropped.
pub struct UploadPlace {
    _permit: OwnedSemaphorePermit,
    client: Option<(IpAddr, Arc<Mutex<HashMap<IpAddr, u32>>>)>,
}

impl Drop for UploadPlace {
    fn drop(&mut self) {
        if let Some((addr, counts)) = &self.client {
            let mut counts = counts.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            if let Some(held) = counts.get_mut(addr) {
                *held -= 1;
                if *held == 0 {
                    counts.remove(addr);
                }
            }
        }
    }
}

impl UploadPlaces {
    /// `per_client_limit` 0: no share per address, only the total.
    pub fn new(total: u32, per_client_limit: u32) -> UploadPlaces {
        UploadPlaces { all: Arc::new(Semaphore::new(total.max(1) as usize)), per_client: Arc::default(), per_client_limit }
    }

    pub fn take(&self, client: Option<IpAddr>) -> Result<UploadPlace, NoPlace> {
        let client = client.filter(|_| self.per_client_limit > 0);
        if let Some(addr) = client {
            let mut counts = self.per_client.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let held = counts.entry(addr).or_insert(0);
            if *held >= self.per_client_limit {
                return Err(NoPlace::ClientShare { limit: self.per_client_limit });
            }
            let permit = self.all.clone().try_acquire_owned().map_err(|_| NoPlace::Full)?;
            *held += 1;
            return Ok(UploadPlace { _permit: permit, client: Some((addr, self.per_client.clone())) });
        }
        let permit = self.all.clone().try_acquire_owned().map_err(|_| NoPlace::Full)?;
        Ok(UploadPlace { _permit: permit, client: None })
    }
}

/// The body went on too slowly (`RateCheck`).
#[derive(Debug, thiserror::Error)]
#[error("the upload came in at {got_kib_s:.1} KiB/s, under the box's minimum of {min_kib_s} KiB/s")]
pub struct TooSlow {
    pub got_kib_s: f64,
    pub min_kib_s: u64,
}

/// The rate a body arrives at, checked by the readers as each chunk comes in: once a whole
/// [`RATE_WINDOW`] carried less than the minimum, the upload is cut.
pub struct RateCheck {
    min_kib_s: u64,
    window_start: Instant,
    window_bytes: u64,
}

impl RateCheck {
    /// `min_kib_s` 0: no minimum.
    pub fn new(min_kib_s: u64) -> RateCheck {
        RateCheck { min_kib_s, window_start: Instant::now(), window_bytes: 0 }
    }

    pub fn add(&mut self, bytes: usize) -> Result<(), TooSlow> {
        self.window_bytes += bytes as u64;
        let elapsed = self.window_start.elapsed();
        if self.min_kib_s == 0 || elapsed < RATE_WINDOW {
            return Ok(());
        }
        let got_kib_s = self.window_bytes as f64 / 1024.0 / elapsed.as_secs_f64();
        if got_kib_s < self.min_kib_s as f64 {
            return Err(TooSlow { got_kib_s, min_kib_s: self.min_kib_s });
        }
        self.window_start = Instant::now();
        self.window_bytes = 0;
        Ok(())
    }
}
