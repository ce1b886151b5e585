// The emulator's runtime API (streams, events, memory, graphs by capture) and its cuBLAS
// SGEMM: host-side calls that queue work through Enqueue (emu_runtime.h). The fibers, the
// scheduler and the device instructions are in emu_runtime.cc.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "cuda/emu/emu_runtime.h"

// ---- runtime ------------------------------------------------------------------------------
struct EmuStream {
  bool capturing = false;
  bool invalidated = false;                  // a prohibited call during the capture
  std::vector<std::function<void()>> work;  // recorded while capturing
};
struct EmuEvent {};
struct EmuBlas {
  cudaStream_t stream = nullptr;
};
struct EmuGraph {
  std::vector<std::function<void()>> work;
};
struct EmuGraphExec {
  std::vector<std::function<void()>> work;
};

namespace {
int g_capturing = 0;  // streams capturing now
std::vector<EmuStream*> g_capturing_streams;

// A call that allocates, frees or waits for the device while a capture is open: an error
// that invalidates every open capture (the GPU forbids the synchronising ones; the
// emulator forbids allocations too, which the trainer's warm-up step must have made).
bool ProhibitedDuringCapture(const char* what) {
  if (g_capturing == 0) return false;
  std::fprintf(stderr, "emu: %s while a stream is capturing\n", what);
  for (EmuStream* s : g_capturing_streams) s->invalidated = true;
  return true;
}
}  // namespace

void colonnade::emu::Enqueue(cudaStream_t stream, std::function<void()> work) {
  if (stream != nullptr && stream->capturing) {
    stream->work.push_back(std::move(work));
  } else {
    work();
  }
}

const char* cudaGetErrorString(cudaError_t e) { return e == 0 ? "no error" : "emulated error"; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "CPU emulator");
  p->multiProcessorCount = 4;
  p->totalGlobalMem = size_t(1) << 32;
  p->major = 9;
  p->l2CacheSize = 1 << 20;
  p->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}
namespace {
cudaError_t HostAlloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
}  // namespace
cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (ProhibitedDuringCapture("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
  return HostAlloc(p, bytes);
}
cudaError_t cudaFree(void* p) {
  if (ProhibitedDuringCapture("cudaFree")) return cudaErrorStreamCaptureUnsupported;
  std::free(p);
  return cudaSuccess;
}
// Page-locked host memory is allocated by other threads (the data pipeline) at any time.
cudaError_t cudaMallocHost(void** p, size_t bytes) { return HostAlloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (ProhibitedDuringCapture("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
  std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind,
                            cudaStream_t s) {
  colonnade::emu::Enqueue(s, [dst, src, n] { std::memmove(dst, src, n); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (ProhibitedDuringCapture("cudaMemset")) return cudaErrorStreamCaptureUnsupported;
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  colonnade::emu::Enqueue(s, [p, v, n] { std::memset(p, v, n); });
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream;
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int) {
  return cudaStreamCreateWithFlags(s, flags);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -1;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  if (ProhibitedDuringCapture("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  if (ProhibitedDuringCapture("cudaDeviceSynchronize")) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *f = *t = size_t(1) << 32;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new EmuEvent;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) {
  if (ProhibitedDuringCapture("cudaEventQuery")) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  if (ProhibitedDuringCapture("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (s == nullptr || s->capturing) return cudaErrorIllegalState;  // no legacy-stream capture
  s->capturing = true;
  s->invalidated = false;
  s->work.clear();
  ++g_capturing;
  g_capturing_streams.push_back(s);
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  *graph = nullptr;
  if (s == nullptr || !s->capturing) return cudaErrorIllegalState;
  s->capturing = false;
  --g_capturing;
  g_capturing_streams.erase(
      std::find(g_capturing_streams.begin(), g_capturing_streams.end(), s));
  std::vector<std::function<void()>> work = std::move(s->work);
  s->work.clear();
  if (s->invalidated) return cudaErrorStreamCaptureInvalidated;
  *graph = new EmuGraph{std::move(work)};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  *status = s == nullptr || !s->capturing ? cudaStreamCaptureStatusNone
            : s->invalidated              ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  *exec = new EmuGraphExec{graph->work};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  colonnade::emu::Enqueue(s, [exec] {
    for (const auto& w : exec->work) w();
  });
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new EmuBlas;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
namespace {
void Sgemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha_v,
           const float* a, int lda, const float* b, int ldb, float beta_v, float* c, int ldc) {
  const float* alpha = &alpha_v;
  const float* beta = &beta_v;
  // Column-major: C(i,j) = alpha * sum_l op(A)(i,l) op(B)(l,j) + beta * C(i,j).
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int l = 0; l < k; ++l) {
        float av = ta == CUBLAS_OP_N ? a[i + (size_t)l * lda] : a[l + (size_t)i * lda];
        float bv = tb == CUBLAS_OP_N ? b[l + (size_t)j * ldb] : b[j + (size_t)l * ldb];
        s += (double)av * bv;
      }
      float& cv = c[i + (size_t)j * ldc];
      cv = *beta == 0.0f ? (float)(*alpha * s) : (float)(*alpha * s + *beta * cv);
    }
}
}  // namespace

// alpha and beta are host pointers (the default pointer mode): read at the call, as cuBLAS
// does, also when the call is captured.
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* a, int lda,
                           const float* b, int ldb, const float* beta, float* c, int ldc) {
  const float al = *alpha, be = *beta;
  colonnade::emu::Enqueue(h->stream, [=] { Sgemm(ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc); });
  return CUBLAS_STATUS_SUCCESS;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 0;
  return cudaSuccess;
}
