// Launchers of the softmax cross-entropy (ops/softmax.cu): raw device pointers, queued on
// ctx.stream; label_smoothing 0 is the plain loss (Ops::SoftmaxCrossEntropyForward).
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace colonnade::cuda {

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n,
                                   float label_smoothing);
void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k, int n,
                                    float label_smoothing);

}  // namespace colonnade::cuda
