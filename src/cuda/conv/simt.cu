// The SIMT family: convolutions on CHWN tensors in FP32 on the CUDA cores, in the manner of
// cuda-convnet: each thread block stages 2-D tiles of image pixels and filter weights in
// shared memory and computes a tile of outputs for many filters and many images at once;
// every thread keeps an 8 x 8 (or 6 x 8, 4 x 8) block of outputs in registers, so each filter
// value it loads from shared memory is reused across 8 images/pixels and each pixel value
// across 8 filters. Images are innermost, so the 32 threads of a warp that read one filter tap
// read 32 (x4 with float4) consecutive images of one pixel: 128-byte coalesced loads. There
// is no im2col buffer: the image tile is gathered straight from the CHWN tensor (gather.h).
//
// All three convolutions are one matrix product in disguise (per group g):
//   forward          y[f][(oy,ox,n)]   = sum_{(c,ky,kx)} w[f][c][ky][kx] *
//                                          x[c][oy*s-p+ky][ox*s-p+kx][n]
//   backward data    dx[c][(iy,ix,n)]  = sum_{(f,ky',kx')} w[f][c][KH-1-ky'][KW-1-kx'] *
//                                          dy[f][iy-p'+ky'][ix-p'+kx'][n]
//                    with p' = K-1-p at stride 1; at stride s, one such product per stride
//                    phase of dx (common.h, BackwardDataGemms)
//   backward filter  dw[f][(c,ky,kx)]  = sum_{(oy,ox,n)} dy[f][oy][ox][n] *
//                                          x[c][oy*s-p+ky][ox*s-p+kx][n]
// Configurations (catalogue.h), every one accumulating each output in the same order, so that
// all give the same bits:
//   simt_64x128x8_2              SimtGemmKernel: forward and backward data on any batch and
//                                alignment (register-staged double buffer, scalar loads)
//   simt_{64,96,128}x128x{8,16}_3 SimtGemmPipelinedKernel: forward and backward data when the
//                                batch is a multiple of 4 and the tensors are 16-byte aligned
//                                (three-stage cp.async pipeline, float4); the automatic choice
//                                times the two K slices of its row tile on the first call of a
//                                shape (why a race: src/cuda/README.md, "The SIMT race stays")
//   simt_{64,96,128}x128x8_2     SimtWgradKernel: backward filter, split-K over blocks into a
//                                workspace that common.cu's ReduceSplitsKernel adds up in a
//                                fixed order (deterministic); 96 and 128 rows need float4 loads
// The filter operand is pre-arranged k-major and zero-padded (SimtArrangeWeightsKernel).
//
// Index arithmetic is 32-bit: every tensor must have fewer than 2^31 elements (checked).

#include <algorithm>
#include <memory>
#include <vector>

#include "core/log.h"
#include "cuda/conv/common.h"
#include "cuda/conv/gather.h"
#include "cuda/port.h"

namespace colonnade::cuda {
namespace conv {
namespace {

constexpr int kBK = 8;         // reduction slice per shared-memory stage
constexpr int kBN = 128;       // GEMM columns per block (pixels x images)
constexpr int kThreads = 256;  // 16 x 16 threads; thread (ty, tx) owns rows ~ty, cols ~tx

// Rows of the BM x 128 block tile owned by thread row ty (TM = BM / 16 rows):
// [ty*4, ty*4+4) and, for BM = 128, [64+ty*4, 64+ty*4+4); for BM = 96, [64+ty*2, 64+ty*2+2).
template <int BM>
__device__ __forceinline__ int TileRow(int ty, int i) {
  if (i < 4) return ty * 4 + i;
  return BM == 128 ? 64 + ty * 4 + (i - 4) : 64 + ty * 2 + (i - 4);
}

// One BK-deep step of the register-blocked product: acc[TM][8] += As[kk][rows] x Bs[kk][cols].
// Columns of thread tx: [tx*4, tx*4+4) and [64+tx*4, 64+tx*4+4).
template <int BM, int AS, int BS, int BK = kBK>
__device__ __forceinline__ void MultiplyTile(const float* as, const float* bs, int ty, int tx,
                                             float (&acc)[BM / 16][8]) {
  constexpr int TM = BM / 16;
#pragma unroll
  for (int kk = 0; kk < BK; ++kk) {
    float a[TM], b[8];
    const float4 a0 = *reinterpret_cast<const float4*>(as + kk * AS + ty * 4);
    a[0] = a0.x;
    a[1] = a0.y;
    a[2] = a0.z;
    a[3] = a0.w;
    if constexpr (BM == 128) {
      const float4 a1 = *reinterpret_cast<const float4*>(as + kk * AS + 64 + ty * 4);
      a[4] = a1.x;
      a[5] = a1.y;
      a[6] = a1.z;
      a[7] = a1.w;
    } else if constexpr (BM == 96) {
      const float2 a1 = *reinterpret_cast<const float2*>(as + kk * AS + 64 + ty * 2);
      a[4] = a1.x;
      a[5] = a1.y;
    }
    const float4 b0 = *reinterpret_cast<const float4*>(bs + kk * BS + tx * 4);
    const float4 b1 = *reinterpret_cast<const float4*>(bs + kk * BS + 64 + tx * 4);
    b[0] = b0.x;
    b[1] = b0.y;
    b[2] = b0.z;
    b[3] = b0.w;
    b[4] = b1.x;
    b[5] = b1.y;
    b[6] = b1.z;
    b[7] = b1.w;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// ============================================================================================
// Forward / backward-data implicit GEMM.
// ============================================================================================
struct SimtGemmParams : GemmGeometry {
  const float* in;  // gathered operand: (groups*cg) x h x w x n, CHWN (x, or dy for bwd data)
  const float* at;  // [groups][kp][mp] filter operand, k-major, zero-padded
  float* out;       // [groups*m] rows of out_h x out_w x n (CHWN)
};

// Epilogue of both GEMM kernels: rows are filters (or input channels), columns are
// (pixel, image); thread (ty, tx) writes its BM/16 rows x two runs of 4 columns.
template <int BM, bool kVec>
__device__ __forceinline__ void StoreTile(const SimtGemmParams& p, int g, int m0, int j0, int ty,
                                          int tx, const float (&acc)[BM / 16][8]) {
  constexpr int TM = BM / 16;
  const int64_t row_stride = static_cast<int64_t>(p.out_h) * p.out_w * p.n;
  float* out = p.out + static_cast<int64_t>(g) * p.m * row_stride;
  int64_t dst[2][4];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int jj = j0 + half * 64 + tx * 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      dst[half][e] = -1;
      if (kVec && e > 0) continue;  // a run of 4 images of one pixel
      if (jj + e < p.j) dst[half][e] = OutColumn(p, jj + e);
    }
  }
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + TileRow<BM>(ty, i);
    if (row >= p.m) continue;
    float* orow = out + static_cast<int64_t>(row) * row_stride;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      if constexpr (kVec) {
        if (dst[half][0] >= 0)
          *reinterpret_cast<float4*>(orow + dst[half][0]) = make_float4(
              acc[i][half * 4], acc[i][half * 4 + 1], acc[i][half * 4 + 2], acc[i][half * 4 + 3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (dst[half][e] >= 0) orow[dst[half][e]] = acc[i][half * 4 + e];
      }
    }
  }
}

// Kernel SimtGemmKernel<BM> (simt_64x128x8_2, the general path: any batch, any alignment;
// register-staged double buffering, scalar loads)
//   in : (G*cg) x h x w x n          (CHWN; x for forward, dy for backward data)
//   at : G x kp x mp                 (k-major filters, zero rows/cols beyond k/m)
//   out: (G*m) x out_h x out_w x n   (CHWN; column (oy, ox, img) -> see OutColumn)
// Grid: x = ceil(oh*ow*n / 128) column tiles, y = mp / BM row tiles, z = group.
// Block: 256 threads = 16 x 16; thread (ty = tid/16, tx = tid%16) accumulates BM/16 output
// rows (filters) x 8 output columns (pixel, image pairs). Per 8-deep slice of the
// reduction, the block stages
//   As[8][BM]  filter taps (one float4 per thread), Bs[8][128] gathered image values:
//   thread t loads row t/32, columns t%32 + 32*i (i < 4) as scalars.
// Two shared-memory stages: the next slice's global loads are in flight in registers
// while the current slice is multiplied. (Its float4 variant for n % 4 == 0 lost every
// timing against SimtGemmPipelinedKernel and was removed: src/cuda/README.md.)
template <int BM>
__global__ void __launch_bounds__(kThreads, 2) SimtGemmKernel(const SimtGemmParams p) {
  constexpr int TM = BM / 16;
  constexpr int kBCols = 4;  // column groups per thread in the B loader
  alignas(16) __shared__ float As[2][kBK][BM];
  alignas(16) __shared__ float Bs[2][kBK][kBN];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int g = blockIdx.z;
  const int j0 = blockIdx.x * kBN;
  const int m0 = blockIdx.y * BM;
  const int hwn = p.h * p.w * p.n;
  const float* in = p.in + static_cast<int64_t>(g) * p.cg * hwn;
  const float* at = p.at + static_cast<int64_t>(g) * p.kp * p.mp;

  const int brow = tid / 32;  // row of the B tile this thread loads
  GatherColumn cols[kBCols];
#pragma unroll
  for (int i = 0; i < kBCols; ++i) cols[i] = MakeColumn(p, j0 + (tid % 32) + 32 * i);

  float4 ra = make_float4(0.f, 0.f, 0.f, 0.f);
  float rb[4];
  const bool a_loader = tid < 2 * BM;  // BK*BM/4 float4s
  const int a_row = tid / (BM / 4), a_col = (tid % (BM / 4)) * 4;

  auto load = [&](int k0) {
    if (a_loader) {
      ra = __ldg(reinterpret_cast<const float4*>(at + (k0 + a_row) * p.mp + m0 + a_col));
    }
    const GatherTap tap = MakeTap(p, k0 + brow);
#pragma unroll
    for (int i = 0; i < kBCols; ++i) {
      bool ok;
      const int offset = GatherOffset(p, hwn, tap, cols[i], &ok);
      rb[i] = ok ? __ldg(in + offset) : 0.0f;
    }
  };
  auto store = [&](int buf) {
    if (a_loader) *reinterpret_cast<float4*>(&As[buf][a_row][a_col]) = ra;
#pragma unroll
    for (int i = 0; i < 4; ++i) Bs[buf][brow][(tid % 32) + 32 * i] = rb[i];
  };

  float acc[TM][8];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int ktiles = p.kp / kBK;
  load(0);
  store(0);
  __syncthreads();
  for (int t = 0; t < ktiles; ++t) {
    const int cur = t & 1;
    if (t + 1 < ktiles) load((t + 1) * kBK);
    MultiplyTile<BM, BM, kBN>(&As[cur][0][0], &Bs[cur][0][0], ty, tx, acc);
    if (t + 1 < ktiles) store(cur ^ 1);
    __syncthreads();
  }
  StoreTile<BM, false>(p, g, m0, j0, ty, tx, acc);
}

// Kernel SimtGemmPipelinedKernel<BM, BK> (simt_<BM>x128x<BK>_3: three-stage cp.async
// pipeline, n % 4 == 0)
//   Same operands, grid, block and thread tile as SimtGemmKernel<BM>, and the same
//   accumulation order, so the results are bit-identical; with n % 4 == 0 each thread's 8
//   columns are two runs of 4 consecutive images of one pixel (float4 copies). Tiles go
//   straight from global to shared memory (cp.async, 16 bytes per copy, zero-filled for
//   padding) two slices ahead of the multiply instead of one slice ahead through registers:
//   more load latency hidden and no staging registers. Per BK-deep slice: wait for slice t,
//   one barrier (which also retires slice t-1's buffer), issue slice t+2, multiply slice t.
//   Thread t copies B rows t/32 + 8*r (r < BK/8), columns 4*(t%32)..+3, and float4s
//   t + 256*r of the A slice.
template <int BM, int BK>
__global__ void __launch_bounds__(kThreads, 2) SimtGemmPipelinedKernel(const SimtGemmParams p) {
  constexpr int TM = BM / 16;
  constexpr int kStages = 3;
  constexpr int kAVec = BK * BM / 4;  // float4s per A slice
  constexpr int kACopies = (kAVec + kThreads - 1) / kThreads;
  constexpr int kBRows = BK / 8;
  alignas(16) __shared__ float As[kStages][BK][BM];
  alignas(16) __shared__ float Bs[kStages][BK][kBN];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int g = blockIdx.z;
  const int j0 = blockIdx.x * kBN;
  const int m0 = blockIdx.y * BM;
  const int hwn = p.h * p.w * p.n;
  const float* in = p.in + static_cast<int64_t>(g) * p.cg * hwn;
  const float* at = p.at + static_cast<int64_t>(g) * p.kp * p.mp;
  const int brow = tid / 32;
  const GatherColumn col = MakeColumn(p, j0 + 4 * (tid % 32));

  auto issue = [&](int k0, int st) {
#pragma unroll
    for (int r = 0; r < kACopies; ++r) {
      const int f = tid + kThreads * r;
      if (f < kAVec) {
        const int a_row = f / (BM / 4), a_col = (f % (BM / 4)) * 4;
        CpAsync16(&As[st][a_row][a_col], at + (k0 + a_row) * p.mp + m0 + a_col, true);
      }
    }
#pragma unroll
    for (int r = 0; r < kBRows; ++r) {
      const GatherTap tap = MakeTap(p, k0 + brow + 8 * r);
      bool ok;
      const int offset = GatherOffset(p, hwn, tap, col, &ok);
      CpAsync16(&Bs[st][brow + 8 * r][4 * (tid % 32)], ok ? in + offset : in, ok);
    }
  };

  float acc[TM][8];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int ktiles = p.kp / BK;
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < ktiles) issue(st * BK, st);
    CpAsyncCommit();
  }
  for (int t = 0; t < ktiles; ++t) {
    CpAsyncWait<kStages - 2>();  // this thread's copies of slice t have landed
    __syncthreads();             // everyone's have; everyone is done with slice t-1
    const int tn = t + kStages - 1;
    if (tn < ktiles) issue(tn * BK, tn % kStages);
    CpAsyncCommit();
    const int cur = t % kStages;
    MultiplyTile<BM, BM, kBN, BK>(&As[cur][0][0], &Bs[cur][0][0], ty, tx, acc);
  }
  StoreTile<BM, true>(p, g, m0, j0, ty, tx, acc);
}

// Kernel SimtArrangeWeightsKernel: builds the k-major, zero-padded filter operand
//   at : G x kp x mp floats,  at[g][k][m] = W(g, m, k) (common.h's ArrangeParams, zero beyond
//   m or k). Grid-stride loop, one thread per element of at (writes coalesce along m).
__global__ void SimtArrangeWeightsKernel(const ArrangeParams p) {
  const int64_t total = static_cast<int64_t>(p.groups) * p.kp * p.mp;
  const int khkw = p.kh * p.kw, taps = p.tkh * p.tkw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int mm = static_cast<int>(i % p.mp);
    const int kk = static_cast<int>((i / p.mp) % p.kp);
    const int g = static_cast<int>(i / (static_cast<int64_t>(p.mp) * p.kp));
    static_cast<float*>(p.at)[i] = FilterValue(p, g, mm, kk, khkw, taps);
  }
}

// ============================================================================================
// Backward filter.
// ============================================================================================
struct SimtWgradParams : WgradGeometry {  // ksplit: a multiple of kBK
  const float* x;                         // (G*cg) x h x w x n
  const float* dy;                        // (G*m) x oh x ow x n
  float* out;  // splits == 1: dw, (G*m) x ncol; else workspace G x splits x m x ncol
};

// Kernel SimtWgradKernel<BM, kVec>
//   x  : (G*cg) x h x w x n,  dy : (G*m) x oh x ow x n        (CHWN)
//   out: dw[(g*m + f)][(c*kh + ky)*kw + kx]  (or the split-K workspace, same row layout)
// GEMM per group: rows f (m of them), columns (c, ky, kx) (ncol), reduction over
// j = (oy, ox, img) in [split*ksplit, (split+1)*ksplit).
// Grid: x = ceil(ncol / 128), y = ceil(m / BM), z = G * splits. Block: 256 threads as in
// SimtGemmKernel; per 8-deep slice of j the block stages
//   As[8][BM+4]: dy rows (kVec: thread t loads row f = t/2, j = 4*(t%2)..+3 as one float4,
//                stored transposed), Bs[8][128+4]: x gathered at the taps of 128 columns
//                (kVec: thread t owns column t/2 and loads 4 consecutive images as a float4).
// Rows are padded by 4 floats so that the transposed stores do not share banks.
// Long because the staging, the unrolled multiply and the split-K store share registers and
// shared-memory indices: split into functions, nvcc spills (measured in earlier versions).
template <int BM, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) SimtWgradKernel(const SimtWgradParams p) {
  constexpr int TM = BM / 16;
  constexpr int AS = BM + 4, BS = kBN + 4;
  alignas(16) __shared__ float As[2][kBK][AS];
  alignas(16) __shared__ float Bs[2][kBK][BS];

  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int g = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int c0 = blockIdx.x * kBN;
  const int m0 = blockIdx.y * BM;
  const int kbeg = split * p.ksplit;
  const int kend = IMin(p.jtot, kbeg + p.ksplit);
  const int hwn = p.h * p.w * p.n;
  const float* x = p.x + static_cast<int64_t>(g) * p.cg * hwn;
  const float* dy = p.dy + static_cast<int64_t>(g) * p.m * p.jtot;

  // ---- B loader: this thread's filter-tap columns (fixed) ----
  constexpr int kBCols = kVec ? 1 : 4;
  int col_coff[kBCols], col_ky[kBCols], col_kx[kBCols];
  bool col_ok[kBCols];
#pragma unroll
  for (int i = 0; i < kBCols; ++i) {
    const int col = kVec ? c0 + tid / 2 : c0 + tid / 8 + 32 * i;
    col_ok[i] = col < p.ncol;
    const int cc = col_ok[i] ? col : 0;
    const int c = Div(cc, p.div_khkw);
    const int r = cc - c * (p.kh * p.kw);
    col_ky[i] = Div(r, p.div_kw);
    col_kx[i] = r - col_ky[i] * p.kw;
    col_coff[i] = c * hwn;
  }

  // ---- A loader ----
  // kVec: thread t < 2*BM loads dy row m0 + t/2, j = j0 + 4*(t%2) .. +3.
  // scalar: thread t loads j = j0 + t%8 for rows m0 + t/8 + 32*i, i < BM/32.
  constexpr int kARows = kVec ? 1 : BM / 32;
  float ra[4 * kARows];
  float rb[4];

  auto load = [&](int j0) {
    if constexpr (kVec) {
      if (tid < 2 * BM) {
        const int row = m0 + tid / 2, jj = j0 + 4 * (tid % 2);
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row < p.m && jj < kend)
          v = __ldg(reinterpret_cast<const float4*>(dy + static_cast<int64_t>(row) * p.jtot + jj));
        ra[0] = v.x;
        ra[1] = v.y;
        ra[2] = v.z;
        ra[3] = v.w;
      }
    } else {
      const int jj = j0 + tid % 8;
#pragma unroll
      for (int i = 0; i < kARows; ++i) {
        const int row = m0 + tid / 8 + 32 * i;
        ra[i] =
            (row < p.m && jj < kend) ? __ldg(dy + static_cast<int64_t>(row) * p.jtot + jj) : 0.0f;
      }
    }
    // B: decompose this thread's reduction index j = (oy, ox, img) once per slice.
    const int jj = kVec ? j0 + 4 * (tid % 2) : j0 + tid % 8;
    const bool j_ok = jj < kend;
    const int jc = j_ok ? jj : 0;
    const int pix = Div(jc, p.div_n);
    const int img = jc - pix * p.n;
    const int oy = Div(pix, p.div_ow);
    const int ox = pix - oy * p.ow;
    const int sy0 = oy * p.stride - p.pad_h, sx0 = ox * p.stride - p.pad_w;
#pragma unroll
    for (int i = 0; i < kBCols; ++i) {
      const int sy = sy0 + col_ky[i], sx = sx0 + col_kx[i];
      const bool ok = j_ok && col_ok[i] && static_cast<unsigned>(sy) < static_cast<unsigned>(p.h) &&
                      static_cast<unsigned>(sx) < static_cast<unsigned>(p.w);
      const int offset = col_coff[i] + (sy * p.w + sx) * p.n + img;
      if constexpr (kVec) {
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (ok) v = __ldg(reinterpret_cast<const float4*>(x + offset));
        rb[0] = v.x;
        rb[1] = v.y;
        rb[2] = v.z;
        rb[3] = v.w;
      } else {
        rb[i] = ok ? __ldg(x + offset) : 0.0f;
      }
    }
  };
  auto store = [&](int buf) {
    if constexpr (kVec) {
      if (tid < 2 * BM) {
        const int row = tid / 2, jq = 4 * (tid % 2);
#pragma unroll
        for (int e = 0; e < 4; ++e) As[buf][jq + e][row] = ra[e];
      }
      const int col = tid / 2, jq = 4 * (tid % 2);
#pragma unroll
      for (int e = 0; e < 4; ++e) Bs[buf][jq + e][col] = rb[e];
    } else {
#pragma unroll
      for (int i = 0; i < kARows; ++i) As[buf][tid % 8][tid / 8 + 32 * i] = ra[i];
#pragma unroll
      for (int i = 0; i < 4; ++i) Bs[buf][tid % 8][tid / 8 + 32 * i] = rb[i];
    }
  };

  float acc[TM][8];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

  const int ktiles = kend > kbeg ? (kend - kbeg + kBK - 1) / kBK : 0;
  if (ktiles > 0) {
    load(kbeg);
    store(0);
    __syncthreads();
    for (int t = 0; t < ktiles; ++t) {
      const int cur = t & 1;
      if (t + 1 < ktiles) load(kbeg + (t + 1) * kBK);
      MultiplyTile<BM, AS, BS>(&As[cur][0][0], &Bs[cur][0][0], ty, tx, acc);
      if (t + 1 < ktiles) store(cur ^ 1);
      __syncthreads();
    }
  }

  const int64_t row_base = p.splits == 1 ? static_cast<int64_t>(g) * p.m
                                         : (static_cast<int64_t>(g) * p.splits + split) * p.m;
#pragma unroll
  for (int i = 0; i < TM; ++i) {
    const int row = m0 + TileRow<BM>(ty, i);
    if (row >= p.m) continue;
    float* orow = p.out + (row_base + row) * p.ncol;
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = c0 + half * 64 + tx * 4 + e;
        if (col < p.ncol) orow[col] = acc[i][half * 4 + e];
      }
  }
}

// ---- host side ----------------------------------------------------------------------------

using GemmFn = void (*)(SimtGemmParams);

// The forward / backward-data kernel of a configuration.
GemmFn GemmKernel(const ConvConfig& c) {
  CHECK(c.family == ConvFamily::kSimt && c.bn == kBN && c.blocks_per_sm == 2) << c.name;
  if (c.stages == 2) {
    CHECK(c.bm == 64 && c.bk == kBK) << c.name << ": not its kernel's tile";
    return SimtGemmKernel<64>;
  }
  CHECK((c.bm == 64 || c.bm == 96 || c.bm == 128) && (c.bk == 8 || c.bk == 16) && c.stages == 3)
      << c.name << ": not its kernel's tile";
  if (c.bk == 8) {
    return c.bm == 128  ? SimtGemmPipelinedKernel<128, 8>
           : c.bm == 96 ? SimtGemmPipelinedKernel<96, 8>
                        : SimtGemmPipelinedKernel<64, 8>;
  }
  return c.bm == 128  ? SimtGemmPipelinedKernel<128, 16>
         : c.bm == 96 ? SimtGemmPipelinedKernel<96, 16>
                      : SimtGemmPipelinedKernel<64, 16>;
}

// Runs one implicit GEMM (forward, or one phase of backward data): selects the configuration,
// arranges the filter operand for its row tile and launches. vec_ok: the tensors are 16-byte
// aligned (the float4 path also needs the batch to be a multiple of 4).
ConvLaunchInfo RunGemm(const DeviceContext& ctx, ConvProblem problem, ConvGemm gemm, int groups,
                       const float* in, float* out, bool vec_ok) {
  const bool vec = vec_ok && gemm.geo.n % 4 == 0;
  SimtGemmParams q{};
  std::unique_ptr<Scratch> at;
  int arranged_bm = 0;
  // Arranges on the first launch (the autotuner's candidates share one row tile).
  auto launch = [&](const ConvConfig& c) {
    if (c.bm != arranged_bm) {
      Finish(&gemm, c.bm, 16);  // kp: a multiple of every configuration's K slice
      const int64_t elems = int64_t(groups) * gemm.geo.kp * gemm.geo.mp;
      at = std::make_unique<Scratch>(ctx.alloc, sizeof(float) * size_t(elems));
      gemm.arrange.at = at->f();
      Launch(SimtArrangeWeightsKernel, ElementwiseGrid(ctx, elems), dim3(256), ctx.stream,
             gemm.arrange);
      static_cast<GemmGeometry&>(q) = gemm.geo;
      q.in = in;
      q.at = at->f();
      q.out = out;
      arranged_bm = c.bm;
    }
    const dim3 grid(static_cast<unsigned>(CeilDiv(q.j, kBN)), static_cast<unsigned>(q.mp / c.bm),
                    static_cast<unsigned>(groups));
    Launch(GemmKernel(c), grid, dim3(kThreads), ctx.stream, q);
  };
  const ConvGemmDesc desc = Describe(gemm.geo, groups, ctx, MathMode::kFP32, vec, false);
  const ConvRace race{ctx.stream, RaceKey(gemm.geo, groups), launch};
  const ConvConfig& c = problem == ConvProblem::kForward ? SelectForwardConfig(desc, &race)
                                                         : SelectBackwardDataConfig(desc, &race);
  launch(c);
  return LaunchInfo(c, vec, 1);
}

}  // namespace
}  // namespace conv

ConvLaunchInfo ConvForwardGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                              const float* x, const float* w, float* y) {
  conv::CheckSizes(d);
  return conv::RunGemm(ctx, ConvProblem::kForward, conv::ForwardGemm(d, p, w), p.groups, x, y,
                       conv::Aligned(x, 16) && conv::Aligned(y, 16));
}

ConvLaunchInfo ConvBackwardDataGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                                   const float* dy, const float* w, float* dx) {
  conv::CheckSizes(d);
  bool zero_first = false;
  const std::vector<conv::ConvGemm> gemms = conv::BackwardDataGemms(d, p, w, &zero_first);
  if (zero_first) {
    COLONNADE_CUDA_CHECK(
        cudaMemsetAsync(dx, 0, sizeof(float) * size_t(d.c) * d.h * d.w * d.n, ctx.stream));
  }
  const bool vec_ok = conv::Aligned(dy, 16) && conv::Aligned(dx, 16);
  ConvLaunchInfo info;
  for (const conv::ConvGemm& gemm : gemms)
    info = conv::RunGemm(ctx, ConvProblem::kBackwardData, gemm, p.groups, dy, dx, vec_ok);
  return info;
}

ConvLaunchInfo ConvBackwardFilterGpu(const DeviceContext& ctx, const ConvDims& d,
                                     const ConvParams& p, const float* x, const float* dy,
                                     float* dw) {
  using conv::kBN;
  conv::CheckSizes(d);
  const int groups = p.groups;
  conv::SimtWgradParams q{};
  static_cast<conv::WgradGeometry&>(q) = conv::BackwardFilterGeometry(d, p);
  q.x = x;
  q.dy = dy;
  const bool vec = d.n % 4 == 0 && conv::Aligned(x, 16) && conv::Aligned(dy, 16);
  const ConvConfig& c =
      SelectBackwardFilterConfig(conv::Describe(q, groups, ctx, MathMode::kFP32, vec, false));
  // At least 32 slices of kBK per split.
  conv::SplitK(&q, c.bm, kBN, groups, ctx, 32, conv::kBK);
  const conv::SplitKOutput output(ctx, q, groups, dw);
  q.out = output.out();
  const dim3 grid(static_cast<unsigned>(CeilDiv(q.ncol, kBN)),
                  static_cast<unsigned>(CeilDiv(q.m, c.bm)),
                  static_cast<unsigned>(groups * q.splits));
  CHECK(c.family == ConvFamily::kSimt && c.bn == kBN && c.bk == conv::kBK && c.stages == 2 &&
        c.blocks_per_sm == 2)
      << c.name << ": not its kernel's tile";
  void (*kernel)(conv::SimtWgradParams) = nullptr;
  if (!vec) {
    kernel = conv::SimtWgradKernel<64, false>;
  } else if (c.bm == 128) {
    kernel = conv::SimtWgradKernel<128, true>;
  } else if (c.bm == 96) {
    kernel = conv::SimtWgradKernel<96, true>;
  } else {
    kernel = conv::SimtWgradKernel<64, true>;
  }
  Launch(kernel, grid, dim3(conv::kThreads), ctx.stream, q);
  output.Reduce(ctx);
  return conv::LaunchInfo(c, vec, q.splits);
}

}  // namespace colonnade::cuda
