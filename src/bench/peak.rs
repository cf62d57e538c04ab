//! A measured matmul peak: GFLOP/s of a large square `mm` on this libtorch at the current thread count,
//! the yardstick a model's GFLOP/s is rated against (the same method as the reference script's
//! `--matmul-peak`, run in-process).
use std::time::{Duration, Instant};

use tch::{Device, Kind, Tensor};

/// Best run of an `n × n` matmul at `kind` on `device` within `budget` (after two warm-ups). The
/// best, not the median: the peak is what the machine can do, and other load only slows it.
pub fn matmul_gflops(kind: Kind, n: i64, budget: Duration, device: Device) -> f64 {
    let _guard = tch::no_grad_guard();
    let a = Tensor::randn([n, n], (Kind::Float, Device::Cpu)).to_device(device).to_kind(kind);
    let b = Tensor::randn([n, n], (Kind::Float, Device::Cpu)).to_device(device).to_kind(kind);
    // On CUDA a launch returns at once: the clock stops when the device has finished.
    let finish = || crate::device::cuda::synchronize(device);
    for _ in 0..2 {
        let _ = a.mm(&b);
    }
    finish();
    let deadline = Instant::now() + budget;
    let mut best = f64::INFINITY;
    while Instant::now() < deadline {
        let started = Instant::now();
        let _ = a.mm(&b);
        finish();
        best = best.min(started.elapsed().as_secs_f64());
    }
    2.0 * (n as f64).powi(3) / best / 1e9
}
