// The convolutions of the CUDA backend: forward, backward data and backward filter over CHWN
// tensors as implicit GEMMs (per group g, M = filters, N = output pixels x images with images
// innermost, K = input channels x kh x kw; no im2col buffer), in three families of kernels:
//
//   simt.cu   FP32 on the CUDA cores, bit-identical across its configurations
//   mma.cu    the tensor cores through mma.sync: bf16 (m16n8k16) or tf32 (m16n8k8) operands
//   wgmma.cu  the tensor cores through Hopper's wgmma (sm_90a): bf16 operands in bf16 storage
//
// Every configuration of every family is named in one catalogue (catalogue.h: its block tile
// and pipeline depth, the problems it runs); one selection function per problem picks one
// for each launch, and COLONNADE_CONV_CONFIG (SetConvConfig) overrides the choice. What the
// families share (index arithmetic, epilogues, the split-K reduction, the size checks) is in
// gather.h, tensor_core.h and common.h. Everything is queued on ctx.stream.
#pragma once

#include <cstdint>

#include "core/ops.h"
#include "cuda/conv/catalogue.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

// Sizes of one convolution: input C x H x W x N, output F x OH x OW x N.
struct ConvDims {
  int n, c, h, w;
  int f, oh, ow;
};

// What a launch ran (benchmarks and tests of the dispatch). Backward data reports its last
// stride phase's GEMM.
struct ConvLaunchInfo {
  const char* config = "";  // the catalogue's name of the configuration
  int bm = 0, bn = 0;       // block tile
  int stages = 0;           // shared-memory pipeline depth
  bool vec = false;         // vector loads of the batch (SIMT: float4, N % 4 == 0; tensor cores:
                            // 16-byte chunks, N a multiple of the chunk; tensors aligned)
  int splits = 1;           // split-K factor (backward filter)
  bool wgmma = false;       // a wgmma configuration ran
  int stats_tiles = 0;      // forward with TcConvArgs::stats: the column tiles whose channel sums
                            // it wrote (0: none written; the kernel could not stage its tile)
  bool masked = false;      // backward data with TcConvArgs::dx_mask: dx was stored masked (else
                            // the caller masks it: a wgmma kernel with a float dx)
};

// ---- FP32 (simt.cu): bitwise the same whichever configuration runs -------------------------
ConvLaunchInfo ConvForwardGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                              const float* x, const float* w, float* y);
ConvLaunchInfo ConvBackwardDataGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                                   const float* dy, const float* w, float* dx);
ConvLaunchInfo ConvBackwardFilterGpu(const DeviceContext& ctx, const ConvDims& d,
                                     const ConvParams& p, const float* x, const float* dy,
                                     float* dw);

// ---- tensor cores (mma.cu, wgmma.cu; driver tensor_core.cu) ---------------------------------
// bf16 or tf32 operands, FP32 accumulators, FP32 split-K reduction for backward filter.
// Activations and gradients may be stored as float (rounded to bf16 / tf32 on their way into
// the tensor cores) or bf16 (CHWN, same shapes); the filters are always the FP32 masters,
// rounded when they are arranged for a launch. Not bit-identical to the FP32 kernels:
// src/cuda/TC_NOTES.md has the precision.
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
  // Forward (and backward data, below), may be null: room for StatsCapacity(dims) floats, where a
  // wgmma configuration with a staged epilogue leaves each column tile's per-channel sum and sum of
  // squares of y as stored (TcGemmParams::stats; ConvLaunchInfo::stats_tiles says how many tiles, 0
  // if none).
  float* stats = nullptr;
  // Backward data, may be null: dx's shape and storage type; dx is stored masked by it (0
  // where the mask is not above 0: the ReLU that wrote it, Ops::ConvLayerBackward's relu_dx).
  // stats then serves backward data too, as for the forward (dx's per-channel sums of the
  // masked values, for the bias gradient of the layer that wrote the mask), where one GEMM
  // writes the whole of dx (stride 1).
  TcInput dx_mask;
  // Backward data: dx holds a gradient already, and the product is added to it: dx = dx +
  // (the masked product rounded to dx's storage), the bits of storing it and an Add after
  // (Ops::ConvLayerBackward's add_dx). Only where the GEMMs write the whole of dx
  // (BackwardDataCoversDx); the stats are then left out.
  bool dx_add = false;
  int fault = 0;  // tests only: 1 drops the first K slice of every tile (a wrong kernel)
};
// Floats TcConvArgs::stats must hold for the forward of dims: 2 per channel and column tile of
// at least 128 columns.
int64_t StatsCapacity(const ConvDims& d);
int64_t StatsCapacityDx(const ConvDims& d);  // the same for backward data's dx

ConvLaunchInfo ConvForwardTc(const DeviceContext& ctx, const TcConvArgs& a);
ConvLaunchInfo ConvBackwardDataTc(const DeviceContext& ctx, const TcConvArgs& a);
ConvLaunchInfo ConvBackwardFilterTc(const DeviceContext& ctx, const TcConvArgs& a);
// Whether backward data's GEMMs (one per stride phase) write every element of dx: false
// where some phase has no tap (a 1 x 1 convolution of stride 2), whose pixels are zeroed first.
bool BackwardDataCoversDx(const ConvDims& d, const ConvParams& p);

// Whether this build and device can run the wgmma configurations (built with
// CMAKE_CUDA_ARCHITECTURES holding 90a, compute capability 9.0; always on the emulator).
bool TcWgmmaAvailable();
// Whether the automatic choice uses them where they apply: available, and not turned off
// (COLONNADE_CONV_CONFIG=mma or an mma configuration) nor, on the CPU emulator, left off
// (there only COLONNADE_CONV_CONFIG=wgmma or a wgmma configuration turns them on: an emulated
// wgmma costs 128 fibers' scalar products).
bool TcWgmmaEnabled();

// float <-> bf16 (round to nearest even) on the device: the tensor-core operands' copies
// (CudaOps::TcOperand), tests and benchmarks.
void FloatToBf16Gpu(const DeviceContext& ctx, const float* x, void* y, int64_t n);
void Bf16ToFloatGpu(const DeviceContext& ctx, const void* x, float* y, int64_t n);

// Deprecated: SetConvConfig. Kept only for tests/cuda/cuda_ops_test.cc's ConvTest until it
// moves to SetConvConfig: 0 restores the automatic choice, 2 or 3 keeps the SIMT forward and
// backward-data row tile automatic and forces the 8-deep (2) or 16-deep (3) 3-stage slices
// (simt_<BM>x128x8_3 or simt_<BM>x128x16_3).
void SetConvGemmVersion(int version);

}  // namespace colonnade::cuda
