// Launchers of the batch-norm family (ops/batchnorm.cu): raw device pointers, queued on
// ctx.stream.
#pragma once

#include <cstdint>

#include "core/ops/batchnorm.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

// relu: y = max(batch norm, 0) (Ops::BatchNorm* with relu); relu_y (backward, may be null): dy
// passes that ReLU's mask first.
void BatchNormForwardTrainGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                              const float* beta, float* y, float* running_mean, float* running_var,
                              float* save_mean, float* save_invstd, float* save_scale, int c,
                              int64_t inner, const BatchNormParams& p, bool relu);
void BatchNormApplyGpu(const DeviceContext& ctx, const float* x, const float* mean,
                       const float* scale, const float* shift, float* y, int c, int64_t inner,
                       bool relu);
void BatchNormForwardInferGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                              const float* beta, const float* running_mean,
                              const float* running_var, float* y, int c, int64_t inner,
                              const BatchNormParams& p);
void BatchNormBackwardGpu(const DeviceContext& ctx, const float* x, const float* gamma,
                          const float* save_mean, const float* save_invstd, const float* relu_y,
                          const float* dy, float* dx, float* dgamma, float* dbeta, int c,
                          int64_t inner);
// The same with x and dx stored as xt, y, dy and relu_y as yt; gamma, beta, the statistics and
// dgamma, dbeta are float, and the sums (double) are taken over the widened values. Training
// forward with tile_stats (not null): the statistics from the convolution that wrote x
// (TcConvArgs::stats, `tiles` column tiles of per-channel FP32 sum and sum of squares) instead
// of two passes over x; the variance is then sum of squares / M - mean^2 (docs/PRECISION.md).
void BatchNormForwardTrainGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, void* y, StorageType yt,
                              float* running_mean, float* running_var, float* save_mean,
                              float* save_invstd, float* save_scale, int c, int64_t inner,
                              const BatchNormParams& p, bool relu,
                              const float* tile_stats = nullptr, int tiles = 0,
                              bool write_y = true);
void BatchNormApplyGpu(const DeviceContext& ctx, const void* x, StorageType xt, const float* mean,
                       const float* scale, const float* shift, void* y, StorageType yt, int c,
                       int64_t inner, bool relu);
// y = a' + b' (ReLU with relu), a' = BnApply(a, affine[0..2] = mean, scale, shift) rounded to
// t where affine[0] is not null, else a (b likewise); a, b and y stored as t. AddNormalized.
void BatchNormAddGpu(const DeviceContext& ctx, const void* a, const float* const (&a_affine)[3],
                     const void* b, const float* const (&b_affine)[3], void* y, StorageType t,
                     int c, int64_t inner, bool relu);
void BatchNormForwardInferGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, const float* running_mean,
                              const float* running_var, void* y, StorageType yt, int c,
                              int64_t inner, const BatchNormParams& p);
// given (may be null): the sums of dy and dy * xhat that ReluBackwardBnSumsGpu left for this
// x and dy; used, and the first pass skipped, when their layout is the one this launch would
// take (returns whether it did).
// How the batch-norm backward reduces a C x inner tensor: the lanes its tensors' alignment
// allows (1 or 4) and the splits per channel (BnSplits).
struct BnSumsLayout {
  int lanes = 1;
  int splits = 1;
  int64_t chunk = 1;
  bool operator==(const BnSumsLayout& o) const {
    return lanes == o.lanes && splits == o.splits && chunk == o.chunk;
  }
};
bool BatchNormBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                          const float* gamma, const float* save_mean, const float* save_invstd,
                          const void* relu_y, const void* dy, StorageType yt, void* dx,
                          float* dgamma, float* dbeta, int c, int64_t inner,
                          const float* mask_scale = nullptr, const float* mask_shift = nullptr,
                          const double* given = nullptr,
                          const BnSumsLayout* given_layout = nullptr);

// The layout for C x inner tensors at these addresses.
BnSumsLayout BnBackwardLayout(const DeviceContext& ctx, int c, int64_t inner,
                              std::initializer_list<const void*> tensors, StorageType t);
// dx = dy where y > 0, else 0 (ReluBackward; y, dy, dx stored as t), and in the same pass, for
// k < operands, the first pass of BatchNormBackwardGpu over x[k] (stored as t) and dy = dx as
// stored: part[k] (C x layout.splits x 2 doubles) as that pass would leave them.
void ReluBackwardBnSumsGpu(const DeviceContext& ctx, const BnSumsLayout& layout, const void* y,
                           const void* dy, void* dx, StorageType t, int c, int64_t inner,
                           int operands, const void* const (&x)[2], const float* const (&mean)[2],
                           const float* const (&invstd)[2], double* const (&part)[2]);

}  // namespace colonnade::cuda
