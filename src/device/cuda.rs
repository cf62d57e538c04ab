//! Device memory facts from libtorch's CUDA caching allocator and the TF32 switches (through
//! src/device/cuda_shim.cpp). All of it is `None`/no-op without a GPU or without the shim.
use tch::Device;

#[cfg(cuda_shim)]
mod ffi {
    extern "C" {
        pub fn vaebox_cuda_peak_allocated_bytes(device: i32, out: *mut u64) -> i32;
        pub fn vaebox_cuda_reset_peak(device: i32) -> i32;
        pub fn vaebox_cuda_memory_info(device: i32, free_bytes: *mut u64, total_bytes: *mut u64) -> i32;
        pub fn vaebox_cuda_reserved_bytes(device: i32, out: *mut u64) -> i32;
        pub fn vaebox_cuda_empty_cache() -> i32;
        pub fn vaebox_set_tf32(on: bool) -> i32;
        pub fn vaebox_pin_memory(tensor: *const std::ffi::c_void, out: *mut *mut std::ffi::c_void) -> i32;
    }
}

/// Whether the statistics below can be read at all (a CUDA build of libtorch and a GPU present).
/// The caching allocator sets up its per-device state when CUDA is first used, and until then every
/// query throws (on the H100 the first `calibrate` child asked before any tensor existed and got no
/// statistics), so the first call here makes one tiny tensor on the device.
fn available(device: Device) -> Option<i32> {
    match device {
        Device::Cuda(index) if cfg!(cuda_shim) && tch::Cuda::is_available() => {
            static INITIALISED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
            INITIALISED.get_or_init(|| drop(tch::Tensor::zeros([1], (tch::Kind::Float, device))));
            Some(index as i32)
        }
        _ => None,
    }
}

/// Waits until `device` has finished its queued work (a no-op on the CPU): a CUDA launch returns at
/// once, so a clock stopped before this bills the work to whatever runs next.
pub fn synchronize(device: Device) {
    if let Device::Cuda(index) = device {
        tch::Cuda::synchronize(index as i64);
    }
}

/// Peak bytes held by tensors on `device` since the last [`reset_peak`].
pub fn peak_allocated_bytes(device: Device) -> Option<u64> {
    let _index = available(device)?;
    #[cfg(cuda_shim)]
    {
        let mut out = 0u64;
        // SAFETY: plain C ABI; `out` outlives the call.
        return (unsafe { ffi::vaebox_cuda_peak_allocated_bytes(_index, &mut out) } == 0).then_some(out);
    }
    #[allow(unreachable_code)]
    None
}

pub fn reset_peak(device: Device) {
    let Some(_index) = available(device) else { return };
    #[cfg(cuda_shim)]
    // SAFETY: plain C ABI.
    unsafe {
        ffi::vaebox_cuda_reset_peak(_index);
    }
}

/// (free, total) bytes of `device` as the driver reports them.
fn memory_info(device: Device) -> Option<(u64, u64)> {
    let _index = available(device)?;
    #[cfg(cuda_shim)]
    {
        let (mut free, mut total) = (0u64, 0u64);
        // SAFETY: plain C ABI; both outputs outlive the call.
        return (unsafe { ffi::vaebox_cuda_memory_info(_index, &mut free, &mut total) } == 0).then_some((free, total));
    }
    #[allow(unreachable_code)]
    None
}

/// Bytes this process's caching allocator holds on `device`, in use or cached.
fn reserved_bytes(device: Device) -> Option<u64> {
    let _index = available(device)?;
    #[cfg(cuda_shim)]
    {
        let mut out = 0u64;
        // SAFETY: plain C ABI; `out` outlives the call.
        return (unsafe { ffi::vaebox_cuda_reserved_bytes(_index, &mut out) } == 0).then_some(out);
    }
    #[allow(unreachable_code)]
    None
}

/// (free, total) bytes of `device` for this process: the driver's figures, capped by the share that
/// `per_process_memory_fraction` in `PYTORCH_CUDA_ALLOC_CONF` gives it (free less what the process
/// already holds). The driver does not know that cap: a plan made for the free memory alone ran out of
/// memory on its first attempt, which took 33 s with cuDNN autotuning (an H200 capped at 7 GiB of 140,
/// docs/benchmarks.md).
pub fn memory_for_this_process(device: Device) -> Option<(u64, u64)> {
    let (free, total) = memory_info(device)?;
    let conf = std::env::var("PYTORCH_CUDA_ALLOC_CONF").ok();
    let fraction = conf.as_deref().and_then(process_memory_fraction);
    Some(under_fraction(free, total, fraction, reserved_bytes(device).unwrap_or(0)))
}

/// `per_process_memory_fraction` of an allocator configuration (`key:value` pairs separated by commas),
/// when it is a share in (0, 1].
fn process_memory_fraction(conf: &str) -> Option<f64> {
    conf.split(',')
        .filter_map(|pair| pair.split_once(':'))
        .filter(|(key, _)| key.trim() == "per_process_memory_fraction")
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .filter(|share| *share > 0.0 && *share <= 1.0)
        .last()
}

/// (free, total) within `fraction` of `total`, of which this process holds `reserved`.
fn under_fraction(free: u64, total: u64, fraction: Option<f64>, reserved: u64) -> (u64, u64) {
    match fraction {
        Some(share) => {
            let allowed = (total as f64 * share) as u64;
            (free.min(allowed.saturating_sub(reserved)), allowed)
        }
        None => (free, total),
    }
}

/// Returns cached blocks to the driver, so the next plan sees them as free.
pub fn empty_cache(device: Device) {
    if available(device).is_none() {
        return;
    }
    #[cfg(cuda_shim)]
    // SAFETY: plain C ABI.
    unsafe {
        ffi::vaebox_cuda_empty_cache();
    }
}

/// cuDNN's autotuning (`cudnn_benchmark`) for the job about to run: the configured switch.
pub fn set_autotuning(device: Device, on: bool) {
    if device.is_cuda() {
        tch::Cuda::cudnn_set_benchmark(on);
    }
}

/// After an out-of-memory the job retries in pieces of new shapes, and autotuning tries every
/// algorithm of each, some with large workspaces, in the little memory left: on an H100 a capped
/// decode took 62.6 s with it and 6.0 s without, through the same fallbacks (docs/benchmarks.md).
/// So it stays off for the rest of the job; the next job starts with the configured switch again.
pub fn stop_autotuning_after_out_of_memory() {
    if cfg!(cuda_shim) && tch::Cuda::is_available() {
        tch::Cuda::cudnn_set_benchmark(false);
    }
}

/// TF32 for float32 matmuls and convolutions on Ampere and newer (faster, ~10 mantissa bits).
/// Returns whether the switch was applied (false without CUDA).
pub fn set_tf32(on: bool) -> bool {
    if !cfg!(cuda_shim) || !tch::Cuda::is_available() {
        return false;
    }
    #[cfg(cuda_shim)]
    // SAFETY: plain C ABI.
    return unsafe { ffi::vaebox_set_tf32(on) } == 0;
    #[allow(unreachable_code)]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this CPU-only machine the shim is linked (a CUDA wheel) but there is no device: every
    /// query answers "unknown" instead of crashing inside libtorch.
    #[test]
    fn without_a_gpu_everything_is_unknown() {
        if tch::Cuda::is_available() {
            return;
        }
        assert_eq!(peak_allocated_bytes(Device::Cuda(0)), None);
        assert_eq!(memory_info(Device::Cuda(0)), None);
        assert_eq!(memory_for_this_process(Device::Cuda(0)), None);
        assert_eq!(peak_allocated_bytes(Device::Cpu), None);
        reset_peak(Device::Cuda(0));
        empty_cache(Device::Cuda(0));
        assert!(!set_tf32(true));
    }

    #[test]
    fn the_allocator_s_fraction_is_read_from_its_configuration() {
        assert_eq!(process_memory_fraction("per_process_memory_fraction:0.05"), Some(0.05));
        assert_eq!(process_memory_fraction("expandable_segments:True, per_process_memory_fraction: 0.5"), Some(0.5));
        assert_eq!(process_memory_fraction("expandable_segments:True"), None);
        // Out of (0, 1] the allocator refuses it too; the driver's free memory stays the limit.
        assert_eq!(process_memory_fraction("per_process_memory_fraction:0"), None);
        assert_eq!(process_memory_fraction("per_process_memory_fraction:1.5"), None);
        assert_eq!(process_memory_fraction("per_process_memory_fraction:half"), None);
    }

    #[test]
    fn a_fraction_caps_the_free_memory_less_what_the_process_holds() {
        const GIB: u64 = 1 << 30;
        // The H200 of the GPU check: 140 GiB free, 5% of it is 7 GiB, 1 GiB of weights already held.
        assert_eq!(under_fraction(140 * GIB, 140 * GIB, Some(0.05), GIB), (6 * GIB, 7 * GIB));
        // Other processes use the card: the driver's free memory is the smaller.
        assert_eq!(under_fraction(2 * GIB, 140 * GIB, Some(0.5), GIB), (2 * GIB, 70 * GIB));
        assert_eq!(under_fraction(140 * GIB, 140 * GIB, None, GIB), (140 * GIB, 140 * GIB));
        // Holding more than the share: nothing left, not an underflow.
        assert_eq!(under_fraction(140 * GIB, 140 * GIB, Some(0.01), 2 * GIB).0, 0);
    }
}

/// `tensor` (on the host) in page-locked memory, so that copies to a GPU can overlap with work, through the
/// call torch keeps (`pin_memory()` without a device; tch's passes one, deprecated since torch 2.11). `None`
/// without the shim or when libtorch refuses (the caller may fall back to tch's call).
pub fn pinned(tensor: &tch::Tensor) -> Option<tch::Tensor> {
    #[cfg(cuda_shim)]
    {
        let mut out: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `as_ptr` is tch's handle of a live tensor, the `torch::Tensor*` the shim reads; on success
        // `out` is a new handle of the same kind, which `from_ptr` takes ownership of.
        let ok = unsafe { ffi::vaebox_pin_memory(tensor.as_ptr().cast(), &mut out) } == 0;
        return (ok && !out.is_null()).then(|| unsafe { tch::Tensor::from_ptr(out.cast()) });
    }
    #[allow(unreachable_code)]
    {
        let _ = tensor;
        None
    }
}
