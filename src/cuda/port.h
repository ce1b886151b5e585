// What src/cuda needs from the CUDA runtime and cuBLAS, or from the CPU emulator
// (src/cuda/emu) when COLONNADE_CUDA_EMULATE is defined, plus the launch and error
// helpers every kernel file shares.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(COLONNADE_CUDA_EMULATE)
#include "cuda/emu/emu_runtime.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace colonnade::cuda {

// Aborts with the failing call's text: a CUDA error inside the backend is a programming
// error or a broken device, neither of which the caller can recover from.
#define COLONNADE_CUDA_CHECK(expr)                                                  \
  do {                                                                              \
    cudaError_t err_ = (expr);                                                      \
    if (err_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d: CUDA error %d (%s) in %s\n", __FILE__, __LINE__, \
                   static_cast<int>(err_), cudaGetErrorString(err_), #expr);        \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

#define COLONNADE_CUBLAS_CHECK(expr)                                             \
  do {                                                                           \
    cublasStatus_t st_ = (expr);                                                 \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                          \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d in %s\n", __FILE__, __LINE__, \
                   static_cast<int>(st_), #expr);                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

// Launches `kernel(params)` (every kernel in src/cuda takes one parameter struct by
// value) and checks the launch. On the emulator the kernel runs on the CPU.
template <typename P>
inline void Launch(void (*kernel)(P), dim3 grid, dim3 block, cudaStream_t stream, const P& p) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#if defined(COLONNADE_CUDA_EMULATE)
  // The parameters by value: a captured launch runs after this call has returned.
  colonnade::emu::Enqueue(stream, [kernel, grid, block, p] {
    colonnade::emu::Launch(grid, block, [&] { kernel(p); });
  });
#else
  P copy = p;
  void* args[] = {&copy};
  COLONNADE_CUDA_CHECK(
      cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args, 0, stream));
#endif
}

// The same with `smem_bytes` of dynamic shared memory (COLONNADE_DYNAMIC_SMEM in the
// kernel). A launch above 48 KiB first raises the kernel's limit (cudaFuncSetAttribute).
template <typename P>
inline void LaunchDynamicSmem(void (*kernel)(P), dim3 grid, dim3 block, size_t smem_bytes,
                              cudaStream_t stream, const P& p) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::Enqueue(stream, [kernel, grid, block, smem_bytes, p] {
    colonnade::emu::SetDynamicSharedBytes(smem_bytes);
    colonnade::emu::Launch(grid, block, [&] { kernel(p); });
  });
#else
  if (smem_bytes > (48u << 10)) {
    // Idempotent and cheap next to a convolution; no cache, so no lock.
    COLONNADE_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(smem_bytes)));
  }
  P copy = p;
  void* args[] = {&copy};
  COLONNADE_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, args,
                                        smem_bytes, stream));
#endif
}

// A kernel parameter whose address the kernel takes (a TMA tensor map is read by the
// instruction from the parameter space): __grid_constant__ on the GPU.
#if defined(COLONNADE_CUDA_EMULATE)
#define COLONNADE_GRID_CONSTANT
#else
#define COLONNADE_GRID_CONSTANT __grid_constant__
#endif

// Declares `name`, the block's dynamic shared memory (unsigned char*, 128-byte aligned).
#if defined(COLONNADE_CUDA_EMULATE)
#define COLONNADE_DYNAMIC_SMEM(name) unsigned char* name = ::colonnade::emu::DynamicShared()
#else
#define COLONNADE_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

// Unsigned division by a run-time constant with a multiply and a shift (Granlund and
// Montgomery), for index arithmetic in inner loops. Valid for dividends below 2^31.
struct FastDiv {
  uint32_t d = 1, m = 0, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    s = 0;
    while ((uint64_t(1) << s) < divisor) ++s;
    m = static_cast<uint32_t>(((uint64_t(1) << 32) * ((uint64_t(1) << s) - divisor)) / divisor + 1);
  }
};

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)
__device__ __forceinline__ int Div(int n, const FastDiv& f) {
  uint32_t t = __umulhi(static_cast<uint32_t>(n), f.m);
  return static_cast<int>((t + static_cast<uint32_t>(n)) >> f.s);
}
__device__ __forceinline__ int IMin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int IMax(int a, int b) { return a > b ? a : b; }
#endif

// Asynchronous global -> shared copies (sm_80+ cp.async): 16 or 4 bytes, zero-filled when
// `ok` is false (the source is then not read). Commit closes a group of copies; Wait<N>
// blocks until at most N of this thread's groups are still in flight. On the emulator a
// copy lands at a random moment between its issue and its wait, so both the waits and the
// barriers around the copies are checked.
#if defined(COLONNADE_CUDA_EMULATE)
inline void CpAsync16(void* smem, const void* gmem, bool ok) {
  colonnade::emu::CpAsync(smem, gmem, 16, ok ? 16 : 0);
}
inline void CpAsync4(void* smem, const void* gmem, bool ok) {
  colonnade::emu::CpAsync(smem, gmem, 4, ok ? 4 : 0);
}
inline void CpAsyncCommit() { colonnade::emu::CpAsyncCommit(); }
template <int N>
inline void CpAsyncWait() {
  colonnade::emu::CpAsyncWait(N);
}
#elif defined(__CUDACC__)
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool ok) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem),
               "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void CpAsync4(void* smem, const void* gmem, bool ok) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem),
               "r"(ok ? 4 : 0));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace colonnade::cuda
