// Launchers of the softmax cross-entropy (ops/softmax.cu): raw device pointers, queued on
// ctx.stream.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace colonnade::cuda {

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n);
void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k, int n);

}  // namespace colonnade::cuda
