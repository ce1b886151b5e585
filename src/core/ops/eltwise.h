// The element-wise family: fill, copy, axpby, sums (with the ReLU Net fuses into a residual
// sum), ReLU, bias, channel blocks (concatenation) and the whole-tensor sum. The shape rules
// beyond "same size" (core/op_shapes.h); the CPU reference is in eltwise.cc (CpuOps), the CUDA
// kernels in src/cuda/ops/eltwise.cu.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace colonnade::op_shapes {

// CopyChannelsIn/Out: `part` (C1 x H x W x N) is channels [c0, c0 + C1) of `whole`.
void CopyChannels(const Tensor& part, int64_t c0, const Tensor& whole, const char* what);

// AddBias / BiasBackward: b has one element per channel (first dimension) of y.
void Bias(const Tensor& y, const Tensor& b, const char* what);

}  // namespace colonnade::op_shapes
