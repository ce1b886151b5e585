// The CUDA backend: registers a Backend for Device::kCUDA whose Ops run the kernels of
// src/cuda (hand-written CHWN convolutions, cuBLAS for the fully connected layers) on one
// stream of one GPU, with a caching device allocator.
//
//   if (colonnade::cuda::Available()) {
//     absl::Status s = colonnade::cuda::RegisterBackend(/*device_ordinal=*/local_rank);
//   }
//   Tensor t(shape, Device::kCUDA);  // now allocates on that GPU
//
// In a build without CUDA (COLONNADE_WITH_CUDA undefined) the same calls compile: Available()
// is false and RegisterBackend returns an Unavailable error.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace colonnade::cuda {

#if defined(COLONNADE_WITH_CUDA) && COLONNADE_WITH_CUDA

inline constexpr bool kBuilt = true;  // this build has the CUDA backend
// True when the CUDA runtime finds at least one GPU.
bool Available();
// GPUs the CUDA runtime sees; 0 when there are none or the runtime fails. Programs choose a
// rank's GPU from it (Mesh::GpuIndex) without including CUDA headers.
int DeviceCount();
// Makes `device_ordinal` current for the calling process and registers the Backend for
// Device::kCUDA. Calling it again with the same ordinal is a no-op; another ordinal is an
// error (one GPU per process, as the rank layout in DESIGN.md prescribes).
absl::Status RegisterBackend(int device_ordinal);

// The stream every kernel and copy of the backend is queued on (a cudaStream_t), for code
// that must order its own work against it (NCCL collectives, event timing). Null before
// RegisterBackend.
void* ComputeStream();

class CachingAllocator;
// The registered backend's device allocator (null before RegisterBackend), for code of
// src/cuda that must manage blocks around a graph capture (step_graph.h).
CachingAllocator* BackendAllocator();

struct MemoryStats {
  size_t bytes_in_use = 0, peak_bytes_in_use = 0;
  size_t bytes_reserved = 0, peak_bytes_reserved = 0;
  size_t device_allocations = 0;  // cudaMalloc calls so far
};
MemoryStats GetMemoryStats();
void ResetPeakMemoryStats();
// "NVIDIA H200, 132 SMs, driver 13.0, runtime 13.0" (empty without a registered backend).
std::string DeviceDescription();
// Whether bf16 convolutions run on the wgmma kernels: a build for sm_90a on a compute
// capability 9.0 GPU, unless COLONNADE_TC_WGMMA=0 or SetTcWgmma(false) (src/cuda/TC_NOTES.md).
bool WgmmaConvolutions();

#else

inline constexpr bool kBuilt = false;
inline bool Available() { return false; }
inline int DeviceCount() { return 0; }
inline absl::Status RegisterBackend(int) {
  return absl::UnavailableError("this build has no CUDA backend (configure with CUDA)");
}
inline void* ComputeStream() { return nullptr; }
inline bool WgmmaConvolutions() { return false; }
inline std::string DeviceDescription() { return ""; }

#endif

}  // namespace colonnade::cuda
