#include "core/backend.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/cpu_ops.h"
#include "core/log.h"

namespace colonnade {
namespace {

class CpuBackend : public Backend {
 public:
  Device device() const override { return Device::kCPU; }
  void* Allocate(size_t bytes) override {
    // 64-byte alignment for vector loads; round the size up as aligned_alloc requires.
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    CHECK(p != nullptr) << "out of host memory allocating " << bytes << " bytes";
    return p;
  }
  void Free(void* p) override { std::free(p); }
  void CopyToHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyFromHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyDeviceToDevice(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
  }
  void Synchronize() override {}
  Ops& ops() override { return ops_; }

 private:
  CpuOps ops_;
};

std::mutex g_mu;
// Leaked on purpose: tensors in static objects may be freed after main returns.
Backend* g_backends[2] = {nullptr, nullptr};

}  // namespace

double HostClockFence::MillisecondsSince(const Fence& earlier) const {
  const auto* e = dynamic_cast<const HostClockFence*>(&earlier);
  CHECK(e != nullptr) << "fences of different devices";
  return std::chrono::duration<double, std::milli>(at_ - e->at_).count();
}

Backend* GetBackend(Device device) {
  std::lock_guard<std::mutex> lock(g_mu);
  int i = static_cast<int>(device);
  if (device == Device::kCPU && !g_backends[i]) g_backends[i] = new CpuBackend();
  return g_backends[i];
}

void RegisterBackend(std::unique_ptr<Backend> backend) {
  std::lock_guard<std::mutex> lock(g_mu);
  int i = static_cast<int>(backend->device());
  g_backends[i] = backend.release();  // an earlier one is leaked: its tensors may live on
}

}  // namespace colonnade
