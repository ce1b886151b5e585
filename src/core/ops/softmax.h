// The loss family: softmax with cross-entropy over the classes of each image. The shape rule;
// the CPU reference is in softmax.cc (CpuOps), the CUDA kernels in src/cuda/ops/softmax.cu.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace colonnade::op_shapes {

// Softmax cross-entropy: scores (logits, or probs) K x ... x N with the batch last,
// labels of N elements, `same` (probs, or dlogits) shaped as scores, loss (forward only;
// may be null) of N elements. Returns {K, N}.
struct SoftmaxDims {
  int64_t classes, batch;
};
SoftmaxDims Softmax(const Tensor& scores, const Tensor& labels, const Tensor& same,
                    const Tensor* loss, const char* what);

}  // namespace colonnade::op_shapes

namespace colonnade {

// The gradient's targets of label smoothing eps over K classes, in float, the same on every
// backend: off = eps / K on every class, on = (1 - eps) + off on the label (PyTorch's
// CrossEntropyLoss(label_smoothing=eps)).
struct SmoothedTargets {
  float off, on;
};
inline SmoothedTargets SmoothTargets(float eps, int64_t classes) {
  const float off = eps / static_cast<float>(classes);
  return {off, (1.0f - eps) + off};
}

}  // namespace colonnade
