// The convolution families' shared host code (common.h); backward filter's split-K reduction
// is kernel_common.h's ReduceSplitsKernel, shared with every other kernel file.

#include "cuda/conv/common.h"

#include <algorithm>

#include "core/log.h"

namespace colonnade::cuda::conv {
namespace {

// The fields forward and backward filter take straight from the convolution (both gather x).
template <class G>
void SetFromConvolution(const ConvDims& d, const ConvParams& p, G* q) {
  q->n = d.n;
  q->h = d.h;
  q->w = d.w;
  q->oh = d.oh;
  q->ow = d.ow;
  q->kh = p.kernel_h;
  q->kw = p.kernel_w;
  q->stride = p.stride;
  q->pad_h = p.pad;
  q->pad_w = p.pad;
  q->cg = d.c / p.groups;
  q->m = d.f / p.groups;
}

}  // namespace

ConvLaunchInfo LaunchInfo(const ConvConfig& c, bool vec, int splits) {
  ConvLaunchInfo info;
  info.config = c.name;
  info.bm = c.bm;
  info.bn = c.bn;
  info.stages = c.stages;
  info.vec = vec;
  info.splits = splits;
  info.wgmma = c.family == ConvFamily::kWgmma;
  return info;
}

void CheckSizes(const ConvDims& d) {
  const int64_t lim = int64_t(1) << 31;
  CHECK(int64_t(d.c) * d.h * d.w * d.n < lim && int64_t(d.f) * d.oh * d.ow * d.n < lim)
      << "convolution tensors must have fewer than 2^31 elements";
}

ConvGemm ForwardGemm(const ConvDims& d, const ConvParams& p, const float* w) {
  const int groups = p.groups;
  ConvGemm gemm;
  GemmGeometry& q = gemm.geo;
  SetFromConvolution(d, p, &q);
  q.k = q.cg * q.kh * q.kw;
  q.j = d.oh * d.ow * d.n;
  q.out_h = d.oh;
  q.out_w = d.ow;
  q.out_s = 1;
  ArrangeParams& ap = gemm.arrange;
  ap.w = w;
  ap.groups = groups;
  ap.fg = q.m;
  ap.cg = q.cg;
  ap.kh = ap.tkh = q.kh;
  ap.kw = ap.tkw = q.kw;
  ap.step = 1;
  ap.transposed = 0;
  return gemm;
}

bool PhasesLeaveZeros(const ConvDims& d, const ConvParams& p) {
  const int s = p.stride;
  for (int ry = 0; ry < s && ry < d.h; ++ry)
    for (int rx = 0; rx < s && rx < d.w; ++rx)
      if ((ry + p.pad) % s >= p.kernel_h || (rx + p.pad) % s >= p.kernel_w) return true;
  return false;
}

std::vector<ConvGemm> BackwardDataGemms(const ConvDims& d, const ConvParams& p, const float* w,
                                        bool* zero_first) {
  const int groups = p.groups, s = p.stride;
  const int fg = d.f / groups, cg = d.c / groups;
  *zero_first = PhasesLeaveZeros(d, p);
  std::vector<ConvGemm> gemms;
  for (int ry = 0; ry < s && ry < d.h; ++ry) {
    for (int rx = 0; rx < s && rx < d.w; ++rx) {
      const int ky0 = (ry + p.pad) % s, kx0 = (rx + p.pad) % s;
      if (ky0 >= p.kernel_h || kx0 >= p.kernel_w) continue;
      const int tkh = (p.kernel_h - ky0 + s - 1) / s, tkw = (p.kernel_w - kx0 + s - 1) / s;
      const int cy = (ry + p.pad - ky0) / s, cx = (rx + p.pad - kx0) / s;
      ConvGemm gemm;
      GemmGeometry& q = gemm.geo;
      q.n = d.n;
      q.h = d.oh;  // the gathered tensor is dy
      q.w = d.ow;
      q.oh = (d.h - ry + s - 1) / s;  // this phase's pixels of dx
      q.ow = (d.w - rx + s - 1) / s;
      q.kh = tkh;
      q.kw = tkw;
      q.stride = 1;
      q.pad_h = tkh - 1 - cy;
      q.pad_w = tkw - 1 - cx;
      q.cg = fg;
      q.m = cg;
      q.k = fg * tkh * tkw;
      q.j = q.oh * q.ow * d.n;
      q.out_h = d.h;
      q.out_w = d.w;
      q.out_s = s;
      q.out_oy = ry;
      q.out_ox = rx;
      ArrangeParams& ap = gemm.arrange;
      ap.w = w;
      ap.groups = groups;
      ap.fg = fg;
      ap.cg = cg;
      ap.kh = p.kernel_h;
      ap.kw = p.kernel_w;
      ap.tkh = tkh;
      ap.tkw = tkw;
      ap.ky0 = ky0;
      ap.kx0 = kx0;
      ap.step = s;
      ap.transposed = 1;
      gemms.push_back(gemm);
    }
  }
  return gemms;
}

void Finish(ConvGemm* gemm, int bm, int kslice) {
  GemmGeometry& q = gemm->geo;
  q.kp = static_cast<int>(CeilDiv(q.k, kslice) * kslice);
  q.mp = static_cast<int>(CeilDiv(q.m, bm) * bm);
  q.plain = (q.out_s == 1 && q.out_oy == 0 && q.out_ox == 0 && q.out_h == q.oh && q.out_w == q.ow)
                ? 1
                : 0;
  ArrangeParams& ap = gemm->arrange;
  ap.m = q.m;
  ap.k = q.k;
  ap.kp = q.kp;
  ap.mp = q.mp;
  q.div_n = FastDiv(q.n);
  q.div_ow = FastDiv(q.ow);
  q.div_kw = FastDiv(q.kw);
  q.div_khkw = FastDiv(q.kh * q.kw);
}

ConvGemmDesc Describe(const GemmGeometry& q, int groups, const DeviceContext& ctx, MathMode math,
                      bool vec, bool bf16_operands) {
  ConvGemmDesc d{math, q.m, q.j, q.k, groups, ctx.sm_count, vec, bf16_operands};
  // (Before Finish: the output's plainness from its geometry, not q.plain.)
  d.plain = PlainGather(q, q.j) && q.out_s == 1 && q.out_oy == 0 && q.out_ox == 0 &&
            q.out_h == q.oh && q.out_w == q.ow;
  d.tap_boxes = !d.plain && q.n % 64 == 0;
  return d;
}

ConvGemmDesc Describe(const WgradGeometry& q, int groups, const DeviceContext& ctx, MathMode math,
                      bool vec, bool bf16_operands) {
  ConvGemmDesc d{math, q.m, q.ncol, q.jtot, groups, ctx.sm_count, vec, bf16_operands};
  d.plain = PlainGather(q, q.jtot);
  return d;
}

std::vector<int> RaceKey(const GemmGeometry& q, int groups) {
  return {q.n,     q.h,  q.w, q.oh, q.ow, q.kh,    q.kw,    q.stride, q.pad_h,
          q.pad_w, q.cg, q.m, q.k,  q.j,  q.out_h, q.out_w, q.out_s,  groups};
}

WgradGeometry BackwardFilterGeometry(const ConvDims& d, const ConvParams& p) {
  WgradGeometry q{};
  SetFromConvolution(d, p, &q);
  q.ncol = q.cg * q.kh * q.kw;
  q.jtot = d.oh * d.ow * d.n;
  q.div_n = FastDiv(q.n);
  q.div_ow = FastDiv(q.ow);
  q.div_kw = FastDiv(q.kw);
  q.div_khkw = FastDiv(q.kh * q.kw);
  return q;
}

void SplitK(WgradGeometry* q, int bm, int bn, int groups, const DeviceContext& ctx, int min_slices,
            int kslice) {
  const int64_t tiles = CeilDiv(q->ncol, bn) * CeilDiv(q->m, bm) * groups;
  const KSplit k = SplitReduction(tiles, q->jtot, ctx.sm_count, min_slices, kslice);
  q->ksplit = static_cast<int>(k.ksplit);
  q->splits = static_cast<int>(k.splits);
}

SplitKOutput::SplitKOutput(const DeviceContext& ctx, const WgradGeometry& q, int groups, float* dw)
    : groups_(groups), splits_(q.splits), per_group_(int64_t(q.m) * q.ncol), dw_(dw) {
  if (q.splits > 1) {
    ws_ = std::make_unique<Scratch>(ctx.alloc,
                                    sizeof(float) * size_t(groups) * q.splits * q.m * q.ncol);
  }
}

void SplitKOutput::Reduce(const DeviceContext& ctx, bool two_level) const {
  if (!ws_) return;
  if (two_level && splits_ >= kTwoLevel) {
    int chunk = 1;
    while (chunk * chunk < splits_) ++chunk;
    const int chunks = static_cast<int>(CeilDiv(int64_t(splits_), int64_t(chunk)));
    Scratch mid(ctx.alloc, sizeof(float) * size_t(groups_) * chunks * per_group_);
    const ReduceSplitChunksParams<float> cp{ws_->f(), mid.f(), groups_,   splits_,
                                            chunk,    chunks,  per_group_};
    Launch(ReduceSplitChunksKernel<float>,
           ElementwiseGrid(ctx, int64_t(groups_) * chunks * per_group_), dim3(256), ctx.stream, cp);
    const ReduceSplitsParams<float> rp{mid.f(), dw_, groups_, chunks, per_group_};
    Launch(ReduceSplitsKernel<float>, ElementwiseGrid(ctx, groups_ * rp.per_group), dim3(256),
           ctx.stream, rp);
    return;
  }
  const ReduceSplitsParams<float> rp{ws_->f(), dw_, groups_, splits_, per_group_};
  Launch(ReduceSplitsKernel<float>, ElementwiseGrid(ctx, groups_ * rp.per_group), dim3(256),
         ctx.stream, rp);
}

}  // namespace colonnade::cuda::conv
