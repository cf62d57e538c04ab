//! Where a pipeline's time went: seconds this thread spent reading input, computing and writing output,
//! as every op records them in its timings.
use std::time::Instant;

use crate::jobs::Timings;

/// Seconds this thread spent waiting on each stage.
#[derive(Default)]
pub struct StageClock {
    pub read: f64,
    pub compute: f64,
    pub write: f64,
}

impl StageClock {
    pub fn time<T>(slot: &mut f64, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = work();
        *slot += started.elapsed().as_secs_f64();
        out
    }

    pub fn record(&self, timings: &mut Timings, frames: u64, since: Instant) {
        timings.read = Some(self.read);
        timings.compute = Some(self.compute);
        timings.write = Some(self.write);
        timings.fps = Some(frames as f64 / since.elapsed().as_secs_f64().max(1e-9));
    }
}
