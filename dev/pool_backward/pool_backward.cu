// dev/pool_backward: max-pool backward version 2, the one-kernel gather that left the main path.
// Ops::PoolBackward without a record runs version 3 (src/cuda/ops/pool.cu: PoolArgmaxKernel then
// PoolMaxGatherKernel); training runs neither: since 2026-12-05 the forward keeps each window's
// argmax (a bf16 record) and the backward is version 3's gather reading it, without x or y. The
// autotuner raced versions 2 and 3 on every call of Ops::PoolBackward until this moved here
// (COLONNADE_POOL_BWD=v2|v3 forced one); bench_dev_pool_backward times version 2 against the main
// path, dev_tests / dev_emu_tests check it bit for bit. Nothing here is linked into the library
// or dispatched at run time.
//
// Versions (all add the same terms in the same order: bit-identical):
//   v1  (gone since run 1) a flat 64-bit index per thread, four 64-bit divisions each: 12x the
//       memory-bound time on AlexNet's pool1 (src/cuda/kernel_common.h, RowGrid's comment).
//   v2  PoolBackwardKernel below: a thread per input element visits the windows containing its
//       pixel and decides "first maximum of the window" by re-reading the window's earlier
//       pixels, a chain of dependent loads.
//   v3  (main path) PoolArgmaxKernel finds each window's first maximum with independent loads,
//       then PoolMaxGatherKernel gathers dy by it.
// Measured (one H200, AlexNet FP32 training step at batch 256; experiments/gpu_bench/README.md,
// runs 2 and 3, 2026-12-02, per-layer events of bench_train): pool1's backward 1.97 ms with v2
// (11x its 0.17 ms memory floor), 1.20 ms with v3 (7x); all max-pool backward 3.4 ms (v2) and
// 2.1 ms (v3) of a 35.9 / 34.7 ms step, "version 3 is the whole difference". Nothing outside
// AlexNet's three pools at batch 256 was timed (src/cuda/README.md, before this move).

#include <cstdint>

#include "core/log.h"
#include "cuda/kernel_common.h"
#include "dev/pool_backward/pool_backward.h"

namespace colonnade::cuda::dev {
namespace {

// The parameters of ops/pool.cu's kernels, as version 2 took them. x and out (dx) are stored as
// XT, y and dy as YT (float or Bf16).
struct PoolKernelParams {
  const void* x;
  const void* y;
  const void* dy;
  void* out;
  int c, h, w, n, oh, ow;
  int size, stride, pad;
  int kind;  // PoolParams::Kind
};

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

}  // namespace

void PoolBackwardV2Gpu(const DeviceContext& ctx, const void* x, const void* y, const void* dy,
                       void* dx, StorageType xt, StorageType yt, int c, int h, int w, int n, int oh,
                       int ow, const PoolParams& pp) {
  PoolKernelParams p{x, y,  dy, dx,      c,         h,      w,
                     n, oh, ow, pp.size, pp.stride, pp.pad, static_cast<int>(pp.kind)};
  CHECK_LT(int64_t(c) * h * w * n, int64_t(1) << 31)
      << "pooling supports tensors below 2^31 elements";
  CHECK(pp.kind != PoolParams::kMax || xt == StorageType::kBF16 || yt == StorageType::kFloat)
      << "max-pool backward: float x with bf16 y is not supported (a rounded maximum need not "
         "equal its pixel, so the argmax cannot be found again)";
  WithStorage(xt, [&](auto xs) {
    WithStorage(yt, [&](auto ys) {
      Launch(PoolBackwardKernel<decltype(xs), decltype(ys)>,
             RowGrid(int64_t(w) * n, int64_t(c) * h), dim3(kBlock), ctx.stream, p);
    });
  });
}

}  // namespace colonnade::cuda::dev
