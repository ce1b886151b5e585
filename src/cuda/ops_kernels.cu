// The non-convolution kernels of the CUDA backend: element-wise operations, reductions,
// pooling, response normalisation, batch norm, dropout, softmax and the SGD update.
//
// All of them are memory-bound: each reads its inputs once and writes its outputs once
// (the window ops re-read neighbours through L1/L2), so the figure of merit is bytes moved
// over the copy bandwidth. Layout is CHWN: consecutive threads take consecutive images of
// one pixel, so loads and stores coalesce. Reductions are two-pass and in a fixed order
// (deterministic), accumulating in double. No warp intrinsics: block reductions go through
// shared memory, which keeps every kernel runnable on the CPU emulator (src/cuda/emu).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <vector>

#include "core/log.h"
#include "core/philox.h"
#include "cuda/autotune.h"
#include "cuda/kernels.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda {
namespace {

constexpr int kBlock = 256;

// d^-beta exactly as CpuOps computes it (beta = 0.75 without powf), so that both backends
// round alike: sqrtf and division are correctly rounded on the GPU (-prec-sqrt/-prec-div).
__device__ __forceinline__ float PowNegBeta(float d, float beta) {
  if (beta == 0.75f) return 1.0f / (sqrtf(d) * sqrtf(sqrtf(d)));
  return powf(d, -beta);
}

// Storage of a tensor element: float, or Bf16 (the upper half of a float's bits: bf16
// activation storage). Kernels templated on it load into floats and round once at the store
// (to nearest even), so their arithmetic is the float kernels' own.
using Bf16 = uint16_t;
__device__ __forceinline__ float Load(const float* p) { return *p; }
__device__ __forceinline__ float Load(const Bf16* p) { return tc::Bf16ToFloat(*p); }
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(Bf16* p, float v) { *p = tc::FloatToBf16(v); }
constexpr int StorageBytes(StorageType t) { return t == StorageType::kBF16 ? 2 : 4; }

// Calls f(XT{}) with XT the storage type named by t (a runtime type to a template argument).
template <typename F>
void WithStorage(StorageType t, F&& f) {
  if (t == StorageType::kBF16) {
    f(Bf16{});
  } else {
    f(float{});
  }
}

// V images per thread of the pooling kernels (elements of GradToBf16Kernel): V = 4 moves
// four at once (a float4, or 8 bytes of bf16) when N is a multiple of 4 and the tensors are
// aligned to 4 elements (ImageNet batches), V = 1 otherwise. ncu on AlexNet's pools (H200)
// showed the one-image kernels issue-bound (SM 70-78% busy at 30% of DRAM bandwidth): every
// load paid its own index arithmetic and loop step. Lanes hold floats whatever the storage
// and each image's arithmetic is unchanged, so both widths give the same bits.
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

dim3 GridFor(const DeviceContext& ctx, int64_t n, int per_thread = 1) {
  const int64_t blocks = CeilDiv(std::max<int64_t>(1, CeilDiv(n, per_thread)), kBlock);
  return dim3(static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(ctx.sm_count) * 32)));
}

#define GRID_STRIDE_LOOP(i, n)                                                           \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

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

// A tensor of a vectorised launch: its storage and type (null: none).
struct LaneOperand {
  const void* data;
  StorageType type;
};
// Whether p is aligned to v elements of storage t (v-element vector moves).
bool AlignedTo(const void* p, int v, StorageType t) {
  return reinterpret_cast<uintptr_t>(p) % (v * StorageBytes(t)) == 0;
}
// v when n is a multiple of v and every tensor is aligned to v of its elements, else 1.
int VectorLanes(int64_t n, int v, std::initializer_list<LaneOperand> tensors) {
  if (n % v != 0) return 1;
  for (const LaneOperand& t : tensors)
    if (t.data != nullptr && !AlignedTo(t.data, v, t.type)) return 1;
  return v;
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

// ---- element-wise -----------------------------------------------------------------------------
// Kernel FillKernel<T>: y[i] = v (stored as T: bf16 rounds v) for i < n. Grid-stride, one
// element per thread step (any element count and alignment of T).
struct FillParams {
  void* y;
  int64_t n;
  float v;
};
template <typename T>
__global__ void FillKernel(const FillParams p) {
  GRID_STRIDE_LOOP(i, p.n) Store(static_cast<T*>(p.y) + i, p.v);
}

// Kernel AxpbyKernel: y[i] = alpha*x[i] + beta*y[i] (y not read when beta == 0, as in BLAS).
// Multiplies and adds are rounded separately (no FMA contraction) to match the CPU.
struct AxpbyParams {
  float alpha;
  const float* x;
  float beta;
  float* y;
  int64_t n;
};
__global__ void AxpbyKernel(const AxpbyParams p) {
  GRID_STRIDE_LOOP(i, p.n) {
    const float ax = __fmul_rn(p.alpha, p.x[i]);
    p.y[i] = p.beta == 0.0f ? ax : __fadd_rn(ax, __fmul_rn(p.beta, p.y[i]));
  }
}

// Kernel BinaryKernel<V, AT, BT, YT>: y[i] = a[i] op b[i], each stored as its type (dropout's
// backward multiplies by the float mask), V consecutive elements per thread step (V = 4 where
// n is a multiple of 4 and every operand aligned to 4 elements: the bf16 residual sums of
// ResNet were issue-bound one element at a time); the same bits for every V. y may alias a
// or b (same type: each element is read before the same thread writes it).
enum class BinaryOp { kAdd, kMultiply, kAddRelu };
struct BinaryParams {
  const void* a;
  const void* b;
  void* y;
  int64_t n;
  BinaryOp op;
};
__device__ __forceinline__ float Relu(float v) { return v > 0.0f ? v : 0.0f; }
template <int V, typename AT, typename BT, typename YT>
__global__ void BinaryKernel(const BinaryParams p) {
  const AT* a = static_cast<const AT*>(p.a);
  const BT* b = static_cast<const BT*>(p.b);
  YT* y = static_cast<YT*>(p.y);
  GRID_STRIDE_LOOP(q, p.n / V) {
    const int64_t i = q * V;
    Lanes<V> r = LoadLanes<V>(a + i);
    const Lanes<V> u = LoadLanes<V>(b + i);
    for (int k = 0; k < V; ++k) {
      if (p.op == BinaryOp::kAdd) {
        r.v[k] = r.v[k] + u.v[k];
      } else if (p.op == BinaryOp::kAddRelu) {  // ReluForwardKernel's expression on the sum
        r.v[k] = Relu(r.v[k] + u.v[k]);
      } else {
        r.v[k] = r.v[k] * u.v[k];
      }
    }
    StoreLanes<V>(y + i, r);
  }
}

// Kernel ReluKernel: forward y = max(x, 0); backward (y_or_x = y) dx = y > 0 ? dy : 0.
// In place is fine (each element is read before it is written, by the same thread).
// Storage: forward x XT, y (out) YT; backward y and dy YT, dx (out) XT.
struct ReluParams {
  const void* a;   // x (forward) or y (backward)
  const void* dy;  // backward only
  void* out;
  int64_t n;
};
// With every pointer aligned to 4 of its elements the kernels move quads (a float4, or 8
// bytes of bf16: quads = n / 4, then the tail); the arithmetic per element is the same.
struct ReluVecParams {
  ReluParams r;
  int vec;
};
template <typename XT, typename YT>
__global__ void ReluForwardKernel(const ReluVecParams q) {
  const ReluParams& p = q.r;
  const XT* x = static_cast<const XT*>(p.a);
  YT* y = static_cast<YT*>(p.out);
  int64_t done = 0;
  if (q.vec) {
    GRID_STRIDE_LOOP(i, p.n / 4) {
      Lanes<4> v = LoadLanes<4>(x + 4 * i);
      for (int k = 0; k < 4; ++k) v.v[k] = Relu(v.v[k]);
      StoreLanes<4>(y + 4 * i, v);
    }
    done = p.n / 4 * 4;
  }
  GRID_STRIDE_LOOP(i, p.n - done) Store(y + done + i, Relu(Load(x + done + i)));
}
template <typename YT, typename XT>
__global__ void ReluBackwardKernel(const ReluVecParams q) {
  const ReluParams& p = q.r;
  const YT* y = static_cast<const YT*>(p.a);
  const YT* dy = static_cast<const YT*>(p.dy);
  XT* dx = static_cast<XT*>(p.out);
  int64_t done = 0;
  if (q.vec) {
    GRID_STRIDE_LOOP(i, p.n / 4) {
      const Lanes<4> m = LoadLanes<4>(y + 4 * i);
      Lanes<4> g = LoadLanes<4>(dy + 4 * i);
      for (int k = 0; k < 4; ++k) g.v[k] = m.v[k] > 0.0f ? g.v[k] : 0.0f;
      StoreLanes<4>(dx + 4 * i, g);
    }
    done = p.n / 4 * 4;
  }
  GRID_STRIDE_LOOP(i, p.n - done) {
    Store(dx + done + i, Load(y + done + i) > 0.0f ? Load(dy + done + i) : 0.0f);
  }
}

// Kernel AddBiasKernel: y[c][i] += b[c] for y: C x inner (CHWN with inner = H*W*N).
// Grid: x = column chunks of the channel, y = channel; float4 when inner % 4 == 0.
struct AddBiasParams {
  float* y;
  const float* b;
  int64_t inner;
  int vec;
};
__global__ void AddBiasKernel(const AddBiasParams p) {
  const int c = blockIdx.y;
  const float bias = p.b[c];
  float* row = p.y + c * p.inner;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (p.vec) {
    float4* row4 = reinterpret_cast<float4*>(row);
    for (int64_t i = start; i < p.inner / 4; i += step) {
      float4 v = row4[i];
      v.x += bias;
      v.y += bias;
      v.z += bias;
      v.w += bias;
      row4[i] = v;
    }
  } else {
    for (int64_t i = start; i < p.inner; i += step) row[i] += bias;
  }
}

// ---- reductions -------------------------------------------------------------------------------
// Kernel RowSumPartialKernel: part[r][s] = sum of chunk s of row r of x: rows x inner.
// Grid: x = splits (chunks per row), y = row. Block: 256 threads, double accumulation.
// With splits == 1 the block writes the row's sum straight into out[r].
struct RowSumParams {
  const float* x;
  double* part;
  float* out;
  int64_t inner;
  int splits;
};
__global__ void RowSumPartialKernel(const RowSumParams p) {
  __shared__ double sh[kBlock];
  const int r = blockIdx.y, s = blockIdx.x;
  const int64_t chunk = (p.inner + p.splits - 1) / p.splits;
  const int64_t beg = s * chunk;
  const int64_t end = beg + chunk < p.inner ? beg + chunk : p.inner;
  const float* row = p.x + r * p.inner;
  double acc = 0.0;
  for (int64_t i = beg + threadIdx.x; i < end; i += kBlock) acc += row[i];
  acc = BlockSum(acc, sh);
  if (threadIdx.x == 0) {
    if (p.splits == 1) {
      p.out[r] = static_cast<float>(acc);
    } else {
      p.part[static_cast<int64_t>(r) * p.splits + s] = acc;
    }
  }
}
// Kernel RowSumFinishKernel: out[r] = sum_s part[r][s], s in order. One thread per row.
struct RowSumFinishParams {
  const double* part;
  float* out;
  int rows, splits;
};
__global__ void RowSumFinishKernel(const RowSumFinishParams p) {
  GRID_STRIDE_LOOP(r, p.rows) {
    double acc = 0.0;
    for (int s = 0; s < p.splits; ++s) acc += p.part[r * p.splits + s];
    p.out[r] = static_cast<float>(acc);
  }
}

// Kernel GradToBf16Kernel<T>: a convolution's output gradient on its way into the bf16
// tensor-core products (CudaOps::ConvLayerBackward): g = dy, or with a mask (a fused ReLU's
// y) g = mask > 0 ? dy : 0, rounded to bf16 into out (null: not written); with sums, also the
// bias gradient's row sums of g (double; splits > 1: partials for RowSumFinishKernel), so dy
// is read once. dy and mask are stored as T (float or Bf16).
// Grid: x = split (chunk elements of the row), y = row. vec: quads (inner and chunk
// multiples of 4, dy and mask aligned to 4 elements, out 8-byte aligned).
struct GradBf16Params {
  const void* dy;
  const void* mask;
  uint16_t* out;
  double* part;
  float* sums;  // null: no sums
  int64_t inner, chunk;
  int splits, vec;
};
template <typename T>
__global__ void GradToBf16Kernel(const GradBf16Params p) {
  __shared__ double sh[kBlock];
  const int64_t base = blockIdx.y * p.inner;
  const int64_t beg = blockIdx.x * p.chunk;
  const int64_t end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  const T* dy = static_cast<const T*>(p.dy) + base;
  const T* mask = p.mask ? static_cast<const T*>(p.mask) + base : nullptr;
  uint16_t* out = p.out ? p.out + base : nullptr;
  double acc = 0.0;
  if (p.vec) {
    for (int64_t q = beg / 4 + threadIdx.x; q < end / 4; q += kBlock) {
      Lanes<4> g = LoadLanes<4>(dy + 4 * q);
      if (mask) {
        const Lanes<4> m = LoadLanes<4>(mask + 4 * q);
        for (int i = 0; i < 4; ++i) g.v[i] = m.v[i] > 0.0f ? g.v[i] : 0.0f;
      }
      for (int i = 0; i < 4; ++i) acc += g.v[i];
      if (out) StoreLanes<4>(out + 4 * q, g);
    }
  } else {
    for (int64_t i = beg + threadIdx.x; i < end; i += kBlock) {
      const float g = mask && !(Load(mask + i) > 0.0f) ? 0.0f : Load(dy + i);
      acc += g;
      if (out) Store(out + i, g);
    }
  }
  if (!p.sums) return;  // uniform over the grid: no block reaches the barrier alone
  acc = BlockSum(acc, sh);
  if (threadIdx.x == 0) {
    if (p.splits == 1) {
      p.sums[blockIdx.y] = static_cast<float>(acc);
    } else {
      p.part[blockIdx.y * p.splits + blockIdx.x] = acc;
    }
  }
}

// Kernel SumPartialKernel: part[b] = sum of x over block b's grid-stride elements (double);
// then SumFinishKernel (one block) adds the partials in order into out[0].
struct SumParams {
  const float* x;
  int64_t n;
  double* part;
  int parts;
};
__global__ void SumPartialKernel(const SumParams p) {
  __shared__ double sh[kBlock];
  double acc = 0.0;
  GRID_STRIDE_LOOP(i, p.n) acc += p.x[i];
  acc = BlockSum(acc, sh);
  if (threadIdx.x == 0) p.part[blockIdx.x] = acc;
}
__global__ void SumFinishKernel(const SumParams p) {
  __shared__ double sh[kBlock];
  double acc = 0.0;
  for (int i = threadIdx.x; i < p.parts; i += kBlock) acc += p.part[i];
  acc = BlockSum(acc, sh);
  if (threadIdx.x == 0) p.part[p.parts] = acc;
}

// ---- results (core/results.h) ---------------------------------------------------------------
// Kernel ResultsKernel: block b ranks images [32b, 32b + 32) (CountCorrect's rule): thread
// (warp w, lane) compares image 32b + lane's label probability with classes w, w + 8, ...,
// so the K x 32 probabilities are read by 8 warps at once, each load a coalesced row of 32
// images; the block's loss sum and top-1/top-5 counts go to part[3b .. 3b + 2]. The last
// block to finish (a counter in the totals, the threadFenceReduction pattern) adds the
// partials in block order to the totals: one launch, and the same bits for the same
// inputs whatever the blocks' timing.
constexpr int kResultImages = 32;
constexpr int kResultWarps = kBlock / 32;
struct ResultsParams {
  const float* probs;  // K x N
  const float* labels;
  const float* loss;
  int64_t k, n;
  double* part;  // 3 per block
  int64_t step;
  const int64_t* step_on_device;  // a graphed step's number (StepScalars), else null
  ResultTotals* totals;
};
__device__ void AddStepToTotals(const ResultsParams& p) {
  double loss = 0.0, top1 = 0.0, top5 = 0.0;
  for (unsigned b = 0; b < gridDim.x; ++b) {
    loss += p.part[3 * b];
    top1 += p.part[3 * b + 1];
    top5 += p.part[3 * b + 2];
  }
  ResultTotals& t = *p.totals;
  t.loss_sum += loss;
  t.top1 += top1;
  t.top5 += top5;
  t.last_loss_sum = loss;
  t.steps += 1;
  if (!std::isfinite(loss)) {
    if (t.nonfinite_steps == 0) {
      t.first_nonfinite_step = p.step_on_device != nullptr ? *p.step_on_device : p.step;
      t.first_nonfinite_loss = loss;
    }
    t.nonfinite_steps += 1;
  }
  t.blocks_done = 0;  // for the next launch
}
__global__ void __launch_bounds__(kBlock) ResultsKernel(const ResultsParams p) {
  __shared__ int ranked_above[kResultWarps][kResultImages];
  __shared__ double sh[kBlock];
  __shared__ bool last_block;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kResultImages + lane;
  const int64_t label = j < p.n ? static_cast<int64_t>(p.labels[j]) : -1;
  const bool ranked = label >= 0 && label < p.k;  // else wrong (as CountCorrect)
  int better = 0;
  if (ranked) {
    const float pl = p.probs[label * p.n + j];
    for (int64_t c = warp; c < p.k; c += kResultWarps) {
      const float q = p.probs[c * p.n + j];
      better += (q > pl || (q == pl && c < label)) ? 1 : 0;
    }
  }
  ranked_above[warp][lane] = better;
  __syncthreads();
  double loss = 0.0, top1 = 0.0, top5 = 0.0;
  if (warp == 0 && j < p.n) {
    loss = p.loss[j];
    int above = 0;
    for (int w = 0; w < kResultWarps; ++w) above += ranked_above[w][lane];
    top1 = ranked && above == 0 ? 1.0 : 0.0;
    top5 = ranked && above < 5 ? 1.0 : 0.0;
  }
  loss = BlockSum(loss, sh);
  top1 = BlockSum(top1, sh);
  top5 = BlockSum(top5, sh);
  if (threadIdx.x == 0) {
    p.part[3 * blockIdx.x] = loss;
    p.part[3 * blockIdx.x + 1] = top1;
    p.part[3 * blockIdx.x + 2] = top5;
    __threadfence();  // the partials are visible before the count says so
    last_block = atomicAdd(&p.totals->blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last_block && threadIdx.x == 0) {
    __threadfence();
    AddStepToTotals(p);
  }
}

// ---- pooling ----------------------------------------------------------------------------------
// x and out (dx) are stored as the kernels' XT, y and dy as YT (float or Bf16).
struct PoolKernelParams {
  const void* x;
  const void* y;
  const void* dy;
  void* out;
  int c, h, w, n, oh, ow;
  int size, stride, pad;
  int kind;   // PoolParams::Kind
  Bf16* rec;  // max forward: each window's argmax as its offset in the window, or null
};

// Pooling kernels use a 2-D grid: blockIdx.y walks (channel, row) pairs, x-threads the
// (column, image) positions of that row, so all index arithmetic is 32-bit and per block
// (version 1 decomposed a flat 64-bit index per thread with four 64-bit divisions and ran
// 4x (forward) to 12x (backward) over the memory-bound time on AlexNet's pool1).
dim3 RowGrid(int64_t row_len, int64_t rows) {
  return dim3(static_cast<unsigned>(CeilDiv(row_len, kBlock)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
}

// Kernel PoolForwardKernel<V, XT, YT, kArg>
//   x: C x H x W x N  ->  y: C x OH x OW x N. Grid: y = C*OH rows (strided if more than
//   65535), x = ceil(OW*N/V / 256); thread = (ox, V consecutive images) of its row, images
//   fastest. Window [oy*stride - pad, +size) x [ox*stride - pad, +size) clipped to the image;
//   max keeps the first maximum in row-major order, avg multiplies the sum by
//   1 / (clipped pixel count). A maximum is one of its inputs: exact in any storage. kArg
//   (max only): also the first maximum's offset in its (unclipped) window, (iy - oy*stride +
//   pad) * size + ix - ox*stride + pad, into p.rec as a bf16 (exact below 256): the pixel
//   PoolArgmaxKernel finds from x and y (the window's first pixel when none exceeds -inf).
template <int V, typename XT, typename YT, bool kArg = false>
__global__ void PoolForwardKernel(const PoolKernelParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  const int nv = p.n / V;
  if (q >= p.ow * nv) return;
  const int ox = q / nv, img = (q - ox * nv) * V;
  const int x0 = IMax(ox * p.stride - p.pad, 0), x1 = IMin(ox * p.stride - p.pad + p.size, p.w);
  for (int row = blockIdx.y; row < p.c * p.oh; row += gridDim.y) {
    const int c = row / p.oh, oy = row - c * p.oh;
    const int y0 = IMax(oy * p.stride - p.pad, 0), y1 = IMin(oy * p.stride - p.pad + p.size, p.h);
    const XT* xc = static_cast<const XT*>(p.x) + static_cast<int64_t>(c) * p.h * p.w * p.n + img;
    Lanes<V> r;
    if (p.kind == PoolParams::kMax) {
      const int wy = oy * p.stride - p.pad, wx = ox * p.stride - p.pad;  // window origin
      Lanes<V> at;
      for (int i = 0; i < V; ++i) r.v[i] = -INFINITY, at.v[i] = (y0 - wy) * p.size + x0 - wx;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) {
          const Lanes<V> v = LoadLanes<V>(xc + (yy * p.w + xx) * p.n);
          for (int i = 0; i < V; ++i)
            if (v.v[i] > r.v[i]) {
              r.v[i] = v.v[i];
              if constexpr (kArg) at.v[i] = (yy - wy) * p.size + xx - wx;
            }
        }
      if constexpr (kArg)
        StoreLanes<V>(p.rec + static_cast<int64_t>(row) * p.ow * p.n + ox * p.n + img, at);
    } else {
      Lanes<V> s;
      for (int i = 0; i < V; ++i) s.v[i] = 0.0f;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) {
          const Lanes<V> v = LoadLanes<V>(xc + (yy * p.w + xx) * p.n);
          for (int i = 0; i < V; ++i) s.v[i] += v.v[i];
        }
      const int count = (y1 - y0) * (x1 - x0);
      for (int i = 0; i < V; ++i)
        r.v[i] = count > 0 ? s.v[i] * (1.0f / static_cast<float>(count)) : 0.0f;
    }
    StoreLanes<V>(static_cast<YT*>(p.out) + static_cast<int64_t>(row) * p.ow * p.n + ox * p.n + img,
                  r);
  }
}

// Kernel PoolBackwardKernel<XT, YT>
//   x, dx: C x H x W x N;  y, dy: C x OH x OW x N. Grid: y = C*H rows, x = ceil(W*N / 256);
//   one thread per input element (a gather: no atomics, deterministic). It visits every
//   window that contains its pixel in (oy, ox) order. Max: the gradient goes to the window's
//   first maximum in row-major order (the forward's argmax): the pixel takes it when it
//   equals the window's output and no earlier pixel of the window does; avg: dy / (clipped
//   window size) to every pixel of the window.
template <typename XT, typename YT>
__global__ void PoolBackwardKernel(const PoolKernelParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  if (q >= p.w * p.n) return;
  const int ix = q / p.n, img = q - ix * p.n;
  const int lx = ix + p.pad - p.size + 1;
  const int ox0 = lx <= 0 ? 0 : (lx + p.stride - 1) / p.stride;
  const int ox1 = IMin((ix + p.pad) / p.stride, p.ow - 1);
  for (int row = blockIdx.y; row < p.c * p.h; row += gridDim.y) {
    const int c = row / p.h, iy = row - c * p.h;
    const int ly = iy + p.pad - p.size + 1;
    const int oy0 = ly <= 0 ? 0 : (ly + p.stride - 1) / p.stride;
    const int oy1 = IMin((iy + p.pad) / p.stride, p.oh - 1);
    const XT* xc = static_cast<const XT*>(p.x) + static_cast<int64_t>(c) * p.h * p.w * p.n + img;
    const int64_t plane_out = static_cast<int64_t>(c) * p.oh * p.ow * p.n + img;
    const YT* yc = static_cast<const YT*>(p.y) + plane_out;
    const YT* dyc = static_cast<const YT*>(p.dy) + plane_out;
    const float v = Load(xc + (iy * p.w + ix) * p.n);
    float g = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy) {
      const int y0 = IMax(oy * p.stride - p.pad, 0);
      const int y1 = IMin(oy * p.stride - p.pad + p.size, p.h);
      for (int ox = ox0; ox <= ox1; ++ox) {
        const int o = (oy * p.ow + ox) * p.n;
        const int x0 = IMax(ox * p.stride - p.pad, 0);
        const int x1 = IMin(ox * p.stride - p.pad + p.size, p.w);
        if (p.kind == PoolParams::kMax) {
          const float m = Load(yc + o);
          if (!(v == m)) continue;
          bool first = true;  // no earlier pixel of the window reaches the maximum
          for (int yy = y0; yy <= iy && first; ++yy) {
            const int xe = yy < iy ? x1 : ix;
            for (int xx = x0; xx < xe; ++xx)
              if (Load(xc + (yy * p.w + xx) * p.n) >= m) {
                first = false;
                break;
              }
          }
          if (first) g += Load(dyc + o);
        } else {
          g += Load(dyc + o) * (1.0f / static_cast<float>((y1 - y0) * (x1 - x0)));
        }
      }
    }
    Store(static_cast<XT*>(p.out) + static_cast<int64_t>(row) * p.w * p.n + q, g);
  }
}

// Max-pool backward, version 3: two passes, each with independent loads.
//   PoolArgmaxKernel: per output element (grid as PoolForwardKernel), the index iy*W + ix of
//   the first pixel of its window, in row-major order, equal to the window's output (the
//   window's first pixel if none is, as in CpuOps).
//   PoolMaxGatherKernel: per input element (grid as PoolBackwardKernel), the sum of dy over
//   the windows, in (oy, ox) order, whose argmax it is.
// Version 2 (PoolBackwardKernel) decides "first maximum" with a chain of dependent loads per
// thread and measured 11x its memory floor on AlexNet's pool1. Both add the same terms in
// the same order: bit-identical; the faster is chosen per shape on first use. Storage: x and
// out (dx) XT, y and dy YT.
struct PoolArgParams {
  const void* x;
  const void* y;
  const void* dy;
  int* arg;  // PoolArgmaxKernel's output, PoolMaxGatherKernel's input
  void* out;
  int c, h, w, n, oh, ow;
  int size, stride, pad;
  const Bf16* rec;  // PoolMaxGatherKernel<.., true>: the forward's record (window offsets)
};
template <int V, typename XT, typename YT>
__global__ void PoolArgmaxKernel(const PoolArgParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  const int nv = p.n / V;
  if (q >= p.ow * nv) return;
  const int ox = q / nv, img = (q - ox * nv) * V;
  const int x0 = IMax(ox * p.stride - p.pad, 0), x1 = IMin(ox * p.stride - p.pad + p.size, p.w);
  for (int row = blockIdx.y; row < p.c * p.oh; row += gridDim.y) {
    const int c = row / p.oh, oy = row - c * p.oh;
    const int y0 = IMax(oy * p.stride - p.pad, 0), y1 = IMin(oy * p.stride - p.pad + p.size, p.h);
    const XT* xc = static_cast<const XT*>(p.x) + static_cast<int64_t>(c) * p.h * p.w * p.n + img;
    const int64_t o = static_cast<int64_t>(row) * p.ow * p.n + ox * p.n + img;
    const Lanes<V> m = LoadLanes<V>(static_cast<const YT*>(p.y) + o);
    int first[V];
    bool found[V];
    for (int i = 0; i < V; ++i) first[i] = y0 * p.w + x0, found[i] = false;
    for (int yy = y0; yy < y1; ++yy)
      for (int xx = x0; xx < x1; ++xx) {
        const Lanes<V> v = LoadLanes<V>(xc + (yy * p.w + xx) * p.n);  // no dependent chain
        for (int i = 0; i < V; ++i) {
          const bool hit = !found[i] && v.v[i] == m.v[i];
          first[i] = hit ? yy * p.w + xx : first[i];
          found[i] = found[i] || hit;
        }
      }
    for (int i = 0; i < V; ++i) p.arg[o + i] = first[i];
  }
}
template <int V, typename XT, typename YT, bool kRec = false>
__global__ void PoolMaxGatherKernel(const PoolArgParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  const int nv = p.n / V;
  if (q >= p.w * nv) return;
  const int ix = q / nv, img = (q - ix * nv) * V;
  const int lx = ix + p.pad - p.size + 1;
  const int ox0 = lx <= 0 ? 0 : (lx + p.stride - 1) / p.stride;
  const int ox1 = IMin((ix + p.pad) / p.stride, p.ow - 1);
  for (int row = blockIdx.y; row < p.c * p.h; row += gridDim.y) {
    const int c = row / p.h, iy = row - c * p.h;
    const int ly = iy + p.pad - p.size + 1;
    const int oy0 = ly <= 0 ? 0 : (ly + p.stride - 1) / p.stride;
    const int oy1 = IMin((iy + p.pad) / p.stride, p.oh - 1);
    const int64_t plane = static_cast<int64_t>(c) * p.oh * p.ow * p.n + img;
    const int me = iy * p.w + ix;
    Lanes<V> g;
    for (int i = 0; i < V; ++i) g.v[i] = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy)
      for (int ox = ox0; ox <= ox1; ++ox) {
        const int64_t o = plane + (oy * p.ow + ox) * p.n;
        const Lanes<V> d = LoadLanes<V>(static_cast<const YT*>(p.dy) + o);
        if constexpr (kRec) {  // the forward's record: this pixel's offset in window (oy, ox)
          const Lanes<V> r = LoadLanes<V>(p.rec + o);
          const float mine = static_cast<float>((iy - oy * p.stride + p.pad) * p.size + ix -
                                                ox * p.stride + p.pad);
          for (int i = 0; i < V; ++i)
            if (r.v[i] == mine) g.v[i] += d.v[i];
        } else {
          for (int i = 0; i < V; ++i)
            if (p.arg[o + i] == me) g.v[i] += d.v[i];
        }
      }
    StoreLanes<V>(static_cast<XT*>(p.out) + static_cast<int64_t>(row) * p.w * p.n + ix * p.n + img,
                  g);
  }
}

// Kernel GlobalAvgPoolKernel
//   forward : x C x HW x N -> y C x N, y[c][n] = mean over HW (double sum); thread per (c, n).
//   backward: dy C x N -> dx C x HW x N, dx = dy / HW; thread per element of dx.
// Storage: forward in (x) IT, out (y) OT; backward in (dy) IT, out (dx) OT.
struct GapParams {
  const void* in;
  void* out;
  int c, hw, n;
};
template <typename IT, typename OT>
__global__ void GlobalAvgPoolForwardKernel(const GapParams p) {
  GRID_STRIDE_LOOP(i, int64_t(p.c) * p.n) {
    const int64_t c = i / p.n, img = i % p.n;
    const IT* xc = static_cast<const IT*>(p.in) + c * p.hw * p.n + img;
    double s = 0.0;
    for (int k = 0; k < p.hw; ++k) s += Load(xc + int64_t(k) * p.n);
    Store(static_cast<OT*>(p.out) + i, static_cast<float>(s / p.hw));
  }
}
template <typename IT, typename OT>
__global__ void GlobalAvgPoolBackwardKernel(const GapParams p) {
  GRID_STRIDE_LOOP(i, int64_t(p.c) * p.hw * p.n) {
    const int64_t img = i % p.n, c = i / (int64_t(p.hw) * p.n);
    Store(static_cast<OT*>(p.out) + i,
          Load(static_cast<const IT*>(p.in) + c * p.n + img) * (1.0f / static_cast<float>(p.hw)));
  }
}

// ---- response normalisation --------------------------------------------------------------------
// Storage: x (and the backward's out, dx) XT; y and dy (and the forward's out, y) YT; the
// denominators float.
struct LrnCrossKernelParams {
  const void* x;
  const void* y;
  const float* denom;
  const void* dy;
  void* out;
  float* denom_out;
  int c, cg;  // channels and channels per group
  int64_t hwn;
  int half;              // size / 2
  float alpha, beta, k;  // alpha already divided by size when requested
  float grad_scale;      // 2 * alpha * beta, rounded as CpuOps does
};

// Kernel LrnCrossForwardKernel
//   x, y, denom: C x H x W x N. One thread per (pixel, image) column q < H*W*N walks the C
//   channels; window [c - half, c + half] clipped to c's group; denom = k + alpha*sum x^2,
//   y = x * denom^-beta. Channel stride hwn keeps the warp's loads coalesced.
template <typename XT, typename YT>
__global__ void LrnCrossForwardKernel(const LrnCrossKernelParams p) {
  YT* y = static_cast<YT*>(p.out);
  GRID_STRIDE_LOOP(q, p.hwn) {
    const XT* xq = static_cast<const XT*>(p.x) + q;
    for (int c = 0; c < p.c; ++c) {
      const int g0 = (c / p.cg) * p.cg;
      const int lo = IMax(c - p.half, g0), hi = IMin(c + p.half, g0 + p.cg - 1);
      float s = 0.0f;
      for (int cc = lo; cc <= hi; ++cc) {
        const float v = Load(xq + cc * p.hwn);
        s += v * v;
      }
      const float d = p.k + p.alpha * s;
      p.denom_out[c * p.hwn + q] = d;
      Store(y + c * p.hwn + q, Load(xq + c * p.hwn) * PowNegBeta(d, p.beta));
    }
  }
}

// Kernel LrnCrossBackwardKernel
//   dx_c = dy_c * denom_c^-beta - 2*alpha*beta * x_c * sum_{c' in window(c)} dy_c' y_c' / denom_c'
//   (windows are symmetric, so c' ranges over c's own window). Thread per column as forward.
template <typename XT, typename YT>
__global__ void LrnCrossBackwardKernel(const LrnCrossKernelParams p) {
  const XT* x = static_cast<const XT*>(p.x);
  const YT* y = static_cast<const YT*>(p.y);
  const YT* dy = static_cast<const YT*>(p.dy);
  XT* dx = static_cast<XT*>(p.out);
  GRID_STRIDE_LOOP(q, p.hwn) {
    for (int c = 0; c < p.c; ++c) {
      const int g0 = (c / p.cg) * p.cg;
      const int lo = IMax(c - p.half, g0), hi = IMin(c + p.half, g0 + p.cg - 1);
      float s = 0.0f;
      for (int cc = lo; cc <= hi; ++cc) {
        const int64_t o = cc * p.hwn + q;
        s += Load(dy + o) * Load(y + o) / p.denom[o];
      }
      const int64_t o = c * p.hwn + q;
      Store(dx + o, Load(dy + o) * PowNegBeta(p.denom[o], p.beta) - p.grad_scale * Load(x + o) * s);
    }
  }
}

// Kernels LrnCrossForwardRing<HALF> / LrnCrossBackwardRing<HALF> (version 2, used for
// window half-widths 1..4): the same arithmetic as the kernels above, in the same order, but
// each thread keeps the window's 2*HALF+1 channels in registers and slides it down the
// channels of one group, so every element is read from memory once (version 1 re-read the
// window through L1: 2.4x the memory-bound time forward, 3.6x backward, on AlexNet's norm1).
// Channels outside the group enter the window as zeros, which leaves the sums bit-identical
// to summing the clipped window in order (x + 0 == x).
//   x, y, denom, dy, dx: C x H x W x N; one thread per column q < H*W*N, as above.
// The denominator k + alpha * sum of squares of a window held in registers (L values in
// channel order, zeros outside the group): every kernel that computes or recomputes a
// cross-channel denominator calls this, so all of them round it alike.
template <int L>
__device__ __forceinline__ float LrnRingDenom(const float* r, float k, float alpha) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < L; ++i) s += r[i] * r[i];
  return k + alpha * s;
}

//   V images per thread (a thread walks V adjacent columns q .. q + V - 1 with one vector
// load per channel; kernels with V > 1 need H*W*N and the tensors aligned to V elements),
// and the loads of the channel after next issued one step ahead: the scalar ring kept one
// 64-byte load per warp in flight per channel step, each consumed at once, and ran at about a
// third of the memory bound on AlexNet's norm1 (H100, 2026-12-05: 0.26 ms forward against
// 0.10). Lanes change no lane's arithmetic, so every V gives the same bits.
template <int V, typename T>
__device__ __forceinline__ Lanes<V> LoadLanesIf(const T* base, int64_t offset, bool inside) {
  if (inside) return LoadLanes<V>(base + offset);
  Lanes<V> zero;
#pragma unroll
  for (int v = 0; v < V; ++v) zero.v[v] = 0.0f;
  return zero;
}
// r[v][slot] = t.v[v]: a channel's V lanes into one slot of per-lane rings.
template <int V, int W>
__device__ __forceinline__ void PutSlot(float (&r)[V][W], int slot, const Lanes<V>& t) {
#pragma unroll
  for (int v = 0; v < V; ++v) r[v][slot] = t.v[v];
}

template <int HALF, int V, typename XT, typename YT>
__global__ void LrnCrossForwardRing(const LrnCrossKernelParams p) {
  constexpr int L = 2 * HALF + 1;
  const XT* x = static_cast<const XT*>(p.x);
  YT* y = static_cast<YT*>(p.out);
  GRID_STRIDE_LOOP(qv, p.hwn / V) {
    const int64_t q = qv * V;
    for (int g0 = 0; g0 < p.c; g0 += p.cg) {
      const int g1 = g0 + p.cg;  // group's channels [g0, g1)
      auto in_group = [&](int cc) { return cc >= g0 && cc < g1; };
      float xr[V][L];  // x of channels c - HALF .. c + HALF per lane (0 outside the group)
#pragma unroll
      for (int i = 0; i < L; ++i) {
        const int cc = g0 - HALF + i;
        PutSlot(xr, i, LoadLanesIf<V>(x, cc * p.hwn + q, in_group(cc)));
      }
      Lanes<V> next = LoadLanesIf<V>(x, (g0 + HALF + 1) * p.hwn + q, in_group(g0 + HALF + 1));
      for (int c = g0; c < g1; ++c) {
        const int64_t o = c * p.hwn + q;
        Lanes<V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          const float d = LrnRingDenom<L>(xr[v], p.k, p.alpha);
          if (p.denom_out != nullptr) p.denom_out[o + v] = d;  // null: the backward recomputes it
          out.v[v] = xr[v][HALF] * PowNegBeta(d, p.beta);
#pragma unroll
          for (int i = 0; i + 1 < L; ++i) xr[v][i] = xr[v][i + 1];
        }
        StoreLanes<V>(y + o, out);
        PutSlot(xr, L - 1, next);  // channel c + HALF + 1
        const int ca = c + HALF + 2;
        next = LoadLanesIf<V>(x, ca * p.hwn + q, in_group(ca));
      }
    }
  }
}

// kRecompute (p.denom null, the forward stored none): each denominator is computed again from
// x with LrnRingDenom over the same window, so it has the forward's bits and dx is the same;
// a lead ring xa holds x of the channels cn - HALF .. cn + HALF around the next channel cn
// to enter the window, so x is still read once (2 + 2 bytes a bf16 element fewer to move
// than the 4-byte denominator, which also never takes memory).
template <int HALF, int V, typename XT, typename YT, bool kRecompute = false>
__global__ void LrnCrossBackwardRing(const LrnCrossKernelParams p) {
  constexpr int L = 2 * HALF + 1;
  const XT* x = static_cast<const XT*>(p.x);
  const YT* y = static_cast<const YT*>(p.y);
  const YT* dy = static_cast<const YT*>(p.dy);
  XT* dx = static_cast<XT*>(p.out);
  // What a channel cc brings when it enters the window: dy and y, and x (kRecompute: x of
  // channel cc + HALF + 1 for the lead ring); zeros outside the group.
  struct Entry {
    Lanes<V> g, y, x;
  };
  GRID_STRIDE_LOOP(qv, p.hwn / V) {
    const int64_t q = qv * V;
    for (int g0 = 0; g0 < p.c; g0 += p.cg) {
      const int g1 = g0 + p.cg;
      auto in_group = [&](int cc) { return cc >= g0 && cc < g1; };
      auto fetch = [&](int cc) {
        Entry e;
        const bool inside = in_group(cc);
        e.g = LoadLanesIf<V>(dy, cc * p.hwn + q, inside);
        e.y = LoadLanesIf<V>(y, cc * p.hwn + q, inside);
        const int cx = kRecompute ? cc + HALF + 1 : cc;
        e.x = LoadLanesIf<V>(x, cx * p.hwn + q, inside && cx < g1);
        return e;
      };
      float xa[V][L];  // kRecompute: x of channels cn - HALF .. cn + HALF per lane
      if constexpr (kRecompute) {
#pragma unroll
        for (int i = 0; i < L; ++i) {
          const int cc = g0 - HALF + i;
          PutSlot(xa, i, LoadLanesIf<V>(x, cc * p.hwn + q, in_group(cc)));
        }
      }
      // Per lane and window slot: ratio dy*y/denom, and x, dy, denom for when the slot is
      // the centre (zeros and a unit denominator outside the group).
      float rr[V][L], xr[V][L], gr[V][L], dr[V][L];
      auto enter = [&](int cc, int slot, const Entry& e) {
        const bool inside = in_group(cc);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float xv = e.x.v[v], dv = 1.0f;
          if (inside) {
            if constexpr (kRecompute) {
              dv = LrnRingDenom<L>(xa[v], p.k, p.alpha);  // xa is centred on cc
              xv = xa[v][HALF];
#pragma unroll
              for (int i = 0; i + 1 < L; ++i) xa[v][i] = xa[v][i + 1];
              xa[v][L - 1] = e.x.v[v];
            } else {
              dv = p.denom[cc * p.hwn + q + v];
            }
          }
          xr[v][slot] = xv;
          gr[v][slot] = e.g.v[v];
          dr[v][slot] = dv;
          rr[v][slot] = inside ? e.g.v[v] * e.y.v[v] / dv : 0.0f;
        }
      };
#pragma unroll
      for (int i = 0; i < L; ++i) enter(g0 - HALF + i, i, fetch(g0 - HALF + i));
      Entry next = fetch(g0 + HALF + 1);
      for (int c = g0; c < g1; ++c) {
        Lanes<V> out;
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float s = 0.0f;
#pragma unroll
          for (int i = 0; i < L; ++i) s += rr[v][i];
          out.v[v] = gr[v][HALF] * PowNegBeta(dr[v][HALF], p.beta) - p.grad_scale * xr[v][HALF] * s;
#pragma unroll
          for (int i = 0; i + 1 < L; ++i) {
            rr[v][i] = rr[v][i + 1];
            xr[v][i] = xr[v][i + 1];
            gr[v][i] = gr[v][i + 1];
            dr[v][i] = dr[v][i + 1];
          }
        }
        StoreLanes<V>(dx + c * p.hwn + q, out);
        enter(c + HALF + 1, L - 1, next);
        next = fetch(c + HALF + 2);
      }
    }
  }
}

// Kernels LrnMaxPoolForward<HALF> / LrnMaxPoolBackward<HALF>: cross-channel LRN followed
// by max pooling (AlexNet's norm + pool) in one pass each way, for pooling windows of up to
// kLrnPoolSide x kLrnPoolSide pixels and LRN windows of up to 9 channels. Neither the normalised
// map nor its denominator is stored: the forward writes the pooled y and each window's argmax; the
// backward reads x, the argmax and dy, and writes dx. Per element that is 1 read (forward) and 2
// reads + 1 write (backward) of the LRN-sized tensors instead of 1 + 2 writes and 4 reads + 1 write
// for the LRN alone plus 1 read, and 2 reads + 1 write, for the pooling. Bits: every LRN value is
// recomputed with the unfused kernels' arithmetic in their order (LrnRingDenom, PowNegBeta, gr * y
// / d, the window sum of ratios); the maximum is the first in row-major order, as
// PoolForwardKernel's, and its index is what PoolArgmaxKernel finds (the first pixel equal to the
// maximum); a pixel's pooling gradient is summed over the windows in (oy, ox) order as in
// PoolMaxGatherKernel. So y and dx are those of the unfused kernels bit for bit
// (tests/cuda/cuda_ops_test.cc checks it).
//   x, dx: C x H x W x N; y, arg, dy: C x OH x OW x N. The channels of each group are cut
//   into chunks of `chunk` channels, each walked by one thread with a register ring (the
//   first 2*HALF (forward: HALF) channels of a chunk read its neighbours' as a halo).
//   Forward: grid y = (chunk, oy) rows, x = (ox, image) of the row; backward: grid y =
//   (chunk, iy) rows, x = (ix, image).
constexpr int kLrnPoolSide = 3, kLrnPoolWindow = kLrnPoolSide * kLrnPoolSide;
// Storage: x and dx XT, y and dy YT (float or Bf16); arg is float. y is rounded once at its
// store, after the argmax is found on the FP32 normalised values.
struct LrnPoolKernelParams {
  const void* x;
  const void* dy;
  const float* argmax;  // backward: the forward's arg
  void* y;
  float* arg;
  void* dx;
  int c, cg, h, w, n, oh, ow;
  int size, stride, pad;  // pooling
  int chunk;              // channels per thread
  float alpha, beta, k, grad_scale;
  // LrnMaxPoolForwardTiled: outputs per block (oyt x oxt windows of ni images), the input
  // region they cover at most (ry_max x rx_max pixels), and the tile counts.
  int oyt, oxt, ni, ry_max, rx_max, oy_tiles, ox_tiles, img_tiles;
};

template <int HALF, typename XT, typename YT>
__global__ void LrnMaxPoolForward(const LrnPoolKernelParams p) {
  constexpr int L = 2 * HALF + 1;
  const XT* x = static_cast<const XT*>(p.x);
  const int q = blockIdx.x * kBlock + threadIdx.x;
  if (q >= p.ow * p.n) return;
  const int ox = q / p.n, img = q - ox * p.n;
  const int x0 = IMax(ox * p.stride - p.pad, 0), x1 = IMin(ox * p.stride - p.pad + p.size, p.w);
  const int per_group = (p.cg + p.chunk - 1) / p.chunk;
  const int64_t plane = static_cast<int64_t>(p.h) * p.w * p.n;
  const int rows = (p.c / p.cg) * per_group * p.oh;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const int cj = row / p.oh, oy = row - cj * p.oh;
    const int g0 = (cj / per_group) * p.cg, g1 = g0 + p.cg;
    const int c0 = g0 + (cj % per_group) * p.chunk, c1 = IMin(c0 + p.chunk, g1);
    const int y0 = IMax(oy * p.stride - p.pad, 0), y1 = IMin(oy * p.stride - p.pad + p.size, p.h);
    // Slot i = (i / side, i % side) of the window, clipped to the image: row-major order, and
    // constant indices, so the per-slot arrays stay in registers.
    bool in[kLrnPoolWindow];
    int idx[kLrnPoolWindow], at[kLrnPoolWindow];  // pixel iy * W + ix, its offset in a plane
#pragma unroll
    for (int i = 0; i < kLrnPoolWindow; ++i) {
      const int yy = y0 + i / kLrnPoolSide, xx = x0 + i % kLrnPoolSide;
      in[i] = yy < y1 && xx < x1;
      idx[i] = yy * p.w + xx;
      at[i] = idx[i] * p.n + img;
    }
    float xr[kLrnPoolWindow][L];  // per slot: x of channels c - HALF .. c + HALF
#pragma unroll
    for (int i = 0; i < kLrnPoolWindow; ++i)
#pragma unroll
      for (int j = 0; j < L; ++j) {
        const int cc = c0 - HALF + j;
        xr[i][j] = (in[i] && cc >= g0 && cc < g1) ? Load(x + cc * plane + at[i]) : 0.0f;
      }
    for (int c = c0; c < c1; ++c) {
      float m = -INFINITY;
      int a = y0 * p.w + x0;
#pragma unroll
      for (int i = 0; i < kLrnPoolWindow; ++i) {
        if (in[i]) {
          const float d = LrnRingDenom<L>(xr[i], p.k, p.alpha);
          const float v = xr[i][HALF] * PowNegBeta(d, p.beta);
          if (v > m) {
            m = v;
            a = idx[i];
          }
        }
      }
      const int64_t o = (static_cast<int64_t>(c) * p.oh + oy) * p.ow * p.n + q;
      Store(static_cast<YT*>(p.y) + o, m);
      p.arg[o] = static_cast<float>(a);
      const int cn = c + HALF + 1;
#pragma unroll
      for (int i = 0; i < kLrnPoolWindow; ++i) {
#pragma unroll
        for (int j = 0; j + 1 < L; ++j) xr[i][j] = xr[i][j + 1];
        xr[i][L - 1] = (in[i] && cn < g1) ? Load(x + cn * plane + at[i]) : 0.0f;
      }
    }
  }
}

// Version 2 of the forward: the block's threads normalise each pixel of its tile's input
// region once (one thread per pixel and image, a register ring over channels) into shared
// memory, then one thread per window and image takes the maximum there. Version 1 above
// normalises every pixel of every window it pools, about 2.25 times per element for
// AlexNet's overlapping 3 x 3 windows at stride 2, and the LRN's d^-beta (three correctly
// rounded square roots and a division) makes it arithmetic-bound; here the repeat is only a
// tile's halo (AlexNet: 63 pixels for 12 windows, 1.3 times). Same values, same order of
// comparison: bit-identical to version 1; the autotuner picks the faster per shape.
//   Block: ry_max x rx_max region slots x ni images (<= kLrnPoolTileThreads); grid x =
//   (output-column tile, image tile), y = (channel chunk, output-row tile).
constexpr int kLrnPoolTileThreads = 1024;
template <int HALF, typename XT, typename YT>
__global__ void __launch_bounds__(kLrnPoolTileThreads)
    LrnMaxPoolForwardTiled(const LrnPoolKernelParams p) {
  constexpr int L = 2 * HALF + 1;
  const XT* x = static_cast<const XT*>(p.x);
  __shared__ float sm[2][kLrnPoolTileThreads];  // LRN of the region, double-buffered by channel
  const int t = threadIdx.x;
  const int li = t % p.ni, slot = t / p.ni;  // image in the tile; region slot / output slot
  const int img = (blockIdx.x % p.img_tiles) * p.ni + li;
  const int ox0 = (blockIdx.x / p.img_tiles) * p.oxt;
  const int per_group = (p.cg + p.chunk - 1) / p.chunk;
  const int64_t plane = static_cast<int64_t>(p.h) * p.w * p.n;
  const int rows = (p.c / p.cg) * per_group * p.oy_tiles;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const int cj = row / p.oy_tiles, oy0 = (row - cj * p.oy_tiles) * p.oyt;
    const int g0 = (cj / per_group) * p.cg, g1 = g0 + p.cg;
    const int c0 = g0 + (cj % per_group) * p.chunk, c1 = IMin(c0 + p.chunk, g1);
    // The input rows and columns the tile's windows cover, clipped to the image.
    const int ry0 = IMax(oy0 * p.stride - p.pad, 0), rx0 = IMax(ox0 * p.stride - p.pad, 0);
    const int ry1 = IMin((IMin(oy0 + p.oyt, p.oh) - 1) * p.stride - p.pad + p.size, p.h);
    const int rx1 = IMin((IMin(ox0 + p.oxt, p.ow) - 1) * p.stride - p.pad + p.size, p.w);
    const int iy = ry0 + slot / p.rx_max, ix = rx0 + slot % p.rx_max;
    const bool pix = img < p.n && slot < p.ry_max * p.rx_max && iy < ry1 && ix < rx1;
    const int64_t at = (static_cast<int64_t>(iy) * p.w + ix) * p.n + img;
    // This thread's window (as an output): slot (oy - oy0, ox - ox0) of the tile.
    const int oy = oy0 + slot / p.oxt, ox = ox0 + slot % p.oxt;
    const bool out = img < p.n && slot < p.oyt * p.oxt && oy < p.oh && ox < p.ow;
    const int wy0 = IMax(oy * p.stride - p.pad, 0), wy1 = IMin(oy * p.stride - p.pad + p.size, p.h);
    const int wx0 = IMax(ox * p.stride - p.pad, 0), wx1 = IMin(ox * p.stride - p.pad + p.size, p.w);
    float xr[L];  // x of channels c - HALF .. c + HALF at this thread's pixel
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int cc = c0 - HALF + j;
      xr[j] = (pix && cc >= g0 && cc < g1) ? Load(x + cc * plane + at) : 0.0f;
    }
    for (int c = c0; c < c1; ++c) {
      float* buf = sm[(c - c0) & 1];
      if (pix) {
        const float d = LrnRingDenom<L>(xr, p.k, p.alpha);
        buf[t] = xr[HALF] * PowNegBeta(d, p.beta);
      }
#pragma unroll
      for (int j = 0; j + 1 < L; ++j) xr[j] = xr[j + 1];
      const int cn = c + HALF + 1;
      xr[L - 1] = (pix && cn < g1) ? Load(x + cn * plane + at) : 0.0f;
      __syncthreads();  // the region's values of channel c are in buf
      if (out) {
        float m = -INFINITY;
        int a = wy0 * p.w + wx0;
        for (int yy = wy0; yy < wy1; ++yy)
          for (int xx = wx0; xx < wx1; ++xx) {
            const float v = buf[((yy - ry0) * p.rx_max + (xx - rx0)) * p.ni + li];
            if (v > m) {
              m = v;
              a = yy * p.w + xx;
            }
          }
        const int64_t o = ((static_cast<int64_t>(c) * p.oh + oy) * p.ow + ox) * p.n + img;
        Store(static_cast<YT*>(p.y) + o, m);
        p.arg[o] = static_cast<float>(a);
      }
      // No second barrier: channel c + 1 writes the other buffer, and channel c + 2 writes
      // this one only after the next barrier, which every reader of this one has passed.
    }
    __syncthreads();  // the next row's first channel may write the buffer read last
  }
}

template <int HALF, typename XT, typename YT>
__global__ void LrnMaxPoolBackward(const LrnPoolKernelParams p) {
  constexpr int L = 2 * HALF + 1, R = 4 * HALF + 1;
  const XT* x = static_cast<const XT*>(p.x);
  const YT* dy = static_cast<const YT*>(p.dy);
  const int q = blockIdx.x * kBlock + threadIdx.x;
  if (q >= p.w * p.n) return;
  const int ix = q / p.n, img = q - ix * p.n;
  const int lx = ix + p.pad - p.size + 1;
  const int ox0 = lx <= 0 ? 0 : (lx + p.stride - 1) / p.stride;
  const int ox1 = IMin((ix + p.pad) / p.stride, p.ow - 1);
  const int per_group = (p.cg + p.chunk - 1) / p.chunk;
  const int64_t plane = static_cast<int64_t>(p.h) * p.w * p.n;
  const int64_t out_plane = static_cast<int64_t>(p.oh) * p.ow * p.n;
  const int rows = (p.c / p.cg) * per_group * p.h;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const int cj = row / p.h, iy = row - cj * p.h;
    const int g0 = (cj / per_group) * p.cg, g1 = g0 + p.cg;
    const int c0 = g0 + (cj % per_group) * p.chunk, c1 = IMin(c0 + p.chunk, g1);
    const int ly = iy + p.pad - p.size + 1;
    const int oy0 = ly <= 0 ? 0 : (ly + p.stride - 1) / p.stride;
    const int oy1 = IMin((iy + p.pad) / p.stride, p.oh - 1);
    const float me = static_cast<float>(iy * p.w + ix);
    const int64_t at = static_cast<int64_t>(iy * p.w + ix) * p.n + img;
    // Channel cc's pooling gradient at this pixel: dy of the windows whose argmax it is.
    auto pool_grad = [&](int cc) {
      const int64_t pl = cc * out_plane + img;
      float g = 0.0f;
      for (int oy = oy0; oy <= oy1; ++oy)
        for (int ox = ox0; ox <= ox1; ++ox) {
          const int64_t o = pl + (oy * p.ow + ox) * p.n;
          if (p.argmax[o] == me) g += Load(dy + o);
        }
      return g;
    };
    auto load_x = [&](int cc) { return (cc >= g0 && cc < g1) ? Load(x + cc * plane + at) : 0.0f; };
    // xr: x of channels c - 2*HALF .. c + 2*HALF. Per window slot j (channel c - HALF + j):
    // rr = g * y / d, and g, d^-beta for when it is the centre (as LrnCrossBackwardRing).
    float xr[R], rr[L], gr[L], pw[L];
#pragma unroll
    for (int i = 0; i < R; ++i) xr[i] = load_x(c0 - 2 * HALF + i);
#pragma unroll
    for (int j = 0; j < L; ++j) {
      const int cc = c0 - HALF + j;
      if (cc >= g0 && cc < g1) {
        const float d = LrnRingDenom<L>(xr + j, p.k, p.alpha);
        pw[j] = PowNegBeta(d, p.beta);
        gr[j] = pool_grad(cc);
        rr[j] = gr[j] * (xr[j + HALF] * pw[j]) / d;
      } else {
        rr[j] = gr[j] = pw[j] = 0.0f;
      }
    }
    for (int c = c0; c < c1; ++c) {
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < L; ++j) s += rr[j];
      Store(static_cast<XT*>(p.dx) + c * plane + at,
            gr[HALF] * pw[HALF] - p.grad_scale * xr[2 * HALF] * s);
#pragma unroll
      for (int i = 0; i + 1 < R; ++i) xr[i] = xr[i + 1];
      xr[R - 1] = load_x(c + 2 * HALF + 1);
#pragma unroll
      for (int j = 0; j + 1 < L; ++j) {
        rr[j] = rr[j + 1];
        gr[j] = gr[j + 1];
        pw[j] = pw[j + 1];
      }
      const int cn = c + HALF + 1;  // enters the window: its x are xr[R - L .. R - 1]
      if (cn < g1) {
        const float d = LrnRingDenom<L>(xr + (R - L), p.k, p.alpha);
        pw[L - 1] = PowNegBeta(d, p.beta);
        gr[L - 1] = pool_grad(cn);
        rr[L - 1] = gr[L - 1] * (xr[R - 1 - HALF] * pw[L - 1]) / d;
      } else {
        rr[L - 1] = gr[L - 1] = pw[L - 1] = 0.0f;
      }
    }
  }
}

struct LrnWithinKernelParams {
  const float* x;
  const float* y;
  const float* denom;
  const float* dy;
  float* out;
  float* denom_out;
  int c, h, w, n;
  int size;
  float alpha, beta, k;  // alpha already divided by size^2
  float grad_scale;      // 2 * alpha / size^2 * beta, rounded as CpuOps does
};

// Kernel LrnWithinForwardKernel
//   x, y, denom: C x H x W x N; thread per element. Window rows [y - size/2, +size),
//   columns likewise, clipped; denom = k + alpha * sum u^2, y = u * denom^-beta.
__global__ void LrnWithinForwardKernel(const LrnWithinKernelParams p) {
  const int64_t total = int64_t(p.c) * p.h * p.w * p.n;
  GRID_STRIDE_LOOP(i, total) {
    const int img = static_cast<int>(i % p.n);
    int64_t t = i / p.n;
    const int xx = static_cast<int>(t % p.w);
    t /= p.w;
    const int yy = static_cast<int>(t % p.h);
    const int64_t c = t / p.h;
    const float* xc = p.x + c * p.h * p.w * p.n + img;
    const int y0 = IMax(yy - p.size / 2, 0), y1 = IMin(yy - p.size / 2 + p.size, p.h);
    const int x0 = IMax(xx - p.size / 2, 0), x1 = IMin(xx - p.size / 2 + p.size, p.w);
    float s = 0.0f;
    for (int a = y0; a < y1; ++a)
      for (int b = x0; b < x1; ++b) {
        const float v = xc[(int64_t(a) * p.w + b) * p.n];
        s += v * v;
      }
    const float d = p.k + p.alpha * s;
    p.denom_out[i] = d;
    p.out[i] = p.x[i] * PowNegBeta(d, p.beta);
  }
}

// Kernel LrnWithinBackwardKernel
//   dx_u = dy_u denom_u^-beta - 2 alpha beta u sum_{v: u in window(v)} dy_v y_v / denom_v,
//   where u in window(v) <=> v in [u - size + size/2 + 1, u + size/2] on each axis.
__global__ void LrnWithinBackwardKernel(const LrnWithinKernelParams p) {
  const int64_t total = int64_t(p.c) * p.h * p.w * p.n;
  GRID_STRIDE_LOOP(i, total) {
    const int img = static_cast<int>(i % p.n);
    int64_t t = i / p.n;
    const int xx = static_cast<int>(t % p.w);
    t /= p.w;
    const int yy = static_cast<int>(t % p.h);
    const int64_t c = t / p.h;
    const int64_t base = c * p.h * p.w * p.n + img;
    const int y0 = IMax(yy - p.size + p.size / 2 + 1, 0), y1 = IMin(yy + p.size / 2, p.h - 1);
    const int x0 = IMax(xx - p.size + p.size / 2 + 1, 0), x1 = IMin(xx + p.size / 2, p.w - 1);
    float s = 0.0f;
    for (int a = y0; a <= y1; ++a)
      for (int b = x0; b <= x1; ++b) {
        const int64_t o = base + (int64_t(a) * p.w + b) * p.n;
        s += p.dy[o] * p.y[o] / p.denom[o];
      }
    p.out[i] = p.dy[i] * PowNegBeta(p.denom[i], p.beta) - p.grad_scale * p.x[i] * s;
  }
}

// ---- batch norm ---------------------------------------------------------------------------------
// Storage: x and dx XT; y, dy and relu_y YT (the kernels' template arguments). The
// per-channel parameters and statistics are float, the sums double, from the widened values.
struct BnParams {
  const void* x;
  const float* gamma;
  const float* beta;
  const void* dy;
  const float* mean_in;    // save_mean (backward) or running_mean (inference)
  const float* invstd_in;  // save_invstd (backward) or running_var (inference)
  void* y;                 // y, or dx (backward)
  float* running_mean;
  float* running_var;
  float* save_mean;
  float* save_invstd;
  float* save_scale;  // gamma * invstd as the forward used it (BatchNormApply's scale)
  float* dgamma;
  float* dbeta;
  int64_t inner;
  float eps, momentum;
  // The split reductions of training and backward (BnGridFor): partial sums, C x splits
  // (backward: x 2), and the variance's, C x splits.
  double* part;
  double* part2;
  int splits;
  int64_t chunk;  // elements per split
  // Fused ReLU (Ops::BatchNormRelu*): forward and apply write max(y, 0); backward reads dy
  // through the mask of relu_y, the rectified output (null: no ReLU).
  int relu;
  const void* relu_y;
};
// dy of elements i .. i + V - 1 as the ReLU's backward passes it (ReluBackwardKernel's
// expression), or dy unfused.
template <int V, typename YT>
__device__ __forceinline__ Lanes<V> BnGrad(const BnParams& p, int64_t i) {
  Lanes<V> g = LoadLanes<V>(static_cast<const YT*>(p.dy) + i);
  if (p.relu_y) {
    const Lanes<V> m = LoadLanes<V>(static_cast<const YT*>(p.relu_y) + i);
    for (int k = 0; k < V; ++k) g.v[k] = m.v[k] > 0.0f ? g.v[k] : 0.0f;
  }
  return g;
}

// y = (x - mean) * scale + shift: the one expression of the training forward and of
// BatchNormApplyKernel, so both round alike (this file is built with --fmad=false).
__device__ __forceinline__ float BnApply(float x, float mean, float scale, float shift) {
  return (x - mean) * scale + shift;
}

// The training forward and the backward reduce each channel (C x inner, inner = H*W*N) in
// `splits` chunks of consecutive elements, one block each (grid x = split, y = channel), so a
// layer of 64 channels still fills the device; each block leaves its double partial sum in
// `part` and the next kernel adds a channel's partials in split order (deterministic: the
// same bits every run for a given split count, which depends only on C, inner and the
// device's SM count).
// Lanes: V = 4 consecutive elements per thread and step (a float4, or 8 bytes of bf16) where
// inner is a multiple of 4 and every tensor is aligned to 4 elements (VectorLanes), else V = 1;
// the split chunks are then multiples of 4. A thread adds its V elements in order, so V = 4
// sums a channel in another order than V = 1 (the double partial sums, then rounded to
// float, differ in rare last bits); float and bf16 storage pick the same V for the same
// shape, so they keep giving the same statistics. Why: the one-element loops were
// issue-bound far below the memory bandwidth, as the pooling kernels' were (see Lanes).
__device__ __forceinline__ double OrderedPartSum(const double* part, int splits, int stride = 1) {
  double s = 0.0;
  for (int k = 0; k < splits; ++k) s += part[k * stride];
  return s;
}

// Kernel BatchNormSumKernel<XT>: part[c][split] = sum of the split's x (double).
template <int V, typename XT>
__global__ void BatchNormSumKernel(const BnParams p) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.y;
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  double s = 0.0;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    const Lanes<V> v = LoadLanes<V>(xc + i);
    for (int k = 0; k < V; ++k) s += v.v[k];
  }
  s = BlockSum(s, sh);
  if (threadIdx.x == 0) p.part[int64_t(c) * p.splits + blockIdx.x] = s;
}
// Kernel BatchNormVarKernel: the mean from the partial sums, then p.part2[c][split] = the
// split's sum of (x - mean)^2 (double): the two-pass variance.
template <int V, typename XT>
__global__ void BatchNormVarKernel(const BnParams p) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.y;
  const double mean =
      OrderedPartSum(p.part + int64_t(c) * p.splits, p.splits) / static_cast<double>(p.inner);
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  double v = 0.0;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    const Lanes<V> x = LoadLanes<V>(xc + i);
    for (int k = 0; k < V; ++k) {
      const double d = x.v[k] - mean;
      v += d * d;
    }
  }
  v = BlockSum(v, sh);
  if (threadIdx.x == 0) p.part2[int64_t(c) * p.splits + blockIdx.x] = v;
}
// Kernel BatchNormNormalizeKernel: mean and biased variance from the partials, y written;
// the first split of each channel saves the statistics and updates the running ones
// (unbiased variance).
template <int V, typename XT, typename YT>
__global__ void BatchNormNormalizeKernel(const BnParams p) {
  const int c = blockIdx.y;
  const double mean =
      OrderedPartSum(p.part + int64_t(c) * p.splits, p.splits) / static_cast<double>(p.inner);
  const double ss = OrderedPartSum(p.part2 + int64_t(c) * p.splits, p.splits);
  const double var = ss / static_cast<double>(p.inner);
  const double invstd = 1.0 / sqrt(var + p.eps);
  const float fmean = static_cast<float>(mean);
  const float scale = static_cast<float>(p.gamma[c] * invstd), shift = p.beta[c];
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  YT* yc = static_cast<YT*>(p.y) + c * p.inner;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    Lanes<V> v = LoadLanes<V>(xc + i);
    for (int k = 0; k < V; ++k) {
      v.v[k] = BnApply(v.v[k], fmean, scale, shift);
      if (p.relu) v.v[k] = Relu(v.v[k]);
    }
    StoreLanes<V>(yc + i, v);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    p.save_mean[c] = fmean;
    p.save_invstd[c] = static_cast<float>(invstd);
    p.save_scale[c] = scale;
    const double unbiased = p.inner > 1 ? ss / static_cast<double>(p.inner - 1) : var;
    p.running_mean[c] =
        static_cast<float>((1.0 - p.momentum) * p.running_mean[c] + p.momentum * mean);
    p.running_var[c] =
        static_cast<float>((1.0 - p.momentum) * p.running_var[c] + p.momentum * unbiased);
  }
}

// Kernel BatchNormInferKernel: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta,
// grid-stride over x: C x inner.
struct BnInferParams {
  BnParams b;
  int c;
};
template <typename XT, typename YT>
__global__ void BatchNormInferKernel(const BnInferParams q) {
  const BnParams& p = q.b;
  GRID_STRIDE_LOOP(i, q.c * p.inner) {
    const int64_t c = i / p.inner;
    const double invstd = 1.0 / sqrt(static_cast<double>(p.invstd_in[c]) + p.eps);
    const float scale = static_cast<float>(p.gamma[c] * invstd);
    Store(static_cast<YT*>(p.y) + i,
          (Load(static_cast<const XT*>(p.x) + i) - p.mean_in[c]) * scale + p.beta[c]);
  }
}

// Kernel BatchNormApplyKernel: y = BnApply(x, mean, scale, shift) per channel (the saved
// values of a training forward). Grid: x = column chunks of the channel, y = channel (as
// AddBiasKernel: no division per element).
template <int V, typename XT, typename YT>
__global__ void BatchNormApplyKernel(const BnParams p) {
  const int c = blockIdx.y;
  const float mean = p.mean_in[c], scale = p.gamma[c], shift = p.beta[c];
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  YT* yc = static_cast<YT*>(p.y) + c * p.inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V; i < p.inner;
       i += step) {
    Lanes<V> v = LoadLanes<V>(xc + i);
    for (int k = 0; k < V; ++k) {
      v.v[k] = BnApply(v.v[k], mean, scale, shift);
      if (p.relu) v.v[k] = Relu(v.v[k]);
    }
    StoreLanes<V>(yc + i, v);
  }
}

// Kernel BatchNormBackwardSumsKernel: per split, sum dy and sum dy * xhat (double), xhat =
// (x - mean) * invstd, into part[c][split][0..1].
template <int V, typename XT, typename YT>
__global__ void BatchNormBackwardSumsKernel(const BnParams p) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.y;
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  const double mean = p.mean_in[c], invstd = p.invstd_in[c];
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  double sdy = 0.0, sdyx = 0.0;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    const Lanes<V> g = BnGrad<V, YT>(p, c * p.inner + i);
    const Lanes<V> x = LoadLanes<V>(xc + i);
    for (int k = 0; k < V; ++k) {
      sdy += g.v[k];
      sdyx += g.v[k] * ((x.v[k] - mean) * invstd);
    }
  }
  sdy = BlockSum(sdy, sh);
  sdyx = BlockSum(sdyx, sh);
  if (threadIdx.x == 0) {
    double* o = p.part + (int64_t(c) * p.splits + blockIdx.x) * 2;
    o[0] = sdy;
    o[1] = sdyx;
  }
}
// Kernel BatchNormBackwardKernel: dbeta = sum dy, dgamma = sum dy*xhat (the partials in split
// order), dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma); the first split of each
// channel writes dgamma and dbeta. dx is rounded to float, then (bf16) to bf16 at the store.
template <int V, typename XT, typename YT>
__global__ void BatchNormBackwardKernel(const BnParams p) {
  const int c = blockIdx.y;
  const double* pc = p.part + int64_t(c) * p.splits * 2;
  const double db = OrderedPartSum(pc, p.splits, 2), dg = OrderedPartSum(pc + 1, p.splits, 2);
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  const double mean = p.mean_in[c], invstd = p.invstd_in[c];
  const double m = static_cast<double>(p.inner);
  const double k = p.gamma[c] * invstd / m;
  XT* dxc = static_cast<XT*>(p.y) + c * p.inner;
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    Lanes<V> x = LoadLanes<V>(xc + i);
    const Lanes<V> g = BnGrad<V, YT>(p, c * p.inner + i);
    for (int e = 0; e < V; ++e) {
      const double xhat = (x.v[e] - mean) * invstd;
      x.v[e] = static_cast<float>(k * (m * static_cast<double>(g.v[e]) - db - xhat * dg));
    }
    StoreLanes<V>(dxc + i, x);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    p.dgamma[c] = static_cast<float>(dg);
    p.dbeta[c] = static_cast<float>(db);
  }
}

// ---- dropout ----------------------------------------------------------------------------------
// Kernel DropoutForwardKernel: x, y, mask C x H x W x N, thread per element. The mask of
// local element (c, h, w, n) is a pure function of (seed, step, global element index)
// exactly as in CpuOps (see DropoutKeep below), so both backends draw the same mask.
// Storage: x XT, y YT; the mask float (it does not depend on the storage).
struct DropoutKernelParams {
  const void* x;
  void* y;
  float* mask;
  int c, h, w, n;
  float p, scale;
  uint64_t seed;
  int64_t step, channel_offset, image_offset, global_batch;
  const int64_t* step_on_device;  // a CUDA-graph step: the step is read here (StepScalars)
};
template <typename XT, typename YT>
__global__ void DropoutForwardKernel(const DropoutKernelParams p) {
  const int64_t total = int64_t(p.c) * p.h * p.w * p.n;
  const uint64_t step = static_cast<uint64_t>(p.step_on_device ? *p.step_on_device : p.step);
  GRID_STRIDE_LOOP(i, total) {
    const int64_t img = i % p.n;
    const int64_t chw = i / p.n;  // ((c*H + h)*W + w)
    const int64_t c = chw / (int64_t(p.h) * p.w);
    const int64_t hw = chw % (int64_t(p.h) * p.w);
    const int64_t gidx =
        ((c + p.channel_offset) * p.h * p.w + hw) * p.global_batch + img + p.image_offset;
    const float u = PhiloxUniform(p.seed, step, static_cast<uint64_t>(gidx));
    const float m = u >= p.p ? p.scale : 0.0f;
    p.mask[i] = m;
    Store(static_cast<YT*>(p.y) + i, Load(static_cast<const XT*>(p.x) + i) * m);
  }
}

// ---- softmax + cross-entropy ------------------------------------------------------------------
// Kernel SoftmaxXentForwardKernel: logits K x N (class-major, images innermost), labels N.
// One block per image: block max, block sum of exp, then probs and -log p[label] computed
// as log(sum) - (z[label] - max).
struct XentParams {
  const float* logits;
  const float* labels;
  const float* probs_in;
  float* probs;
  float* loss;
  float* dlogits;
  int k, n;
  float scale;
};
__global__ void SoftmaxXentForwardKernel(const XentParams p) {
  __shared__ double shd[kBlock];
  __shared__ float shf[kBlock];
  const int img = blockIdx.x;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < p.k; k += kBlock) mx = fmaxf(mx, p.logits[int64_t(k) * p.n + img]);
  mx = BlockMax(mx, shf);
  double s = 0.0;
  for (int k = threadIdx.x; k < p.k; k += kBlock) s += expf(p.logits[int64_t(k) * p.n + img] - mx);
  s = BlockSum(s, shd);
  for (int k = threadIdx.x; k < p.k; k += kBlock) {
    const int64_t o = int64_t(k) * p.n + img;
    p.probs[o] = static_cast<float>(static_cast<double>(expf(p.logits[o] - mx)) / s);
  }
  if (threadIdx.x == 0) {
    const int label = static_cast<int>(p.labels[img]);
    const float z = (label >= 0 && label < p.k) ? p.logits[int64_t(label) * p.n + img] : NAN;
    p.loss[img] = static_cast<float>(log(s) - (static_cast<double>(z) - mx));
  }
}
// Kernel SoftmaxXentBackwardKernel: dlogits[k][n] = scale * (probs[k][n] - [k == label[n]]).
__global__ void SoftmaxXentBackwardKernel(const XentParams p) {
  GRID_STRIDE_LOOP(i, int64_t(p.k) * p.n) {
    const int64_t k = i / p.n, img = i % p.n;
    const float onehot = static_cast<int64_t>(p.labels[img]) == k ? 1.0f : 0.0f;
    p.dlogits[i] = p.scale * (p.probs_in[i] - onehot);
  }
}

// ---- SGD ----------------------------------------------------------------------------------------
// Kernel SgdKernel: v = momentum*v - lr*(grad + wd*w); w = w + v, element-wise over n.
// Each product and sum is rounded separately (no FMA contraction), as on the CPU.
struct SgdKernelParams {
  float* w;
  const float* g;
  float* v;
  int64_t n;
  float lr, momentum, wd;
  const float* lr_on_device;  // a CUDA-graph step: lr = *lr_on_device * lr_mult (StepScalars)
  float lr_mult;
};
__global__ void SgdKernel(const SgdKernelParams p) {
  // One rounded product, as the host's `lr * lr_mult` that makes p.lr: the same bits.
  const float lr = p.lr_on_device ? __fmul_rn(*p.lr_on_device, p.lr_mult) : p.lr;
  GRID_STRIDE_LOOP(i, p.n) {
    const float w = p.w[i];
    const float grad = __fadd_rn(p.g[i], __fmul_rn(p.wd, w));
    const float v = __fsub_rn(__fmul_rn(p.momentum, p.v[i]), __fmul_rn(lr, grad));
    p.v[i] = v;
    p.w[i] = __fadd_rn(w, v);
  }
}

// Kernel SetStepScalarsKernel: one thread writes a step's StepScalars block. Queued on the
// compute stream before each replay of a step graph: the values travel as launch
// arguments, so no host buffer has to outlive the call.
struct StepScalarsParams {
  StepScalars* out;
  StepScalars v;
};
__global__ void SetStepScalarsKernel(const StepScalarsParams p) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.out = p.v;
}

}  // namespace

// ================================ launchers
// ========================================================

// Max-pool backward versions 2 and 3 are bit-identical; the autotuner (autotune.h) times
// them on the first call of each shape and keeps the faster, unless one is forced
// (SetPoolBackwardVersion, COLONNADE_POOL_BWD=v2|v3). The emulator runs version 3.
namespace {
KernelAutotuner& PoolBackwardTuner() {
  static KernelAutotuner* tuner = new KernelAutotuner("COLONNADE_POOL_BWD", {2, 3}, 3);
  return *tuner;
}
}  // namespace

void SetPoolBackwardVersion(int version) { PoolBackwardTuner().Force(version); }

void FillGpu(const DeviceContext& ctx, float* y, int64_t n, float v) {
  FillGpu(ctx, y, StorageType::kFloat, n, v);
}

void FillGpu(const DeviceContext& ctx, void* y, StorageType t, int64_t n, float v) {
  WithStorage(t, [&](auto ts) {
    Launch(FillKernel<decltype(ts)>, GridFor(ctx, n), dim3(kBlock), ctx.stream,
           FillParams{y, n, v});
  });
}

void AxpbyGpu(const DeviceContext& ctx, float alpha, const float* x, float beta, float* y,
              int64_t n) {
  Launch(AxpbyKernel, GridFor(ctx, n), dim3(kBlock), ctx.stream, AxpbyParams{alpha, x, beta, y, n});
}

namespace {
// BinaryKernel with each operand's storage (Mul: float only, not instantiated otherwise).
void LaunchBinary(const DeviceContext& ctx, const void* a, StorageType at, const void* b,
                  StorageType bt, void* y, StorageType yt, int64_t n, BinaryOp op) {
  const int lanes = VectorLanes(n, 4, {{a, at}, {b, bt}, {y, yt}});
  WithLanes(lanes, [&](auto v) {
    WithStorage(at, [&](auto as) {
      WithStorage(bt, [&](auto bs) {
        WithStorage(yt, [&](auto ys) {
          Launch(BinaryKernel<decltype(v)::value, decltype(as), decltype(bs), decltype(ys)>,
                 GridFor(ctx, n, lanes), dim3(kBlock), ctx.stream, BinaryParams{a, b, y, n, op});
        });
      });
    });
  });
}
}  // namespace

void AddGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n) {
  const StorageType f = StorageType::kFloat;
  LaunchBinary(ctx, a, f, b, f, y, f, n, BinaryOp::kAdd);
}

void AddGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n) {
  LaunchBinary(ctx, a, at, b, bt, y, yt, n, BinaryOp::kAdd);
}

void AddReluGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n) {
  const StorageType f = StorageType::kFloat;
  LaunchBinary(ctx, a, f, b, f, y, f, n, BinaryOp::kAddRelu);
}

void AddReluGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b,
                StorageType bt, void* y, StorageType yt, int64_t n) {
  LaunchBinary(ctx, a, at, b, bt, y, yt, n, BinaryOp::kAddRelu);
}

void MulGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n) {
  const StorageType f = StorageType::kFloat;
  LaunchBinary(ctx, a, f, b, f, y, f, n, BinaryOp::kMultiply);
}

void MulGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n) {
  LaunchBinary(ctx, a, at, b, bt, y, yt, n, BinaryOp::kMultiply);
}

double SumGpu(const DeviceContext& ctx, const float* x, int64_t n) {
  const int parts = static_cast<int>(GridFor(ctx, n, 8).x);
  Scratch part(ctx.alloc, sizeof(double) * (parts + 1));
  SumParams p{x, n, part.d(), parts};
  Launch(SumPartialKernel, dim3(parts), dim3(kBlock), ctx.stream, p);
  Launch(SumFinishKernel, dim3(1), dim3(kBlock), ctx.stream, p);
  double out = 0.0;
  COLONNADE_CUDA_CHECK(
      cudaMemcpyAsync(&out, part.d() + parts, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  COLONNADE_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
  return out;
}

void AccumulateResultsGpu(const DeviceContext& ctx, const float* probs, const float* labels,
                          const float* loss, int64_t k, int64_t n, int64_t step,
                          const int64_t* step_on_device, void* totals) {
  const int blocks = static_cast<int>(std::max<int64_t>(1, CeilDiv(n, kResultImages)));
  Scratch part(ctx.alloc, sizeof(double) * 3 * blocks);
  const ResultsParams p{probs,
                        labels,
                        loss,
                        k,
                        n,
                        part.d(),
                        step,
                        step_on_device,
                        static_cast<ResultTotals*>(totals)};
  Launch(ResultsKernel, dim3(blocks), dim3(kBlock), ctx.stream, p);
}

void AddBiasGpu(const DeviceContext& ctx, float* y, const float* b, int64_t channels,
                int64_t inner) {
  CHECK_LT(channels, 65536) << "AddBias supports up to 65535 channels";
  const bool vec = inner % 4 == 0 && (reinterpret_cast<uintptr_t>(y) & 15) == 0;
  const int64_t work = vec ? inner / 4 : inner;
  const int64_t want_blocks = std::max<int64_t>(1, int64_t(ctx.sm_count) * 8 / channels);
  const int64_t bx = std::max<int64_t>(1, std::min(CeilDiv(work, kBlock), want_blocks));
  Launch(AddBiasKernel, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(channels)),
         dim3(kBlock), ctx.stream, AddBiasParams{y, b, inner, vec ? 1 : 0});
}

namespace {
// Blocks per row for a row-wise reduction over rows x inner: about eight blocks per
// multiprocessor over all rows, each summing at least 4096 values.
int64_t RowSplits(const DeviceContext& ctx, int64_t rows, int64_t inner) {
  const int64_t splits = std::max<int64_t>(1, CeilDiv(int64_t(ctx.sm_count) * 8, rows));
  return std::min<int64_t>(splits, std::max<int64_t>(1, inner / 4096));
}
}  // namespace

void RowSumGpu(const DeviceContext& ctx, const float* x, float* out, int64_t rows, int64_t inner) {
  CHECK_LT(rows, 65536) << "RowSum supports up to 65535 rows";
  const int64_t splits = RowSplits(ctx, rows, inner);
  std::unique_ptr<Scratch> part;
  if (splits > 1) part = std::make_unique<Scratch>(ctx.alloc, sizeof(double) * rows * splits);
  RowSumParams p{x, part ? part->d() : nullptr, out, inner, static_cast<int>(splits)};
  Launch(RowSumPartialKernel, dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)),
         dim3(kBlock), ctx.stream, p);
  if (splits > 1) {
    RowSumFinishParams f{part->d(), out, static_cast<int>(rows), static_cast<int>(splits)};
    Launch(RowSumFinishKernel, GridFor(ctx, rows), dim3(kBlock), ctx.stream, f);
  }
}

namespace {
// Images per thread of the pooling kernels: 4 (float4 / 8-byte bf16 moves) when N is a
// multiple of 4 and every tensor is aligned to 4 of its elements, else 1.
int PoolLanes(int n, std::initializer_list<LaneOperand> tensors) {
  return VectorLanes(n, 4, tensors);
}
}  // namespace

void PoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int h, int w, int n,
                    int oh, int ow, const PoolParams& pp) {
  PoolForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, c, h, w, n, oh, ow, pp);
}

void PoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int c, int h, int w, int n, int oh, int ow,
                    const PoolParams& pp) {
  MaxPoolForwardArgGpu(ctx, x, xt, y, yt, nullptr, c, h, w, n, oh, ow, pp);
}

bool MaxPoolRecordFits(const PoolParams& p) {
  return p.kind == PoolParams::kMax && p.size * p.size <= 256;
}

void MaxPoolForwardArgGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, void* rec, int c, int h, int w, int n, int oh, int ow,
                          const PoolParams& pp) {
  PoolKernelParams p{x, nullptr, nullptr, y,       c,         h,      w,
                     n, oh,      ow,      pp.size, pp.stride, pp.pad, static_cast<int>(pp.kind)};
  p.rec = static_cast<Bf16*>(rec);
  CHECK(rec == nullptr || MaxPoolRecordFits(pp))
      << "an argmax record needs max pooling with at most 256 pixels per window";
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "pooling supports tensors below 2^31 elements";
  const dim3 block(kBlock);
  const int v = PoolLanes(n, {{x, xt}, {y, yt}, {rec, StorageType::kBF16}});
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      auto launch = [&](auto with_arg) {
        constexpr bool kArg = decltype(with_arg)::value;
        if (v == 4) {
          Launch(PoolForwardKernel<4, XT, YT, kArg>, RowGrid(int64_t(ow) * n / 4, int64_t(c) * oh),
                 block, ctx.stream, p);
        } else {
          Launch(PoolForwardKernel<1, XT, YT, kArg>, RowGrid(int64_t(ow) * n, int64_t(c) * oh),
                 block, ctx.stream, p);
        }
      };
      if (rec != nullptr)
        launch(std::true_type{});
      else
        launch(std::false_type{});
    });
  });
}

void MaxPoolBackwardArgGpu(const DeviceContext& ctx, const void* rec, const void* dy,
                           StorageType yt, void* dx, StorageType xt, int c, int h, int w, int n,
                           int oh, int ow, const PoolParams& pp) {
  CHECK(MaxPoolRecordFits(pp)) << "MaxPoolBackwardArgGpu: max pooling, at most 256 pixels a window";
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "pooling supports tensors below 2^31 elements";
  const PoolArgParams a{nullptr, nullptr, dy,        nullptr, dx,
                        c,       h,       w,         n,       oh,
                        ow,      pp.size, pp.stride, pp.pad,  static_cast<const Bf16*>(rec)};
  const int v = PoolLanes(n, {{dy, yt}, {dx, xt}, {rec, StorageType::kBF16}});
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      if (v == 4) {
        Launch(PoolMaxGatherKernel<4, XT, YT, true>, RowGrid(int64_t(w) * n / 4, int64_t(c) * h),
               dim3(kBlock), ctx.stream, a);
      } else {
        Launch(PoolMaxGatherKernel<1, XT, YT, true>, RowGrid(int64_t(w) * n, int64_t(c) * h),
               dim3(kBlock), ctx.stream, a);
      }
    });
  });
}

void PoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* y, const float* dy,
                     float* dx, int c, int h, int w, int n, int oh, int ow, const PoolParams& pp) {
  PoolBackwardGpu(ctx, x, y, dy, dx, StorageType::kFloat, StorageType::kFloat, c, h, w, n, oh, ow,
                  pp);
}

void PoolBackwardGpu(const DeviceContext& ctx, const void* x, const void* y, const void* dy,
                     void* dx, StorageType xt, StorageType yt, int c, int h, int w, int n, int oh,
                     int ow, const PoolParams& pp) {
  PoolKernelParams p{x, y,  dy, dx,      c,         h,      w,
                     n, oh, ow, pp.size, pp.stride, pp.pad, static_cast<int>(pp.kind)};
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "pooling supports tensors below 2^31 elements";
  CHECK(pp.kind != PoolParams::kMax || xt == StorageType::kBF16 || yt == StorageType::kFloat)
      << "max-pool backward: float x with bf16 y is not supported (a rounded maximum need not "
         "equal its pixel, so the argmax cannot be found again)";
  const dim3 in_grid = RowGrid(int64_t(w) * n, int64_t(c) * h);
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      if (pp.kind != PoolParams::kMax) {
        Launch(PoolBackwardKernel<XT, YT>, in_grid, dim3(kBlock), ctx.stream, p);
        return;
      }
      if constexpr (std::is_same_v<XT, float> && std::is_same_v<YT, Bf16>) {
        return;  // refused above; not instantiated
      } else {
        Scratch arg(ctx.alloc, sizeof(int) * size_t(c) * oh * ow * n);
        PoolArgParams a{x,         y,     dy, static_cast<int*>(static_cast<void*>(arg.f())),
                        dx,        c,     h,  w,
                        n,         oh,    ow, pp.size,
                        pp.stride, pp.pad};
        const int v =
            PoolLanes(n, {{x, xt}, {y, yt}, {dy, yt}, {dx, xt}, {arg.f(), StorageType::kFloat}});
        const dim3 out_grid = RowGrid(int64_t(ow) * n / v, int64_t(c) * oh);
        const dim3 in_grid_v = RowGrid(int64_t(w) * n / v, int64_t(c) * h);
        auto run = [&](int version) {
          if (version == 2) {
            Launch(PoolBackwardKernel<XT, YT>, in_grid, dim3(kBlock), ctx.stream, p);
          } else if (v == 4) {
            Launch(PoolArgmaxKernel<4, XT, YT>, out_grid, dim3(kBlock), ctx.stream, a);
            Launch(PoolMaxGatherKernel<4, XT, YT>, in_grid_v, dim3(kBlock), ctx.stream, a);
          } else {
            Launch(PoolArgmaxKernel<1, XT, YT>, out_grid, dim3(kBlock), ctx.stream, a);
            Launch(PoolMaxGatherKernel<1, XT, YT>, in_grid_v, dim3(kBlock), ctx.stream, a);
          }
        };
        // The storage types are in the key: float and bf16 shapes are timed apart.
        run(PoolBackwardTuner().Choose(
            ctx.stream,
            {c, h, w, n, pp.size, pp.stride, pp.pad, static_cast<int>(xt), static_cast<int>(yt)},
            run));
      }
    });
  });
}

void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int hw,
                             int n) {
  GlobalAvgPoolForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, c, hw, n);
}

void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                             StorageType yt, int c, int hw, int n) {
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      Launch(GlobalAvgPoolForwardKernel<decltype(xs), decltype(ys)>, GridFor(ctx, int64_t(c) * n),
             dim3(kBlock), ctx.stream, GapParams{x, y, c, hw, n});
    });
  });
}

void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const float* dy, float* dx, int c, int hw,
                              int n) {
  GlobalAvgPoolBackwardGpu(ctx, dy, StorageType::kFloat, dx, StorageType::kFloat, c, hw, n);
}

void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const void* dy, StorageType yt, void* dx,
                              StorageType xt, int c, int hw, int n) {
  WithStorage(yt, [&](auto ys) {
    WithStorage(xt, [&](auto xs) {
      Launch(GlobalAvgPoolBackwardKernel<decltype(ys), decltype(xs)>,
             GridFor(ctx, int64_t(c) * hw * n), dim3(kBlock), ctx.stream,
             GapParams{dy, dx, c, hw, n});
    });
  });
}

namespace {
LrnCrossKernelParams CrossParams(int c, int64_t hwn, const LrnCrossParams& lp) {
  LrnCrossKernelParams p{};
  p.c = c;
  p.cg = c / lp.groups;
  p.hwn = hwn;
  p.half = lp.size / 2;
  p.alpha = lp.alpha_over_size ? lp.alpha / static_cast<float>(lp.size) : lp.alpha;
  p.beta = lp.beta;
  p.k = lp.k;
  p.grad_scale = 2.0f * p.alpha * lp.beta;
  return p;
}
LrnWithinKernelParams WithinParams(int c, int h, int w, int n, const LrnWithinParams& lp) {
  LrnWithinKernelParams p{};
  p.c = c;
  p.h = h;
  p.w = w;
  p.n = n;
  p.size = lp.size;
  p.alpha = lp.alpha / static_cast<float>(lp.size * lp.size);
  p.beta = lp.beta;
  p.k = lp.k;
  p.grad_scale = 2.0f * lp.alpha / static_cast<float>(lp.size * lp.size) * lp.beta;
  return p;
}
}  // namespace

namespace {
using LrnCrossKernel = void (*)(LrnCrossKernelParams);
// The kernel for window half-width `half`: the register ring for 1..4 with V images per
// thread, else the generic one (one image; V must be 1).
template <int V, typename XT, typename YT>
LrnCrossKernel LrnCrossForwardFor(int half) {
  switch (half) {
    case 1:
      return LrnCrossForwardRing<1, V, XT, YT>;
    case 2:
      return LrnCrossForwardRing<2, V, XT, YT>;
    case 3:
      return LrnCrossForwardRing<3, V, XT, YT>;
    case 4:
      return LrnCrossForwardRing<4, V, XT, YT>;
    default:
      CHECK_EQ(V, 1);
      return LrnCrossForwardKernel<XT, YT>;
  }
}
template <int V, typename XT, typename YT, bool kRecompute>
LrnCrossKernel LrnCrossBackwardFor(int half) {
  switch (half) {
    case 1:
      return LrnCrossBackwardRing<1, V, XT, YT, kRecompute>;
    case 2:
      return LrnCrossBackwardRing<2, V, XT, YT, kRecompute>;
    case 3:
      return LrnCrossBackwardRing<3, V, XT, YT, kRecompute>;
    case 4:
      return LrnCrossBackwardRing<4, V, XT, YT, kRecompute>;
    default:
      CHECK(!kRecompute) << "LRN: only half-widths 1-4 recompute their denominators";
      CHECK_EQ(V, 1);
      return LrnCrossBackwardKernel<XT, YT>;
  }
}
// Images per thread of the ring kernels: 4 forward (one ring), 2 backward (five rings per
// lane: more would cost occupancy), where the columns and tensors allow; the generic kernels
// (half-widths above 4) take one.
constexpr int kLrnForwardLanes = 4, kLrnBackwardLanes = 2;
}  // namespace

void LrnCrossForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                        int hwn, const LrnCrossParams& lp) {
  LrnCrossForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, denom, c, hwn, lp);
}

void LrnCrossForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                        StorageType yt, float* denom, int c, int hwn, const LrnCrossParams& lp) {
  LrnCrossKernelParams p = CrossParams(c, hwn, lp);
  CHECK(denom != nullptr || LrnCrossRecomputesDenominator(lp))
      << "LRN: only half-widths 1-4 run without stored denominators";
  p.x = x;
  p.out = y;
  p.denom_out = denom;
  const int v =
      p.half >= 1 && p.half <= 4
          ? VectorLanes(hwn, kLrnForwardLanes, {{x, xt}, {y, yt}, {denom, StorageType::kFloat}})
          : 1;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      Launch(v == kLrnForwardLanes ? LrnCrossForwardFor<kLrnForwardLanes, XT, YT>(p.half)
                                   : LrnCrossForwardFor<1, XT, YT>(p.half),
             GridFor(ctx, hwn / v), dim3(kBlock), ctx.stream, p);
    });
  });
}

void LrnCrossBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                         const float* denom, const float* dy, float* dx, int c, int hwn,
                         const LrnCrossParams& lp) {
  LrnCrossBackwardGpu(ctx, x, StorageType::kFloat, y, denom, dy, StorageType::kFloat, dx, c, hwn,
                      lp);
}

void LrnCrossBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, const void* y,
                         const float* denom, const void* dy, StorageType yt, void* dx, int c,
                         int hwn, const LrnCrossParams& lp) {
  LrnCrossKernelParams p = CrossParams(c, hwn, lp);
  p.x = x;
  p.y = y;
  p.denom = denom;
  p.dy = dy;
  p.out = dx;
  const int v =
      p.half >= 1 && p.half <= 4
          ? VectorLanes(hwn, kLrnBackwardLanes,
                        {{x, xt}, {y, yt}, {dy, yt}, {dx, xt}, {denom, StorageType::kFloat}})
          : 1;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      constexpr int V = kLrnBackwardLanes;
      LrnCrossKernel k = denom != nullptr ? LrnCrossBackwardFor<1, XT, YT, false>(p.half)
                                          : LrnCrossBackwardFor<1, XT, YT, true>(p.half);
      if (v == V)
        k = denom != nullptr ? LrnCrossBackwardFor<V, XT, YT, false>(p.half)
                             : LrnCrossBackwardFor<V, XT, YT, true>(p.half);
      Launch(k, GridFor(ctx, hwn / v), dim3(kBlock), ctx.stream, p);
    });
  });
}

bool LrnCrossRecomputesDenominator(const LrnCrossParams& lp) {
  return lp.size / 2 >= 1 && lp.size / 2 <= 4;
}

bool LrnMaxPoolFusable(const LrnCrossParams& lp, const PoolParams& pp) {
  return pp.kind == PoolParams::kMax && pp.size >= 1 && pp.size <= kLrnPoolSide &&
         lp.size / 2 >= 1 && lp.size / 2 <= 4;
}

namespace {
// The fused kernels' parameters, with the chunk of channels per thread: whole groups unless
// that leaves fewer than ~8 blocks of threads per SM (AlexNet's pool2 forward: 13 x 13
// windows x 256 images per group), then halved while chunks keep at least 8 channels (the
// halo of a chunk costs 2 * HALF extra channel reads).
LrnPoolKernelParams LrnPoolParams(const DeviceContext& ctx, int c, int h, int w, int n, int oh,
                                  int ow, int64_t threads_per_group_chunk, const LrnCrossParams& lp,
                                  const PoolParams& pp) {
  CHECK(LrnMaxPoolFusable(lp, pp))
      << "LrnMaxPool: pooling window " << pp.size << ", LRN size " << lp.size << " are not fused";
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "LRN + pooling supports tensors below 2^31 elements";
  const LrnCrossKernelParams cp = CrossParams(c, int64_t(h) * w * n, lp);
  LrnPoolKernelParams p{};
  p.c = c;
  p.cg = cp.cg;
  p.h = h, p.w = w, p.n = n, p.oh = oh, p.ow = ow;
  p.size = pp.size, p.stride = pp.stride, p.pad = pp.pad;
  p.alpha = cp.alpha, p.beta = cp.beta, p.k = cp.k, p.grad_scale = cp.grad_scale;
  const int64_t want = int64_t(ctx.sm_count) * 8 * kBlock;
  int chunks = 1;
  while (threads_per_group_chunk * (c / p.cg) * chunks < want && p.cg / (chunks * 2) >= 8)
    chunks *= 2;
  p.chunk = static_cast<int>(CeilDiv(p.cg, chunks));
  return p;
}

template <typename Kernel>
Kernel LrnPoolKernel(int half, Kernel k1, Kernel k2, Kernel k3, Kernel k4) {
  return half == 1 ? k1 : half == 2 ? k2 : half == 3 ? k3 : k4;
}
}  // namespace

// Forward versions 1 (per window) and 2 (tiled) are bit-identical; the autotuner times
// them per shape on first use unless one is forced (SetLrnMaxPoolForwardVersion,
// COLONNADE_LRN_POOL_FWD=v1|v2). The emulator runs version 2.
namespace {
KernelAutotuner& LrnPoolForwardTuner() {
  static KernelAutotuner* tuner = new KernelAutotuner("COLONNADE_LRN_POOL_FWD", {1, 2}, 2);
  return *tuner;
}
}  // namespace

void SetLrnMaxPoolForwardVersion(int version) { LrnPoolForwardTuner().Force(version); }

namespace {
// The tiled forward's tile: ni images (16, fewer for a smaller batch) and the oyt x oxt
// windows whose input region (ry x rx pixels) holds the most windows per pixel within
// kLrnPoolTileThreads threads (AlexNet's 3 x 3 windows at stride 2: 3 x 4 windows over
// 7 x 9 pixels).
void ChooseLrnPoolTile(LrnPoolKernelParams& p) {
  p.ni = std::min(p.n, 16);
  const int max_slots = kLrnPoolTileThreads / p.ni;
  double best = -1.0;
  for (int oyt = 1; oyt <= std::min(p.oh, 16); ++oyt)
    for (int oxt = 1; oxt <= std::min(p.ow, 16); ++oxt) {
      const int ry = (oyt - 1) * p.stride + p.size, rx = (oxt - 1) * p.stride + p.size;
      if (ry * rx > max_slots) continue;
      const double windows_per_pixel = static_cast<double>(oyt * oxt) / (ry * rx);
      if (windows_per_pixel > best + 1e-12) {
        best = windows_per_pixel;
        p.oyt = oyt, p.oxt = oxt, p.ry_max = ry, p.rx_max = rx;
      }
    }
  CHECK_GT(best, 0.0) << "LrnMaxPool: a " << p.size << "x" << p.size << " window does not fit "
                      << "a tile of " << kLrnPoolTileThreads << " threads";
  p.oy_tiles = static_cast<int>(CeilDiv(p.oh, p.oyt));
  p.ox_tiles = static_cast<int>(CeilDiv(p.ow, p.oxt));
  p.img_tiles = static_cast<int>(CeilDiv(p.n, p.ni));
}
}  // namespace

void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* arg, int c,
                          int h, int w, int n, int oh, int ow, const LrnCrossParams& lp,
                          const PoolParams& pp) {
  LrnMaxPoolForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, arg, c, h, w, n, oh, ow,
                       lp, pp);
}

void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, float* arg, int c, int h, int w, int n, int oh, int ow,
                          const LrnCrossParams& lp, const PoolParams& pp) {
  LrnPoolKernelParams p = LrnPoolParams(ctx, c, h, w, n, oh, ow, int64_t(oh) * ow * n, lp, pp);
  p.x = x;
  p.y = y;
  p.arg = arg;
  const int per_group = static_cast<int>(CeilDiv(p.cg, p.chunk));
  const int rows = (c / p.cg) * per_group * oh;
  LrnPoolKernelParams t = LrnPoolParams(ctx, c, h, w, n, oh, ow, int64_t(oh) * ow * n * 4, lp,
                                        pp);  // a block per tile: fuller
  t.x = x, t.y = y, t.arg = arg;
  ChooseLrnPoolTile(t);
  const int tile_rows = (c / t.cg) * static_cast<int>(CeilDiv(t.cg, t.chunk)) * t.oy_tiles;
  const int half = lp.size / 2;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      auto run = [&](int version) {
        if (version == 1) {
          Launch(LrnPoolKernel(half, LrnMaxPoolForward<1, XT, YT>, LrnMaxPoolForward<2, XT, YT>,
                               LrnMaxPoolForward<3, XT, YT>, LrnMaxPoolForward<4, XT, YT>),
                 RowGrid(int64_t(ow) * n, rows), dim3(kBlock), ctx.stream, p);
        } else {
          Launch(LrnPoolKernel(half, LrnMaxPoolForwardTiled<1, XT, YT>,
                               LrnMaxPoolForwardTiled<2, XT, YT>, LrnMaxPoolForwardTiled<3, XT, YT>,
                               LrnMaxPoolForwardTiled<4, XT, YT>),
                 dim3(static_cast<unsigned>(t.ox_tiles * t.img_tiles),
                      static_cast<unsigned>(std::min(tile_rows, 65535))),
                 dim3(static_cast<unsigned>(t.ry_max * t.rx_max * t.ni)), ctx.stream, t);
        }
      };
      // The storage types are in the key: float and bf16 shapes are timed apart.
      run(LrnPoolForwardTuner().Choose(ctx.stream,
                                       {c, lp.groups, h, w, n, pp.size, pp.stride, pp.pad,
                                        static_cast<int>(xt), static_cast<int>(yt)},
                                       run));
    });
  });
}

void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* arg,
                           const float* dy, float* dx, int c, int h, int w, int n, int oh, int ow,
                           const LrnCrossParams& lp, const PoolParams& pp) {
  LrnMaxPoolBackwardGpu(ctx, x, StorageType::kFloat, arg, dy, StorageType::kFloat, dx, c, h, w, n,
                        oh, ow, lp, pp);
}

void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                           const float* arg, const void* dy, StorageType yt, void* dx, int c, int h,
                           int w, int n, int oh, int ow, const LrnCrossParams& lp,
                           const PoolParams& pp) {
  LrnPoolKernelParams p = LrnPoolParams(ctx, c, h, w, n, oh, ow, int64_t(h) * w * n, lp, pp);
  p.x = x;
  p.argmax = arg;
  p.dy = dy;
  p.dx = dx;
  const int rows = (c / p.cg) * static_cast<int>(CeilDiv(p.cg, p.chunk)) * h;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      Launch(
          LrnPoolKernel(lp.size / 2, LrnMaxPoolBackward<1, XT, YT>, LrnMaxPoolBackward<2, XT, YT>,
                        LrnMaxPoolBackward<3, XT, YT>, LrnMaxPoolBackward<4, XT, YT>),
          RowGrid(int64_t(w) * n, rows), dim3(kBlock), ctx.stream, p);
    });
  });
}

void LrnWithinForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                         int h, int w, int n, const LrnWithinParams& lp) {
  LrnWithinKernelParams p = WithinParams(c, h, w, n, lp);
  p.x = x;
  p.out = y;
  p.denom_out = denom;
  Launch(LrnWithinForwardKernel, GridFor(ctx, int64_t(c) * h * w * n), dim3(kBlock), ctx.stream, p);
}

void LrnWithinBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                          const float* denom, const float* dy, float* dx, int c, int h, int w,
                          int n, const LrnWithinParams& lp) {
  LrnWithinKernelParams p = WithinParams(c, h, w, n, lp);
  p.x = x;
  p.y = y;
  p.denom = denom;
  p.dy = dy;
  p.out = dx;
  Launch(LrnWithinBackwardKernel, GridFor(ctx, int64_t(c) * h * w * n), dim3(kBlock), ctx.stream,
         p);
}

namespace {
// Aligned to 4 of its elements (the quad moves: 16 bytes of float, 8 of bf16).
bool QuadAligned(const void* p, StorageType t) { return AlignedTo(p, 4, t); }

// Splits per channel for the batch-norm reductions (RowSplits; sets p.splits, p.chunk and
// returns the grid).
dim3 BnSplits(const DeviceContext& ctx, int c, int64_t inner, int lanes, BnParams& p) {
  CHECK_LT(c, 65536) << "batch norm supports up to 65535 channels";
  const int64_t splits = RowSplits(ctx, c, inner);
  p.chunk = std::max<int64_t>(1, CeilDiv(inner, splits));
  p.chunk = CeilDiv(p.chunk, lanes) * lanes;  // whole quads per split
  p.splits = static_cast<int>(std::max<int64_t>(1, CeilDiv(inner, p.chunk)));  // none empty
  return dim3(static_cast<unsigned>(p.splits), static_cast<unsigned>(c));
}
}  // namespace

void BatchNormForwardTrainGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                              const float* beta, float* y, float* running_mean, float* running_var,
                              float* save_mean, float* save_invstd, float* save_scale, int c,
                              int64_t inner, const BatchNormParams& bp, bool relu) {
  const StorageType f = StorageType::kFloat;
  BatchNormForwardTrainGpu(ctx, x, f, gamma, beta, y, f, running_mean, running_var, save_mean,
                           save_invstd, save_scale, c, inner, bp, relu);
}

void BatchNormForwardTrainGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, void* y, StorageType yt,
                              float* running_mean, float* running_var, float* save_mean,
                              float* save_invstd, float* save_scale, int c, int64_t inner,
                              const BatchNormParams& bp, bool relu) {
  BnParams p{};
  p.relu = relu ? 1 : 0;
  p.x = x;
  p.gamma = gamma;
  p.beta = beta;
  p.y = y;
  p.running_mean = running_mean;
  p.running_var = running_var;
  p.save_mean = save_mean;
  p.save_invstd = save_invstd;
  p.save_scale = save_scale;
  p.inner = inner;
  p.eps = bp.eps;
  p.momentum = bp.momentum;
  const int lanes = VectorLanes(inner, 4, {{x, xt}, {y, yt}});
  const dim3 grid = BnSplits(ctx, c, inner, lanes, p);
  Scratch part(ctx.alloc, sizeof(double) * size_t(c) * p.splits * 2);
  p.part = part.d();
  p.part2 = part.d() + int64_t(c) * p.splits;
  WithLanesAndStorage(lanes, xt, yt, [&](auto v, auto xs, auto ys) {
    constexpr int V = decltype(v)::value;
    using XT = decltype(xs);
    using YT = decltype(ys);
    Launch(BatchNormSumKernel<V, XT>, grid, dim3(kBlock), ctx.stream, p);
    Launch(BatchNormVarKernel<V, XT>, grid, dim3(kBlock), ctx.stream, p);
    Launch(BatchNormNormalizeKernel<V, XT, YT>, grid, dim3(kBlock), ctx.stream, p);
  });
}

void BatchNormForwardInferGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                              const float* beta, const float* running_mean,
                              const float* running_var, float* y, int c, int64_t inner,
                              const BatchNormParams& bp) {
  const StorageType f = StorageType::kFloat;
  BatchNormForwardInferGpu(ctx, x, f, gamma, beta, running_mean, running_var, y, f, c, inner, bp);
}

void BatchNormForwardInferGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, const float* running_mean,
                              const float* running_var, void* y, StorageType yt, int c,
                              int64_t inner, const BatchNormParams& bp) {
  BnInferParams q{};
  q.b.x = x;
  q.b.gamma = gamma;
  q.b.beta = beta;
  q.b.mean_in = running_mean;
  q.b.invstd_in = running_var;
  q.b.y = y;
  q.b.inner = inner;
  q.b.eps = bp.eps;
  q.c = c;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      Launch(BatchNormInferKernel<decltype(xs), decltype(ys)>, GridFor(ctx, c * inner),
             dim3(kBlock), ctx.stream, q);
    });
  });
}

void BatchNormApplyGpu(const DeviceContext& ctx, const float* x, const float* mean,
                       const float* scale, const float* shift, float* y, int c, int64_t inner,
                       bool relu) {
  const StorageType f = StorageType::kFloat;
  BatchNormApplyGpu(ctx, x, f, mean, scale, shift, y, f, c, inner, relu);
}

void BatchNormApplyGpu(const DeviceContext& ctx, const void* x, StorageType xt, const float* mean,
                       const float* scale, const float* shift, void* y, StorageType yt, int c,
                       int64_t inner, bool relu) {
  CHECK_LT(c, 65536) << "BatchNormApply supports up to 65535 channels";
  BnParams p{};
  p.relu = relu ? 1 : 0;
  p.x = x;
  p.mean_in = mean;
  p.gamma = scale;  // BnParams' per-channel slots: scale and shift take gamma's and beta's
  p.beta = shift;
  p.y = y;
  p.inner = inner;
  const int lanes = VectorLanes(inner, 4, {{x, xt}, {y, yt}});
  const int64_t want_blocks = std::max<int64_t>(1, int64_t(ctx.sm_count) * 8 / c);
  const int64_t bx =
      std::max<int64_t>(1, std::min(CeilDiv(inner, int64_t(kBlock) * lanes), want_blocks));
  WithLanesAndStorage(lanes, xt, yt, [&](auto v, auto xs, auto ys) {
    Launch(BatchNormApplyKernel<decltype(v)::value, decltype(xs), decltype(ys)>,
           dim3(static_cast<unsigned>(bx), static_cast<unsigned>(c)), dim3(kBlock), ctx.stream, p);
  });
}

void BatchNormBackwardGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                          const float* save_mean, const float* save_invstd, const float* relu_y,
                          const float* dy, float* dx, float* dgamma, float* dbeta, int c,
                          int64_t inner) {
  const StorageType f = StorageType::kFloat;
  BatchNormBackwardGpu(ctx, x, f, gamma, save_mean, save_invstd, relu_y, dy, f, dx, dgamma, dbeta,
                       c, inner);
}

void BatchNormBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                          const float* gamma, const float* save_mean, const float* save_invstd,
                          const void* relu_y, const void* dy, StorageType yt, void* dx,
                          float* dgamma, float* dbeta, int c, int64_t inner) {
  BnParams p{};
  p.relu_y = relu_y;
  p.x = x;
  p.gamma = gamma;
  p.mean_in = save_mean;
  p.invstd_in = save_invstd;
  p.dy = dy;
  p.y = dx;
  p.dgamma = dgamma;
  p.dbeta = dbeta;
  p.inner = inner;
  const int lanes = VectorLanes(inner, 4, {{x, xt}, {relu_y, yt}, {dy, yt}, {dx, xt}});
  const dim3 grid = BnSplits(ctx, c, inner, lanes, p);
  Scratch part(ctx.alloc, sizeof(double) * size_t(c) * p.splits * 2);
  p.part = part.d();
  WithLanesAndStorage(lanes, xt, yt, [&](auto v, auto xs, auto ys) {
    constexpr int V = decltype(v)::value;
    using XT = decltype(xs);
    using YT = decltype(ys);
    Launch(BatchNormBackwardSumsKernel<V, XT, YT>, grid, dim3(kBlock), ctx.stream, p);
    Launch(BatchNormBackwardKernel<V, XT, YT>, grid, dim3(kBlock), ctx.stream, p);
  });
}

void ReluForwardGpu(const DeviceContext& ctx, const float* x, float* y, int64_t n) {
  ReluForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, n);
}

void ReluForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int64_t n) {
  const int vec = QuadAligned(x, xt) && QuadAligned(y, yt) ? 1 : 0;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      Launch(ReluForwardKernel<decltype(xs), decltype(ys)>, GridFor(ctx, n, vec ? 4 : 1),
             dim3(kBlock), ctx.stream, ReluVecParams{ReluParams{x, nullptr, y, n}, vec});
    });
  });
}

void ReluBackwardGpu(const DeviceContext& ctx, const float* y, const float* dy, float* dx,
                     int64_t n) {
  ReluBackwardGpu(ctx, y, dy, StorageType::kFloat, dx, StorageType::kFloat, n);
}

void ReluBackwardGpu(const DeviceContext& ctx, const void* y, const void* dy, StorageType yt,
                     void* dx, StorageType xt, int64_t n) {
  const int vec = QuadAligned(y, yt) && QuadAligned(dy, yt) && QuadAligned(dx, xt) ? 1 : 0;
  WithStorage(yt, [&](auto ys) {
    WithStorage(xt, [&](auto xs) {
      Launch(ReluBackwardKernel<decltype(ys), decltype(xs)>, GridFor(ctx, n, vec ? 4 : 1),
             dim3(kBlock), ctx.stream, ReluVecParams{ReluParams{y, dy, dx, n}, vec});
    });
  });
}

void DropoutForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* mask, int c,
                       int h, int w, int n, const DropoutParams& dp) {
  DropoutForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, mask, c, h, w, n, dp);
}

void DropoutForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                       StorageType yt, float* mask, int c, int h, int w, int n,
                       const DropoutParams& dp) {
  DropoutKernelParams p{};
  p.x = x;
  p.y = y;
  p.mask = mask;
  p.c = c;
  p.h = h;
  p.w = w;
  p.n = n;
  p.p = dp.p;
  p.scale = 1.0f / (1.0f - dp.p);
  p.seed = dp.seed;
  p.step = dp.step;
  p.step_on_device = dp.step_on_device;
  p.channel_offset = dp.channel_offset;
  p.image_offset = dp.image_offset;
  p.global_batch = dp.global_batch > 0 ? dp.global_batch : n;
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      Launch(DropoutForwardKernel<decltype(xs), decltype(ys)>, GridFor(ctx, int64_t(c) * h * w * n),
             dim3(kBlock), ctx.stream, p);
    });
  });
}

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n) {
  XentParams p{};
  p.logits = logits;
  p.labels = labels;
  p.probs = probs;
  p.loss = loss;
  p.k = k;
  p.n = n;
  Launch(SoftmaxXentForwardKernel, dim3(n), dim3(kBlock), ctx.stream, p);
}

void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k,
                                    int n) {
  XentParams p{};
  p.probs_in = probs;
  p.labels = labels;
  p.dlogits = dlogits;
  p.k = k;
  p.n = n;
  p.scale = scale;
  Launch(SoftmaxXentBackwardKernel, GridFor(ctx, int64_t(k) * n), dim3(kBlock), ctx.stream, p);
}

void SgdUpdateGpu(const DeviceContext& ctx, float* w, const float* grad, float* v, int64_t n,
                  const SgdParams& sp) {
  SgdKernelParams p{w, grad, v, n, sp.lr, sp.momentum, sp.weight_decay};
  p.lr_on_device = sp.lr_on_device;
  p.lr_mult = sp.lr_mult;
  Launch(SgdKernel, GridFor(ctx, n), dim3(kBlock), ctx.stream, p);
}

void GradToBf16Gpu(const DeviceContext& ctx, const float* dy, const float* mask, void* out,
                   float* row_sums, int64_t rows, int64_t inner) {
  GradToBf16Gpu(ctx, dy, mask, StorageType::kFloat, out, row_sums, rows, inner);
}

void GradToBf16Gpu(const DeviceContext& ctx, const void* dy, const void* mask, StorageType t,
                   void* out, float* row_sums, int64_t rows, int64_t inner) {
  if (rows <= 0 || inner <= 0) return;
  CHECK_LT(rows, 65536) << "GradToBf16 supports up to 65535 rows";
  CHECK(out != nullptr || t == StorageType::kBF16)
      << "GradToBf16: out may be null only for bf16 dy (the sums alone)";
  const uintptr_t quad = 4 * StorageBytes(t);
  const bool vec = inner % 4 == 0 && reinterpret_cast<uintptr_t>(dy) % quad == 0 &&
                   reinterpret_cast<uintptr_t>(mask) % quad == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 8 == 0;
  int64_t chunk = CeilDiv(inner, RowSplits(ctx, rows, inner));
  if (vec) chunk = CeilDiv(chunk, 4) * 4;
  const int64_t splits = CeilDiv(inner, chunk);
  std::unique_ptr<Scratch> part;
  if (row_sums && splits > 1)
    part = std::make_unique<Scratch>(ctx.alloc, sizeof(double) * rows * splits);
  GradBf16Params p{dy,
                   mask,
                   static_cast<uint16_t*>(out),
                   part ? part->d() : nullptr,
                   row_sums,
                   inner,
                   chunk,
                   static_cast<int>(splits),
                   vec ? 1 : 0};
  WithStorage(t, [&](auto ts) {
    Launch(GradToBf16Kernel<decltype(ts)>,
           dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)), dim3(kBlock),
           ctx.stream, p);
  });
  if (part) {
    RowSumFinishParams f{part->d(), row_sums, static_cast<int>(rows), static_cast<int>(splits)};
    Launch(RowSumFinishKernel, GridFor(ctx, rows), dim3(kBlock), ctx.stream, f);
  }
}

void SetStepScalarsGpu(cudaStream_t stream, StepScalars* out, const StepScalars& v) {
  Launch(SetStepScalarsKernel, dim3(1), dim3(32), stream, StepScalarsParams{out, v});
}

}  // namespace colonnade::cuda
