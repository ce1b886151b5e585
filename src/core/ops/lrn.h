// The local response normalisation family: across channels (AlexNet's LRN) and within a map
// (cuda-convnet's rnorm). Parameters, the constants every backend derives from them alike, and
// the shape rules; the CPU reference is in lrn.cc (CpuOps), the CUDA kernels in
// src/cuda/ops/lrn.cu.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace colonnade {

// Local response normalisation across channels:
//   b_c = a_c / (k + alpha' * sum_{c' in window(c)} a_c'^2)^beta
// with window(c) = [c - size/2, c + size/2] (size is odd) clipped to the channel's group (groups >
// 1 keeps AlexNet's two columns independent), and alpha' = alpha (Krizhevsky et al. 2012: k = 2,
// alpha = 1e-4, beta = 0.75, size = 5) or alpha/size when alpha_over_size is set (cuda-convnet and
// PyTorch's convention, usually with k = 1).
struct LrnCrossParams {
  int size = 5;
  float alpha = 1e-4f;
  float beta = 0.75f;
  float k = 2.0f;
  bool alpha_over_size = false;
  int groups = 1;
};
// alpha' above, and the backward's factor 2 * alpha' * beta, rounded as every backend rounds them.
inline float LrnCrossAlpha(const LrnCrossParams& p) {
  return p.alpha_over_size ? p.alpha / static_cast<float>(p.size) : p.alpha;
}
inline float LrnCrossGradScale(const LrnCrossParams& p) { return 2.0f * LrnCrossAlpha(p) * p.beta; }

// Response normalisation within a map (cuda-convnet's `rnorm`):
//   b = u / (k + (alpha / size^2) * sum_{size x size window} u^2)^beta
// The window of pixel (y, x) is [y - size/2, y - size/2 + size) (likewise for x), clipped
// to the image.
struct LrnWithinParams {
  int size = 3;
  float alpha = 5e-5f;
  float beta = 0.75f;
  float k = 1.0f;
};

namespace op_shapes {
// LRN across channels: x CHWN, size >= 1, groups >= 1 dividing the channels; every tensor
// in `same` (y, denom, dy, dx) shaped as x.
void LrnCross(const Tensor& x, const LrnCrossParams& p, std::initializer_list<const Tensor*> same,
              const char* what);
// LRN within a map: x CHWN, size >= 1; every tensor in `same` shaped as x.
void LrnWithin(const Tensor& x, const LrnWithinParams& p, std::initializer_list<const Tensor*> same,
               const char* what);
}  // namespace op_shapes

}  // namespace colonnade
