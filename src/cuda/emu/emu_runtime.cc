#include "cuda/emu/emu_runtime.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace colonnade::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;
  uint3 tid;
  bool done = false;
};

ucontext_t g_sched;
Fiber* g_current = nullptr;
const std::function<void()>* g_body = nullptr;
int g_order = 2;
std::mt19937 g_rng(12345);

void Trampoline() {
  (*g_body)();
  g_current->done = true;
  // Returning resumes uc_link (the scheduler).
}

}  // namespace

void SetScheduleOrder(int order) { g_order = order; }

void SyncThreads() {
  if (g_current == nullptr) return;  // called outside a launch
  swapcontext(&g_current->ctx, &g_sched);
}

void Launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024) {
    std::fprintf(stderr, "emu: bad block size %u\n", nt);
    std::abort();
  }
  gridDim = grid;
  blockDim = block;
  g_body = &body;
  std::vector<Fiber> fibers(nt);
  for (Fiber& f : fibers) f.stack.reset(new char[kStackBytes]);
  std::vector<unsigned> order(nt);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = uint3{bx, by, bz};
        for (unsigned t = 0; t < nt; ++t) {
          Fiber& f = fibers[t];
          f.tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          f.done = false;
          getcontext(&f.ctx);
          f.ctx.uc_stack.ss_sp = f.stack.get();
          f.ctx.uc_stack.ss_size = kStackBytes;
          f.ctx.uc_link = &g_sched;
          makecontext(&f.ctx, Trampoline, 0);
        }
        for (unsigned t = 0; t < nt; ++t) order[t] = t;
        int phase = 0;
        while (true) {
          if (g_order == 1 || (g_order == 2 && phase % 3 == 1)) std::reverse(order.begin(), order.end());
          if (g_order == 2 && phase % 3 == 2) std::shuffle(order.begin(), order.end(), g_rng);
          unsigned finished = 0, waiting = 0;
          for (unsigned t : order) {
            Fiber& f = fibers[t];
            if (f.done) continue;
            threadIdx = f.tid;
            g_current = &f;
            swapcontext(&g_sched, &f.ctx);
            g_current = nullptr;
            if (f.done) ++finished; else ++waiting;
          }
          if (waiting == 0) break;
          if (finished != 0) {
            std::fprintf(stderr, "emu: %u threads left the kernel while %u wait at a barrier\n",
                         finished, waiting);
            std::abort();
          }
          ++phase;
        }
      }
  g_body = nullptr;
}

}  // namespace colonnade::emu

// ---- runtime ------------------------------------------------------------------------------
struct EmuStream {};
struct EmuBlas {};

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
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k,
                            cudaStream_t) {
  return cudaMemcpy(dst, src, n, k);
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new EmuStream;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete s;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
cudaError_t cudaMemGetInfo(size_t* f, size_t* t) {
  *f = *t = size_t(1) << 32;
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
cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* a, int lda,
                           const float* b, int ldb, const float* beta, float* c, int ldc) {
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
