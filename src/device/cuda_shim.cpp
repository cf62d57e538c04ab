// The few libtorch CUDA facilities tch does not expose, behind a C ABI for src/device/cuda.rs:
// caching-allocator statistics (the peak a job really used), free device memory (the planner's
// default budget) and the TF32 switches. Every entry point catches C++ exceptions and reports
// failure through its return value; Rust only calls them after `tch::Cuda::is_available()`.
#include <cstdint>

#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <c10/core/CachingDeviceAllocator.h>

// The device-generic interface of the CUDA caching allocator: no CUDA headers needed to build.
static c10::DeviceAllocator* cuda_allocator() {
  return c10::getDeviceAllocator(c10::DeviceType::CUDA);
}

extern "C" {

// Peak bytes allocated by tensors on `device` since the last reset.
int vaebox_cuda_peak_allocated_bytes(int device, uint64_t* out) {
  try {
    // Index 0 is StatType::AGGREGATE: small and large pools together.
    const auto stats = cuda_allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    *out = static_cast<uint64_t>(stats.allocated_bytes[0].peak);
    return 0;
  } catch (...) {
    return -1;
  }
}

int vaebox_cuda_reset_peak(int device) {
  try {
    cuda_allocator()->resetPeakStats(static_cast<c10::DeviceIndex>(device));
    return 0;
  } catch (...) {
    return -1;
  }
}

// Free and total device memory as the driver sees them (other processes' use included).
int vaebox_cuda_memory_info(int device, uint64_t* free_bytes, uint64_t* total_bytes) {
  try {
    const auto info = cuda_allocator()->getMemoryInfo(static_cast<c10::DeviceIndex>(device));
    *free_bytes = info.first;
    *total_bytes = info.second;
    return 0;
  } catch (...) {
    return -1;
  }
}

// Bytes this process's caching allocator holds on `device` (in use or cached): what counts against
// a `per_process_memory_fraction` cap.
int vaebox_cuda_reserved_bytes(int device, uint64_t* out) {
  try {
    const auto stats = cuda_allocator()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    *out = static_cast<uint64_t>(stats.reserved_bytes[0].current);
    return 0;
  } catch (...) {
    return -1;
  }
}

// Cached blocks go back to the driver (after an out-of-memory retry, or between jobs).
int vaebox_cuda_empty_cache() {
  try {
    cuda_allocator()->emptyCache();
    return 0;
  } catch (...) {
    return -1;
  }
}

int vaebox_set_tf32(bool on) {
  try {
    at::globalContext().setAllowTF32CuBLAS(on);
    at::globalContext().setAllowTF32CuDNN(on);
    return 0;
  } catch (...) {
    return -1;
  }
}

// `self.pin_memory()` with no device: torch 2.11 deprecates the device argument, which tch's own call always
// passes (one warning per pinned tensor: 160 in a GPU server's log after a few jobs). `self` and `*out` are
// the `torch::Tensor*` handles tch's C API uses; tch takes ownership of `*out`.
int vaebox_pin_memory(const at::Tensor* self, at::Tensor** out) {
  try {
    *out = new at::Tensor(self->pin_memory());
    return 0;
  } catch (...) {
    return -1;
  }
}

}  // extern "C"
