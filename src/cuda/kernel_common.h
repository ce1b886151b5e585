// What the kernel files of src/cuda share (src/cuda/ops/*.cu, dev/*): the storage of a tensor
// element (float or bf16) and its loads and stores, V elements at a time; the grids of the
// element-wise and row kernels; alignment; block reductions; the split-K reduction of the
// convolutions' partial products. Included by .cu files only (device code).
//
// Every kernel takes its tensors' storage as template arguments (XT, YT: float or Bf16), loads
// widen to float, the arithmetic is the float kernel's own, stores round to nearest even
// (docs/PRECISION.md, bf16 activation storage). No warp intrinsics: block reductions go through
// shared memory, which keeps every kernel runnable on the CPU emulator (src/cuda/emu).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "cuda/kernels.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda {

// Threads per block of the element-wise, row and reduction kernels.
inline constexpr int kBlock = 256;

// ---- storage and alignment (host) -----------------------------------------------------------
// Bytes of one element stored as t.
constexpr size_t StorageBytes(StorageType t) { return t == StorageType::kBF16 ? 2 : 4; }
// Whether p is aligned to `bytes` (null is).
inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
// Whether p is aligned to v elements of storage t (v-element vector moves).
inline bool AlignedTo(const void* p, int v, StorageType t) {
  return Aligned(p, v * StorageBytes(t));
}

// A tensor of a vectorised launch: its storage and type (null: none).
struct LaneOperand {
  const void* data;
  StorageType type;
};
// v when n is a multiple of v and every tensor is aligned to v of its elements, else 1.
inline int VectorLanes(int64_t n, int v, std::initializer_list<LaneOperand> tensors) {
  if (n % v != 0) return 1;
  for (const LaneOperand& t : tensors)
    if (t.data != nullptr && !AlignedTo(t.data, v, t.type)) return 1;
  return v;
}

// ---- element storage (device) -----------------------------------------------------------------
// Storage of a tensor element: float, or Bf16 (the upper half of a float's bits: bf16
// activation storage). Kernels templated on it load into floats and round once at the store
// (to nearest even), so their arithmetic is the float kernels' own.
using Bf16 = uint16_t;
__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const Bf16* p) { return tc::Bf16ToFloat(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(Bf16* p, float v) { *p = tc::FloatToBf16(v); }

// Calls f(XT{}) with XT the storage type named by t (a runtime type to a template argument).
template <typename F>
void WithStorage(StorageType t, F&& f) {
  if (t == StorageType::kBF16) {
    f(Bf16{});
  } else {
    f(float{});
  }
}

// V consecutive elements per thread (V images of the pooling kernels, elements of the
// element-wise and batch-norm kernels): V = 4 moves four at once (a float4, or 8 bytes of bf16)
// when the count is a multiple of 4 and the tensors are aligned to 4 elements (ImageNet
// batches), V = 1 otherwise. ncu on AlexNet's pools (H200) showed the one-image kernels
// issue-bound (SM 70-78% busy at 30% of DRAM bandwidth): every load paid its own index
// arithmetic and loop step. Lanes hold floats whatever the storage and each element's
// arithmetic is unchanged, so every width gives the same bits.
template <int V>
struct Lanes {
  float v[V];
};
template <int V, typename T>
__device__ __forceinline__ Lanes<V> LoadLanes(const T* p) {
  Lanes<V> r;
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    r.v[0] = t.x, r.v[1] = t.y, r.v[2] = t.z, r.v[3] = t.w;
  } else if constexpr (V == 4) {
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    r.v[0] = tc::Bf16ToFloat(t.x & 0xffffu), r.v[1] = tc::Bf16ToFloat(t.x >> 16);
    r.v[2] = tc::Bf16ToFloat(t.y & 0xffffu), r.v[3] = tc::Bf16ToFloat(t.y >> 16);
  } else if constexpr (V == 2 && std::is_same_v<T, float>) {
    const float2 t = *reinterpret_cast<const float2*>(p);
    r.v[0] = t.x, r.v[1] = t.y;
  } else if constexpr (V == 2) {
    const uint32_t t = *reinterpret_cast<const uint32_t*>(p);
    r.v[0] = tc::Bf16ToFloat(t & 0xffffu), r.v[1] = tc::Bf16ToFloat(t >> 16);
  } else {
    for (int i = 0; i < V; ++i) r.v[i] = Load(p + i);
  }
  return r;
}
template <int V, typename T>
__device__ __forceinline__ void StoreLanes(T* p, const Lanes<V>& r) {
  if constexpr (V == 4 && std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p) = make_float4(r.v[0], r.v[1], r.v[2], r.v[3]);
  } else if constexpr (V == 4) {
    *reinterpret_cast<uint2*>(p) =
        make_uint2(uint32_t(tc::FloatToBf16(r.v[0])) | (uint32_t(tc::FloatToBf16(r.v[1])) << 16),
                   uint32_t(tc::FloatToBf16(r.v[2])) | (uint32_t(tc::FloatToBf16(r.v[3])) << 16));
  } else if constexpr (V == 2 && std::is_same_v<T, float>) {
    *reinterpret_cast<float2*>(p) = make_float2(r.v[0], r.v[1]);
  } else if constexpr (V == 2) {
    *reinterpret_cast<uint32_t*>(p) =
        uint32_t(tc::FloatToBf16(r.v[0])) | (uint32_t(tc::FloatToBf16(r.v[1])) << 16);
  } else {
    for (int i = 0; i < V; ++i) Store(p + i, r.v[i]);
  }
}

// Calls f(std::integral_constant<int, V>{}) for lanes = V, 4 or 1 (a runtime width to a
// template one).
template <typename F>
void WithLanes(int lanes, F&& f) {
  if (lanes == 4) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}
// Calls f(lanes as WithLanes, XT{}, YT{}) with XT, YT the storage types named by xt, yt: the
// dispatch of a two-tensor kernel templated on <V, XT, YT>.
template <typename F>
void WithLanesAndStorage(int lanes, StorageType xt, StorageType yt, F&& f) {
  WithLanes(lanes, [&](auto v) {
    WithStorage(xt, [&](auto xs) { WithStorage(yt, [&](auto ys) { f(v, xs, ys); }); });
  });
}

__device__ __forceinline__ float Relu(float v) { return v > 0.0f ? v : 0.0f; }

// ---- grids ------------------------------------------------------------------------------------
// The grid of a grid-stride loop over n elements, per_thread of them per thread step: enough
// kBlock-thread blocks to cover them, at most blocks_per_sm per multiprocessor (the element-wise
// kernels of src/cuda/ops take 32; the convolutions' helpers have taken 16).
inline dim3 GridFor(const DeviceContext& ctx, int64_t n, int per_thread = 1,
                    int blocks_per_sm = 32) {
  const int64_t blocks = CeilDiv(std::max<int64_t>(1, CeilDiv(n, per_thread)), kBlock);
  return dim3(
      static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(ctx.sm_count) * blocks_per_sm)));
}

#define GRID_STRIDE_LOOP(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// A 2-D grid of rows: blockIdx.y walks the rows (strided when there are more than 65535),
// x-threads the row_len positions of a row, so all index arithmetic is 32-bit and per block
// (the pooling kernels: a flat 64-bit index per thread, four 64-bit divisions each, ran 4x
// (forward) to 12x (backward) over the memory-bound time on AlexNet's pool1).
inline dim3 RowGrid(int64_t row_len, int64_t rows) {
  return dim3(static_cast<unsigned>(CeilDiv(row_len, kBlock)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
}

// ---- reductions -------------------------------------------------------------------------------
// Sum over the block's kBlock threads through shared memory; every thread gets the result.
__device__ __forceinline__ double BlockSum(double v, double* sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] += sh[tid + s];
    __syncthreads();
  }
  const double r = sh[0];
  __syncthreads();
  return r;
}
__device__ __forceinline__ float BlockMax(float v, float* sh) {
  const int tid = threadIdx.x;
  sh[tid] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (tid < s) sh[tid] = fmaxf(sh[tid], sh[tid + s]);
    __syncthreads();
  }
  const float r = sh[0];
  __syncthreads();
  return r;
}

// Blocks per row for a row-wise reduction over rows x inner (the bias gradient, batch norm's
// statistics): about eight blocks per multiprocessor over all rows, each summing at least 4096
// values.
inline int64_t RowSplits(const DeviceContext& ctx, int64_t rows, int64_t inner) {
  const int64_t splits = std::max<int64_t>(1, CeilDiv(int64_t(ctx.sm_count) * 8, rows));
  return std::min<int64_t>(splits, std::max<int64_t>(1, inner / 4096));
}

// Kernel ReduceSplitsKernel<T>: the split-K partial products of a GEMM added in a fixed order:
//   out[g][r] = sum_{s < splits} part[g][s][r], s = 0, 1, ... (deterministic),
//   part: groups x splits x per_group, out: groups x per_group. One thread per element of out,
//   grid-stride (GridFor). For the convolutions' backward filter (conv_kernels.cu,
//   conv_tc_kernels.cu: GridFor(ctx, groups * per_group, 1, 16), kBlock threads).
template <typename T>
struct ReduceSplitsParams {
  const T* part;
  T* out;
  int groups, splits;
  int64_t per_group;
};
template <typename T>
__global__ void ReduceSplitsKernel(const ReduceSplitsParams<T> p) {
  const int64_t total = p.groups * p.per_group;
  GRID_STRIDE_LOOP(i, total) {
    const int64_t g = i / p.per_group, r = i % p.per_group;
    const T* src = p.part + g * p.splits * p.per_group + r;
    T s = 0;
    // Unrolled so that eight loads are in flight at once; the adds keep their order.
#pragma unroll 8
    for (int k = 0; k < p.splits; ++k) s += src[k * p.per_group];
    p.out[i] = s;
  }
}

// Kernel ReduceSplitChunksKernel<T>: the first level of a two-level split-K reduction, for
// many splits over few elements (the tensor-core backward filter: hundreds of splits of a
// few thousand weights, where one thread per element adding every split is latency-bound):
//   out[g][c][r] = sum_{s in chunk c} part[g][s][r], chunks of `chunk` consecutive splits in
//   order; ReduceSplitsKernel then adds the chunks in order. Deterministic (a fixed tree).
template <typename T>
struct ReduceSplitChunksParams {
  const T* part;
  T* out;
  int groups, splits, chunk, chunks;
  int64_t per_group;
};
template <typename T>
__global__ void ReduceSplitChunksKernel(const ReduceSplitChunksParams<T> p) {
  const int64_t total = int64_t(p.groups) * p.chunks * p.per_group;
  GRID_STRIDE_LOOP(i, total) {
    const int64_t r = i % p.per_group, gc = i / p.per_group;
    const int64_t g = gc / p.chunks, c = gc % p.chunks;
    const int s0 = static_cast<int>(c) * p.chunk;
    const int n = p.splits - s0 < p.chunk ? p.splits - s0 : p.chunk;
    const T* src = p.part + (g * p.splits + s0) * p.per_group + r;
    T s = 0;
#pragma unroll 8
    for (int k = 0; k < n; ++k) s += src[k * p.per_group];
    p.out[i] = s;
  }
}

}  // namespace colonnade::cuda
