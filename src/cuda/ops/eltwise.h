// Launchers of the element-wise family (ops/eltwise.cu): raw device pointers, queued on
// ctx.stream. Storage-typed launchers (bf16 activation storage): each tensor stored as float or
// bf16 as its StorageType says; loads widen bf16 to float, the arithmetic is the float kernel's
// own, stores round to nearest even. With float storage they are the float launchers (which
// call them) bit for bit.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace colonnade::cuda {

void FillGpu(const DeviceContext& ctx, float* y, int64_t n, float v);
// Fill: every element = v (bf16: v rounded once).
void FillGpu(const DeviceContext& ctx, void* y, StorageType t, int64_t n, float v);
void AxpbyGpu(const DeviceContext& ctx, float alpha, const float* x, float beta, float* y,
              int64_t n);
void AddGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// y = max(a + b, 0) in one pass (Ops::Add with relu).
void AddReluGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// The same with a, b, y each float or bf16 (y may alias a or b of its own type).
void AddGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n);
void AddReluGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b,
                StorageType bt, void* y, StorageType yt, int64_t n);
double SumGpu(const DeviceContext& ctx, const float* x, int64_t n);  // synchronises
// y[c * inner + i] += b[c].
void AddBiasGpu(const DeviceContext& ctx, float* y, const float* b, int64_t channels,
                int64_t inner);
// out[c] = sum over tiles t of sums[(t * channels + c) * 2] (the tile sums of a tensor-core
// epilogue, TcConvArgs::stats: a bias gradient; deterministic).
void TileSumsGpu(const DeviceContext& ctx, const float* sums, int tiles, float* out,
                 int64_t channels);
// out[r] = sum_i x[r * inner + i] (deterministic two-pass reduction).
void RowSumGpu(const DeviceContext& ctx, const float* x, float* out, int64_t rows, int64_t inner);
// (GradToBf16Gpu, the tensor-core convolutions' gradient operand, is declared in kernels.h with
// them and defined in ops/eltwise.cu with the row sums it shares.)

void ReluForwardGpu(const DeviceContext& ctx, const float* x, float* y, int64_t n);
void ReluBackwardGpu(const DeviceContext& ctx, const float* y, const float* dy, float* dx,
                     int64_t n);
// The same with storage types: forward x xt, y yt (in place: the same type); backward y and dy
// yt, dx xt. Quads (float4, 8 bytes of bf16) when every pointer is aligned to 4 of its elements.
void ReluForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int64_t n);
// dx2 (not null): a second gradient written with the same values in the same pass.
void ReluBackwardGpu(const DeviceContext& ctx, const void* y, const void* dy, StorageType yt,
                     void* dx, StorageType xt, int64_t n, void* dx2 = nullptr);
void MulGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// The same with a, b, y each float or bf16 (y may alias a or b of its own type): dropout's
// backward, dx = dy * mask with a float mask.
void MulGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n);

}  // namespace colonnade::cuda
