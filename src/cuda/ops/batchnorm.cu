// The batch-normalisation family (core/ops/batchnorm.h): training forward (batch statistics,
// running averages), the recomputation's apply, inference, backward; each with the ReLU Net
// fuses after a batch norm (forward: rectified in the normalising pass; backward: dy read
// through the mask of the rectified y). Kernels, launchers (ops/batchnorm.h) and the CudaOps
// methods.
//
// Shapes (CHWN): x, y, dy, dx and relu_y C x H x W x N, each channel a contiguous block of
// inner = H*W*N elements; gamma, beta, the statistics and their gradients C floats. Storage: x
// and dx XT, y, dy and relu_y YT (float or bf16); the statistics are float, the sums double, of
// the widened values.
//
// Mapping: training forward and backward reduce each channel in `splits` chunks (grid x =
// split, y = channel; BnSplits: about eight blocks per SM over all channels, so a layer of 64
// channels still fills the device), one kBlock-thread block each leaving a double partial sum;
// the next kernel adds a channel's partials in split order: deterministic. Forward: sums, then
// the two-pass variance, then the normalising pass (which also saves and updates the
// statistics); backward: sums of dy and dy * xhat, then dx. Apply: grid y = channel, x =
// column chunks (no division per element); inference: a grid-stride loop. V = 4 elements per
// thread step where inner and the tensors allow (VectorLanes).

#include <algorithm>
#include <cstdint>
#include <memory>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/batchnorm.h"

namespace colonnade::cuda {
namespace {

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
  // The normalising pass reads the statistics' partials part and part2 in stat_splits pieces
  // per channel: splits, or 1 after BatchNormTileStatsKernel.
  int stat_splits;
  // Training forward from the convolution's tile sums (BatchNormForwardTrainGpu with
  // tile_stats): tiles x C x {sum, sum of squares}, FP32 (TcGemmParams::stats).
  const float* tile_stats;
  int tiles;
  int write_y;    // training forward: 0 leaves y unwritten (the statistics only)
  int64_t chunk;  // elements per split
  // Fused ReLU (the relu arguments of Ops::BatchNorm*): forward and apply write max(y, 0); backward
  // reads dy through the mask of relu_y, the rectified output (null: no ReLU).
  int relu;
  const void* relu_y;
  // Backward with the mask recomputed from x instead of read from relu_y (BatchNormBackwardGpu
  // with mask_scale): y = BnApply(x, mean_in, mask_scale, mask_shift) as the forward stored it
  // (rounded to YT), so the mask is relu_y's bit for bit and one tensor fewer is read.
  const float* mask_scale;
  const float* mask_shift;
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

// v as a YT store gives it back (bf16: rounded to nearest even).
template <typename YT>
__device__ __forceinline__ float StoredAs(float v) {
  YT t;
  Store(&t, v);
  return Load(&t);
}

// dy of elements i .. i + V - 1 of channel c through the fused ReLU's mask, given x there:
// with p.mask_scale the mask is recomputed from x as the forward computed and stored y (its
// positive elements are those whose rounded BnApply is positive), else BnGrad's.
template <int V, typename YT>
__device__ __forceinline__ Lanes<V> BnGradGivenX(const BnParams& p, int c, int64_t i,
                                                 const Lanes<V>& x) {
  if (p.mask_scale == nullptr) return BnGrad<V, YT>(p, i);
  Lanes<V> g = LoadLanes<V>(static_cast<const YT*>(p.dy) + i);
  const float mean = p.mean_in[c], scale = p.mask_scale[c], shift = p.mask_shift[c];
  for (int k = 0; k < V; ++k)
    if (!(StoredAs<YT>(BnApply(x.v[k], mean, scale, shift)) > 0.0f)) g.v[k] = 0.0f;
  return g;
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
// Kernel BatchNormTileStatsKernel: the statistics' sums from the convolution's per-tile
// partials (grid x = channel): thread t adds tiles t, t + kBlock, ... in double, the block
// adds the threads' sums in a fixed tree (deterministic), and thread 0 leaves part[c] = the
// sum and part2[c] = sum of squares - sum^2 / M (the centred sum the two-pass variance
// computes directly; clamped at 0 against rounding).
__global__ void BatchNormTileStatsKernel(const BnParams p) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.x, channels = gridDim.x;
  double s = 0.0, s2 = 0.0;
  for (int t = threadIdx.x; t < p.tiles; t += kBlock) {
    const float* st = p.tile_stats + (static_cast<int64_t>(t) * channels + c) * 2;
    s += st[0];
    s2 += st[1];
  }
  s = BlockSum(s, sh);
  s2 = BlockSum(s2, sh);
  if (threadIdx.x == 0) {
    p.part[c] = s;
    const double centred = s2 - s * s / static_cast<double>(p.inner);
    p.part2[c] = centred > 0.0 ? centred : 0.0;
  }
}

// Kernel BatchNormNormalizeKernel: mean and biased variance from the partials, y written;
// the first split of each channel saves the statistics and updates the running ones
// (unbiased variance).
template <int V, typename XT, typename YT>
__global__ void BatchNormNormalizeKernel(const BnParams p) {
  const int c = blockIdx.y;
  const double mean = OrderedPartSum(p.part + int64_t(c) * p.stat_splits, p.stat_splits) /
                      static_cast<double>(p.inner);
  const double ss = OrderedPartSum(p.part2 + int64_t(c) * p.stat_splits, p.stat_splits);
  const double var = ss / static_cast<double>(p.inner);
  const double invstd = 1.0 / sqrt(var + p.eps);
  const float fmean = static_cast<float>(mean);
  const float scale = static_cast<float>(p.gamma[c] * invstd), shift = p.beta[c];
  const int64_t beg = blockIdx.x * p.chunk, end = beg + p.chunk < p.inner ? beg + p.chunk : p.inner;
  const XT* xc = static_cast<const XT*>(p.x) + c * p.inner;
  YT* yc = static_cast<YT*>(p.y) + c * p.inner;
  for (int64_t i = beg + V * threadIdx.x; p.write_y && i < end; i += V * kBlock) {
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

// Kernel BatchNormAddKernel<V, T>: y = a' + b' (then ReLU with relu): a' = a as its batch norm
// would have stored it, StoredAs<T>(BnApply(a, mean, scale, shift)), where mean[0] is given,
// else a itself (b likewise): CudaOps::AddNormalized, the residual block's last batch norm(s)
// and its sum in one pass, bitwise BatchNormApply's store and BinaryKernel's kAdd / kAddRelu.
// Grid: x = column chunks of the channel, y = channel (BatchNormApplyKernel's).
struct BnAddParams {
  const void* a;
  const void* b;
  void* y;
  const float* mean[2];
  const float* scale[2];
  const float* shift[2];
  int64_t inner;
  int relu;
};
template <int V, typename T>
__global__ void BatchNormAddKernel(const BnAddParams p) {
  const int c = blockIdx.y;
  const T* ac = static_cast<const T*>(p.a) + c * p.inner;
  const T* bc = static_cast<const T*>(p.b) + c * p.inner;
  T* yc = static_cast<T*>(p.y) + c * p.inner;
  float mean[2] = {0.0f, 0.0f}, scale[2] = {0.0f, 0.0f}, shift[2] = {0.0f, 0.0f};
  for (int o = 0; o < 2; ++o)
    if (p.mean[o] != nullptr) {
      mean[o] = p.mean[o][c];
      scale[o] = p.scale[o][c];
      shift[o] = p.shift[o][c];
    }
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * V;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V; i < p.inner;
       i += step) {
    Lanes<V> u = LoadLanes<V>(ac + i);
    const Lanes<V> w = LoadLanes<V>(bc + i);
    for (int k = 0; k < V; ++k) {
      const float a =
          p.mean[0] != nullptr ? StoredAs<T>(BnApply(u.v[k], mean[0], scale[0], shift[0])) : u.v[k];
      const float b =
          p.mean[1] != nullptr ? StoredAs<T>(BnApply(w.v[k], mean[1], scale[1], shift[1])) : w.v[k];
      u.v[k] = p.relu ? Relu(a + b) : a + b;
    }
    StoreLanes<V>(yc + i, u);
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
    const Lanes<V> x = LoadLanes<V>(xc + i);
    const Lanes<V> g = BnGradGivenX<V, YT>(p, c, c * p.inner + i, x);
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
    const Lanes<V> g = BnGradGivenX<V, YT>(p, c, c * p.inner + i, x);
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

// Kernel ReluBackwardBnSumsKernel<V, T>: a residual sum's backward through its fused ReLU,
// dx = dy where y > 0 else 0 (ReluBackwardKernel's expression), on BatchNormBackwardSumsKernel's
// grid and lanes, with that kernel's sums for each of the kOperands batch norms whose input
// is x[k] and whose dy is this dx: the values as stored (what that kernel would load), the same
// terms in the same order per thread and the same block reduction, so BatchNormBackwardKernel
// given these partials computes the bits it would after its own pass. Why: that pass read dy
// and x again, two tensors of the block's output size per batch norm, for sums this pass can
// take reading x alone (docs/MEMORY.md, "Backward sums in the sum's pass").
struct BnSumsParams {
  const void* y;
  const void* dy;
  void* dx;
  const void* x[2];
  const float* mean[2];
  const float* invstd[2];
  double* part[2];
  int splits;
  int64_t inner, chunk;
};
// kOperands (1 or 2) a template argument, so that the accumulators stay in registers.
template <int V, typename T, int kOperands>
__global__ void ReluBackwardBnSumsKernel(const BnSumsParams q) {
  __shared__ double sh[kBlock];
  const int c = blockIdx.y;
  const int64_t base = static_cast<int64_t>(c) * q.inner;
  const T* y = static_cast<const T*>(q.y) + base;
  const T* dy = static_cast<const T*>(q.dy) + base;
  T* dx = static_cast<T*>(q.dx) + base;
  double mean[kOperands], invstd[kOperands], sdy[kOperands], sdyx[kOperands];
#pragma unroll
  for (int k = 0; k < kOperands; ++k) {
    mean[k] = q.mean[k][c], invstd[k] = q.invstd[k][c];
    sdy[k] = 0.0, sdyx[k] = 0.0;
  }
  const int64_t beg = blockIdx.x * q.chunk, end = beg + q.chunk < q.inner ? beg + q.chunk : q.inner;
  for (int64_t i = beg + V * threadIdx.x; i < end; i += V * kBlock) {
    const Lanes<V> m = LoadLanes<V>(y + i);
    Lanes<V> g = LoadLanes<V>(dy + i);
    for (int e = 0; e < V; ++e) g.v[e] = m.v[e] > 0.0f ? g.v[e] : 0.0f;
    StoreLanes<V>(dx + i, g);
    for (int e = 0; e < V; ++e) g.v[e] = StoredAs<T>(g.v[e]);
#pragma unroll
    for (int k = 0; k < kOperands; ++k) {
      const Lanes<V> x = LoadLanes<V>(static_cast<const T*>(q.x[k]) + base + i);
      for (int e = 0; e < V; ++e) {
        sdy[k] += g.v[e];
        sdyx[k] += g.v[e] * ((x.v[e] - mean[k]) * invstd[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kOperands; ++k) {
    sdy[k] = BlockSum(sdy[k], sh);
    sdyx[k] = BlockSum(sdyx[k], sh);
    if (threadIdx.x == 0) {
      double* o = q.part[k] + (int64_t(c) * q.splits + blockIdx.x) * 2;
      o[0] = sdy[k];
      o[1] = sdyx[k];
    }
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

namespace {
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
                              const BatchNormParams& bp, bool relu, const float* tile_stats,
                              int tiles, bool write_y) {
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
  p.stat_splits = p.splits;
  p.tile_stats = tile_stats;
  p.tiles = tiles;
  p.write_y = write_y ? 1 : 0;
  if (tile_stats != nullptr) {
    CHECK_GT(tiles, 0) << "BatchNormForwardTrainGpu: tile statistics without tiles";
    p.stat_splits = 1;
    p.part2 = part.d() + c;
    Launch(BatchNormTileStatsKernel, dim3(static_cast<unsigned>(c)), dim3(kBlock), ctx.stream, p);
  }
  WithLanesAndStorage(lanes, xt, yt, [&](auto v, auto xs, auto ys) {
    constexpr int V = decltype(v)::value;
    using XT = decltype(xs);
    using YT = decltype(ys);
    if (tile_stats == nullptr) {
      Launch(BatchNormSumKernel<V, XT>, grid, dim3(kBlock), ctx.stream, p);
      Launch(BatchNormVarKernel<V, XT>, grid, dim3(kBlock), ctx.stream, p);
    }
    // Without y only each channel's first block runs: it saves the statistics.
    Launch(BatchNormNormalizeKernel<V, XT, YT>, write_y ? grid : dim3(1, grid.y), dim3(kBlock),
           ctx.stream, p);
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

void BatchNormAddGpu(const DeviceContext& ctx, const void* a, const float* const (&a_affine)[3],
                     const void* b, const float* const (&b_affine)[3], void* y, StorageType t,
                     int c, int64_t inner, bool relu) {
  CHECK_LT(c, 65536) << "BatchNormAdd supports up to 65535 channels";
  BnAddParams p{};
  p.a = a;
  p.b = b;
  p.y = y;
  for (int k = 0; k < 2; ++k) {
    const float* const(&f)[3] = k == 0 ? a_affine : b_affine;
    p.mean[k] = f[0];
    p.scale[k] = f[1];
    p.shift[k] = f[2];
  }
  p.inner = inner;
  p.relu = relu ? 1 : 0;
  const int lanes = VectorLanes(inner, 4, {{a, t}, {b, t}, {y, t}});
  const int64_t want_blocks = std::max<int64_t>(1, int64_t(ctx.sm_count) * 8 / c);
  const int64_t bx =
      std::max<int64_t>(1, std::min(CeilDiv(inner, int64_t(kBlock) * lanes), want_blocks));
  WithLanesAndStorage(lanes, t, t, [&](auto v, auto ts, auto) {
    Launch(BatchNormAddKernel<decltype(v)::value, decltype(ts)>,
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

bool BatchNormBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                          const float* gamma, const float* save_mean, const float* save_invstd,
                          const void* relu_y, const void* dy, StorageType yt, void* dx,
                          float* dgamma, float* dbeta, int c, int64_t inner,
                          const float* mask_scale, const float* mask_shift, const double* given,
                          const BnSumsLayout* given_layout) {
  BnParams p{};
  p.relu_y = relu_y;
  if (relu_y != nullptr && mask_scale != nullptr && mask_shift != nullptr) {
    p.relu_y = nullptr;
    p.mask_scale = mask_scale;
    p.mask_shift = mask_shift;
  }
  p.x = x;
  p.gamma = gamma;
  p.mean_in = save_mean;
  p.invstd_in = save_invstd;
  p.dy = dy;
  p.y = dx;
  p.dgamma = dgamma;
  p.dbeta = dbeta;
  p.inner = inner;
  const int lanes = VectorLanes(inner, 4, {{x, xt}, {p.relu_y, yt}, {dy, yt}, {dx, xt}});
  const dim3 grid = BnSplits(ctx, c, inner, lanes, p);
  // The sums a residual sum's backward took (ReluBackwardBnSumsGpu): only for a plain dy (no
  // mask to apply) and this very layout, so that they are this pass's bits.
  const bool use_given = given != nullptr && given_layout != nullptr && p.relu_y == nullptr &&
                         p.mask_scale == nullptr &&
                         *given_layout == BnSumsLayout{lanes, p.splits, p.chunk};
  std::unique_ptr<Scratch> part;
  if (use_given) {
    p.part = const_cast<double*>(given);  // (read only: BatchNormBackwardKernel)
  } else {
    part = std::make_unique<Scratch>(ctx.alloc, sizeof(double) * size_t(c) * p.splits * 2);
    p.part = part->d();
  }
  WithLanesAndStorage(lanes, xt, yt, [&](auto v, auto xs, auto ys) {
    constexpr int V = decltype(v)::value;
    using XT = decltype(xs);
    using YT = decltype(ys);
    if (!use_given)
      Launch(BatchNormBackwardSumsKernel<V, XT, YT>, grid, dim3(kBlock), ctx.stream, p);
    Launch(BatchNormBackwardKernel<V, XT, YT>, grid, dim3(kBlock), ctx.stream, p);
  });
  return use_given;
}

BnSumsLayout BnBackwardLayout(const DeviceContext& ctx, int c, int64_t inner,
                              std::initializer_list<const void*> tensors, StorageType t) {
  int lanes = inner % 4 == 0 ? 4 : 1;
  for (const void* d : tensors)
    if (d != nullptr && VectorLanes(inner, 4, {{d, t}}) != 4) lanes = 1;
  BnParams p{};
  BnSplits(ctx, c, inner, lanes, p);
  return BnSumsLayout{lanes, p.splits, p.chunk};
}

void ReluBackwardBnSumsGpu(const DeviceContext& ctx, const BnSumsLayout& layout, const void* y,
                           const void* dy, void* dx, StorageType t, int c, int64_t inner,
                           int operands, const void* const (&x)[2], const float* const (&mean)[2],
                           const float* const (&invstd)[2], double* const (&part)[2]) {
  CHECK(operands == 1 || operands == 2) << "ReluBackwardBnSumsGpu: one or two batch norms";
  BnSumsParams q{y,
                 dy,
                 dx,
                 {x[0], x[1]},
                 {mean[0], mean[1]},
                 {invstd[0], invstd[1]},
                 {part[0], part[1]},
                 layout.splits,
                 inner,
                 layout.chunk};
  const dim3 grid(static_cast<unsigned>(layout.splits), static_cast<unsigned>(c));
  WithLanesAndStorage(layout.lanes, t, t, [&](auto v, auto ts, auto) {
    constexpr int V = decltype(v)::value;
    using T = decltype(ts);
    if (operands == 2) {
      Launch(ReluBackwardBnSumsKernel<V, T, 2>, grid, dim3(kBlock), ctx.stream, q);
    } else {
      Launch(ReluBackwardBnSumsKernel<V, T, 1>, grid, dim3(kBlock), ctx.stream, q);
    }
  });
}

// ---- CudaOps methods ---------------------------------------------------------------------------

// relu: the ReLU in the normalising pass (and in Apply's); relu_y: the backward's two passes read
// dy through its mask. The same bits as the unfused passes.
void CudaOps::BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    Tensor& y, Tensor& running_mean, Tensor& running_var,
                                    Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                    const BatchNormParams& p, bool relu, bool write_y) {
  op_shapes::BatchNorm(
      x, {&y}, {&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd, &save_scale},
      relu ? "BatchNormReluForwardTrain" : "BatchNormForwardTrain");
  // The statistics from the convolution that just wrote x (ConvLayerForward with bn_sums),
  // when they are x's; used once either way.
  PendingSums sums = std::move(pending_sums_);
  pending_sums_ = PendingSums{};
  const bool from_conv = sums.sums != nullptr && sums.y == x.raw() &&
                         sums.channels == x.shape()[0] && sums.inner == Inner(x);
  if (from_conv) ++bn_from_conv_sums_;
  BatchNormForwardTrainGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), beta.data(), y.raw(),
                           StorageOf(y), running_mean.data(), running_var.data(), save_mean.data(),
                           save_invstd.data(), save_scale.data(), I32(x.shape()[0], "c"), Inner(x),
                           p, relu, from_conv ? sums.sums->f() : nullptr,
                           from_conv ? sums.tiles : 0, write_y);
}

void CudaOps::BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                             const Tensor& shift, Tensor& y, bool relu) {
  op_shapes::BatchNorm(x, {&y}, {&mean, &scale, &shift},
                       relu ? "BatchNormReluApply" : "BatchNormApply");
  BatchNormApplyGpu(ctx_, x.raw(), StorageOf(x), mean.data(), scale.data(), shift.data(), y.raw(),
                    StorageOf(y), I32(x.shape()[0], "c"), Inner(x), relu);
}

void CudaOps::BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    Tensor& y, const BatchNormParams& p) {
  op_shapes::BatchNorm(x, {&y}, {&gamma, &beta, &running_mean, &running_var},
                       "BatchNormForwardInfer");
  BatchNormForwardInferGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), beta.data(),
                           running_mean.data(), running_var.data(), y.raw(), StorageOf(y),
                           I32(x.shape()[0], "c"), Inner(x), p);
}

// One pass when every operand and y share one storage type and each normalised operand would
// have been stored in it too; otherwise the primitives (Ops::AddNormalized).
void CudaOps::AddNormalized(const AddOperand& a, const AddOperand& b, Tensor& y, bool relu) {
  const DType t = y.dtype();
  auto fits = [&](const AddOperand& o) {
    return o.t->dtype() == t && (o.mean == nullptr || o.stored == t);
  };
  if (!fits(a) || !fits(b)) return Ops::AddNormalized(a, b, y, relu);
  op_shapes::SameSize(*a.t, y, "AddNormalized a");
  op_shapes::SameSize(*b.t, y, "AddNormalized b");
  auto affine = [&](const AddOperand& o, const float*(&f)[3]) {
    f[0] = f[1] = f[2] = nullptr;
    if (o.mean == nullptr) return;
    op_shapes::BatchNorm(*o.t, {}, {o.mean, o.scale, o.shift}, "AddNormalized");
    f[0] = o.mean->data();
    f[1] = o.scale->data();
    f[2] = o.shift->data();
  };
  const float* fa[3];
  const float* fb[3];
  affine(a, fa);
  affine(b, fb);
  BatchNormAddGpu(ctx_, a.t->raw(), fa, b.t->raw(), fb, y.raw(), StorageOf(y),
                  I32(y.shape()[0], "c"), Inner(y), relu);
}

void CudaOps::BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor* relu_y, const Tensor& dy,
                                Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor* mask_scale,
                                const Tensor* mask_shift) {
  const bool mask_from_x = relu_y != nullptr && mask_scale != nullptr && mask_shift != nullptr;
  if (mask_from_x) {
    op_shapes::BatchNorm(x, {&dy}, {mask_scale, mask_shift}, "BatchNormReluBackward mask");
  }
  if (relu_y != nullptr) {
    op_shapes::BatchNorm(x, {relu_y, &dy, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                         "BatchNormReluBackward");
    SameStorage(x, "x", dx, "dx", "BatchNormReluBackward");
    SameStorage(*relu_y, "relu_y", dy, "dy", "BatchNormReluBackward");
  } else {
    op_shapes::BatchNorm(x, {&dy, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                         "BatchNormBackward");
    SameStorage(x, "x", dx, "dx", "BatchNormBackward");
  }
  // The sums the residual sum's backward took for this x and dy (ReluBackwardBnSums).
  PendingBnSums given;
  for (auto it = pending_bn_sums_.begin(); relu_y == nullptr && it != pending_bn_sums_.end();
       ++it) {
    if (it->x == x.raw() && it->dy == dy.raw()) {
      given = std::move(*it);
      pending_bn_sums_.erase(it);
      break;
    }
  }
  const bool used = BatchNormBackwardGpu(
      ctx_, x.raw(), StorageOf(x), gamma.data(), save_mean.data(), save_invstd.data(),
      relu_y != nullptr ? relu_y->raw() : nullptr, dy.raw(), StorageOf(dy), dx.raw(), dgamma.data(),
      dbeta.data(), I32(x.shape()[0], "c"), Inner(x), mask_from_x ? mask_scale->data() : nullptr,
      mask_from_x ? mask_shift->data() : nullptr, given.part ? given.part->d() : nullptr,
      given.part ? &given.layout : nullptr);
  bn_from_sum_sums_ += used;
}

// The sums only where every tensor has dx's storage and shape (else ReluBackward alone): one
// storage type for the kernel, and the batch norm's own pass would find nothing else.
void CudaOps::ReluBackwardBnSums(const Tensor& y, const Tensor& dy, Tensor& dx,
                                 const BnSumsOperand& a, const BnSumsOperand* b) {
  const BnSumsOperand* in[2] = {&a, b};
  const int operands = b != nullptr ? 2 : 1;
  bool fits = y.dtype() == dx.dtype() && dy.dtype() == dx.dtype() && y.shape() == dx.shape() &&
              dy.shape() == dx.shape() && dx.shape().rank() == 4;
  for (int k = 0; k < operands && fits; ++k) {
    fits = in[k]->x != nullptr && in[k]->x->dtype() == dx.dtype() &&
           in[k]->x->shape() == dx.shape() && in[k]->mean->size() == dx.shape()[0] &&
           in[k]->invstd->size() == dx.shape()[0];
  }
  if (!fits) {
    ReluBackward(y, dy, dx);
    return;
  }
  const int c = I32(dx.shape()[0], "c");
  const int64_t inner = Inner(dx);
  const StorageType t = StorageOf(dx);
  const BnSumsLayout layout = BnBackwardLayout(
      ctx_, c, inner, {y.raw(), dy.raw(), dx.raw(), a.x->raw(), b ? b->x->raw() : nullptr}, t);
  const void* x[2] = {a.x->raw(), b ? b->x->raw() : nullptr};
  const float* mean[2] = {a.mean->data(), b ? b->mean->data() : nullptr};
  const float* invstd[2] = {a.invstd->data(), b ? b->invstd->data() : nullptr};
  std::unique_ptr<Scratch> parts[2];
  double* part[2] = {nullptr, nullptr};
  for (int k = 0; k < operands; ++k) {
    parts[k] =
        std::make_unique<Scratch>(ctx_.alloc, sizeof(double) * size_t(c) * layout.splits * 2);
    part[k] = parts[k]->d();
  }
  ReluBackwardBnSumsGpu(ctx_, layout, y.raw(), dy.raw(), dx.raw(), t, c, inner, operands, x, mean,
                        invstd, part);
  for (int k = 0; k < operands; ++k) {
    pending_bn_sums_.erase(std::remove_if(pending_bn_sums_.begin(), pending_bn_sums_.end(),
                                          [&](const PendingBnSums& e) { return e.x == x[k]; }),
                           pending_bn_sums_.end());
    pending_bn_sums_.push_back(PendingBnSums{x[k], dx.raw(), layout, std::move(parts[k])});
  }
}

}  // namespace colonnade::cuda
