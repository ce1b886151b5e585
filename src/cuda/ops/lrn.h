// Launchers of the LRN family (ops/lrn.cu): raw device pointers, queued on ctx.stream.
#pragma once

#include "core/ops/lrn.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

void LrnCrossForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                        int hwn, const LrnCrossParams& p);
void LrnCrossBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                         const float* denom, const float* dy, float* dx, int c, int hwn,
                         const LrnCrossParams& p);
// The same with x and dx stored as xt, y and dy as yt (float or bf16); denom is float. Loads
// widen, the arithmetic is the float kernels' own, stores round to nearest even. denom may
// be null in both where LrnCrossRecomputesDenominator (window half-widths 1-4): the forward
// then stores none and the backward computes each again from x, with the forward's bits, so
// dx is the same.
bool LrnCrossRecomputesDenominator(const LrnCrossParams& p);
void LrnCrossForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                        StorageType yt, float* denom, int c, int hwn, const LrnCrossParams& p);
void LrnCrossBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, const void* y,
                         const float* denom, const void* dy, StorageType yt, void* dx, int c,
                         int hwn, const LrnCrossParams& p);
void LrnWithinForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                         int h, int w, int n, const LrnWithinParams& p);
void LrnWithinBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                          const float* denom, const float* dy, float* dx, int c, int h, int w,
                          int n, const LrnWithinParams& p);

}  // namespace colonnade::cuda
