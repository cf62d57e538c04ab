//! Device, precision and backend switches, decided once at start-up by the executor.
pub mod cuda;
pub mod host_memory;

use serde::{Deserialize, Serialize};
use tch::{Device, Kind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda(usize),
}

pub fn parse_device(s: &str) -> Option<DeviceChoice> {
    match s.trim() {
        "auto" => Some(DeviceChoice::Auto),
        "cpu" => Some(DeviceChoice::Cpu),
        "cuda" => Some(DeviceChoice::Cuda(0)),
        other => other.strip_prefix("cuda:")?.parse().ok().map(DeviceChoice::Cuda),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DtypeChoice {
    Auto,
    F32,
    Bf16,
    F16,
}

impl DtypeChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            DtypeChoice::Auto => "auto",
            DtypeChoice::F32 => "f32",
            DtypeChoice::Bf16 => "bf16",
            DtypeChoice::F16 => "f16",
        }
    }

    pub fn parse(s: &str) -> Option<DtypeChoice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(DtypeChoice::Auto),
            "f32" | "fp32" | "float32" => Some(DtypeChoice::F32),
            "bf16" | "bfloat16" => Some(DtypeChoice::Bf16),
            "f16" | "fp16" | "float16" | "half" => Some(DtypeChoice::F16),
            _ => None,
        }
    }

    /// bf16 pays on CUDA and on CPUs with native bf16 dot products; elsewhere it is emulated and slower.
    pub fn resolve(self, device: Device) -> Kind {
        match self {
            DtypeChoice::F32 => Kind::Float,
            DtypeChoice::Bf16 => Kind::BFloat16,
            DtypeChoice::F16 => Kind::Half,
            DtypeChoice::Auto if device.is_cuda() || cpu_has_native_bf16() => Kind::BFloat16,
            DtypeChoice::Auto => Kind::Float,
        }
    }
}

pub fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Float => "f32",
        Kind::BFloat16 => "bf16",
        Kind::Half => "f16",
        _ => "other",
    }
}

pub fn device_name(device: Device) -> String {
    match device {
        Device::Cpu => "cpu".into(),
        Device::Cuda(i) => format!("cuda:{i}"),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Read once: the flags do not change while we run.
pub(crate) fn cpu_has_native_bf16() -> bool {
    static NATIVE_BF16: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NATIVE_BF16.get_or_init(|| {
        std::fs::read_to_string("/proc/cpuinfo")
            .map(|info| info.lines().any(|l| l.starts_with("flags") && (l.contains(" avx512_bf16") || l.contains(" amx_bf16"))))
            .unwrap_or(false)
    })
}

/// Host allocations of this many bytes and more get their own mappings under [`HostAllocator::Bounded`].
pub const BOUNDED_MMAP_THRESHOLD: usize = 64 << 10;

/// How host (CPU) memory is handed out; only CPU jobs feel the difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostAllocator {
    /// Tensors of 64 KiB and more in their own mappings, returned when freed: RSS follows live
    /// tensors, so a memory budget (RSS growth) holds. Every large tensor is faulted in afresh.
    Bounded,
    /// glibc's default: freed tensors stay in the heap for reuse. Wan 2.1 full-size decode, 3 latent
    /// frames 128×128, fresh processes: f32 5.8–6.2 s at 737–790 MiB against 6.7 s at 491 MiB
    /// bounded; bf16 2.8–3.0 s at 533–606 MiB against 3.5–3.7 s at 246 MiB. Budgets do not hold.
    Fast,
}

impl HostAllocator {
    pub fn parse(s: &str) -> Option<HostAllocator> {
        match s {
            "bounded" => Some(HostAllocator::Bounded),
            "fast" => Some(HostAllocator::Fast),
            _ => None,
        }
    }

    /// Process-wide and once: the first call decides.
    pub fn apply(self) {
        if self == HostAllocator::Bounded {
            track_allocations_in_rss();
        }
    }
}

/// Picks the device and applies the backend switches; CUDA paths are skipped on machines without a GPU.
/// `host` applies on CPU only (on CUDA the budget is device memory).
pub fn init(choice: DeviceChoice, threads: i32, host: HostAllocator) -> Device {
    if threads > 0 {
        tch::set_num_threads(threads);
    }
    let device = match choice {
        DeviceChoice::Cpu => Device::Cpu,
        DeviceChoice::Cuda(i) => Device::Cuda(i),
        DeviceChoice::Auto if tch::Cuda::is_available() => Device::Cuda(0),
        DeviceChoice::Auto => Device::Cpu,
    };
    if !device.is_cuda() {
        host.apply();
    }
    if device.is_cuda() {
        // Convolution shapes repeat chunk after chunk, so cuDNN's autotuning is paid once per job shape.
        tch::Cuda::cudnn_set_benchmark(true);
    }
    device
}

/// Host tensors of 64 KiB and more get their own mappings, returned to the system when freed, so RSS
/// follows live tensors and a CPU memory budget (measured as RSS growth) means the same from job to
/// job. glibc's default keeps freed tensors in its heap, with a threshold that adapts upwards to
/// 32 MiB: the peak then depends on what ran before and how the heap fragmented (Wan 2.1 full size,
/// 3 latent frames 128×128 decoded in fresh processes: 447–523 MiB against 305 MiB here). A 1 MiB
/// threshold still left cache tensors of small tiles in the heap: 12 tiles peaked at 85–133 MiB
/// between identical runs, against 67.4–68.3 MiB at 64 KiB. Process-wide, once. The price is time
/// (see [`HostAllocator::Fast`]).
/// An explicit `MALLOC_MMAP_THRESHOLD_` in the environment wins (glibc has applied it already).
pub fn track_allocations_in_rss() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
            set_mmap_threshold(BOUNDED_MMAP_THRESHOLD);
            BOUNDED_THRESHOLD_SET.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
}

/// Whether [`track_allocations_in_rss`] set the threshold (an explicit environment value is left alone).
static BOUNDED_THRESHOLD_SET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For a DiT call under the bounded allocator, this is the mmap threshold: its activations are a few
/// MiB each, allocated and freed thousands of times per call, and under the 64 KiB threshold each one
/// is a fresh mapping faulted in page by page (89k minor faults per forward of the bench's mid-size
/// config, 41% of the matmul peak against 74% with the heap reusing them).
pub const CALL_MMAP_THRESHOLD: usize = 32 << 20;

/// While alive, freed tensors below [`CALL_MMAP_THRESHOLD`] stay in the heap for the next allocation;
/// on drop the bounded threshold is back and the heap is trimmed, so between calls resident memory
/// follows live tensors again. A no-op unless the bounded allocator set the threshold (on CUDA, under
/// `cpu_allocator = "fast"`, or with `MALLOC_MMAP_THRESHOLD_` in the environment).
pub struct HeapReuse {
    active: bool,
}

/// glibc's default: with the mmap threshold set by hand its trim threshold no longer adapts, so a heap
/// top this large is handed back on every `free`, and the next allocation faults it in again.
const DEFAULT_TRIM_THRESHOLD: usize = 128 << 10;

/// Calls inside a call (a job lent the executor at a chunk end): only the outermost puts the thresholds back.
static HEAP_REUSE_DEPTH: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl HeapReuse {
    pub fn for_call() -> HeapReuse {
        let active = BOUNDED_THRESHOLD_SET.load(std::sync::atomic::Ordering::Relaxed);
        if active {
            HEAP_REUSE_DEPTH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            set_mmap_threshold(CALL_MMAP_THRESHOLD);
            set_trim_threshold(usize::MAX >> 1);
        }
        HeapReuse { active }
    }
}

impl Drop for HeapReuse {
    fn drop(&mut self) {
        if self.active && HEAP_REUSE_DEPTH.fetch_sub(1, std::sync::atomic::Ordering::Relaxed) == 1 {
            set_mmap_threshold(BOUNDED_MMAP_THRESHOLD);
            set_trim_threshold(DEFAULT_TRIM_THRESHOLD);
            // SAFETY: returns free heap pages to the system; no pointers are involved.
            unsafe { libc::malloc_trim(0) };
        }
    }
}

fn set_mmap_threshold(bytes: usize) {
    // SAFETY: mallopt only changes glibc's allocation policy for later allocations.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes as libc::c_int) };
}

fn set_trim_threshold(bytes: usize) {
    let bytes = bytes.min(libc::c_int::MAX as usize);
    // SAFETY: as above.
    unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, bytes as libc::c_int) };
}

/// Hands memory that freed tensors left cached back to the system: the CUDA caching allocator's
/// blocks, and on the host glibc's free heap pages. For a retry after running out of memory.
pub fn release_cached_memory(device: Device) {
    cuda::empty_cache(device);
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Peak resident set of this process since the last reset, in bytes (Linux `VmHWM`).
pub fn peak_host_bytes() -> Option<u64> {
    process_status_bytes("VmHWM:")
}

/// Resident set of this process now, in bytes (Linux `VmRSS`).
pub fn resident_host_bytes() -> Option<u64> {
    process_status_bytes("VmRSS:")
}

fn process_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resets `VmHWM` to the current RSS so each job measures its own peak.
pub fn reset_peak_host_bytes() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings() {
        assert_eq!(parse_device("cuda:1"), Some(DeviceChoice::Cuda(1)));
        assert_eq!(parse_device("cuda"), Some(DeviceChoice::Cuda(0)));
        assert_eq!(parse_device("cpu"), Some(DeviceChoice::Cpu));
        assert_eq!(parse_device("gpu"), None);
        assert_eq!(parse_device("cuda:x"), None);
    }

    #[test]
    fn explicit_dtypes_do_not_depend_on_the_machine() {
        assert_eq!(DtypeChoice::parse("f32").unwrap().resolve(Device::Cpu), Kind::Float);
        assert_eq!(DtypeChoice::parse("bf16").unwrap().resolve(Device::Cpu), Kind::BFloat16);
        assert_eq!(DtypeChoice::parse("f8"), None);
    }
}
