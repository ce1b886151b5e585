// What the tensor-core families (mma.cu, wgmma.cu) and their driver (tensor_core.cu) share:
// the kernels' parameter blocks, the epilogues that store a thread's accumulators (the
// mma.sync m16n8 C layout, which wgmma's accumulators repeat, so both families end in the
// same code), backward filter's gather of x, and the families' launchers. Internal to
// src/cuda/conv.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/conv/catalogue.h"
#include "cuda/conv/common.h"
#include "cuda/conv/gather.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda::conv {

// Forward and each stride phase of backward data: out[m][j] = sum_k A[m][k] B[k][j].
struct TcGemmParams : GemmGeometry {
  const void* in;     // gathered operand: (G*cg) x h x w x n, CHWN (x, or dy for bwd data)
  const void* at;     // G x mp x kp filter operand (bf16, or tf32-rounded float), K contiguous
  void* out;          // (G*m) x out_h x out_w x n, CHWN
  const float* bias;  // G*m biases added in the epilogue, or null
  int relu;           // 1: max(., 0) in the epilogue (after the bias)
  int pair_out;       // 1: output columns j, j+1 (j even) are adjacent and 2-element aligned
  // wgmma: 1 when the output and its rows are 16-byte aligned and a 16-byte chunk of columns
  // lands in one run of the output (plain columns with j, or a stride phase's pixels with n,
  // filling whole chunks): the tile then leaves through shared memory in whole 16-byte chunks
  // of each row (StoreTileStaged) instead of the accumulator layout's scattered 4-byte pairs.
  int staged;
  // Staged tiles only, may be null: stats[(tile_x * G*m + g*m + row) * 2 + {0, 1}] = the sum
  // and the sum of squares (FP32, in column order) of the values this column tile stored in
  // output row row of group g, as stored (after bias, ReLU and rounding to TOut): the
  // per-channel partial sums of a batch norm reading this output (BnStatsFromTiles).
  float* stats;
  // Backward data, may be null: out's layout and storage; an output value is stored where
  // mask's value at its place is above 0, else 0 (the ReLU that wrote the mask, Ops::
  // ConvLayerBackward's relu_dx). Before the stats, which sum the masked values.
  const void* mask;
  // Backward data: 1 adds each value, after the mask and rounded to TOut, to out's value there
  // (AddStored; TcConvArgs::dx_add), before the stats.
  int add;
  int groups;  // G
  // 1: at is in (ky, kx, c) K order, each tap's channels padded to cblocks slices of 64: TMA
  // tiles on a convolution that is not a plain GEMM (n % 64 == 0; wgmma.cu, IssueGemmB), and
  // cp.async wgmma tiles where cg fills whole slices (cblocks = cg / 64; WgmmaGemmKernel).
  int tap_boxes, cblocks;
  int fault;  // tests: 1 skips the first K slice (of every tile)
};

// Backward filter (ksplit a multiple of the configuration's K slice).
struct TcWgradParams : WgradGeometry {
  const void* x;   // (G*cg) x h x w x n, storage TX
  const void* dy;  // (G*m) x oh x ow x n, storage TD
  float* out;      // splits == 1: dw, (G*m) x ncol; else workspace G x splits x m x ncol
  int pair_out;    // ncol even and out 8-byte aligned: float2 stores
  int fault;       // tests: 1 skips the first K slice
};

// The families' launchers (grid as computed by the driver; dynamic shared memory and block
// size are the configuration's). Storage types: float or bf16; vec: 16-byte chunk loads.
void LaunchMmaGemm(const ConvConfig& c, StorageType in, StorageType out, bool vec, dim3 grid,
                   cudaStream_t stream, const TcGemmParams& q);
void LaunchMmaWgrad(const ConvConfig& c, StorageType x, StorageType dy, bool vec, dim3 grid,
                    cudaStream_t stream, const TcWgradParams& q);
void LaunchWgmmaGemm(const ConvConfig& c, StorageType out, dim3 grid, cudaStream_t stream,
                     const TcGemmParams& q);
void LaunchWgmmaWgrad(const ConvConfig& c, dim3 grid, cudaStream_t stream, const TcWgradParams& q);

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)

template <class T>
__device__ __forceinline__ void StoreOut(T* p, float v) {
  if constexpr (std::is_same<T, float>::value) {
    *p = v;
  } else {
    *reinterpret_cast<uint16_t*>(p) = tc::FloatToBf16(v);
  }
}
template <class T>
__device__ __forceinline__ void StoreOut2(T* p, float v0, float v1) {
  if constexpr (std::is_same<T, float>::value) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<uint32_t*>(p) = tc::PackBf16x2(v0, v1);
  }
}

template <class T>
__device__ __forceinline__ float LoadOut(const T* p) {
  if constexpr (std::is_same<T, float>::value) {
    return *p;
  } else {
    return tc::Bf16ToFloat(*reinterpret_cast<const uint16_t*>(p));
  }
}

// out + v as the unfused layers compute it (v stored in TOut, then Add's float sum, which the
// caller stores rounded to TOut again): TcGemmParams::add.
template <class T>
__device__ __forceinline__ float AddStored(const T* out, float v) {
  if constexpr (std::is_same<T, float>::value) {
    return *out + v;
  } else {
    return LoadOut(out) + tc::Bf16ToFloat(tc::FloatToBf16(v));
  }
}

// The epilogue's arithmetic on two values of output row `row` of group g: + bias (rows below
// p.m), then ReLU. Both epilogues below (StoreAccumulators, wgmma.cu's StoreTileStaged).
__device__ __forceinline__ void BiasRelu(const TcGemmParams& p, int g, int row, float& v0,
                                         float& v1) {
  if (p.bias != nullptr && row < p.m) {
    const float b = p.bias[g * p.m + row];
    v0 += b;
    v1 += b;
  }
  if (p.relu) {
    v0 = fmaxf(v0, 0.0f);
    v1 = fmaxf(v1, 0.0f);
  }
}

// The epilogue of the forward / backward-data GEMMs: bias, ReLU, conversion to TOut and the
// stores of a thread's accumulators acc[mt][nt][0..3], which hold (row0 + 16 mt, col0 + 8 nt
// + {0, 1}) and (row0 + 16 mt + 8, same columns): the mma.sync m16n8 C layout, which wgmma's
// accumulators repeat (so both kernels end here). row0 includes the block's first row;
// rows are per group g.
// kMask: out is masked by p.mask where given (mma: always checked; wgmma: its kernel's kMask).
template <class TOut, bool kMask, int kMT, int kNT>
__device__ __forceinline__ void StoreAccumulators(const TcGemmParams& p, int g,
                                                  const float (&acc)[kMT][kNT][4], int row0,
                                                  int col0) {
  const int64_t row_stride = static_cast<int64_t>(p.out_h) * p.out_w * p.n;
  TOut* out = static_cast<TOut*>(p.out) + static_cast<int64_t>(g) * p.m * row_stride;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const int jj = col0 + nt * 8;
    if (jj >= p.j) continue;
    const bool second = jj + 1 < p.j;
    const int64_t d0 = OutColumn(p, jj);
    const int64_t d1 = (p.pair_out || !second) ? d0 + 1 : OutColumn(p, jj + 1);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + mt * 16 + 8 * h;
        if (row >= p.m) continue;
        float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        BiasRelu(p, g, row, v0, v1);
        TOut* orow = out + row * row_stride;
        if (kMask && p.mask != nullptr) {
          const TOut* mrow = static_cast<const TOut*>(p.mask) + (orow - static_cast<TOut*>(p.out));
          if (!(LoadOut(mrow + d0) > 0.0f)) v0 = 0.0f;
          if (second && !(LoadOut(mrow + d1) > 0.0f)) v1 = 0.0f;
        }
        if (p.add) {
          v0 = AddStored(orow + d0, v0);
          if (second) v1 = AddStored(orow + d1, v1);
        }
        if (p.pair_out && second) {
          StoreOut2(orow + d0, v0, v1);
        } else {
          StoreOut(orow + d0, v0);
          if (second) StoreOut(orow + d1, v1);
        }
      }
  }
}

// A column (c, ky, kx) of the filter gradient: the plane of x and the tap it reads.
struct WgradTap {
  int coff, ky, kx;
  bool ok;
};
__device__ __forceinline__ WgradTap MakeWgradTap(const TcWgradParams& p, int col, int hwn) {
  WgradTap t;
  t.ok = col < p.ncol;
  const int cl = t.ok ? col : 0;
  const int c = Div(cl, p.div_khkw);
  const int r = cl - c * (p.kh * p.kw);
  t.ky = Div(r, p.div_kw);
  t.kx = r - t.ky * p.kw;
  t.coff = c * hwn;
  return t;
}
// The offset in x of tap t at column col, and whether it is inside the image.
__device__ __forceinline__ int WgradOffset(const TcWgradParams& p, const WgradTap& t,
                                           const GatherColumn& col, bool* ok) {
  const int sy = col.sy + t.ky, sx = col.sx + t.kx;
  *ok = col.ok && t.ok && static_cast<unsigned>(sy) < static_cast<unsigned>(p.h) &&
        static_cast<unsigned>(sx) < static_cast<unsigned>(p.w);
  return t.coff + col.base + (t.ky * p.w + t.kx) * p.n;
}

// Backward filter's epilogue: a thread's accumulators (layout as StoreAccumulators) into the
// FP32 partial sums of its split (rows row_base + row of p.out), or into dw.
template <int kMT, int kNT>
__device__ __forceinline__ void StoreWgradAccumulators(const TcWgradParams& p, int64_t row_base,
                                                       const float (&acc)[kMT][kNT][4], int r0,
                                                       int col0) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + mt * 16 + 8 * h;
      if (row >= p.m) continue;
      float* orow = p.out + (row_base + row) * p.ncol;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int col = col0 + nt * 8;
        if (col >= p.ncol) continue;
        const float v0 = acc[mt][nt][2 * h], v1 = acc[mt][nt][2 * h + 1];
        if (p.pair_out) {
          *reinterpret_cast<float2*>(orow + col) = make_float2(v0, v1);  // ncol even
        } else {
          orow[col] = v0;
          if (col + 1 < p.ncol) orow[col + 1] = v1;
        }
      }
    }
}

#endif  // COLONNADE_CUDA_EMULATE || __CUDACC__

}  // namespace colonnade::cuda::conv
