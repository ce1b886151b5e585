// The pooling family (core/ops/pool.h): max and average pooling, the max pool's record of
// each window's argmax for the backward, global average pooling. Kernels, launchers
// (ops/pool.h) and the CudaOps methods.
//
// Shapes (CHWN): x, dx C x H x W x N; y, dy and the record C x OH x OW x N; global average
// pooling's y, dy C x 1 x 1 x N. Storage: x and dx XT, y and dy YT (float or bf16), the record
// bf16 (window offsets below 256 are exact).
//
// Mapping: the window kernels run on RowGrid: blockIdx.y walks (channel, row) pairs, x-threads
// the (column, image) positions of the row, images fastest, so a warp's load is one pixel of
// consecutive images (coalesced) and all index arithmetic is 32-bit and per block; V = 4 images
// per thread (Lanes) where N % 4 == 0 and the tensors are aligned to 4 elements.
//   Forward: a thread per output element: the window's first maximum (or mean); with a record,
//   also that maximum's offset in its window.
//   Backward, a gather per input element over the windows that contain it, in (oy, ox) order
//   (no atomics: deterministic). Max with the forward's record (what training runs): dy where
//   the record names this pixel, reading neither x nor y. Max without a record: first
//   PoolArgmaxKernel, a thread per output element, finds each window's first pixel equal to its
//   output (independent loads) into int scratch, then the same gather reads that. Average:
//   dy / (clipped window size) from every window. Max with a record whose windows tile x
//   without overlap (stride == size, pad 0): a scatter instead, a thread per output element
//   writing its window's pixels (each written once: still deterministic, the gather's bits).
//   Max with a record whose windows overlap but are at most stride + 1 a side (3 x 3 of
//   stride 2): the gather by blocks of stride x stride pixels, each block's (at most) 2 x 2
//   windows loaded once (PoolMaxBlockGatherKernel; the gather's terms in its order).
// Every path adds the same terms in the same order, so the results are the CPU's (max: bitwise).
// Max-pool backward version 2, one kernel testing "first maximum" with a chain of dependent
// loads, lost to these and lives in dev/pool_backward with its measurements.
//   Global average pooling: a thread per (channel, image) sums its pixels in double.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/pool.h"

namespace colonnade::cuda {
namespace {

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

// Kernel AvgPoolBackwardKernel<XT, YT>
//   dy: C x OH x OW x N -> dx: C x H x W x N. Grid: y = C*H rows, x = ceil(W*N / 256); one
//   thread per input element (a gather: no atomics, deterministic), which adds dy / (clipped
//   window size) of every window containing its pixel, in (oy, ox) order.
template <typename XT, typename YT>
__global__ void AvgPoolBackwardKernel(const PoolKernelParams p) {
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
    const int64_t plane_out = static_cast<int64_t>(c) * p.oh * p.ow * p.n + img;
    const YT* dyc = static_cast<const YT*>(p.dy) + plane_out;
    float g = 0.0f;
    for (int oy = oy0; oy <= oy1; ++oy) {
      const int y0 = IMax(oy * p.stride - p.pad, 0);
      const int y1 = IMin(oy * p.stride - p.pad + p.size, p.h);
      for (int ox = ox0; ox <= ox1; ++ox) {
        const int o = (oy * p.ow + ox) * p.n;
        const int x0 = IMax(ox * p.stride - p.pad, 0);
        const int x1 = IMin(ox * p.stride - p.pad + p.size, p.w);
        g += Load(dyc + o) * (1.0f / static_cast<float>((y1 - y0) * (x1 - x0)));
      }
    }
    Store(static_cast<XT*>(p.out) + static_cast<int64_t>(row) * p.w * p.n + q, g);
  }
}

// Max-pool backward without a record (version 3): two passes, each with independent loads.
//   PoolArgmaxKernel: per output element (grid as PoolForwardKernel), the index iy*W + ix of
//   the first pixel of its window, in row-major order, equal to the window's output (the
//   window's first pixel if none is, as in CpuOps).
//   PoolMaxGatherKernel: per input element (grid as AvgPoolBackwardKernel), the sum of dy over
//   the windows, in (oy, ox) order, whose argmax it is; with kRec, whose record names it.
// Storage: x and out (dx) XT, y and dy YT.
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
          Lanes<V> up;  // relu_y: the window's maximum is above 0 (MaxPoolBackwardArgGpu)
          if (p.y != nullptr) {
            up = LoadLanes<V>(static_cast<const YT*>(p.y) + o);
          } else {
            for (int i = 0; i < V; ++i) up.v[i] = 1.0f;
          }
          for (int i = 0; i < V; ++i)
            if (r.v[i] == mine && up.v[i] > 0.0f) g.v[i] += d.v[i];
        } else {
          for (int i = 0; i < V; ++i)
            if (p.arg[o + i] == me) g.v[i] += d.v[i];
        }
      }
    StoreLanes<V>(static_cast<XT*>(p.out) + static_cast<int64_t>(row) * p.w * p.n + ix * p.n + img,
                  g);
  }
}

// Kernel PoolMaxScatterKernel<V, XT, YT>: max-pool backward by the record for windows that
// tile x without overlap (stride == size, pad 0, the last window clipped at the border:
// PoolWindowsTile), so every input pixel lies in exactly one window. Grid as
// PoolForwardKernel: a thread per output element (ox, V images) loads its window's dy, record
// (and relu_y) once and writes all the window's pixels of dx: 0 + dy at the recorded one (the
// gather's sum of one term, so -0 becomes +0 as there), 0 elsewhere. Bitwise
// PoolMaxGatherKernel<.., true>'s dx with a quarter of its loads for 2 x 2 windows (VGG's
// five pools) and no per-pixel window search.
template <int V, typename XT, typename YT>
__global__ void PoolMaxScatterKernel(const PoolArgParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  const int nv = p.n / V;
  if (q >= p.ow * nv) return;
  const int ox = q / nv, img = (q - ox * nv) * V;
  const int x0 = ox * p.size, x1 = IMin(x0 + p.size, p.w);
  for (int row = blockIdx.y; row < p.c * p.oh; row += gridDim.y) {
    const int c = row / p.oh, oy = row - c * p.oh;
    const int y0 = oy * p.size, y1 = IMin(y0 + p.size, p.h);
    const int64_t o = static_cast<int64_t>(row) * p.ow * p.n + ox * p.n + img;
    const Lanes<V> d = LoadLanes<V>(static_cast<const YT*>(p.dy) + o);
    const Lanes<V> r = LoadLanes<V>(p.rec + o);
    bool pass[V];
    for (int i = 0; i < V; ++i) pass[i] = true;
    if (p.y != nullptr) {  // relu_y: a window whose maximum is not above 0 passes nothing
      const Lanes<V> up = LoadLanes<V>(static_cast<const YT*>(p.y) + o);
      for (int i = 0; i < V; ++i) pass[i] = up.v[i] > 0.0f;
    }
    XT* dxc = static_cast<XT*>(p.out) + static_cast<int64_t>(c) * p.h * p.w * p.n + img;
    for (int iy = y0; iy < y1; ++iy)
      for (int ix = x0; ix < x1; ++ix) {
        const float mine = static_cast<float>((iy - y0) * p.size + ix - x0);
        Lanes<V> g;
        for (int i = 0; i < V; ++i) g.v[i] = pass[i] && r.v[i] == mine ? 0.0f + d.v[i] : 0.0f;
        StoreLanes<V>(dxc + (static_cast<int64_t>(iy) * p.w + ix) * p.n, g);
      }
  }
}

// Kernel PoolMaxBlockGatherKernel<V, XT, YT>: max-pool backward by the record for overlapping
// windows no larger than stride + 1 per side (ResNet's and AlexNet's 3 x 3 of stride 2), where
// the pixels of a stride x stride block of x lie in at most 2 x 2 windows. Grid: y = C x
// ceil(H / stride) block rows, x = ceil(W / stride) x N / V; a thread loads those (up to) four
// windows' dy, record (and relu_y) once and writes its block's pixels, each the sum over the
// windows containing it, in (oy, ox) order, of dy where the record names it: the gather's
// terms in the gather's order (bitwise PoolMaxGatherKernel<.., true>) with 4 window loads per
// 2 x 2 pixels instead of 9 (each pixel of the gather searches its own 1-4 windows).
template <int V, typename XT, typename YT>
__global__ void PoolMaxBlockGatherKernel(const PoolArgParams p) {
  const int q = blockIdx.x * kBlock + threadIdx.x;
  const int nv = p.n / V, s = p.stride;
  const int bw = (p.w + s - 1) / s, bh = (p.h + s - 1) / s;
  if (q >= bw * nv) return;
  const int bx = q / nv, img = (q - bx * nv) * V;
  // The windows over pixels [s * b, s * b + s): [CeilDiv(s b + pad - size + 1, s), (s b + s -
  // 1 + pad) / s] clipped to the output; at most two when size <= stride + 1.
  auto first_window = [&](int b) {
    const int l = s * b + p.pad - p.size + 1;
    return l <= 0 ? 0 : (l + s - 1) / s;
  };
  const int ox0 = first_window(bx);
  const int nwx = IMin((s * bx + s - 1 + p.pad) / s, p.ow - 1) - ox0 + 1;
  const int ix0 = s * bx, ix1 = IMin(ix0 + s, p.w);
  for (int row = blockIdx.y; row < p.c * bh; row += gridDim.y) {
    const int c = row / bh, by = row - c * bh;
    const int oy0 = first_window(by);
    const int nwy = IMin((s * by + s - 1 + p.pad) / s, p.oh - 1) - oy0 + 1;
    const int64_t plane = static_cast<int64_t>(c) * p.oh * p.ow * p.n + img;
    Lanes<V> d[2][2], r[2][2];
    bool up[2][2][V];
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        if (a >= nwy || b >= nwx) continue;
        const int64_t o = plane + ((oy0 + a) * p.ow + ox0 + b) * p.n;
        d[a][b] = LoadLanes<V>(static_cast<const YT*>(p.dy) + o);
        r[a][b] = LoadLanes<V>(p.rec + o);
        if (p.y != nullptr) {  // relu_y: the window's maximum is above 0 (as the gather)
          const Lanes<V> m = LoadLanes<V>(static_cast<const YT*>(p.y) + o);
          for (int i = 0; i < V; ++i) up[a][b][i] = m.v[i] > 0.0f;
        } else {
          for (int i = 0; i < V; ++i) up[a][b][i] = true;
        }
      }
    XT* dxc = static_cast<XT*>(p.out) + static_cast<int64_t>(c) * p.h * p.w * p.n + img;
    for (int iy = s * by; iy < IMin(s * by + s, p.h); ++iy)
      for (int ix = ix0; ix < ix1; ++ix) {
        Lanes<V> g;
        for (int i = 0; i < V; ++i) g.v[i] = 0.0f;
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
          for (int b = 0; b < 2; ++b) {
            if (a >= nwy || b >= nwx) continue;
            const int wy = iy - (oy0 + a) * s + p.pad, wx = ix - (ox0 + b) * s + p.pad;
            if (wy < 0 || wy >= p.size || wx < 0 || wx >= p.size) continue;
            const float mine = static_cast<float>(wy * p.size + wx);
            for (int i = 0; i < V; ++i)
              if (r[a][b].v[i] == mine && up[a][b][i]) g.v[i] += d[a][b].v[i];
          }
        StoreLanes<V>(dxc + (static_cast<int64_t>(iy) * p.w + ix) * p.n, g);
      }
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

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

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
                           int oh, int ow, const PoolParams& pp, const void* relu_y) {
  CHECK(MaxPoolRecordFits(pp)) << "MaxPoolBackwardArgGpu: max pooling, at most 256 pixels a window";
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "pooling supports tensors below 2^31 elements";
  const PoolArgParams a{nullptr, relu_y,  dy,        nullptr, dx,
                        c,       h,       w,         n,       oh,
                        ow,      pp.size, pp.stride, pp.pad,  static_cast<const Bf16*>(rec)};
  const int v = PoolLanes(n, {{dy, yt}, {dx, xt}, {rec, StorageType::kBF16}, {relu_y, yt}});
  // Windows that tile x without overlap, each pixel in exactly one (VGG's 2 x 2 of stride 2).
  const bool tile = pp.stride == pp.size && pp.pad == 0 && int64_t(oh) * pp.size >= h &&
                    int64_t(ow) * pp.size >= w;
  // Overlapping windows of at most stride + 1 pixels a side (3 x 3 of stride 2): the block
  // gather, each stride x stride block of pixels in at most 2 x 2 windows.
  const bool blocks = !tile && pp.stride >= 2 && pp.size <= pp.stride + 1;
  const int64_t bh = CeilDiv(int64_t(h), int64_t(pp.stride));
  const int64_t bw = CeilDiv(int64_t(w), int64_t(pp.stride));
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      using XT = decltype(xs);
      using YT = decltype(ys);
      if (tile && v == 4) {
        Launch(PoolMaxScatterKernel<4, XT, YT>, RowGrid(int64_t(ow) * n / 4, int64_t(c) * oh),
               dim3(kBlock), ctx.stream, a);
      } else if (tile) {
        Launch(PoolMaxScatterKernel<1, XT, YT>, RowGrid(int64_t(ow) * n, int64_t(c) * oh),
               dim3(kBlock), ctx.stream, a);
      } else if (blocks && v == 4) {
        Launch(PoolMaxBlockGatherKernel<4, XT, YT>, RowGrid(bw * n / 4, int64_t(c) * bh),
               dim3(kBlock), ctx.stream, a);
      } else if (blocks) {
        Launch(PoolMaxBlockGatherKernel<1, XT, YT>, RowGrid(bw * n, int64_t(c) * bh), dim3(kBlock),
               ctx.stream, a);
      } else if (v == 4) {
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
        Launch(AvgPoolBackwardKernel<XT, YT>, in_grid, dim3(kBlock), ctx.stream, p);
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
        if (v == 4) {
          Launch(PoolArgmaxKernel<4, XT, YT>, out_grid, dim3(kBlock), ctx.stream, a);
          Launch(PoolMaxGatherKernel<4, XT, YT>, in_grid_v, dim3(kBlock), ctx.stream, a);
        } else {
          Launch(PoolArgmaxKernel<1, XT, YT>, out_grid, dim3(kBlock), ctx.stream, a);
          Launch(PoolMaxGatherKernel<1, XT, YT>, in_grid_v, dim3(kBlock), ctx.stream, a);
        }
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

// ---- CudaOps methods ---------------------------------------------------------------------------

// With a record (max pooling, windows of at most 256 pixels: MaxPoolRecordFits) the forward
// also writes each window's argmax, and the backward reads it instead of x and y.
void CudaOps::PoolForward(const Tensor& x, Tensor& y, const PoolParams& p, Tensor* record) {
  op_shapes::Pool(x, y, p);
  void* rec = nullptr;
  if (record != nullptr && MaxPoolRecordFits(p)) {
    op_shapes::SameSize(y, *record, "PoolForward (record)");
    CHECK(record->dtype() == DType::kBF16) << "PoolForward: the record is a bf16 tensor";
    rec = record->raw();
  }
  MaxPoolForwardArgGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), rec, I32(x.c(), "c"),
                       I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), I32(y.h(), "oh"),
                       I32(y.w(), "ow"), p);
}

void CudaOps::PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                           const PoolParams& p, const Tensor* record, bool relu_dx) {
  op_shapes::PoolBackward(x, y, dy, dx, p);
  const bool recorded = record != nullptr && MaxPoolRecordFits(p);
  const char* op = recorded ? "MaxPoolBackwardArg" : "PoolBackward";
  CHECK(x.dtype() == dx.dtype() && y.dtype() == dy.dtype())
      << op << ": x and dx, y and dy must share a storage type (x " << DTypeName(x.dtype())
      << ", dx " << DTypeName(dx.dtype()) << ", y " << DTypeName(y.dtype()) << ", dy "
      << DTypeName(dy.dtype()) << ")";
  if (recorded) {
    op_shapes::SameSize(y, *record, "PoolBackward (record)");
    CHECK(record->dtype() == DType::kBF16) << "PoolBackward: the record is a bf16 tensor";
    // relu_dx in the gather: the windows whose maximum is 0 pass nothing (bitwise the mask).
    return MaxPoolBackwardArgGpu(ctx_, record->raw(), dy.raw(), StorageOf(dy), dx.raw(),
                                 StorageOf(dx), I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"),
                                 I32(x.n(), "n"), I32(y.h(), "oh"), I32(y.w(), "ow"), p,
                                 relu_dx ? y.raw() : nullptr);
  }
  PoolBackwardGpu(ctx_, x.raw(), y.raw(), dy.raw(), dx.raw(), StorageOf(x), StorageOf(y),
                  I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                  I32(y.h(), "oh"), I32(y.w(), "ow"), p);
  if (relu_dx) ReluBackward(x, dx, dx);
}

void CudaOps::GlobalAvgPoolForward(const Tensor& x, Tensor& y) {
  op_shapes::GlobalAvgPool(x, y, "GlobalAvgPoolForward");
  GlobalAvgPoolForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), I32(x.c(), "c"),
                          I32(x.h() * x.w(), "hw"), I32(x.n(), "n"));
}

void CudaOps::GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) {
  op_shapes::GlobalAvgPool(dx, dy, "GlobalAvgPoolBackward");
  GlobalAvgPoolBackwardGpu(ctx_, dy.raw(), StorageOf(dy), dx.raw(), StorageOf(dx), I32(dx.c(), "c"),
                           I32(dx.h() * dx.w(), "hw"), I32(dx.n(), "n"));
}

}  // namespace colonnade::cuda
