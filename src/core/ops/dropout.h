// The dropout family: parameters (the mask is a Philox function of the global element index,
// the same for every (dp, mp) layout) and the shape rule; the CPU reference is in dropout.cc
// (CpuOps), the CUDA kernel in src/cuda/ops/dropout.cu.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace colonnade {

// Dropout with inverted scaling: y = x * mask / (1 - p). The mask of an element is a
// pure function of (seed, step, global element index) drawn with Philox, so it is the
// same whatever (dp, mp) layout computes it. The global element index of local element
// (c, h, w, n) is ((c + channel_offset) * H + h) * W + w) * global_batch + n + image_offset,
// with channels counted in the full (unsplit) layer.
struct DropoutParams {
  float p = 0.5f;
  uint64_t seed = 0;  // already mixed with the layer's identity
  int64_t step = 0;
  // A CUDA-graph step (StepScalars): the kernel reads the step from here instead of `step`
  // (the same value, uploaded before each replay). Null: `step`. The CPU ignores it.
  const int64_t* step_on_device = nullptr;
  int64_t channel_offset = 0;
  int64_t image_offset = 0;
  int64_t global_batch = 0;  // 0 means the local batch
};

namespace op_shapes {
// DropoutForward: x CHWN, y and mask shaped as x, and the local images
// [image_offset, image_offset + N) inside the global batch.
void Dropout(const Tensor& x, const Tensor& y, const Tensor& mask, const DropoutParams& p);
}  // namespace op_shapes

}  // namespace colonnade
