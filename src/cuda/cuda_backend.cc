#include "cuda/cuda_backend.h"

#include <memory>
#include <mutex>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/log.h"
#include "cuda/caching_allocator.h"
#include "cuda/cuda_ops.h"
#include "cuda/conv/conv.h"
#include "cuda/kernels.h"
#include "cuda/port.h"

namespace colonnade::cuda {
namespace {

#if !defined(COLONNADE_CUDA_EMULATE)
// A fence as a CUDA event on the compute stream: with timing for the step timeline
// (kTimed), else without (cheaper to record and to wait on). Wait spins: a blocking wait
// (cudaEventBlockingSync) put the trainer's thread to sleep behind 16 busy data threads,
// and its late wake-ups starved the device (cifar10-18pct bf16 on the H200: 208k img/s
// instead of 280k).
class EventFence : public Fence {
 public:
  EventFence(cudaStream_t stream, bool timed) : timed_(timed) {
    COLONNADE_CUDA_CHECK(
        cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming));
    COLONNADE_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~EventFence() override { (void)cudaEventDestroy(event_); }
  EventFence(const EventFence&) = delete;
  EventFence& operator=(const EventFence&) = delete;
  void Wait() override { COLONNADE_CUDA_CHECK(cudaEventSynchronize(event_)); }
  double MillisecondsSince(const Fence& earlier) const override {
    const auto* e = dynamic_cast<const EventFence*>(&earlier);
    CHECK(e != nullptr) << "fences of different devices";
    CHECK(timed_ && e->timed_) << "MillisecondsSince of a fence not recorded as kTimed";
    float ms = 0;
    COLONNADE_CUDA_CHECK(cudaEventElapsedTime(&ms, e->event_, event_));
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
  bool timed_;
};
#endif

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int ordinal) : ordinal_(ordinal) {
    COLONNADE_CUDA_CHECK(cudaSetDevice(ordinal));
    cudaDeviceProp prop;
    COLONNADE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
    int driver = 0, runtime = 0;
    COLONNADE_CUDA_CHECK(cudaDriverGetVersion(&driver));
    COLONNADE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    description_ = absl::StrFormat(
        "%s, %d SMs, %.0f GiB, cc %d.%d, driver API %d.%d, runtime %d.%d", prop.name,
        prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor,
        driver / 1000, (driver % 1000) / 10, runtime / 1000, (runtime % 1000) / 10);
    COLONNADE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    COLONNADE_CUBLAS_CHECK(cublasCreate(&blas_));
    COLONNADE_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // Strict FP32: no TF32 tensor-core rounding even when NVIDIA_TF32_OVERRIDE asks for it.
    COLONNADE_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH));
    DeviceContext ctx;
    ctx.stream = stream_;
    ctx.sm_count = prop.multiProcessorCount;
    ctx.alloc = &alloc_;
    ops_ = std::make_unique<CudaOps>(ctx, blas_);
  }
  // Never destroyed (see backend.cc): tensors may outlive main.

  Device device() const override { return Device::kCUDA; }
  void* Allocate(size_t bytes) override { return alloc_.Allocate(bytes); }
  void Free(void* p) override { alloc_.Free(p); }
  void CopyToHost(void* dst, const void* src, size_t n) override {
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
    COLONNADE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void CopyFromHost(void* dst, const void* src, size_t n) override {
    // Synchronous: the caller may reuse or free its (possibly pinned) buffer on return.
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
    COLONNADE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void CopyFromHostAsync(void* dst, const void* src, size_t n) override {
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream_));
  }
  void CopyToHostAsync(void* dst, const void* src, size_t n) override {
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, stream_));
  }
  std::unique_ptr<Fence> RecordFence(FenceUse use) override {
#if defined(COLONNADE_CUDA_EMULATE)
    return std::make_unique<HostClockFence>();  // the emulator runs each launch at once
#else
    return std::make_unique<EventFence>(stream_, use == FenceUse::kTimed);
#endif
  }
  // Called from data-pipeline threads: select our GPU first, or the runtime would create
  // a context on GPU 0 for that thread (memory on another rank's GPU).
  void* AllocateHostPinned(size_t n) override {
    COLONNADE_CUDA_CHECK(cudaSetDevice(ordinal_));
    void* p = nullptr;
    if (cudaMallocHost(&p, n) == cudaSuccess) return p;
    (void)cudaGetLastError();  // pinning refused (e.g. a locked-memory limit): caller falls back
    return nullptr;
  }
  void FreeHostPinned(void* p) override {
    COLONNADE_CUDA_CHECK(cudaSetDevice(ordinal_));
    COLONNADE_CUDA_CHECK(cudaFreeHost(p));
  }
  void CopyDeviceToDevice(void* dst, const void* src, size_t n) override {
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream_));
  }
  void Synchronize() override { COLONNADE_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  Ops& ops() override { return *ops_; }
  size_t PeakBytes() const override { return alloc_.peak_bytes_reserved(); }
  size_t AvailableBytes() override {
#if defined(COLONNADE_CUDA_EMULATE)
    return 0;  // the emulator's memory is the host's
#else
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return free_bytes + (alloc_.bytes_reserved() - alloc_.bytes_in_use());
#endif
  }

  int ordinal() const { return ordinal_; }
  cudaStream_t stream() const { return stream_; }
  CachingAllocator& allocator() { return alloc_; }
  const std::string& description() const { return description_; }

 private:
  int ordinal_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  CachingAllocator alloc_;
  std::unique_ptr<CudaOps> ops_;
};

std::mutex g_mu;
CudaBackend* g_backend = nullptr;

}  // namespace

bool Available() { return DeviceCount() > 0; }

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

absl::Status RegisterBackend(int device_ordinal) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_backend != nullptr) {
    if (g_backend->ordinal() == device_ordinal) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrFormat(
        "the CUDA backend already uses GPU %d; one process drives one GPU (asked for %d)",
        g_backend->ordinal(), device_ordinal));
  }
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return absl::UnavailableError(absl::StrFormat(
        "no CUDA device found (%s)", err == cudaSuccess ? "count is 0" : cudaGetErrorString(err)));
  }
  if (device_ordinal < 0 || device_ordinal >= n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPU ordinal %d is out of range: this machine has %d GPU(s)", device_ordinal, n));
  }
  auto backend = std::make_unique<CudaBackend>(device_ordinal);
  g_backend = backend.get();
  colonnade::RegisterBackend(std::move(backend));
  return absl::OkStatus();
}

void* ComputeStream() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_backend ? static_cast<void*>(g_backend->stream()) : nullptr;
}

CachingAllocator* BackendAllocator() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_backend ? &g_backend->allocator() : nullptr;
}

MemoryStats GetMemoryStats() {
  std::lock_guard<std::mutex> lock(g_mu);
  MemoryStats s;
  if (!g_backend) return s;
  CachingAllocator& a = g_backend->allocator();
  s.bytes_in_use = a.bytes_in_use();
  s.peak_bytes_in_use = a.peak_bytes_in_use();
  s.bytes_reserved = a.bytes_reserved();
  s.peak_bytes_reserved = a.peak_bytes_reserved();
  s.device_allocations = a.num_device_allocations();
  return s;
}

void ResetPeakMemoryStats() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_backend) g_backend->allocator().ResetPeaks();
}

std::string DeviceDescription() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_backend ? g_backend->description() : std::string();
}

bool WgmmaConvolutions() { return TcWgmmaEnabled(); }

}  // namespace colonnade::cuda
