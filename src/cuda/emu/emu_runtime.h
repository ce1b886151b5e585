// A CPU emulator of the small part of the CUDA runtime, the device language and cuBLAS
// that src/cuda uses, so that the kernels and their host glue can be checked on a machine
// without a GPU (GPU time is scarce; logic errors are cheaper to find here).
//
// Blocks run one after another. The threads of a block are user-space fibers (ucontext)
// switched at __syncthreads(); each barrier phase runs the threads in forward, reverse or
// shuffled order, so a missing barrier shows up as a wrong result. __shared__ becomes
// `static`, which is per-block memory because blocks run sequentially. Not emulated: warp
// intrinsics, atomics, timing. Build: COLONNADE_CUDA_EMULATION=ON (tests/cuda).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }

extern uint3 threadIdx;
extern uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

inline unsigned __umulhi(unsigned a, unsigned b) {
  return static_cast<unsigned>((static_cast<uint64_t>(a) * b) >> 32);
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline float __fdividef(float a, float b) { return a / b; }

namespace colonnade::emu {
void SyncThreads();
// Runs `body` once per thread of every block of `grid`.
void Launch(dim3 grid, dim3 block, const std::function<void()>& body);
// Thread order inside each barrier phase: 0 forward, 1 reverse, 2 shuffled (default 2).
void SetScheduleOrder(int order);
}  // namespace colonnade::emu

inline void __syncthreads() { colonnade::emu::SyncThreads(); }

// ---- runtime API ----------------------------------------------------------------------
typedef int cudaError_t;
enum : int { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNoDevice = 100 };
typedef struct EmuStream* cudaStream_t;
typedef struct EmuEvent* cudaEvent_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum { cudaStreamNonBlocking = 1 };
struct cudaDeviceProp {
  char name[256];
  int multiProcessorCount;
  size_t totalGlobalMem;
  int major, minor;
  int l2CacheSize;
  size_t sharedMemPerBlock;
};

const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);  // ordinary host memory here
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind k);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind k,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

// ---- cuBLAS (column-major SGEMM only) ------------------------------------------------------
typedef struct EmuBlas* cublasHandle_t;
typedef int cublasStatus_t;
enum : int { CUBLAS_STATUS_SUCCESS = 0 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2 };
cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* a, int lda,
                           const float* b, int ldb, const float* beta, float* c, int ldc);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaRuntimeGetVersion(int* v);
