// The LRN family's shape rules and CPU reference (lrn.h; the CUDA kernels: src/cuda/ops/lrn.cu).
#include "core/ops/lrn.h"

#include <algorithm>
#include <cmath>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::kScratchTask;
using cpu::ParallelFor;
using cpu::Scratch;

namespace op_shapes {

void LrnCross(const Tensor& x, const LrnCrossParams& p, std::initializer_list<const Tensor*> same,
              const char* what) {
  CHWN(x, what);
  CHECK(p.groups >= 1 && x.c() % p.groups == 0 && p.size >= 1)
      << what << ": " << x.c() << " channels, groups " << p.groups << ", size " << p.size;
  AllSameSize(x, same, what);
}

void LrnWithin(const Tensor& x, const LrnWithinParams& p, std::initializer_list<const Tensor*> same,
               const char* what) {
  CHWN(x, what);
  CHECK_GE(p.size, 1) << what << ": rnorm size";
  AllSameSize(x, same, what);
}

}  // namespace op_shapes

namespace {

// d^-beta; beta = 0.75 (AlexNet, cuda-convnet) avoids powf: 1 / (sqrt(d) * d^(1/4)).
inline float PowNegBeta(float d, float beta) {
  if (beta == 0.75f) return 1.0f / (std::sqrt(d) * std::sqrt(std::sqrt(d)));
  return std::pow(d, -beta);
}

// Box sum along one axis of a CHWN block, vectorised over the contiguous inner run:
//   out[o][j] = sum_{i in [o + off, o + off + size) ∩ [0, len)} in[i][j]
// for o in [0, len), where rows are `inner` floats apart ("in" and "out" are
// `outer` x len x inner arrays).
void BoxSum(const float* in, float* out, int64_t outer, int64_t len, int64_t inner, int64_t off,
            int64_t size) {
  for (int64_t a = 0; a < outer; ++a) {
    const float* src = in + a * len * inner;
    float* dst = out + a * len * inner;
    for (int64_t o = 0; o < len; ++o) {
      float* d = dst + o * inner;
      std::fill(d, d + inner, 0.0f);
      const int64_t lo = std::max<int64_t>(0, o + off), hi = std::min<int64_t>(len, o + off + size);
      for (int64_t i = lo; i < hi; ++i) {
        const float* s = src + i * inner;
        for (int64_t j = 0; j < inner; ++j) d[j] += s[j];
      }
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Local response normalisation across channels (see LrnCrossParams)
//
// Channels are S = H*W*N floats apart, so the work is split over blocks of positions
// s in [0, S): each block computes every channel at its positions, reading the channel
// window with unit stride.
// ---------------------------------------------------------------------------------------
namespace {
constexpr int64_t kLrnBlock = 256;

struct LrnCrossGeom {
  int64_t C, S, Cg, half;
  float alpha;  // alpha' (already divided by size if alpha_over_size)
  // Window of channel c: [c - size/2, c + size/2] clipped to c's group. The relation is
  // symmetric (j in window(c) <=> c in window(j)), which the backward pass uses.
  void Window(int64_t c, int64_t* lo, int64_t* hi) const {
    const int64_t g0 = c / Cg * Cg;
    *lo = std::max(g0, c - half);
    *hi = std::min(g0 + Cg - 1, c + half);
  }
};

LrnCrossGeom MakeLrnCrossGeom(const Tensor& x, const LrnCrossParams& p) {
  LrnCrossGeom g;
  g.C = x.c();
  g.S = x.h() * x.w() * x.n();
  g.Cg = g.C / p.groups;
  g.half = p.size / 2;
  g.alpha = p.alpha_over_size ? p.alpha / static_cast<float>(p.size) : p.alpha;
  return g;
}
}  // namespace

// denom[c][s] = k + alpha' * sum_{c' in window(c)} x[c'][s]^2;  y = x * denom^-beta.
// The CPU always stores the denominators (an empty `denom` gets x's shape: ops.h).
void CpuOps::LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnCrossParams& p) {
  if (denom.empty()) denom = Tensor(x.shape(), Device::kCPU);
  op_shapes::LrnCross(x, p, {&y, &denom}, "LrnCrossForward");
  const LrnCrossGeom g = MakeLrnCrossGeom(x, p);
  const float* xs = x.data();
  float* ys = y.data();
  float* ds = denom.data();
  const int64_t blocks = (g.S + kLrnBlock - 1) / kLrnBlock;
  ParallelFor(blocks, kLrnBlock * g.C * p.size, [&](int64_t b0, int64_t b1) {
    float acc[kLrnBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s0 = b * kLrnBlock, len = std::min(kLrnBlock, g.S - s0);
      for (int64_t c = 0; c < g.C; ++c) {
        int64_t lo, hi;
        g.Window(c, &lo, &hi);
        std::fill(acc, acc + len, 0.0f);
        for (int64_t c2 = lo; c2 <= hi; ++c2) {
          const float* v = xs + c2 * g.S + s0;
          for (int64_t i = 0; i < len; ++i) acc[i] += v[i] * v[i];
        }
        const float* xv = xs + c * g.S + s0;
        float* yv = ys + c * g.S + s0;
        float* dv = ds + c * g.S + s0;
        for (int64_t i = 0; i < len; ++i) {
          const float d = p.k + g.alpha * acc[i];
          dv[i] = d;
          yv[i] = xv[i] * PowNegBeta(d, p.beta);
        }
      }
    }
  });
}

// With y_c = x_c d_c^-beta and d_c = k + alpha' sum_{j in window(c)} x_j^2:
//   dx_j = dy_j d_j^-beta - 2 alpha' beta x_j sum_{c in window(j)} dy_c y_c / d_c
// (window symmetry turns "all c whose window holds j" into window(j)).
void CpuOps::LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                              const Tensor& dy, Tensor& dx, const LrnCrossParams& p) {
  op_shapes::LrnCross(x, p, {&y, &denom, &dy, &dx}, "LrnCrossBackward");
  const LrnCrossGeom g = MakeLrnCrossGeom(x, p);
  const float* xs = x.data();
  const float* ys = y.data();
  const float* ds = denom.data();
  const float* gs = dy.data();
  float* dxs = dx.data();
  const float scale = 2.0f * g.alpha * p.beta;
  const int64_t blocks = (g.S + kLrnBlock - 1) / kLrnBlock;
  ParallelFor(blocks, kLrnBlock * g.C * p.size, [&](int64_t b0, int64_t b1) {
    // ratio[c][i] = dy * y / denom for the block, all channels (read by neighbours).
    float* ratio = Scratch(kScratchTask, g.C * kLrnBlock);
    float acc[kLrnBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s0 = b * kLrnBlock, len = std::min(kLrnBlock, g.S - s0);
      for (int64_t c = 0; c < g.C; ++c) {
        const int64_t o = c * g.S + s0;
        float* r = ratio + c * kLrnBlock;
        for (int64_t i = 0; i < len; ++i) r[i] = gs[o + i] * ys[o + i] / ds[o + i];
      }
      for (int64_t j = 0; j < g.C; ++j) {
        int64_t lo, hi;
        g.Window(j, &lo, &hi);
        std::fill(acc, acc + len, 0.0f);
        for (int64_t c = lo; c <= hi; ++c) {
          const float* r = ratio + c * kLrnBlock;
          for (int64_t i = 0; i < len; ++i) acc[i] += r[i];
        }
        const int64_t o = j * g.S + s0;
        for (int64_t i = 0; i < len; ++i)
          dxs[o + i] = gs[o + i] * PowNegBeta(ds[o + i], p.beta) - scale * xs[o + i] * acc[i];
      }
    }
  });
}

// ---------------------------------------------------------------------------------------
// Response normalisation within a map (cuda-convnet rnorm; see LrnWithinParams)
//
// Per channel (the parallel unit), the window sum of squares is a 2-D box filter,
// computed separably (along x, then along y) with the N images as the contiguous inner
// run. Window of pixel y: [y - size/2, y - size/2 + size) clipped to [0, H).
// ---------------------------------------------------------------------------------------
// denom = k + alpha/size^2 * sum_{window} x^2;  y = x * denom^-beta.
void CpuOps::LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom}, "LrnWithinForward");
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), S = H * W * N;
  const int64_t off = -(p.size / 2);
  const float a = p.alpha / static_cast<float>(p.size * p.size);
  const float* xs = x.data();
  float* ys = y.data();
  float* ds = denom.data();
  ParallelFor(C, S * p.size * 2, [&](int64_t c0, int64_t c1) {
    float* sq = Scratch(kScratchTask, 2 * S);
    float* rows = sq + S;
    for (int64_t c = c0; c < c1; ++c) {
      const float* xv = xs + c * S;
      for (int64_t i = 0; i < S; ++i) sq[i] = xv[i] * xv[i];
      BoxSum(sq, rows, H, W, N, off, p.size);      // along x: H outer, W along, N inner
      BoxSum(rows, sq, 1, H, W * N, off, p.size);  // along y: whole rows of W*N
      float* yv = ys + c * S;
      float* dv = ds + c * S;
      for (int64_t i = 0; i < S; ++i) {
        const float d = p.k + a * sq[i];
        dv[i] = d;
        yv[i] = xv[i] * PowNegBeta(d, p.beta);
      }
    }
  });
}

// dx_q = dy_q d_q^-beta - 2 (alpha/size^2) beta x_q sum_{p : q in window(p)} dy_p y_p / d_p.
// q is in window(p) iff p is in [q + size/2 - size + 1, q + size/2]: the transposed
// window (the same one for odd sizes), again summed separably.
void CpuOps::LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                               const Tensor& dy, Tensor& dx, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom, &dy, &dx}, "LrnWithinBackward");
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), S = H * W * N;
  const int64_t off = p.size / 2 - p.size + 1;
  const float scale = 2.0f * p.alpha / static_cast<float>(p.size * p.size) * p.beta;
  const float* xs = x.data();
  const float* ys = y.data();
  const float* ds = denom.data();
  const float* gs = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, S * p.size * 2, [&](int64_t c0, int64_t c1) {
    float* r = Scratch(kScratchTask, 2 * S);
    float* rows = r + S;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t o = c * S;
      for (int64_t i = 0; i < S; ++i) r[i] = gs[o + i] * ys[o + i] / ds[o + i];
      BoxSum(r, rows, H, W, N, off, p.size);
      BoxSum(rows, r, 1, H, W * N, off, p.size);
      for (int64_t i = 0; i < S; ++i)
        dxs[o + i] = gs[o + i] * PowNegBeta(ds[o + i], p.beta) - scale * xs[o + i] * r[i];
    }
  });
}

}  // namespace colonnade
