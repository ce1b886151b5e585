// Backend registry: each device supplies an allocator, raw copies and an `Ops`
// implementation. The CPU backend is built in; the CUDA backend registers itself
// (colonnade::cuda::RegisterBackend) so that `core` never depends on `cuda`.
#pragma once

#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace colonnade {

class Ops;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyDeviceToDevice(void* dst, const void* src, size_t bytes) = 0;
  // Enqueues a host -> device copy behind the work already queued on this device and
  // returns at once: `src` must stay allocated and unchanged until that work has run
  // (a Synchronize, or any copy to the host, waits for it). From page-locked memory
  // (AllocateHostPinned) the copy runs at full link speed without host staging. Default:
  // the synchronous copy.
  virtual void CopyFromHostAsync(void* dst, const void* src, size_t bytes) {
    CopyFromHost(dst, src, bytes);
  }
  // Page-locked host memory for fast host -> device copies; nullptr when this device has
  // none to give (the CPU) or pinning failed, and the caller then uses ordinary memory.
  virtual void* AllocateHostPinned(size_t /*bytes*/) { return nullptr; }
  virtual void FreeHostPinned(void* /*ptr*/) {}
  // Waits for all queued work on this device.
  virtual void Synchronize() = 0;
  virtual Ops& ops() = 0;
  // Peak bytes held by the allocator since start (0 if not tracked).
  virtual size_t PeakBytes() const { return 0; }
};

// Returns the backend for `device`, or nullptr when it is not compiled in or has no
// usable hardware.
Backend* GetBackend(Device device);
void RegisterBackend(std::unique_ptr<Backend> backend);
inline Ops& OpsFor(Device device) { return GetBackend(device)->ops(); }

}  // namespace colonnade
