// Dropout (core/ops/dropout.h): the forward's mask, a Philox function of (seed, step, global
// element index), bit for bit CpuOps's (the same PhiloxUniform, core/philox.h); the backward is
// dy * mask (MulGpu, ops/eltwise.h). Kernel, launcher (ops/dropout.h) and the CudaOps methods.
//
// Shapes (CHWN): x, y, mask C x H x W x N; storage x XT, y YT, the mask float (the same whatever
// the storage). Mapping: a grid-stride loop, one thread per element, which computes its global
// index from (c, h, w, n) and the layer's channel and image offsets: the mask does not depend on
// how (dp, mp) split the layer. In a graphed step the Philox step is read from the device
// (StepScalars), so a replay draws the next step's mask.

#include <cstdint>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "core/philox.h"
#include "cuda/ops/eltwise.h"
#include "cuda/ops/dropout.h"

namespace colonnade::cuda {
namespace {

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

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

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

// ---- CudaOps methods ---------------------------------------------------------------------------

using op_shapes::SameSize;

void CudaOps::DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) {
  op_shapes::Dropout(x, y, mask, p);
  AliasSameStorage(x, "x", y, "DropoutForward");
  DropoutForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), mask.data(),
                    I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), p);
}

void CudaOps::DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  SameSize(dy, mask, "DropoutBackward mask");
  SameSize(dy, dx, "DropoutBackward dx");
  AliasSameStorage(dy, "dy", dx, "DropoutBackward");
  MulGpu(ctx_, dy.raw(), StorageOf(dy), mask.data(), StorageType::kFloat, dx.raw(), StorageOf(dx),
         dx.size());
}

}  // namespace colonnade::cuda
