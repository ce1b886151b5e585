// Backend registry: each device supplies an allocator, raw copies and an `Ops`
// implementation. The CPU backend is built in; the CUDA backend registers itself
// (colonnade::cuda::RegisterBackend) so that `core` never depends on `cuda`.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "core/tensor.h"

namespace colonnade {

class Ops;

// A point in the work queued on a device (on CUDA an event on the compute stream). The
// host can wait until the work queued before it has run, and read the device time between
// two fences once both have passed: the trainer's step timeline (--profile_steps) and its
// metrics, read back without stopping the device between steps.
class Fence {
 public:
  virtual ~Fence() = default;
  // Blocks until the work queued before this fence has run.
  virtual void Wait() = 0;
  // Milliseconds of device time from `earlier` to this fence (both recorded on the same
  // device with Backend::FenceUse::kTimed, and both passed: call Wait first).
  virtual double MillisecondsSince(const Fence& earlier) const = 0;
};

// The fence of a device whose work runs synchronously on the calling thread (the CPU, the
// CUDA emulator): it has passed when it is recorded, and its time is the host clock's.
class HostClockFence : public Fence {
 public:
  HostClockFence() : at_(std::chrono::steady_clock::now()) {}
  void Wait() override {}
  double MillisecondsSince(const Fence& earlier) const override;

 private:
  std::chrono::steady_clock::time_point at_;
};

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
  // The other direction: enqueues a device -> host copy behind the queued work and
  // returns at once; `dst` holds the data once a fence recorded after it has passed.
  // Asynchronous only into page-locked memory (AllocateHostPinned). Default: synchronous.
  virtual void CopyToHostAsync(void* dst, const void* src, size_t bytes) {
    CopyToHost(dst, src, bytes);
  }
  // How a fence is used: kOrdering only waits (the cheapest kind on a GPU: an event
  // without timing); kTimed may also be asked MillisecondsSince (the step timeline).
  enum class FenceUse { kOrdering, kTimed };
  // A fence behind the work queued so far. Default: HostClockFence (synchronous devices).
  virtual std::unique_ptr<Fence> RecordFence(FenceUse /*use*/ = FenceUse::kOrdering) {
    return std::make_unique<HostClockFence>();
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
  // Bytes an allocation could get now (the device's free memory plus the allocator's
  // cached, unused blocks), so that a plan larger than the device is refused with a message
  // instead of failing inside the allocator; 0 when unknown (the CPU: the OS decides).
  virtual size_t AvailableBytes() { return 0; }
};

// Returns the backend for `device`, or nullptr when it is not compiled in or has no
// usable hardware.
Backend* GetBackend(Device device);
void RegisterBackend(std::unique_ptr<Backend> backend);
inline Ops& OpsFor(Device device) { return GetBackend(device)->ops(); }

}  // namespace colonnade
