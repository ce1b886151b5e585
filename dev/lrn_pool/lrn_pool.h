// dev/lrn_pool: the cross-channel LRN fused with the max pool after it, one pass each way. Not on
// the main path: it measured slower than the unfused ops (lrn_pool.cu's header has the versions
// and the numbers; dev/README.md the rule). The launchers take raw device pointers and queue on
// ctx.stream, as src/cuda/ops' do.
#pragma once

#include "core/ops/lrn.h"
#include "core/ops/pool.h"
#include "cuda/kernels.h"

namespace colonnade::cuda::dev {

// Whether the fused kernels take these parameters: max pooling windows of up to 3 x 3 pixels
// and LRN windows of 3 to 9 channels (half-widths 1-4).
bool LrnMaxPoolFusable(const LrnCrossParams& lp, const PoolParams& pp);

// y = MaxPool(Lrn(x)) and arg, each window's argmax (the pixel index iy * W + ix of its first
// maximum, as a float), without storing the normalised map or its denominator: x C x H x W x N,
// y and arg C x OH x OW x N. version 1 (a thread per window) or 2 (tiled through shared
// memory): the same bits, those of ops/lrn.cu's LRN followed by ops/pool.cu's max pool.
void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* arg, int c,
                          int h, int w, int n, int oh, int ow, const LrnCrossParams& lp,
                          const PoolParams& pp, int version);
// dx, the gradient of x, from x, the forward's arg and dy: the unfused backward's bits (pool
// backward, then the LRN's backward with its denominators recomputed).
void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* arg,
                           const float* dy, float* dx, int c, int h, int w, int n, int oh, int ow,
                           const LrnCrossParams& lp, const PoolParams& pp);
// The same with float or bf16 storage (xt: x and dx; yt: y and dy); the argmax is found on the
// FP32 normalised values, before y is rounded.
void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, float* arg, int c, int h, int w, int n, int oh, int ow,
                          const LrnCrossParams& lp, const PoolParams& pp, int version);
void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                           const float* arg, const void* dy, StorageType yt, void* dx, int c, int h,
                           int w, int n, int oh, int ow, const LrnCrossParams& lp,
                           const PoolParams& pp);

}  // namespace colonnade::cuda::dev
