// The results family: a step's loss sum and top-1/top-5 counts added to running totals on the
// device (the totals and the counting rule: core/results.h). The shape rule; the CPU reference
// is in results.cc (CpuOps), the CUDA kernel in src/cuda/ops/results.cu.
#pragma once

#include "core/ops/softmax.h"
#include "core/results.h"
#include "core/tensor.h"

namespace colonnade::op_shapes {

// AccumulateResults: probs K x ... x N, labels and loss of N elements, totals of
// kResultTotalsFloats (core/results.h). Returns {K, N}.
SoftmaxDims Results(const Tensor& probs, const Tensor& labels, const Tensor& loss,
                    const Tensor& totals);

}  // namespace colonnade::op_shapes
