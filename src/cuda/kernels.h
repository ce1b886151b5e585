// Launchers of the CUDA kernels (conv_kernels.cu, ops_kernels.cu), called by CudaOps
// (cuda_ops.cc) with raw device pointers. Everything is queued on ctx.stream.
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

// Sizes of one convolution: input C x H x W x N, output F x OH x OW x N.
struct ConvDims {
  int n, c, h, w;
  int f, oh, ow;
};

// Which implicit-GEMM tile a launch used (for benchmarks and tests of the dispatch).
struct ConvLaunchInfo {
  int bm = 0;        // rows of the block tile
  bool vec = false;  // float4 batch loads (N % 4 == 0)
  int splits = 1;    // split-K factor (backward filter)
  int version = 1;   // 1: ConvGemmKernel (general path), 2/3: ConvGemmKernelV2, 8/16-deep slices
};

// Forward/backward-data kernel version on the float4 path (batch a multiple of 4, aligned
// tensors): 0 picks per shape by timing them on first use (default; the results are
// bit-identical; autotune.h), 2 or 3 forces one (also COLONNADE_CONV_GEMM=v2|v3). The
// general path has one version, 1.
void SetConvGemmVersion(int version);

ConvLaunchInfo ConvForwardGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                              const float* x, const float* w, float* y);
ConvLaunchInfo ConvBackwardDataGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                                   const float* dy, const float* w, float* dx);
ConvLaunchInfo ConvBackwardFilterGpu(const DeviceContext& ctx, const ConvDims& d,
                                     const ConvParams& p, const float* x, const float* dy,
                                     float* dw);

// ---- tensor-core convolutions (conv_tc_kernels.cu) -------------------------------------------
// The same three implicit GEMMs as above (M = filters, N = output pixels x images with images
// innermost, K = input channels x kh x kw) on the tensor cores: bf16 operands with
// mma.sync m16n8k16 or tf32 operands with mma.sync m16n8k8, FP32 accumulators, FP32
// split-K reduction for backward filter. Activations and gradients may be stored as float
// (rounded to bf16 / tf32 on their way into the tensor cores) or bf16 (CHWN, same shapes);
// the filters are always the FP32 masters, rounded when they are arranged for a launch.
// Not bit-identical to the FP32 kernels: see src/cuda/TC_NOTES.md for the precision.
enum class MathMode { kFP32, kTF32, kBF16 };
enum class StorageType { kFloat, kBF16 };
const char* MathModeName(MathMode m);

struct TcInput {
  const void* data = nullptr;
  StorageType type = StorageType::kFloat;
};
struct TcOutput {
  void* data = nullptr;
  StorageType type = StorageType::kFloat;
};

// Operands of one tensor-core convolution. Forward: y = conv(x, w) (+ bias, ReLU).
// Backward data: dx = conv^T(dy, w). Backward filter: dw = corr(x, dy), FP32.
// All tensors CHWN with the shapes of ConvDims; w and dw F x C/G x KH x KW.
struct TcConvArgs {
  ConvDims dims{};
  ConvParams conv{};
  MathMode math = MathMode::kBF16;  // kTF32 or kBF16
  TcInput x;                        // forward, backward filter
  TcInput dy;                       // backward data, backward filter
  const float* w = nullptr;         // forward, backward data: FP32 master filters
  const float* bias = nullptr;      // forward epilogue: y[f] += bias[f] (null: none)
  bool relu = false;                // forward epilogue: y = max(y, 0) after the bias
  TcOutput y;                       // forward
  TcOutput dx;                      // backward data
  float* dw = nullptr;              // backward filter
  int fault = 0;  // tests only: 1 drops the first K slice of every tile (a wrong kernel)
};

// What a tensor-core launch chose (benchmarks and tests of the dispatch).
struct TcLaunchInfo {
  int bm = 0, bn = 0;  // block tile
  bool vec = false;    // 16-byte chunk loads (batch a multiple of the chunk, aligned)
  int stages = 0;      // shared-memory pipeline depth
  int splits = 1;      // split-K factor (backward filter)
  bool wgmma = false;  // the wgmma kernel ran (sm_90a), else mma.sync
};

// Block tile of the tensor-core kernels: 0 automatic (default), mma.sync 1: 128 x 128,
// 2: 64 x 128, 3: 128 x 256; wgmma (sm_90a; bf16 math on bf16 operands whose batch is a
// multiple of 8, the rest run the automatic mma.sync tile) 4: 128 x 128, 5: 64 x 256,
// 6: 128 x 256, 7: 128 x 128 in 3 stages with two blocks per multiprocessor (the automatic
// choice for GEMMs of few K slices; COLONNADE_TC_SHORTK) (also COLONNADE_TC_TILE=128x128|
// 64x128|128x256|wg128x128|wg64x256|wg128x256|wg128x128s3). Among the mma.sync tiles results
// differ only through the split-K factor of backward filter (FP32 summation order).
void SetTcTile(int tile);
// Whether the automatic choice uses the wgmma kernels (all three ops) where they apply: the
// default on a GPU (COLONNADE_TC_WGMMA=0 turns it off), off on the CPU emulator unless asked
// for (COLONNADE_TC_WGMMA=1).
void SetTcWgmma(bool on);
// Whether this build and device can run the wgmma kernels (built with CMAKE_CUDA_ARCHITECTURES
// holding 90a, compute capability 9.0; always on the emulator).
bool TcWgmmaAvailable();
// Whether the automatic choice uses them: enabled (SetTcWgmma, COLONNADE_TC_WGMMA) and available.
bool TcWgmmaEnabled();

TcLaunchInfo ConvForwardTc(const DeviceContext& ctx, const TcConvArgs& a);
TcLaunchInfo ConvBackwardDataTc(const DeviceContext& ctx, const TcConvArgs& a);
TcLaunchInfo ConvBackwardFilterTc(const DeviceContext& ctx, const TcConvArgs& a);

// float <-> bf16 (round to nearest even) on the device, for tests and benchmarks.
void FloatToBf16Gpu(const DeviceContext& ctx, const float* x, void* y, int64_t n);
void Bf16ToFloatGpu(const DeviceContext& ctx, const void* x, float* y, int64_t n);
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
