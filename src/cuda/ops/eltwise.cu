// The element-wise family (core/ops/eltwise.h): Fill, Copy, Axpby, Add with an optional ReLU,
// Mul (dropout's backward), ReLU, the bias and its gradient, channel blocks (concatenation)
// and the whole-tensor Sum; also the bf16 gradient operand of the tensor-core convolutions
// (GradToBf16Gpu, kernels.h), which sums the bias gradient on the way. Kernels, launchers
// (ops/eltwise.h) and the CudaOps methods.
//
// Shapes (CHWN): the element-wise kernels see their tensors as flat arrays of n elements;
// AddBias and the row reductions see a C x inner matrix (inner = H*W*N: a channel is one
// contiguous block). Each element's arithmetic is one expression, so the results are the CPU's
// bits (built --fmad=false: products and sums round separately, as on the CPU).
//
// Mapping: the element-wise kernels are grid-stride loops of kBlock threads (GridFor), V = 4
// elements per thread step (a float4, or 8 bytes of bf16) where the count and every pointer
// allow (VectorLanes; ReLU: quads, then the tail), since one element per step left the bf16
// residual sums of ResNet issue-bound; every V gives the same bits. AddBias: grid y = channel,
// x = column chunks, so the bias is one load per thread and there is no division per element.
// Row sums (bias gradient, GradToBf16): grid y = row, x = splits of the row (RowSplits), double
// partials added by a second kernel in split order; Sum: per-block double partials added by
// one block in order. Deterministic: the same bits every run on one device.

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/eltwise.h"

namespace colonnade::cuda {
namespace {

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
  void* out2;  // backward: a second dx written with the same values, or null
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
  XT* dx2 = static_cast<XT*>(p.out2);
  int64_t done = 0;
  if (q.vec) {
    GRID_STRIDE_LOOP(i, p.n / 4) {
      const Lanes<4> m = LoadLanes<4>(y + 4 * i);
      Lanes<4> g = LoadLanes<4>(dy + 4 * i);
      for (int k = 0; k < 4; ++k) g.v[k] = m.v[k] > 0.0f ? g.v[k] : 0.0f;
      StoreLanes<4>(dx + 4 * i, g);
      if (dx2 != nullptr) StoreLanes<4>(dx2 + 4 * i, g);
    }
    done = p.n / 4 * 4;
  }
  GRID_STRIDE_LOOP(i, p.n - done) {
    const float g = Load(y + done + i) > 0.0f ? Load(dy + done + i) : 0.0f;
    Store(dx + done + i, g);
    if (dx2 != nullptr) Store(dx2 + done + i, g);
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

// ---- reductions ------------------------------------------------------------------------------
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

// Kernel TileSumsKernel: out[c] = the sum over tiles t of sums[(t * channels + c) * 2], the
// per-tile channel sums a tensor-core epilogue left (TcConvArgs::stats). Block per channel:
// thread i adds tiles i, i + kBlock, ... in double, BlockSum's fixed tree adds the threads
// (deterministic), rounded once.
struct TileSumsParams {
  const float* sums;
  float* out;
  int tiles;
};
__global__ void TileSumsKernel(const TileSumsParams p) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.x, channels = gridDim.x;
  double s = 0.0;
  for (int t = threadIdx.x; t < p.tiles; t += kBlock)
    s += p.sums[(static_cast<int64_t>(t) * channels + c) * 2];
  s = BlockSum(s, sh);
  if (threadIdx.x == 0) p.out[c] = static_cast<float>(s);
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

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

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

void AddBiasGpu(const DeviceContext& ctx, float* y, const float* b, int64_t channels,
                int64_t inner) {
  CHECK_LT(channels, 65536) << "AddBias supports up to 65535 channels";
  const bool vec = inner % 4 == 0 && Aligned(y, 16);
  const int64_t work = vec ? inner / 4 : inner;
  const int64_t want_blocks = std::max<int64_t>(1, int64_t(ctx.sm_count) * 8 / channels);
  const int64_t bx = std::max<int64_t>(1, std::min(CeilDiv(work, kBlock), want_blocks));
  Launch(AddBiasKernel, dim3(static_cast<unsigned>(bx), static_cast<unsigned>(channels)),
         dim3(kBlock), ctx.stream, AddBiasParams{y, b, inner, vec ? 1 : 0});
}

void TileSumsGpu(const DeviceContext& ctx, const float* sums, int tiles, float* out,
                 int64_t channels) {
  if (channels <= 0) return;
  Launch(TileSumsKernel, dim3(static_cast<unsigned>(channels)), dim3(kBlock), ctx.stream,
         TileSumsParams{sums, out, tiles});
}

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

void ReluForwardGpu(const DeviceContext& ctx, const float* x, float* y, int64_t n) {
  ReluForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, n);
}

void ReluForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int64_t n) {
  const int vec = AlignedTo(x, 4, xt) && AlignedTo(y, 4, yt) ? 1 : 0;
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
                     void* dx, StorageType xt, int64_t n, void* dx2) {
  const int vec = AlignedTo(y, 4, yt) && AlignedTo(dy, 4, yt) && AlignedTo(dx, 4, xt) &&
                          (dx2 == nullptr || AlignedTo(dx2, 4, xt))
                      ? 1
                      : 0;
  WithStorage(yt, [&](auto ys) {
    WithStorage(xt, [&](auto xs) {
      Launch(ReluBackwardKernel<decltype(ys), decltype(xs)>, GridFor(ctx, n, vec ? 4 : 1),
             dim3(kBlock), ctx.stream, ReluVecParams{ReluParams{y, dy, dx, n, dx2}, vec});
    });
  });
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
  const bool vec =
      inner % 4 == 0 && AlignedTo(dy, 4, t) && AlignedTo(mask, 4, t) && Aligned(out, 8);
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

// ---- CudaOps methods ---------------------------------------------------------------------------

namespace {

using op_shapes::SameSize;

// Channel c0's first byte of a CHWN tensor (a block of channels is contiguous).
void* ChannelBytes(Tensor& t, int64_t c0) {
  return static_cast<char*>(t.raw()) + c0 * t.h() * t.w() * t.n() * DTypeBytes(t.dtype());
}
const void* ChannelBytes(const Tensor& t, int64_t c0) {
  return static_cast<const char*>(t.raw()) + c0 * t.h() * t.w() * t.n() * DTypeBytes(t.dtype());
}
// n elements from one channel block to another: bytes when the types agree, else converted
// (bf16 widened exactly, float rounded to nearest even).
void CopyChannelBlock(const DeviceContext& ctx, const void* from, StorageType from_type, void* to,
                      StorageType to_type, int64_t n) {
  if (n == 0) return;
  if (from_type == to_type) {
    const size_t bytes = static_cast<size_t>(n) * StorageBytes(from_type);
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
  } else if (from_type == StorageType::kBF16) {
    Bf16ToFloatGpu(ctx, from, static_cast<float*>(to), n);
  } else {
    FloatToBf16Gpu(ctx, static_cast<const float*>(from), to, n);
  }
}

}  // namespace

void CudaOps::Fill(Tensor& y, float value) {
  CheckOnDevice(y, "Fill output");
  FillGpu(ctx_, y.raw(), StorageOf(y), y.size(), value);
}

void CudaOps::Copy(const Tensor& x, Tensor& y) {
  SameSize(x, y, "Copy");
  if (x.raw() == y.raw() || x.size() == 0) return;
  // Between storage types (a gradient passed on to an input stored otherwise): converting.
  if (x.is_bf16() && !y.is_bf16()) return Bf16ToFloatGpu(ctx_, x.raw(), y.data(), x.size());
  if (!x.is_bf16() && y.is_bf16()) return FloatToBf16Gpu(ctx_, x.data(), y.raw(), x.size());
  COLONNADE_CUDA_CHECK(
      cudaMemcpyAsync(y.raw(), x.raw(), x.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream));
}

void CudaOps::Axpby(float alpha, const Tensor& x, float beta, Tensor& y) {
  SameSize(x, y, "Axpby");
  AxpbyGpu(ctx_, alpha, x.data(), beta, y.data(), y.size());
}

// With relu, one pass writes max(a + b, 0) (BinaryKernel's kAddRelu: ReluForwardKernel's
// expression on the sum).
void CudaOps::Add(const Tensor& a, const Tensor& b, Tensor& y, bool relu) {
  const char* op = relu ? "AddRelu" : "Add";
  SameSize(a, b, op);
  SameSize(a, y, op);
  AliasSameStorage(a, "a", y, op);
  AliasSameStorage(b, "b", y, op);
  if (relu) {
    AddReluGpu(ctx_, a.raw(), StorageOf(a), b.raw(), StorageOf(b), y.raw(), StorageOf(y), y.size());
  } else {
    AddGpu(ctx_, a.raw(), StorageOf(a), b.raw(), StorageOf(b), y.raw(), StorageOf(y), y.size());
  }
}

void CudaOps::CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsIn");
  CopyChannelBlock(ctx_, x.raw(), StorageOf(x), ChannelBytes(y, c0), StorageOf(y), x.size());
}

void CudaOps::CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsOut");
  CopyChannelBlock(ctx_, ChannelBytes(y, c0), StorageOf(y), x.raw(), StorageOf(x), x.size());
}

double CudaOps::Sum(const Tensor& x) {
  if (x.size() == 0) return 0.0;
  return SumGpu(ctx_, x.data(), x.size());
}

void CudaOps::AddBias(Tensor& y, const Tensor& b) {
  op_shapes::Bias(y, b, "AddBias");
  AddBiasGpu(ctx_, y.data(), b.data(), y.shape()[0], Inner(y));
}

void CudaOps::BiasBackward(const Tensor& dy, Tensor& db) {
  op_shapes::Bias(dy, db, "BiasBackward");
  RowSumGpu(ctx_, dy.data(), db.data(), dy.shape()[0], Inner(dy));
}

void CudaOps::ReluForward(const Tensor& x, Tensor& y) {
  SameSize(x, y, "ReluForward");
  AliasSameStorage(x, "x", y, "ReluForward");
  ReluForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), x.size());
}

void CudaOps::ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  SameSize(y, dy, "ReluBackward dy");
  SameSize(y, dx, "ReluBackward dx");
  SameStorage(y, "y", dy, "dy", "ReluBackward");
  AliasSameStorage(dy, "dy", dx, "ReluBackward");
  ReluBackwardGpu(ctx_, y.raw(), dy.raw(), StorageOf(dy), dx.raw(), StorageOf(dx), dx.size());
}

void CudaOps::ReluBackwardTwice(const Tensor& y, const Tensor& dy, Tensor& dx0, Tensor& dx1) {
  if (dx0.dtype() != dx1.dtype() || dx0.raw() == dx1.raw())
    return Ops::ReluBackwardTwice(y, dy, dx0, dx1);
  SameSize(y, dy, "ReluBackwardTwice dy");
  SameSize(y, dx0, "ReluBackwardTwice dx0");
  SameSize(y, dx1, "ReluBackwardTwice dx1");
  SameStorage(y, "y", dy, "dy", "ReluBackwardTwice");
  AliasSameStorage(dy, "dy", dx0, "ReluBackwardTwice");
  AliasSameStorage(dy, "dy", dx1, "ReluBackwardTwice");
  // One pass: y and dy read once, both gradients written (an element is read before it is
  // written, so either may alias dy).
  ReluBackwardGpu(ctx_, y.raw(), dy.raw(), StorageOf(dy), dx0.raw(), StorageOf(dx0), dx0.size(),
                  dx1.raw());
}

}  // namespace colonnade::cuda
