// dev/pool_backward: max-pool backward version 2, kept with its measurements (pool_backward.cu's
// header) beside the main path's version 3 (src/cuda/ops/pool.cu). Raw device pointers, queued
// on ctx.stream, as src/cuda/ops' launchers.
#pragma once

#include "core/ops/pool.h"
#include "cuda/kernels.h"

namespace colonnade::cuda::dev {

// dx from x, y, dy (x and dx stored as xt, y and dy as yt) with version 2's one kernel: a thread
// per input element over the windows containing it. Max pooling: the gradient of each window goes
// to its first maximum in row-major order; average pooling: dy / (clipped window size) to every
// pixel (the main path's AvgPoolBackwardKernel is this branch). The same bits as
// cuda::PoolBackwardGpu. Refuses max pooling with float x and bf16 y, as that does.
void PoolBackwardV2Gpu(const DeviceContext& ctx, const void* x, const void* y, const void* dy,
                       void* dx, StorageType xt, StorageType yt, int c, int h, int w, int n, int oh,
                       int ow, const PoolParams& pp);

}  // namespace colonnade::cuda::dev
