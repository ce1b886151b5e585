// Launchers of the SGD update and of the step's scalars (ops/sgd.cu): raw device pointers, queued
// on ctx.stream.
#pragma once

#include <cstdint>
#include <vector>

#include "core/ops.h"
#include "core/ops/sgd.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

void SgdUpdateGpu(const DeviceContext& ctx, float* w, const float* grad, float* v, int64_t n,
                  const SgdParams& p);
// One tensor of SgdUpdateManyGpu: w, grad and v of n floats each, and its update's parameters.
struct SgdManyUpdate {
  float* w;
  const float* grad;
  float* v;
  int64_t n;
  SgdParams p;
};
// SgdUpdateGpu for every tensor of `updates`, in as few launches as the table allows (48 tensors
// each): bit for bit one SgdUpdateGpu per tensor.
void SgdUpdateManyGpu(const DeviceContext& ctx, const std::vector<SgdManyUpdate>& updates);
// out[0] = sum of w^2, out[1] = sum of grad^2 (n each), deterministic (Ops::SquaredNorms).
void SquaredNormsGpu(const DeviceContext& ctx, const float* w, const float* grad, int64_t n,
                     float* out);
// *out = v, queued on `stream` (a step graph's scalars, written before each replay).
void SetStepScalarsGpu(cudaStream_t stream, StepScalars* out, const StepScalars& v);

}  // namespace colonnade::cuda
