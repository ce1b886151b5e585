// What the convolution families share on the host and in their parameter blocks: the geometry
// of an implicit GEMM (forward, or one stride phase of backward data) and of backward filter's
// split-K GEMM, the filter operand's arrangement, the size check, and the split-K reduction
// (kernel_common.h's ReduceSplitsKernel, launched by SplitKOutput). Internal to src/cuda/conv.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/ops.h"
#include "cuda/caching_allocator.h"
#include "cuda/conv/conv.h"
#include "cuda/kernels.h"
#include "cuda/port.h"

namespace colonnade::cuda::conv {

// One implicit GEMM out[m][j] = sum_k A[m][k] B[k][j] per group: A the arranged filters, B
// gathered from a CHWN tensor (x in forward, dy in backward data), column j = (oy, ox, img)
// with images innermost, row k = (c, ky, kx). The base of every forward / backward-data
// kernel's parameter block (gather.h reads these fields).
struct GemmGeometry {
  int n, h, w;  // gathered tensor's batch and spatial size
  int oh, ow;   // GEMM output grid; column j = (oy*ow + ox)*n + img
  int kh, kw;   // taps; GEMM row k = (c*kh + ky)*kw + kx
  int stride;   // source pixel of tap (ky, kx): (oy*stride - pad_h + ky, ox*stride - pad_w + kx)
  int pad_h, pad_w;
  int cg;               // gathered channels per group
  int m, k, kp, mp, j;  // rows, reduction, both padded to the tile; columns
  // Column (oy, ox, img) is written to pixel (out_oy + out_s*oy, out_ox + out_s*ox) of an
  // out_h x out_w output; plain = 1 when that is simply column j (out_s 1, no offset).
  int out_h, out_w, out_s, out_oy, out_ox, plain;
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

// Backward filter per group: dw[f][(c,ky,kx)] = sum_j dy[f][j] x[c][tap(j)], j = (oy, ox,
// img), split over blocks along j into FP32 partial sums. The base of every backward-filter
// kernel's parameter block.
struct WgradGeometry {
  int n, h, w, oh, ow, kh, kw, stride, pad_h, pad_w;
  int cg, m, ncol, jtot;  // ncol = cg*kh*kw, jtot = oh*ow*n (the reduction length)
  int splits, ksplit;     // ksplit: reduction length per split, a multiple of the K slice
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

// The filter operand of one GEMM, from the canonical weights w: F x (C/G) x KH x KW.
// Forward: W(g, m=f, k=(c,ky,kx)) = w[g*M+f][c][ky][kx]. Backward data (transposed = 1): rows
// are input channels and k = (f, ty, tx) runs over the group's filters and the tkh x tkw taps
// that reach one stride phase, flipped: W(g, m=c, k) = w[g*Fg+f][c][ky0 + step*(tkh-1-ty)]
// [kx0 + step*(tkw-1-tx)] (stride 1: ky0 = kx0 = 0, step 1, tkh x tkw = KH x KW, the plain
// flipped kernel). Each family lays it out in its own order and type (at).
struct ArrangeParams {
  const float* w;
  void* at;
  int groups, fg, cg, kh, kw;  // fg filters and cg input channels per group; kernel size
  int tkh, tkw, ky0, kx0, step;
  int m, k, kp, mp;
  int transposed, tf32;
  // 1: K in (tap, channel) order instead of (channel, tap), each tap's channels padded to
  // cpad (the TMA tap boxes, wgmma.cu's IssueGemmB): kk = tap * cpad + ch.
  int tap_major, cpad;
};

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)
// The filter tap (ky, kx) of backward data's K position r within a filter (transposed): this
// stride phase's taps, flipped.
__device__ __forceinline__ void FlippedTap(const ArrangeParams& p, int r, int* ky, int* kx) {
  *ky = p.ky0 + p.step * (p.tkh - 1 - r / p.tkw);
  *kx = p.kx0 + p.step * (p.tkw - 1 - r % p.tkw);
}
// W(g, mm, kk) of ArrangeParams, zero beyond m or k (khkw = kh * kw, taps = tkh * tkw).
__device__ __forceinline__ float FilterValue(const ArrangeParams& p, int g, int mm, int kk,
                                             int khkw, int taps) {
  float v = 0.0f;
  if (p.tap_major) {  // back to the (channel, tap) index, or past p.k for a padding channel
    const int tap = kk / p.cpad, ch = kk - tap * p.cpad;
    kk = ch < p.k / taps ? ch * taps + tap : p.k;
  }
  if (mm < p.m && kk < p.k) {
    if (!p.transposed) {
      v = p.w[(static_cast<int64_t>(g) * p.fg + mm) * p.k + kk];
    } else {
      const int f = kk / taps, r = kk % taps;
      int ky, kx;
      FlippedTap(p, r, &ky, &kx);
      v = p.w[((static_cast<int64_t>(g) * p.fg + f) * p.cg + mm) * khkw + ky * p.kw + kx];
    }
  }
  return v;
}
#endif

// Whether the gathered operand of a GEMM whose geometry is q (GemmGeometry or WgradGeometry)
// is a plain matrix: a 1 x 1 convolution of stride 1 without padding, its `cols` columns (or
// reduction) the tensor's h w n. The TMA tiles' condition (Describe; wgmma.cu checks it).
template <class G>
bool PlainGather(const G& q, int64_t cols) {
  return q.kh == 1 && q.kw == 1 && q.stride == 1 && q.pad_h == 0 && q.pad_w == 0 &&
         int64_t(q.h) * q.w * q.n == cols;
}

// One GEMM of forward or backward data: its geometry (kp, mp, plain and the divisors are set
// by Finish) and its filter operand (at, m, k, kp, mp filled in by Finish).
struct ConvGemm {
  GemmGeometry geo{};
  ArrangeParams arrange{};
};

// What a launch of configuration c reports.
ConvLaunchInfo LaunchInfo(const ConvConfig& c, bool vec, int splits);
// Refuses tensors of 2^31 elements or more (the kernels' index arithmetic is 32-bit).
void CheckSizes(const ConvDims& d);

ConvGemm ForwardGemm(const ConvDims& d, const ConvParams& p, const float* w);
// Backward data is a convolution of dy with the transposed, flipped filters. With stride s
// it splits into s*s phases: the input pixels (ry + s*qy, rx + s*qx) of phase (ry, rx)
// receive only the taps ky = ky0 + s*t with ky0 = (ry + pad) mod s, and from those a
// stride-1 convolution of dy: oy = qy + cy - t with cy = (ry + pad - ky0) / s. Each phase is
// one implicit GEMM over its own pixels and taps, writing its pixels in place; phases that no
// tap reaches are zeros (*zero_first: dx must be cleared before the GEMMs run). (A first
// version gathered a virtually dilated dy, 15 of 16 taps zero at stride 4: 240x cuDNN's time on
// AlexNet's conv1.)
std::vector<ConvGemm> BackwardDataGemms(const ConvDims& d, const ConvParams& p, const float* w,
                                        bool* zero_first);
// Whether some stride phase of dx has no tap (BackwardDataGemms' *zero_first): a 1 x 1
// convolution of stride 2 leaves three pixels of four zero.
bool PhasesLeaveZeros(const ConvDims& d, const ConvParams& p);
// Pads the GEMM for tiles of bm rows and K slices of kslice (kp a multiple of kslice, mp of
// bm), fills in the arrangement's sizes and the divisors.
void Finish(ConvGemm* gemm, int bm, int kslice);
// The GEMM's description for the selection (catalogue.h).
ConvGemmDesc Describe(const GemmGeometry& q, int groups, const DeviceContext& ctx, MathMode math,
                      bool vec, bool bf16_operands);
ConvGemmDesc Describe(const WgradGeometry& q, int groups, const DeviceContext& ctx, MathMode math,
                      bool vec, bool bf16_operands);
// The autotuner's key of a forward / backward-data GEMM.
std::vector<int> RaceKey(const GemmGeometry& q, int groups);

WgradGeometry BackwardFilterGeometry(const ConvDims& d, const ConvParams& p);
// The fewest K slices a backward-filter split runs (ConvBackwardFilterTc).
constexpr int kWgradMinSlices = 16;
// How a reduction jtot long splits over `tiles` output tiles: about four blocks per
// multiprocessor in flight, each split at least min_slices slices of kslice (its length,
// ksplit, a multiple of kslice). SplitK's arithmetic; the tile choice (ChooseWgmma) weighs it.
struct KSplit {
  int64_t splits, ksplit;
};
inline KSplit SplitReduction(int64_t tiles, int64_t jtot, int sm_count, int min_slices,
                             int kslice) {
  const int64_t want = std::max<int64_t>(1, (int64_t(sm_count) * 4 + tiles - 1) / tiles);
  const int64_t max_splits = std::max<int64_t>(1, jtot / (int64_t(min_slices) * kslice));
  const int64_t splits = std::min(want, max_splits);
  const int64_t per = (jtot + splits - 1) / splits;
  const int64_t ksplit = (per + kslice - 1) / kslice * kslice;
  return {(jtot + ksplit - 1) / ksplit, ksplit};
}
// Splits the reduction so that about four blocks per multiprocessor are in flight (bm x bn
// tiles), each split at least min_slices K slices of kslice long (SplitReduction).
void SplitK(WgradGeometry* q, int bm, int bn, int groups, const DeviceContext& ctx, int min_slices,
            int kslice);

// Backward filter's output: dw itself for one split; else a workspace of groups x splits x
// m x ncol partial sums that Reduce adds into dw in the order of the splits (FP32, a fixed
// order: deterministic).
class SplitKOutput {
 public:
  SplitKOutput(const DeviceContext& ctx, const WgradGeometry& q, int groups, float* dw);
  float* out() const { return ws_ ? ws_->f() : dw_; }
  // The splits added in order (FP32: the bits every configuration gives), or, with
  // two_level and at least kTwoLevel splits, in chunks of ceil(sqrt(splits)) consecutive
  // splits first, then the chunks (the tensor-core backward filter: deterministic, another
  // association).
  void Reduce(const DeviceContext& ctx, bool two_level = false) const;
  static constexpr int kTwoLevel = 9;

 private:
  int groups_, splits_;
  int64_t per_group_;  // m * ncol
  float* dw_;
  std::unique_ptr<Scratch> ws_;
};

// sm_90a build on a compute capability 9.0 device (wgmma.cu); always on the emulator.
bool WgmmaAvailable();

}  // namespace colonnade::cuda::conv

// The kernel files' shared helpers (kernel_common.h: device code, so only where CUDA or the
// emulator compiles; catalogue.cc, plain C++, does without).
#if defined(__CUDACC__) || defined(COLONNADE_CUDA_EMULATE)
#include "cuda/kernel_common.h"

namespace colonnade::cuda::conv {

using cuda::Aligned;
// A grid-stride loop's grid for n elements: GridFor with 256 threads a block and at most 16
// blocks per SM, the convolutions' setting.
inline dim3 ElementwiseGrid(const DeviceContext& ctx, int64_t n) { return GridFor(ctx, n, 1, 16); }

}  // namespace colonnade::cuda::conv
#endif
