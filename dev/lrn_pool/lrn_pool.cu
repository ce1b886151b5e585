// dev/lrn_pool: the cross-channel LRN and the max pool after it (AlexNet's norm1 + pool1 and
// norm2 + pool2) fused into one pass each way. Left the main path (Net::Fusions::lrn_pool,
// Ops::LrnMaxPoolForward/Backward, the autotuner's COLONNADE_LRN_POOL_FWD) after it measured
// slower than the unfused LRN and pool; kept here with its numbers, built by bench_dev_lrn_pool
// and checked by dev_tests / dev_emu_tests (bit for bit the unfused kernels). Nothing here is
// linked into the library or dispatched at run time.
//
// Versions (all bit-identical to the unfused ops/lrn.cu + ops/pool.cu kernels):
//   forward v1  LrnMaxPoolForward: a thread per pooling window and image normalises the LRN of
//               each of its (up to 3 x 3) pixels in registers: every value about 2.25 times
//               over AlexNet's overlapping 3 x 3 windows at stride 2.
//   forward v2  LrnMaxPoolForwardTiled: a block normalises each pixel of its tile's input region
//               once into shared memory (1.3 times: 7 x 9 pixels for 3 x 4 windows), then a
//               thread per window takes the maximum there. The autotuner raced v1 and v2.
//   backward    LrnMaxPoolBackward: from x, the forward's argmax and dy; every denominator
//               recomputed from x, d^-beta once per element.
// Measured (one H200, AlexNet at batch 256, bf16 precision, tree 01eb51e, 2026-12-05;
// experiments/mixed_precision/README.md, "Fusions, each turned off in turn", and
// results_storage/call_output_01eb51e.txt):
//   bench_train step, FP32 activation storage: 9.44 ms fused, 8.52 ms unfused;
//   bf16 activation storage: 9.41 ms fused, 8.00 ms unfused (fusions without lrn_pool:
//   30,030 img/s, 8.52 ms; README's AlexNet row: 27,152 img/s with the fusion, the default
//   then, against 32,001 without).
// Why it lost (experiments/mixed_precision/README.md, "Layer fusions of 2026-12-04"): it moves
// about a third of the bytes of the unfused pair (1.9 GB against 5.7 GB per step at batch 256,
// 930 MiB less memory), but d^-beta costs three correctly rounded square roots and a division
// (~55 instructions a value), so recomputing the normalisation of every pixel of every window,
// forward and backward, costs more than the bytes it saves, where the unfused LRN and pool
// stream each tensor once.

#include <algorithm>
#include <cstdint>

#include "core/log.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/lrn_math.h"
#include "dev/lrn_pool/lrn_pool.h"

namespace colonnade::cuda::dev {
namespace {

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
// (lrn_pool_test.cc checks it).
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
// comparison: bit-identical to version 1.
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

}  // namespace

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
  LrnPoolKernelParams p{};
  p.c = c;
  p.cg = c / lp.groups;
  p.h = h, p.w = w, p.n = n, p.oh = oh, p.ow = ow;
  p.size = pp.size, p.stride = pp.stride, p.pad = pp.pad;
  p.alpha = LrnCrossAlpha(lp), p.beta = lp.beta, p.k = lp.k, p.grad_scale = LrnCrossGradScale(lp);
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
                          const PoolParams& pp, int version) {
  LrnMaxPoolForwardGpu(ctx, x, StorageType::kFloat, y, StorageType::kFloat, arg, c, h, w, n, oh, ow,
                       lp, pp, version);
}

void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, float* arg, int c, int h, int w, int n, int oh, int ow,
                          const LrnCrossParams& lp, const PoolParams& pp, int version) {
  CHECK(version == 1 || version == 2) << "LrnMaxPoolForwardGpu: version " << version;
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

}  // namespace colonnade::cuda::dev
