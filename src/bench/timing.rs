//! Seconds per call of something run several times in a row, as the benches report them.
use std::time::Instant;

/// The median and the best of a run's seconds; the best is the least disturbed by other processes on a
/// shared machine, the median says how typical that was.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Seconds {
    pub median: f64,
    pub best: f64,
}

impl Seconds {
    /// `None` for no samples.
    pub fn of(samples: &[f64]) -> Option<Seconds> {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let best = *sorted.first()?;
        let middle = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 { sorted[middle] } else { (sorted[middle - 1] + sorted[middle]) / 2.0 };
        Some(Seconds { median, best })
    }
}

/// Seconds `run` took.
pub fn seconds(run: impl FnOnce()) -> f64 {
    let started = Instant::now();
    run();
    started.elapsed().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_best() {
        assert_eq!(Seconds::of(&[3.0, 1.0, 2.0]), Some(Seconds { median: 2.0, best: 1.0 }));
        assert_eq!(Seconds::of(&[4.0, 1.0, 2.0, 3.0]), Some(Seconds { median: 2.5, best: 1.0 }));
        assert_eq!(Seconds::of(&[]), None);
    }
}
