// Convolution on CHWN tensors, written in the manner of cuda-convnet: each thread block
// stages 2-D tiles of image pixels and filter weights in shared memory and computes a
// tile of outputs for many filters and many images at once; every thread keeps an 8 x 8
// (or 6 x 8, 4 x 8) block of outputs in registers, so each filter value it loads from
// shared memory is reused across 8 images/pixels and each pixel value across 8 filters.
// Images are innermost, so the 32 threads of a warp that read one filter tap read 32
// (x4 with float4) consecutive images of one pixel: 128-byte coalesced loads. There is
// no im2col buffer: the image tile is gathered straight from the CHWN tensor.
//
// All three convolutions are one matrix product in disguise (per group g):
//   forward          y[f][(oy,ox,n)]   = sum_{(c,ky,kx)} w[f][c][ky][kx] *
//   x[c][oy*s-p+ky][ox*s-p+kx][n] backward data    dx[c][(iy,ix,n)]  = sum_{(f,ky',kx')}
//   w[f][c][KH-1-ky'][KW-1-kx'] * dy[f][iy-p'+ky'][ix-p'+kx'][n]
//                    with p' = K-1-p at stride 1; at stride s, one such product per stride
//                    phase of dx (see ConvBackwardDataGpu)
//   backward filter  dw[f][(c,ky,kx)]  = sum_{(oy,ox,n)} dy[f][oy][ox][n] *
//   x[c][oy*s-p+ky][ox*s-p+kx][n]
// Forward and backward data share one kernel (ConvGemmKernelV2, a cp.async pipeline, when
// the batch is a multiple of 4 and the tensors are 16-byte aligned, else ConvGemmKernel:
// the filter operand is pre-arranged k-major and zero-padded by
// ArrangeWeightsKernel, the image operand is a gather). Backward filter (ConvWgradKernel) reduces
// over pixels x images, which is long (55*55*256 for AlexNet's conv1), so it splits that sum over
// blocks (split-K) into a workspace that ReduceSplitsKernel adds up in a fixed order: deterministic
// results.
//
// Index arithmetic is 32-bit: every tensor must have fewer than 2^31 elements (checked).

#include <algorithm>
#include <memory>
#include <vector>

#include "core/log.h"
#include "cuda/autotune.h"
#include "cuda/conv_gather.h"
#include "cuda/kernels.h"
#include "cuda/port.h"

namespace colonnade::cuda {
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
struct ConvGemmParams {
  const float* in;  // gathered operand: (groups*cg) x h x w x n, CHWN (x, or dy for bwd data)
  const float* at;  // [groups][kp][mp] filter operand, k-major, zero-padded
  float* out;       // [groups*m] rows of out_h x out_w x n (CHWN)
  int n, h, w;      // gathered tensor's batch and spatial size
  int oh, ow;       // GEMM output grid; column j = (oy*ow + ox)*n + img
  int kh, kw;       // taps; GEMM row k = (c*kh + ky)*kw + kx
  int stride;  // source pixel of tap (ky, kx): (oy*stride - pad_h + ky, ox*stride - pad_w + kx)
  int pad_h, pad_w;
  int cg;  // gathered channels per group
  int m, k, kp, mp, j;
  // Column (oy, ox, img) is written to pixel (out_oy + out_s*oy, out_ox + out_s*ox) of an
  // out_h x out_w output; plain = 1 when that is simply column j (out_s 1, no offset).
  int out_h, out_w, out_s, out_oy, out_ox, plain;
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

// Epilogue shared by both versions: rows are filters (or input channels), columns are
// (pixel, image); thread (ty, tx) writes its BM/16 rows x two runs of 4 columns.
template <int BM, bool kVec>
__device__ __forceinline__ void StoreTile(const ConvGemmParams& p, int g, int m0, int j0, int ty,
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

// Kernel ConvGemmKernel<BM> (version 1, the general path: any batch, any alignment;
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
// timing against ConvGemmKernelV2 and was removed: src/cuda/README.md.)
template <int BM>
__global__ void __launch_bounds__(kThreads, 2) ConvGemmKernel(const ConvGemmParams p) {
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

// Kernel ConvGemmKernelV2<BM, BK> (version 2 with BK = 8, version 3 with BK = 16:
// three-stage cp.async pipeline, n % 4 == 0)
//   Same operands, grid, block and thread tile as ConvGemmKernel<BM>, and the same
//   accumulation order, so the results are bit-identical; with n % 4 == 0 each thread's 8
//   columns are two runs of 4 consecutive images of one pixel (float4 copies). Tiles go
//   straight from global to shared memory (cp.async, 16 bytes per copy, zero-filled for
//   padding) two slices ahead of the multiply instead of one slice ahead through registers:
//   more load latency hidden and no staging registers. Per BK-deep slice: wait for slice t,
//   one barrier (which also retires slice t-1's buffer), issue slice t+2, multiply slice t.
//   Thread t copies B rows t/32 + 8*r (r < BK/8), columns 4*(t%32)..+3, and float4s
//   t + 256*r of the A slice.
template <int BM, int BK>
__global__ void __launch_bounds__(kThreads, 2) ConvGemmKernelV2(const ConvGemmParams p) {
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

// Kernel ArrangeWeightsKernel: builds the k-major, zero-padded filter operand
//   at : G x kp x mp,  at[g][k][m] = (k < K && m < M) ? W(g, m, k) : 0
// from the canonical weights w: F x (C/G) x KH x KW. Forward: W(g, m=f, k=(c,ky,kx)) =
// w[g*M+f][c][ky][kx]. Backward data (transposed = 1): rows are input channels and
// k = (f, ty, tx) runs over the group's filters and the tkh x tkw taps that reach one
// stride phase, flipped: W(g, m=c, k) = w[g*Fg+f][c][ky0 + step*(tkh-1-ty)][kx0 + step*(tkw-1-tx)]
// (stride 1: ky0 = kx0 = 0, step 1, tkh x tkw = KH x KW, the plain flipped kernel).
// Grid-stride loop, one thread per element of at (writes coalesce along m).
struct ArrangeParams {
  const float* w;
  float* at;
  int groups, fg, cg, kh, kw;  // fg filters and cg input channels per group; kernel size
  int tkh, tkw, ky0, kx0, step;
  int m, k, kp, mp;
  int transposed;
};

__global__ void ArrangeWeightsKernel(const ArrangeParams p) {
  const int64_t total = static_cast<int64_t>(p.groups) * p.kp * p.mp;
  const int khkw = p.kh * p.kw, taps = p.tkh * p.tkw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int mm = static_cast<int>(i % p.mp);
    const int kk = static_cast<int>((i / p.mp) % p.kp);
    const int g = static_cast<int>(i / (static_cast<int64_t>(p.mp) * p.kp));
    float v = 0.0f;
    if (mm < p.m && kk < p.k) {
      if (!p.transposed) {
        v = p.w[(static_cast<int64_t>(g) * p.fg + mm) * p.k + kk];
      } else {
        const int f = kk / taps, r = kk % taps;
        const int ky = p.ky0 + p.step * (p.tkh - 1 - r / p.tkw);
        const int kx = p.kx0 + p.step * (p.tkw - 1 - r % p.tkw);
        v = p.w[((static_cast<int64_t>(g) * p.fg + f) * p.cg + mm) * khkw + ky * p.kw + kx];
      }
    }
    p.at[i] = v;
  }
}

// ============================================================================================
// Backward filter.
// ============================================================================================
struct ConvWgradParams {
  const float* x;   // (G*cg) x h x w x n
  const float* dy;  // (G*m) x oh x ow x n
  float* out;       // splits == 1: dw, (G*m) x ncol; else workspace G x splits x m x ncol
  int n, h, w, oh, ow, kh, kw, stride, pad_h, pad_w;
  int cg, m, ncol, jtot;  // ncol = cg*kh*kw, jtot = oh*ow*n (the reduction length)
  int splits, ksplit;     // ksplit: reduction length per split, a multiple of kBK
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

// Kernel ConvWgradKernel<BM, kVec>
//   x  : (G*cg) x h x w x n,  dy : (G*m) x oh x ow x n        (CHWN)
//   out: dw[(g*m + f)][(c*kh + ky)*kw + kx]  (or the split-K workspace, same row layout)
// GEMM per group: rows f (m of them), columns (c, ky, kx) (ncol), reduction over
// j = (oy, ox, img) in [split*ksplit, (split+1)*ksplit).
// Grid: x = ceil(ncol / 128), y = ceil(m / BM), z = G * splits. Block: 256 threads as in
// ConvGemmKernel; per 8-deep slice of j the block stages
//   As[8][BM+4]: dy rows (kVec: thread t loads row f = t/2, j = 4*(t%2)..+3 as one float4,
//                stored transposed), Bs[8][128+4]: x gathered at the taps of 128 columns
//                (kVec: thread t owns column t/2 and loads 4 consecutive images as a float4).
// Rows are padded by 4 floats so that the transposed stores do not share banks.
// Long because the staging, the unrolled multiply and the split-K store share registers and
// shared-memory indices: split into functions, nvcc spills (measured in earlier versions).
template <int BM, bool kVec>
__global__ void __launch_bounds__(kThreads, 2) ConvWgradKernel(const ConvWgradParams p) {
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

// Kernel ReduceSplitsKernel: dw[g][r] = sum_{s < splits} ws[g][s][r] in order s = 0, 1, ...
//   ws : G x splits x per_group,  dw : G x per_group (per_group = m * ncol).
// Grid-stride loop, one thread per element of dw.
struct ReduceSplitsParams {
  const float* ws;
  float* dw;
  int groups, splits;
  int64_t per_group;
};

__global__ void ReduceSplitsKernel(const ReduceSplitsParams p) {
  const int64_t total = p.groups * p.per_group;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t g = i / p.per_group, r = i % p.per_group;
    const float* src = p.ws + g * p.splits * p.per_group + r;
    float s = 0.0f;
    for (int k = 0; k < p.splits; ++k) s += src[k * p.per_group];
    p.dw[i] = s;
  }
}

// ---- host-side dispatch ---------------------------------------------------------------------

// Row tile that wastes the fewest padded rows (ties: the larger tile).
int PickBM(int m) {
  int best = 128;
  int64_t best_pad = CeilDiv(m, 128) * 128;
  for (int bm : {96, 64}) {
    int64_t pad = CeilDiv(m, bm) * bm;
    if (pad < best_pad) {
      best = bm;
      best_pad = pad;
    }
  }
  return best;
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

dim3 ElementwiseGrid(const DeviceContext& ctx, int64_t n) {
  return dim3(static_cast<unsigned>(std::max<int64_t>(
      1, std::min<int64_t>(CeilDiv(n, 256), static_cast<int64_t>(ctx.sm_count) * 16))));
}

void CheckSizes(const ConvDims& d) {
  const int64_t lim = int64_t(1) << 31;
  CHECK(int64_t(d.c) * d.h * d.w * d.n < lim && int64_t(d.f) * d.oh * d.ow * d.n < lim)
      << "convolution tensors must have fewer than 2^31 elements";
}

// ---- forward / backward data: version choice ----------------------------------------------
// The versions are bit-identical; the autotuner (autotune.h) times them on the first call of
// each shape and keeps the fastest, unless one is forced (SetConvGemmVersion,
// COLONNADE_CONV_GEMM=v2|v3). The emulator runs version 2.
KernelAutotuner& GemmTuner() {
  static KernelAutotuner* tuner = new KernelAutotuner("COLONNADE_CONV_GEMM", {2, 3}, 2);
  return *tuner;
}

void (*GemmKernel(int version, int bm, bool vec))(ConvGemmParams) {
  if (!vec) return ConvGemmKernel<64>;
  if (version == 2) {
    return bm == 128  ? ConvGemmKernelV2<128, 8>
           : bm == 96 ? ConvGemmKernelV2<96, 8>
                      : ConvGemmKernelV2<64, 8>;
  }
  CHECK_EQ(version, 3) << "no float4 convolution GEMM version " << version;
  return bm == 128  ? ConvGemmKernelV2<128, 16>
         : bm == 96 ? ConvGemmKernelV2<96, 16>
                    : ConvGemmKernelV2<64, 16>;
}

// Which version to run for this problem (the float4 path; the scalar one has version 1 only).
int ChooseVersion(const DeviceContext& ctx, const ConvGemmParams& q, dim3 grid, int bm) {
  const std::vector<int> key = {q.n,
                                q.h,
                                q.w,
                                q.oh,
                                q.ow,
                                q.kh,
                                q.kw,
                                q.stride,
                                q.pad_h,
                                q.pad_w,
                                q.cg,
                                q.m,
                                q.k,
                                q.j,
                                q.out_h,
                                q.out_w,
                                q.out_s,
                                bm,
                                static_cast<int>(grid.z)};
  return GemmTuner().Choose(ctx.stream, key, [&](int version) {
    Launch(GemmKernel(version, bm, true), grid, dim3(kThreads), ctx.stream, q);
  });
}

// Runs one implicit GEMM (forward, or one phase of backward data): arranges the filter
// operand described by `ap` (m, k, kp, mp and at are filled in here) and launches.
// The general path (batch not a multiple of 4, or misaligned tensors) uses BM = 64.
ConvLaunchInfo RunConvGemm(const DeviceContext& ctx, ConvGemmParams q, int groups, ArrangeParams ap,
                           bool vec_ok) {
  ConvLaunchInfo info;
  info.vec = vec_ok && q.n % 4 == 0;
  info.bm = info.vec ? PickBM(q.m) : 64;
  q.kp = static_cast<int>(CeilDiv(q.k, 16) * 16);  // a multiple of every version's slice
  q.mp = static_cast<int>(CeilDiv(q.m, info.bm) * info.bm);
  q.plain = (q.out_s == 1 && q.out_oy == 0 && q.out_ox == 0 && q.out_h == q.oh && q.out_w == q.ow)
                ? 1
                : 0;
  Scratch at(ctx.alloc, sizeof(float) * size_t(groups) * q.kp * q.mp);
  ap.at = at.f();
  ap.m = q.m;
  ap.k = q.k;
  ap.kp = q.kp;
  ap.mp = q.mp;
  Launch(ArrangeWeightsKernel, ElementwiseGrid(ctx, int64_t(groups) * q.kp * q.mp), dim3(256),
         ctx.stream, ap);
  q.at = at.f();
  q.div_n = FastDiv(q.n);
  q.div_ow = FastDiv(q.ow);
  q.div_kw = FastDiv(q.kw);
  q.div_khkw = FastDiv(q.kh * q.kw);
  dim3 grid(static_cast<unsigned>(CeilDiv(q.j, kBN)), static_cast<unsigned>(q.mp / info.bm),
            static_cast<unsigned>(groups));
  info.version = info.vec ? ChooseVersion(ctx, q, grid, info.bm) : 1;
  Launch(GemmKernel(info.version, info.bm, info.vec), grid, dim3(kThreads), ctx.stream, q);
  return info;
}

}  // namespace

void SetConvGemmVersion(int version) { GemmTuner().Force(version); }

ConvLaunchInfo ConvForwardGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                              const float* x, const float* w, float* y) {
  CheckSizes(d);
  const int groups = p.groups;
  ConvGemmParams q{};
  q.in = x;
  q.out = y;
  q.n = d.n;
  q.h = d.h;
  q.w = d.w;
  q.oh = d.oh;
  q.ow = d.ow;
  q.kh = p.kernel_h;
  q.kw = p.kernel_w;
  q.stride = p.stride;
  q.pad_h = p.pad;
  q.pad_w = p.pad;
  q.cg = d.c / groups;
  q.m = d.f / groups;
  q.k = q.cg * q.kh * q.kw;
  q.j = d.oh * d.ow * d.n;
  q.out_h = d.oh;
  q.out_w = d.ow;
  q.out_s = 1;
  ArrangeParams ap{};
  ap.w = w;
  ap.groups = groups;
  ap.fg = q.m;
  ap.cg = q.cg;
  ap.kh = ap.tkh = q.kh;
  ap.kw = ap.tkw = q.kw;
  ap.step = 1;
  ap.transposed = 0;
  return RunConvGemm(ctx, q, groups, ap, Aligned16(x) && Aligned16(y));
}

// Backward data is a convolution of dy with the transposed, flipped filters. With stride s
// it splits into s*s phases: the input pixels (ry + s*qy, rx + s*qx) of phase (ry, rx)
// receive only the taps ky = ky0 + s*t with ky0 = (ry + pad) mod s, and from those a
// stride-1 convolution of dy: oy = qy + cy - t with cy = (ry + pad - ky0) / s. Each phase is
// one implicit GEMM over its own pixels and taps, writing its pixels in place; phases that
// no tap reaches are zeros. (Version 1 gathered a virtually dilated dy, 15 of 16 taps zero
// at stride 4: 240x cuDNN's time on AlexNet's conv1.)
ConvLaunchInfo ConvBackwardDataGpu(const DeviceContext& ctx, const ConvDims& d, const ConvParams& p,
                                   const float* dy, const float* w, float* dx) {
  CheckSizes(d);
  const int groups = p.groups, s = p.stride;
  const int fg = d.f / groups, cg = d.c / groups;
  const bool vec_ok = Aligned16(dy) && Aligned16(dx);
  ConvLaunchInfo info;
  bool zero_first = false;
  for (int ry = 0; ry < s && ry < d.h; ++ry)
    for (int rx = 0; rx < s && rx < d.w; ++rx)
      if ((ry + p.pad) % s >= p.kernel_h || (rx + p.pad) % s >= p.kernel_w) zero_first = true;
  if (zero_first) {
    COLONNADE_CUDA_CHECK(
        cudaMemsetAsync(dx, 0, sizeof(float) * size_t(d.c) * d.h * d.w * d.n, ctx.stream));
  }
  for (int ry = 0; ry < s && ry < d.h; ++ry) {
    for (int rx = 0; rx < s && rx < d.w; ++rx) {
      const int ky0 = (ry + p.pad) % s, kx0 = (rx + p.pad) % s;
      if (ky0 >= p.kernel_h || kx0 >= p.kernel_w) continue;
      const int tkh = (p.kernel_h - ky0 + s - 1) / s, tkw = (p.kernel_w - kx0 + s - 1) / s;
      const int cy = (ry + p.pad - ky0) / s, cx = (rx + p.pad - kx0) / s;
      ConvGemmParams q{};
      q.in = dy;
      q.out = dx;
      q.n = d.n;
      q.h = d.oh;  // the gathered tensor is dy
      q.w = d.ow;
      q.oh = (d.h - ry + s - 1) / s;  // this phase's pixels of dx
      q.ow = (d.w - rx + s - 1) / s;
      q.kh = tkh;
      q.kw = tkw;
      q.stride = 1;
      q.pad_h = tkh - 1 - cy;
      q.pad_w = tkw - 1 - cx;
      q.cg = fg;
      q.m = cg;
      q.k = fg * tkh * tkw;
      q.j = q.oh * q.ow * d.n;
      q.out_h = d.h;
      q.out_w = d.w;
      q.out_s = s;
      q.out_oy = ry;
      q.out_ox = rx;
      ArrangeParams ap{};
      ap.w = w;
      ap.groups = groups;
      ap.fg = fg;
      ap.cg = cg;
      ap.kh = p.kernel_h;
      ap.kw = p.kernel_w;
      ap.tkh = tkh;
      ap.tkw = tkw;
      ap.ky0 = ky0;
      ap.kx0 = kx0;
      ap.step = s;
      ap.transposed = 1;
      info = RunConvGemm(ctx, q, groups, ap, vec_ok);
    }
  }
  return info;
}

ConvLaunchInfo ConvBackwardFilterGpu(const DeviceContext& ctx, const ConvDims& d,
                                     const ConvParams& p, const float* x, const float* dy,
                                     float* dw) {
  CheckSizes(d);
  const int groups = p.groups;
  ConvWgradParams q{};
  q.x = x;
  q.dy = dy;
  q.n = d.n;
  q.h = d.h;
  q.w = d.w;
  q.oh = d.oh;
  q.ow = d.ow;
  q.kh = p.kernel_h;
  q.kw = p.kernel_w;
  q.stride = p.stride;
  q.pad_h = p.pad;
  q.pad_w = p.pad;
  q.cg = d.c / groups;
  q.m = d.f / groups;
  q.ncol = q.cg * q.kh * q.kw;
  q.jtot = d.oh * d.ow * d.n;
  q.div_n = FastDiv(q.n);
  q.div_ow = FastDiv(q.ow);
  q.div_kw = FastDiv(q.kw);
  q.div_khkw = FastDiv(q.kh * q.kw);

  ConvLaunchInfo info;
  info.vec = d.n % 4 == 0 && Aligned16(x) && Aligned16(dy);
  info.bm = info.vec ? PickBM(q.m) : 64;
  // Split the reduction so that about four blocks per multiprocessor are in flight, each
  // with at least 32 slices of work.
  const int64_t tiles = CeilDiv(q.ncol, kBN) * CeilDiv(q.m, info.bm) * groups;
  const int64_t want = std::max<int64_t>(1, CeilDiv(int64_t(ctx.sm_count) * 4, tiles));
  const int64_t max_splits = std::max<int64_t>(1, q.jtot / (32 * kBK));
  int64_t splits = std::min(want, max_splits);
  q.ksplit = static_cast<int>(CeilDiv(CeilDiv(q.jtot, splits), kBK) * kBK);
  splits = CeilDiv(q.jtot, q.ksplit);
  q.splits = static_cast<int>(splits);
  info.splits = q.splits;

  std::unique_ptr<Scratch> ws;
  if (q.splits > 1) {
    ws = std::make_unique<Scratch>(ctx.alloc,
                                   sizeof(float) * size_t(groups) * q.splits * q.m * q.ncol);
    q.out = ws->f();
  } else {
    q.out = dw;
  }
  dim3 grid(static_cast<unsigned>(CeilDiv(q.ncol, kBN)),
            static_cast<unsigned>(CeilDiv(q.m, info.bm)), static_cast<unsigned>(groups * q.splits));
  void (*kernel)(ConvWgradParams) = nullptr;
  if (!info.vec) {
    kernel = ConvWgradKernel<64, false>;
  } else if (info.bm == 128) {
    kernel = ConvWgradKernel<128, true>;
  } else if (info.bm == 96) {
    kernel = ConvWgradKernel<96, true>;
  } else {
    kernel = ConvWgradKernel<64, true>;
  }
  Launch(kernel, grid, dim3(kThreads), ctx.stream, q);
  if (q.splits > 1) {
    ReduceSplitsParams rp{ws->f(), dw, groups, q.splits, int64_t(q.m) * q.ncol};
    Launch(ReduceSplitsKernel, ElementwiseGrid(ctx, groups * rp.per_group), dim3(256), ctx.stream,
           rp);
  }
  return info;
}

}  // namespace colonnade::cuda
