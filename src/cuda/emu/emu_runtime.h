// A CPU emulator of the small part of the CUDA runtime, the device language and cuBLAS
// that src/cuda uses, so that the kernels and their host glue can be checked on a machine
// without a GPU (GPU time is scarce; logic errors are cheaper to find here).
//
// Blocks run one after another. The threads of a block are user-space fibers
// switched at __syncthreads() and at warp-collective instructions (mma.sync, ldmatrix):
// each barrier phase runs the threads in forward, reverse or shuffled order, so a missing
// barrier shows up as a wrong result. A warp-collective instruction is a rendezvous of the
// 32 fibers of one warp: every lane deposits its operands, and only when all 32 have
// arrived does any lane compute its results (from every lane's deposit, with the PTX
// fragment layouts). cp.async copies land at a random moment between their issue and the
// cp.async.wait_group that retires them (deterministic seed), so a read of a stage before
// its wait, or a copy into a stage that other threads still read, shows up as well.
// __shared__ becomes `static`, which is per-block memory because blocks run sequentially;
// dynamic shared memory (COLONNADE_DYNAMIC_SMEM) is one static buffer, poisoned with 0xFF
// bytes (NaN) at the start of every block. Atomics are plain read-modify-writes, which are
// atomic here (fibers switch only at barriers and warp-collective instructions, and blocks
// run one after another); __threadfence is then a no-op. wgmma (sm_90a) is computed per
// thread when the wgmma.wait_group that retires it runs (emu_runtime.cc). A thread waiting on
// an mbarrier yields to the others until the phase completes (below). Not emulated:
// shuffles and votes, timing.
//
// Streams run their work at once, except a stream that is capturing (cudaStreamBeginCapture):
// its kernel launches, copies, memsets and SGEMMs are recorded as closures, not run, and a
// graph launch runs them in order (each reads its memory then, as a graph node does). The
// emulator is stricter than the GPU during a capture: any allocation, free or host
// synchronisation (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset, cudaStreamSynchronize,
// cudaDeviceSynchronize, cudaEventSynchronize, cudaEventQuery) fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture, so such a call inside a
// captured training step shows up in the tests.
// Build: COLONNADE_CUDA_EMULATION=ON (tests/cuda).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
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
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline void __threadfence() {}
// Individually rounded float operations: what the CPU does anyway (x86-64 without FMA).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- bf16 (cuda_bf16.h): storage type and round-to-nearest-even conversions --------------
struct __nv_bfloat16 {
  unsigned short __x;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
// Round to nearest, ties to even, as cvt.rn.bf16.f32 does; NaN stays a (quiet) NaN.
inline unsigned short EmuFloatToBf16Bits(float f) {
  const unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<unsigned short>((u >> 16) | 0x0040u);
  const unsigned lsb = (u >> 16) & 1u;
  return static_cast<unsigned short>((u + 0x7fffu + lsb) >> 16);
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{EmuFloatToBf16Bits(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(unsigned(h.__x) << 16); }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16{u}; }

typedef struct EmuStream* cudaStream_t;

namespace colonnade::emu {
// Runs `work` now, or records it when `stream` is capturing (it then runs at each launch
// of the graph made from the capture). Every queued operation of the runtime goes here.
void Enqueue(cudaStream_t stream, std::function<void()> work);
void SyncThreads();
// Runs `body` once per thread of every block of `grid`.
void Launch(dim3 grid, dim3 block, const std::function<void()>& body);
// Thread order inside each barrier phase: 0 forward, 1 reverse, 2 shuffled (default 2).
void SetScheduleOrder(int order);

// Dynamic shared memory of the running block (kDynamicSharedBytes, 128-byte aligned).
constexpr size_t kDynamicSharedBytes = 232448;  // the H200's per-block opt-in limit
unsigned char* DynamicShared();
// Checks a launch's dynamic shared-memory request against the limit.
void SetDynamicSharedBytes(size_t bytes);

// cp.async: copies `src_bytes` of `bytes` (the rest zero-filled) at some moment between
// now and the CpAsyncWait that retires the group this copy is committed with.
void CpAsync(void* dst, const void* src, int bytes, int src_bytes);
void CpAsyncCommit();
void CpAsyncWait(int newest_pending);  // cp.async.wait_group N

// Warp-collective matrix instructions (one call per lane; all 32 lanes of the warp must
// make the same call). Layouts: see emu_runtime.cc.
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = a * b + c
void MmaBf16m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
//   mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: d = a * b + c
void MmaTf32m16n8k8(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
//   ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16: lane l supplies the address of
//   row l % 8 of matrix l / 8 (lanes beyond 8 * count are ignored); r[i] receives matrix i.
void LdMatrix(uint32_t* r, int count, bool trans, const void* row_address);

// wgmma (sm_90a), per thread of a warpgroup (4 consecutive warps from a warp index divisible
// by 4). Addresses in descriptors are offsets in the dynamic shared memory (SharedAddress).
//   wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 d, desc_a, desc_b, 1, 1, 1, 0,
//   trans_b: d (this thread's n / 2 accumulators) += A * B, A 64 x 16 K-major, B 16 x n
//   MN-major (trans_b) or K-major, both 128-byte swizzled (the only layout supported; others
//   abort). Asynchronous as on the GPU: d holds NaN until the wgmma.wait_group that retires
//   the op, which computes it from shared memory as it is then.
uint32_t SharedAddress(const void* p);
void WgmmaBf16(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_b);
void WgmmaCommit();                // wgmma.commit_group
void WgmmaWait(int newest_pending);  // wgmma.wait_group N

// mbarrier (sm_80+; the warp-specialized pipelines): a 64-bit object in shared memory that
// completes a phase when `count` arrivals have been made since the last one. The emulator
// keeps the phase, the pending and the expected count in the object itself (with a tag, so
// that a barrier used before its init, or initialised twice while in use, aborts).
//   mbarrier.init.shared::cta.b64 [bar], count
//   mbarrier.arrive.shared::cta.b64 _, [bar]         (one arrival; an extra one counts
//     toward the next phase, as on the GPU, and shows as a wrong result)
//   mbarrier.try_wait.parity.shared::cta.b64 in a loop: returns once the phase of parity
//     `parity` has completed; until then the thread yields to the others (a spin on the GPU).
//     Threads that all wait on phases nothing can complete any more are a deadlock: abort.
//   cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar]: an arrival made when every
//     cp.async this thread issued before it has landed; the emulator lands those copies and
//     makes the arrival at a random later moment (when some thread waits on a barrier, or at
//     this thread's next cp.async.wait_group), so a consumer that reads a stage before its
//     barrier completes reads what was there before.
void MbarInit(uint64_t* bar, unsigned count);
void MbarArrive(uint64_t* bar);
void MbarWait(uint64_t* bar, unsigned parity);
void CpAsyncMbarArrive(uint64_t* bar);
// TMA (sm_90; the TMA-fed wgmma kernels): a bulk copy of a box of a tensor into shared memory
// that completes bytes on an mbarrier (transaction count) instead of arriving on it.
//   mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes: the current phase also waits
//     for `bytes` more transaction bytes, then one arrival. A phase completes when its
//     arrivals are made and its transaction bytes have landed (more bytes landing than were
//     expected aborts).
//   cp.async.bulk.tensor.{3,5}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
//     [dst], [map, {c0, c1, ...}], [bar]: the box of `map` whose first element is at
//     coordinates (c0, c1, ...), innermost first, elements outside the tensor read as zero,
//     stored in the box's row-major order from dst (128-byte aligned); with the 128-byte
//     swizzle, the 16-byte chunk at shared address a goes to a ^ (((a >> 7) & 7) << 4), the
//     address-based pattern the wgmma descriptors read (so a stage must start at a 1024-byte
//     boundary for the two to agree, as on the GPU). The copy lands and completes its bytes at
//     a random later moment, as cp.async's arrive-on does.
struct TmaMap {             // the emulator's tensor map (the GPU's is the driver's CUtensorMap)
  const void* base;         // 16-byte aligned
  int rank;                 // 1-5 dimensions
  uint64_t dim[5];          // elements, innermost first
  uint64_t stride[4];       // bytes from one index of dimension i + 1 to the next
  uint32_t box[5];          // elements
  uint32_t elem_bytes;
  bool swizzle128;          // the 128-byte swizzle (box[0] * elem_bytes == 128)
};
void MbarArriveExpectTx(uint64_t* bar, unsigned bytes);
//   .3d and .5d: `coords` holds map->rank coordinates, innermost first.
void TmaLoad(void* dst, const TmaMap* map, const int* coords, uint64_t* bar);
// bar.sync id, count: a barrier of `count` threads (a multiple of 32) on named barrier id
// (1-15; 0 is __syncthreads), which threads outside those count never reach.
void NamedBarrierSync(unsigned id, unsigned count);
}  // namespace colonnade::emu

inline void __syncthreads() { colonnade::emu::SyncThreads(); }

// ---- runtime API ----------------------------------------------------------------------
typedef int cudaError_t;
enum : int {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorNoDevice = 100,
  cudaErrorIllegalState = 401,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901
};
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
cudaError_t cudaMemset(void* p, int v, size_t n);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
// Priorities are accepted and ignored (streams run their work at once).
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
// Events. Every emulated operation completes before its call returns, so an event is
// complete as soon as it is recorded and waiting on one returns at once: the emulator
// checks what is computed, not the ordering between streams (the GPU tests do that).
enum { cudaEventDefault = 0, cudaEventDisableTiming = 2 };
enum : int { cudaErrorNotReady = 600 };
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

// Graphs by stream capture (see the top of this file).
typedef struct EmuGraph* cudaGraph_t;
typedef struct EmuGraphExec* cudaGraphExec_t;
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2
};
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

// ---- cuBLAS (column-major SGEMM only) ------------------------------------------------------
typedef struct EmuBlas* cublasHandle_t;
typedef int cublasStatus_t;
enum : int { CUBLAS_STATUS_SUCCESS = 0 };
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
// The emulator computes every product in FP32, whatever the mode asks for.
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_PEDANTIC_MATH = 2, CUBLAS_TF32_TENSOR_OP_MATH = 3 };
cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                           int n, int k, const float* alpha, const float* a, int lda,
                           const float* b, int ldb, const float* beta, float* c, int ldc);
cudaError_t cudaDriverGetVersion(int* v);
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
cudaError_t cudaRuntimeGetVersion(int* v);
