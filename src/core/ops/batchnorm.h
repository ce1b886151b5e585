// The batch-normalisation family (per channel over H, W and N), with the ReLU it may apply in
// the same pass (Net fuses a batch norm whose output the next layer rectifies in place).
// Parameters and the shape rule; the CPU reference is in batchnorm.cc (CpuOps), the CUDA kernels
// in src/cuda/ops/batchnorm.cu.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace colonnade {

struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch
};

namespace op_shapes {
// Batch norm: x CHWN, every tensor in `same` (y, or dy and dx) shaped as x, every tensor in
// `per_channel` (gamma, beta, running and saved statistics, their gradients) of C elements.
void BatchNorm(const Tensor& x, std::initializer_list<const Tensor*> same,
               std::initializer_list<const Tensor*> per_channel, const char* what);
}  // namespace op_shapes

}  // namespace colonnade
