// Launchers of the dropout family (ops/dropout.cu): raw device pointers, queued on ctx.stream.
#pragma once

#include <cstdint>

#include "core/ops/dropout.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

// Element (c, h, w, n) of a C x H x W x N tensor; see DropoutParams for the global index.
void DropoutForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* mask, int c,
                       int h, int w, int n, const DropoutParams& p);
// The same with x stored as xt, y as yt; the mask is float and the same whatever the storage.
void DropoutForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                       StorageType yt, float* mask, int c, int h, int w, int n,
                       const DropoutParams& p);

}  // namespace colonnade::cuda
