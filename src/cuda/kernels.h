// Launchers of the CUDA kernels (ops_kernels.cu; the convolutions' are in conv/conv.h),
// called by CudaOps (cuda_ops.cc) with raw device pointers. Everything is queued on
// ctx.stream.
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

// ---- element-wise and reductions (ops_kernels.cu) -------------------------------------------
void FillGpu(const DeviceContext& ctx, float* y, int64_t n, float v);
// Storage-typed launchers (bf16 activation storage): each tensor stored as float or bf16 as its
// StorageType says; loads widen bf16 to float, the arithmetic is the float kernel's own, stores
// round to nearest even. With float storage they are the float launchers (which call them) bit
// for bit. Fill: every element = v (bf16: v rounded once).
void FillGpu(const DeviceContext& ctx, void* y, StorageType t, int64_t n, float v);
void AxpbyGpu(const DeviceContext& ctx, float alpha, const float* x, float beta, float* y,
              int64_t n);
void AddGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// y = max(a + b, 0) in one pass (Ops::AddRelu).
void AddReluGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// The same with a, b, y each float or bf16 (y may alias a or b of its own type).
void AddGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n);
void AddReluGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b,
                StorageType bt, void* y, StorageType yt, int64_t n);
double SumGpu(const DeviceContext& ctx, const float* x, int64_t n);  // synchronises
// One step's loss sum and top-1/top-5 counts added to the ResultTotals at `totals`
// (core/results.h, Ops::AccumulateResults): probs K x N, labels and loss N.
void AccumulateResultsGpu(const DeviceContext& ctx, const float* probs, const float* labels,
                          const float* loss, int64_t k, int64_t n, int64_t step,
                          const int64_t* step_on_device, void* totals);
// y[c * inner + i] += b[c].
void AddBiasGpu(const DeviceContext& ctx, float* y, const float* b, int64_t channels,
                int64_t inner);
// out[r] = sum_i x[r * inner + i] (deterministic two-pass reduction).
void RowSumGpu(const DeviceContext& ctx, const float* x, float* out, int64_t rows, int64_t inner);

void PoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int h, int w, int n,
                    int oh, int ow, const PoolParams& p);
// Max-pool backward version: 0 picks per shape by timing (default), 2 or 3 forces one.
void SetPoolBackwardVersion(int version);
void PoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* y, const float* dy,
                     float* dx, int c, int h, int w, int n, int oh, int ow, const PoolParams& p);
// The same with each CHWN tensor stored as float or bf16 (bf16 activation storage,
// docs/PRECISION.md): xt is the storage of x and dx, yt of y and dy. Loads widen bf16 to
// float, stores round to nearest even, and the arithmetic is the float kernels' own: with
// float storage these are the float launchers above (which call them) bit for bit; with
// bf16 they give the float kernels' results on the widened inputs, rounded once at the
// store. Max-pool backward refuses xt float with yt bf16 (a rounded maximum no longer
// equals its pixel, so the argmax could not be found again; Net never binds it).
void PoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int c, int h, int w, int n, int oh, int ow,
                    const PoolParams& p);
void PoolBackwardGpu(const DeviceContext& ctx, const void* x, const void* y, const void* dy,
                     void* dx, StorageType xt, StorageType yt, int c, int h, int w, int n, int oh,
                     int ow, const PoolParams& p);
// Max pooling that keeps a record for its backward (windows of at most 256 pixels,
// MaxPoolRecordFits): the forward also writes each window's argmax, the offset of its first
// maximum in row-major order within the unclipped window, as a bf16 (exact: below 256; rec
// has y's shape, 2 bytes an element), and the backward routes dy to those pixels (a gather
// per input pixel over its windows in (oy, ox) order, as PoolBackwardGpu's version 3)
// without reading x or y: y and dx are bit for bit those of PoolForwardGpu and
// PoolBackwardGpu.
bool MaxPoolRecordFits(const PoolParams& p);
void MaxPoolForwardArgGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, void* rec, int c, int h, int w, int n, int oh, int ow,
                          const PoolParams& p);
void MaxPoolBackwardArgGpu(const DeviceContext& ctx, const void* rec, const void* dy,
                           StorageType yt, void* dx, StorageType xt, int c, int h, int w, int n,
                           int oh, int ow, const PoolParams& p);
void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int hw,
                             int n);
void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const float* dy, float* dx, int c, int hw,
                              int n);
// The same with x and dx stored as xt, y and dy as yt (the double sum from the widened x).
void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                             StorageType yt, int c, int hw, int n);
void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const void* dy, StorageType yt, void* dx,
                              StorageType xt, int c, int hw, int n);

void LrnCrossForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                        int hwn, const LrnCrossParams& p);
void LrnCrossBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                         const float* denom, const float* dy, float* dx, int c, int hwn,
                         const LrnCrossParams& p);
// The same with x and dx stored as xt, y and dy as yt (float or bf16); denom is float. Loads
// widen, the arithmetic is the float kernels' own, stores round to nearest even. denom may
// be null in both where LrnCrossRecomputesDenominator (window half-widths 1-4): the forward
// then stores none and the backward computes each again from x, with the forward's bits, so
// dx is the same.
bool LrnCrossRecomputesDenominator(const LrnCrossParams& p);
void LrnCrossForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                        StorageType yt, float* denom, int c, int hwn, const LrnCrossParams& p);
void LrnCrossBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, const void* y,
                         const float* denom, const void* dy, StorageType yt, void* dx, int c,
                         int hwn, const LrnCrossParams& p);
// Cross-channel LRN then max pooling in one pass each way (Ops::LrnMaxPoolForward): for
// pooling windows of up to 3 x 3 pixels and LRN windows of up to 9 channels (Fusable says
// whether the launchers take these parameters). arg: C x OH x OW x N, each window's argmax.
bool LrnMaxPoolFusable(const LrnCrossParams& lp, const PoolParams& pp);
// Forward version: 0 picks per shape by timing (default), 1 (per window) or 2 (tiled)
// forces one; both give the same bits.
void SetLrnMaxPoolForwardVersion(int version);
void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* arg, int c,
                          int h, int w, int n, int oh, int ow, const LrnCrossParams& lp,
                          const PoolParams& pp);
void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* arg,
                           const float* dy, float* dx, int c, int h, int w, int n, int oh, int ow,
                           const LrnCrossParams& lp, const PoolParams& pp);
// The same with float or bf16 storage (xt: x and dx; yt: y and dy), as PoolForwardGpu
// above; the argmax is found on the FP32 normalised values, before y is rounded.
void LrnMaxPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, float* arg, int c, int h, int w, int n, int oh, int ow,
                          const LrnCrossParams& lp, const PoolParams& pp);
void LrnMaxPoolBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                           const float* arg, const void* dy, StorageType yt, void* dx, int c, int h,
                           int w, int n, int oh, int ow, const LrnCrossParams& lp,
                           const PoolParams& pp);
void LrnWithinForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* denom, int c,
                         int h, int w, int n, const LrnWithinParams& p);
void LrnWithinBackwardGpu(const DeviceContext& ctx, const float* x, const float* y,
                          const float* denom, const float* dy, float* dx, int c, int h, int w,
                          int n, const LrnWithinParams& p);

// relu: y = max(batch norm, 0) (Ops::BatchNormRelu*); relu_y (backward, may be null): dy
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
// dgamma, dbeta are float, and the sums (double) are taken over the widened values.
void BatchNormForwardTrainGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, void* y, StorageType yt,
                              float* running_mean, float* running_var, float* save_mean,
                              float* save_invstd, float* save_scale, int c, int64_t inner,
                              const BatchNormParams& p, bool relu);
void BatchNormApplyGpu(const DeviceContext& ctx, const void* x, StorageType xt, const float* mean,
                       const float* scale, const float* shift, void* y, StorageType yt, int c,
                       int64_t inner, bool relu);
void BatchNormForwardInferGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                              const float* gamma, const float* beta, const float* running_mean,
                              const float* running_var, void* y, StorageType yt, int c,
                              int64_t inner, const BatchNormParams& p);
void BatchNormBackwardGpu(const DeviceContext& ctx, const void* x, StorageType xt,
                          const float* gamma, const float* save_mean, const float* save_invstd,
                          const void* relu_y, const void* dy, StorageType yt, void* dx,
                          float* dgamma, float* dbeta, int c, int64_t inner);

void ReluForwardGpu(const DeviceContext& ctx, const float* x, float* y, int64_t n);
void ReluBackwardGpu(const DeviceContext& ctx, const float* y, const float* dy, float* dx,
                     int64_t n);
// The same with storage types: forward x xt, y yt (in place: the same type); backward y and dy
// yt, dx xt. Quads (float4, 8 bytes of bf16) when every pointer is aligned to 4 of its elements.
void ReluForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int64_t n);
void ReluBackwardGpu(const DeviceContext& ctx, const void* y, const void* dy, StorageType yt,
                     void* dx, StorageType xt, int64_t n);
// Element (c, h, w, n) of a C x H x W x N tensor; see DropoutParams for the global index.
void DropoutForwardGpu(const DeviceContext& ctx, const float* x, float* y, float* mask, int c,
                       int h, int w, int n, const DropoutParams& p);
// The same with x stored as xt, y as yt; the mask is float and the same whatever the storage.
void DropoutForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                       StorageType yt, float* mask, int c, int h, int w, int n,
                       const DropoutParams& p);
void MulGpu(const DeviceContext& ctx, const float* a, const float* b, float* y, int64_t n);
// The same with a, b, y each float or bf16 (y may alias a or b of its own type): dropout's
// backward, dx = dy * mask with a float mask.
void MulGpu(const DeviceContext& ctx, const void* a, StorageType at, const void* b, StorageType bt,
            void* y, StorageType yt, int64_t n);

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n);
void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k, int n);
void SgdUpdateGpu(const DeviceContext& ctx, float* w, const float* grad, float* v, int64_t n,
                  const SgdParams& p);
// *out = v, queued on `stream` (a step graph's scalars, written before each replay).
void SetStepScalarsGpu(cudaStream_t stream, StepScalars* out, const StepScalars& v);

}  // namespace colonnade::cuda
