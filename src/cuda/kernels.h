// Launchers of the convolution kernels (conv_kernels.cu, conv_tc_kernels.cu) and what every
// kernel file shares (DeviceContext, StorageType), called by CudaOps with raw device pointers.
// Everything is queued on ctx.stream.
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

// ---- the other op families ------------------------------------------------------------------
// Their launchers are declared in cuda/ops/<family>.h beside their kernels (ops/<family>.cu);
// cuda_ops.h includes them all.

}  // namespace colonnade::cuda
