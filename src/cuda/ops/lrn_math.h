// The LRN's device arithmetic (d^-beta, and the cross-channel denominator of a window held in
// registers), shared by its kernels (ops/lrn.cu) and by the LRN + max-pool fusion in dev/lrn_pool,
// which must round every value as they do. Device code: included by .cu files only.
#pragma once

#include "cuda/port.h"

namespace colonnade::cuda {

// d^-beta exactly as CpuOps computes it (beta = 0.75 without powf), so that both backends
// round alike: sqrtf and division are correctly rounded on the GPU (-prec-sqrt/-prec-div).
__device__ __forceinline__ float PowNegBeta(float d, float beta) {
  if (beta == 0.75f) return 1.0f / (sqrtf(d) * sqrtf(sqrtf(d)));
  return powf(d, -beta);
}

// The denominator k + alpha * sum of squares of a window held in registers (L values in
// channel order, zeros outside the group): every kernel that computes or recomputes a
// cross-channel denominator calls this, so all of them round it alike.
template <int L>
__device__ __forceinline__ float LrnRingDenom(const float* r, float k, float alpha) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < L; ++i) s += r[i] * r[i];
  return k + alpha * s;
}

}  // namespace colonnade::cuda
