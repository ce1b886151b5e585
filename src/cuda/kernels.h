// What every kernel file shares (DeviceContext, StorageType); the launchers are declared
// by their families (conv/conv.h, ops/<family>.h), called by CudaOps with raw device
// pointers. Everything is queued on ctx.stream.
#pragma once

#include <cstdint>

#include "core/ops.h"
#include "cuda/caching_allocator.h"
#include "cuda/port.h"

namespace colonnade::cuda {

struct DeviceContext {
  cudaStream_t stream = nullptr;
  int sm_count = 132;
  CachingAllocator* alloc = nullptr;
};

// The storage of a tensor's elements (bf16 activation storage, docs/PRECISION.md) and the
// arithmetic of the convolutions (src/cuda/conv/conv.h has their launchers).
enum class MathMode { kFP32, kTF32, kBF16 };
enum class StorageType { kFloat, kBF16 };
const char* MathModeName(MathMode m);

// A convolution's output gradient (rows x inner: C x H*W*N) into its bf16 operand in one
// pass: g = dy, or g = mask > 0 ? dy : 0 with a mask (a fused ReLU's backward, mask = its y);
// out = bf16(g) (round to nearest even); with row_sums, row_sums[r] = the row's sum of g
// (double, rounded once: the bias gradient, as RowSumGpu of g up to summation order).
void GradToBf16Gpu(const DeviceContext& ctx, const float* dy, const float* mask, void* out,
                   float* row_sums, int64_t rows, int64_t inner);
// The same with dy and mask stored as `t` (float or bf16: bf16 activation storage). With
// bf16, out may be null when there is no mask (dy is the operand already): sums only.
void GradToBf16Gpu(const DeviceContext& ctx, const void* dy, const void* mask, StorageType t,
                   void* out, float* row_sums, int64_t rows, int64_t inner);

// ---- the other op families ------------------------------------------------------------------
// Their launchers are declared in cuda/ops/<family>.h beside their kernels (ops/<family>.cu);
// cuda_ops.h includes them all.

}  // namespace colonnade::cuda
