// The local response normalisation family (core/ops/lrn.h): across channels (AlexNet's LRN)
// and within a map (cuda-convnet's rnorm). Kernels, launchers (ops/lrn.h) and the CudaOps
// methods.
//
// Shapes (CHWN): x, y, dy, dx and the denominators C x H x W x N; across channels, a column
// q < H*W*N (one pixel of one image) is one independent problem over the channels, which are
// H*W*N elements apart. Storage: x and dx XT, y and dy YT (float or bf16); the denominators
// float. The arithmetic is CpuOps's (PowNegBeta and LrnRingDenom: ops/lrn_math.h), in its order.
//
// Mapping, across channels: a thread per column (grid-stride over H*W*N, so a warp reads one
// channel of consecutive images: coalesced) walks the C channels. For window half-widths 1-4
// (AlexNet's 5, GoogLeNet's 5) the ring kernels keep the window's 2*HALF+1 channels in
// registers and slide it down a group's channels, so every element is read from memory once
// (the generic kernels, for other widths, re-read the window through L1: 2.4x the memory-bound
// time forward, 3.6x backward, on AlexNet's norm1), with V adjacent columns per thread (4
// forward, 2 backward: more rings would cost occupancy) and the next channel's load issued a
// step ahead. The ring backward can also compute each denominator again from x instead of
// reading it (LrnCrossRecomputesDenominator): the forward then stores none.
// Within a map: a thread per element, its size x size window summed directly (small windows).

#include <cstdint>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/lrn.h"
#include "cuda/ops/lrn_math.h"

namespace colonnade::cuda {
namespace {

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

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

namespace {
LrnCrossKernelParams CrossParams(int c, int64_t hwn, const LrnCrossParams& lp) {
  LrnCrossKernelParams p{};
  p.c = c;
  p.cg = c / lp.groups;
  p.hwn = hwn;
  p.half = lp.size / 2;
  p.alpha = LrnCrossAlpha(lp);
  p.beta = lp.beta;
  p.k = lp.k;
  p.grad_scale = LrnCrossGradScale(lp);
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

// ---- CudaOps methods ---------------------------------------------------------------------------

// An empty denom stays empty where the backward can compute the denominators again (ops.h).
void CudaOps::LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnCrossParams& p) {
  op_shapes::LrnCross(x, p, {&y}, "LrnCrossForward");
  if (denom.empty() && !LrnCrossRecomputesDenominator(p)) denom = Tensor(x.shape(), device());
  const bool stored = !denom.empty();
  if (stored) op_shapes::LrnCross(x, p, {&denom}, "LrnCrossForward");
  LrnCrossForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y),
                     stored ? denom.data() : nullptr, I32(x.c(), "c"),
                     I32(x.h() * x.w() * x.n(), "hwn"), p);
}

void CudaOps::LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                               const Tensor& dy, Tensor& dx, const LrnCrossParams& p) {
  const bool stored = !denom.empty();
  if (stored) {
    op_shapes::LrnCross(x, p, {&y, &denom, &dy, &dx}, "LrnCrossBackward");
  } else {
    op_shapes::LrnCross(x, p, {&y, &dy, &dx}, "LrnCrossBackward");
  }
  SameStorage(x, "x", dx, "dx", "LrnCrossBackward");
  SameStorage(y, "y", dy, "dy", "LrnCrossBackward");
  LrnCrossBackwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), stored ? denom.data() : nullptr,
                      dy.raw(), StorageOf(dy), dx.raw(), I32(x.c(), "c"),
                      I32(x.h() * x.w() * x.n(), "hwn"), p);
}

void CudaOps::LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom,
                               const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom}, "LrnWithinForward");
  LrnWithinForwardGpu(ctx_, x.data(), y.data(), denom.data(), I32(x.c(), "c"), I32(x.h(), "h"),
                      I32(x.w(), "w"), I32(x.n(), "n"), p);
}

void CudaOps::LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                const Tensor& dy, Tensor& dx, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom, &dy, &dx}, "LrnWithinBackward");
  LrnWithinBackwardGpu(ctx_, x.data(), y.data(), denom.data(), dy.data(), dx.data(),
                       I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), p);
}

}  // namespace colonnade::cuda
