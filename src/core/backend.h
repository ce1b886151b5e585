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
