// Convolutions on CHWN tensors on the tensor cores (mixed precision): the implicit GEMMs of
// conv_kernels.cu with bf16 operands (mma.sync m16n8k16) or tf32 operands (mma.sync
// m16n8k8), FP32 accumulators everywhere. Per group g:
//   forward          y[f][(oy,ox,n)]  = sum_{(c,ky,kx)} W[f][(c,ky,kx)] *
//   x[c][oy*s-p+ky][ox*s-p+kx][n] backward data    dx: one such GEMM per stride phase of dx, with
//   the flipped, transposed
//                    filters of that phase's taps (as ConvBackwardDataGpu does)
//   backward filter  dw[f][(c,ky,kx)] = sum_{(oy,ox,n)} dy[f][(oy,ox,n)] *
//   x[c][oy*s-p+ky][ox*s-p+kx][n]
//                    split over blocks along (oy,ox,n) into FP32 partial sums that one more
//                    kernel adds in a fixed order (deterministic)
//
// Operand layouts in shared memory (one 16-byte "chunk" = 8 bf16 or 4 tf32 elements):
//   K-contiguous tiles [rows][BK] (filters in forward/backward data; dy and the gathered x
//     in backward filter): rows of 64 bytes (BK = 32 bf16 or 16 tf32), the 4 chunks of a row
//     XOR-swizzled by (row / 2) % 4, so that the 8 row addresses of one ldmatrix hit 8
//     different 16-byte bank groups. Fragments: ldmatrix.x4 (for tf32 data each 8x8 b16
//     matrix is an 8x4 tf32 matrix, and lane l receives word l % 4 of row l / 4: exactly
//     the tf32 A and B fragments).
//   N-contiguous tiles [BK][BN] (the gathered x or dy of forward/backward data, images
//     innermost as in global memory): bf16 rows of BN elements with chunk c stored at
//     c ^ (row % 8), read with ldmatrix.x4.trans (the B fragment wants pairs along K);
//     tf32 rows with chunk c at c ^ 2 * (row % 4), read with 32-bit loads (no 32-bit
//     transposing ldmatrix exists): a warp's 32 loads (rows k0 + tig, columns n0 + group)
//     then touch 32 different banks.
// Global -> shared: cp.async of 16-byte chunks (zero-filled for padding) when the storage
// type is the math type's (bf16 for bf16, float for tf32) and the batch is a multiple of the
// chunk; otherwise through registers, converted on the way (float -> bf16 with round to
// nearest even; bf16 -> float exactly), with element-wise, zero-filled loads when the batch
// is not a multiple of the chunk (1, 7, 33). tf32 operands that are not pre-rounded filters
// are rounded with cvt.rna when their fragments are loaded.
//
// Pipeline (kStages deep): slice t waits for its cp.async group, one barrier, then the
// register-staged operand of slice t + kStages - 2 is stored and that of t + kStages - 1
// loaded, the cp.async copies of slice t + kStages - 1 issued, and slice t multiplied.

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "core/log.h"
#include "cuda/conv_gather.h"
#include "cuda/kernels.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda {
namespace {

using tc::Bf16ToFloat;
using tc::FloatToBf16;
using tc::LdMatrixX4;
using tc::LdMatrixX4Trans;
using tc::PackBf16x2;
using tc::Tf32Round;

// ---- math modes -----------------------------------------------------------------------------
struct Bf16Math {
  using Smem = uint16_t;            // element type in shared memory
  static constexpr int kE = 8;      // elements per 16-byte chunk
  static constexpr int kMmaK = 16;  // K of one mma.sync
  static constexpr bool kTf32 = false;
};
struct Tf32Math {
  using Smem = uint32_t;
  static constexpr int kE = 4;
  static constexpr int kMmaK = 8;
  static constexpr bool kTf32 = true;
};

// Block tile: kWarpsM x kWarpsN warps, each computing (kMT x 16) x (kNT x 8) outputs;
// BK = 2 mma K-steps (32 bf16 or 16 tf32 elements: 64-byte K-contiguous rows).
template <int kWarpsM, int kWarpsN, int kMT, int kNT, int kStages, int kMinBlocks>
struct Tile {
  static constexpr int WM = kWarpsM, WN = kWarpsN, MT = kMT, NT = kNT, S = kStages;
  static constexpr int kBlocksPerSM = kMinBlocks;  // __launch_bounds__: registers per thread
  static constexpr int BM = WM * MT * 16, BN = WN * NT * 8, T = WM * WN * 32;
  static_assert(NT % 2 == 0, "B fragments come in pairs of n8 tiles (one ldmatrix.x4)");
};
using TileL = Tile<2, 4, 4, 4, 4, 2>;  // 128 x 128, 8 warps of 64 x 32, 64 KiB, 2 blocks/SM
using TileS = Tile<2, 4, 2, 4, 4, 2>;  // 64 x 128, 8 warps of 32 x 32, 48 KiB, 2 blocks/SM
// 128 x 256, 8 warps of 64 x 64 (128 accumulators per thread), 3 stages = 72 KiB, 1 block/SM:
// more reuse per shared-memory byte, fewer warps; only when forced (SetTcTile) until measured.
using TileW = Tile<2, 4, 4, 8, 3, 1>;

// Shared-memory chunk positions (see the file comment).
template <int kRowChunks>
__device__ __forceinline__ int SwizzleK(int row, int c) {
  static_assert(kRowChunks == 4, "K-contiguous rows are 4 chunks (64 bytes)");
  return c ^ ((row >> 1) & 3);
}
template <class Math>
__device__ __forceinline__ int SwizzleN(int row, int c) {
  if constexpr (Math::kTf32) return c ^ ((row & 3) << 1);
  return c ^ (row & 7);
}

// ---- storage types: loads and conversions ----------------------------------------------------
template <class T>
struct Storage;
template <>
struct Storage<float> {
  static constexpr bool kBf16 = false;
  __device__ __forceinline__ static float Get(const uint32_t* raw, int e) {
    return __uint_as_float(raw[e]);
  }
  __device__ __forceinline__ static void Put(uint32_t* raw, int e, const float* p) {
    raw[e] = __float_as_uint(__ldg(p));
  }
};
template <>
struct Storage<__nv_bfloat16> {
  static constexpr bool kBf16 = true;
  __device__ __forceinline__ static float Get(const uint32_t* raw, int e) {
    return Bf16ToFloat((raw[e / 2] >> (16 * (e % 2))) & 0xffffu);
  }
  __device__ __forceinline__ static void Put(uint32_t* raw, int e, const __nv_bfloat16* p) {
    const uint32_t v = __ldg(reinterpret_cast<const unsigned short*>(p));
    raw[e / 2] = (e % 2) ? (raw[e / 2] | (v << 16)) : v;
  }
};

// One chunk of E elements of storage type T held in registers between its load and its
// store to shared memory (raw, so that the conversion does not wait for the load).
template <class Math, class T>
struct RawChunk {
  static constexpr int kE = Math::kE;
  static constexpr int kWords = kE * static_cast<int>(sizeof(T)) / 4;
  uint32_t w[kWords];

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
  }
  // All E elements from p (aligned to the chunk's size in storage).
  __device__ __forceinline__ void LoadVec(const T* p) {
    if constexpr (kWords == 8) {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(p) + 1);
      w[0] = a.x;
      w[1] = a.y;
      w[2] = a.z;
      w[3] = a.w;
      w[4] = b.x;
      w[5] = b.y;
      w[6] = b.z;
      w[7] = b.w;
    } else if constexpr (kWords == 4) {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
      w[0] = a.x;
      w[1] = a.y;
      w[2] = a.z;
      w[3] = a.w;
    } else {
      static_assert(kWords == 2, "chunk of 4 bf16");
      const uint2 a = __ldg(reinterpret_cast<const uint2*>(p));
      w[0] = a.x;
      w[1] = a.y;
    }
  }
  // Element e from p, or 0 when !ok.
  __device__ __forceinline__ void LoadOne(int e, const T* p, bool ok) {
    if (ok) {
      Storage<T>::Put(w, e, p);
    } else if constexpr (Storage<T>::kBf16) {
      if (e % 2 == 0) w[e / 2] = 0;
    } else {
      w[e] = 0;
    }
  }
  // The chunk in the math type's shared-memory format.
  __device__ __forceinline__ uint4 Convert() const {
    float f[kE];
#pragma unroll
    for (int e = 0; e < kE; ++e) f[e] = Storage<T>::Get(w, e);
    if constexpr (Math::kTf32) {
      return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                        __float_as_uint(f[3]));
    } else {
      return make_uint4(PackBf16x2(f[0], f[1]), PackBf16x2(f[2], f[3]), PackBf16x2(f[4], f[5]),
                        PackBf16x2(f[6], f[7]));
    }
  }
};

template <class T>
__device__ __forceinline__ void StoreOut(T* p, float v) {
  if constexpr (std::is_same<T, float>::value) {
    *p = v;
  } else {
    *reinterpret_cast<uint16_t*>(p) = FloatToBf16(v);
  }
}
template <class T>
__device__ __forceinline__ void StoreOut2(T* p, float v0, float v1) {
  if constexpr (std::is_same<T, float>::value) {
    *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
  } else {
    *reinterpret_cast<uint32_t*>(p) = PackBf16x2(v0, v1);
  }
}

// The mma of the math mode on one 16 x 8 accumulator tile.
template <class Math>
__device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (Math::kTf32)
    tc::MmaTf32(d, a, b);
  else
    tc::MmaBf16(d, a, b);
}

// A fragments of a warp's kMT m16 tiles for K-step ks from a K-contiguous tile [rows][BK]
// (rows row0 ..): ldmatrix.x4 per m16 tile; lane l addresses row l % 8 + 8 * ((l / 8) % 2)
// of the tile, chunk 2 * ks + l / 16 (matrices: rows 0-7 / 8-15 x first / second half of
// the K-step, i.e. registers a0..a3 of the fragment).
template <class Math, int kMT, bool kRound>
__device__ __forceinline__ void LoadFragsK(uint32_t (&a)[kMT][4], const typename Math::Smem* tile,
                                           int row0, int ks, int lane) {
  constexpr int BK = 2 * Math::kMmaK, E = Math::kE;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    const int row = row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
    const int c = 2 * ks + lane / 16;
    LdMatrixX4(a[mt], tile + row * BK + SwizzleK<BK / E>(row, c) * E);
    if constexpr (Math::kTf32 && kRound) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[mt][i] = Tf32Round(__uint_as_float(a[mt][i]));
    }
  }
}

// B fragments of kNT n8 tiles from a K-contiguous tile [BN rows][BK] (backward filter):
// one ldmatrix.x4 per pair of n8 tiles; lane l addresses row (n) l % 8 + 8 * (l / 16),
// chunk 2 * ks + (l / 8) % 2, so the matrices are (n 0-7, k half 0), (n 0-7, half 1),
// (n 8-15, half 0), (n 8-15, half 1): b0, b1 of the first tile, then of the second.
template <class Math, int kNT>
__device__ __forceinline__ void LoadFragsBK(uint32_t (&b)[kNT][2], const typename Math::Smem* tile,
                                            int n0, int ks, int lane) {
  constexpr int BK = 2 * Math::kMmaK, E = Math::kE;
#pragma unroll
  for (int np = 0; np < kNT / 2; ++np) {
    const int row = n0 + np * 16 + (lane % 8) + 8 * (lane / 16);
    const int c = 2 * ks + (lane / 8) % 2;
    uint32_t r[4];
    LdMatrixX4(r, tile + row * BK + SwizzleK<BK / E>(row, c) * E);
    b[2 * np][0] = r[0];
    b[2 * np][1] = r[1];
    b[2 * np + 1][0] = r[2];
    b[2 * np + 1][1] = r[3];
  }
  if constexpr (Math::kTf32) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      b[nt][0] = Tf32Round(__uint_as_float(b[nt][0]));
      b[nt][1] = Tf32Round(__uint_as_float(b[nt][1]));
    }
  }
}

// B fragments of kNT n8 tiles from an N-contiguous tile [BK][BN] (forward, backward data).
// bf16: ldmatrix.x4.trans per pair of n8 tiles; lane l addresses K-row l % 8 + 8 * ((l / 8)
// % 2) of the step, columns n0 + 8 * (l / 16) ..+7: matrices (k 0-7, n 0-7), (k 8-15, n 0-7),
// (k 0-7, n 8-15), (k 8-15, n 8-15), transposed into b0, b1 of each tile.
// tf32: lane (group, tig) loads rows 8 * ks + tig and + 4 of column n0 + 8 * nt + group.
template <class Math, int kNT, int BN>
__device__ __forceinline__ void LoadFragsBN(uint32_t (&b)[kNT][2], const typename Math::Smem* tile,
                                            int n0, int ks, int lane) {
  if constexpr (!Math::kTf32) {
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      const int row = ks * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
      const int n = n0 + np * 16 + 8 * (lane / 16);
      uint32_t r[4];
      LdMatrixX4Trans(r, tile + row * BN + SwizzleN<Math>(row, n / 8) * 8);
      b[2 * np][0] = r[0];
      b[2 * np][1] = r[1];
      b[2 * np + 1][0] = r[2];
      b[2 * np + 1][1] = r[3];
    }
  } else {
    const int r0 = ks * 8 + lane % 4, r1 = r0 + 4;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const int n = n0 + nt * 8 + lane / 4;
      const uint32_t v0 = tile[r0 * BN + SwizzleN<Math>(r0, n / 4) * 4 + n % 4];
      const uint32_t v1 = tile[r1 * BN + SwizzleN<Math>(r1, n / 4) * 4 + n % 4];
      b[nt][0] = Tf32Round(__uint_as_float(v0));
      b[nt][1] = Tf32Round(__uint_as_float(v1));
    }
  }
}

// ============================================================================================
// Forward / backward-data implicit GEMM.
// ============================================================================================
struct TcGemmParams {
  const void* in;     // gathered operand: (G*cg) x h x w x n, CHWN (x, or dy for bwd data)
  const void* at;     // G x mp x kp filter operand (Math::Smem), K contiguous, zero-padded
  void* out;          // (G*m) x out_h x out_w x n, CHWN
  const float* bias;  // G*m biases added in the epilogue, or null
  int relu;           // 1: max(., 0) in the epilogue (after the bias)
  int pair_out;       // 1: output columns j, j+1 (j even) are adjacent and 2-element aligned
  int fault;          // tests: 1 skips the first K slice
  int n, h, w;        // gathered tensor's batch and spatial size
  int oh, ow;         // GEMM output grid; column j = (oy*ow + ox)*n + img
  int kh, kw;         // taps; GEMM row k = (c*kh + ky)*kw + kx
  int stride, pad_h, pad_w;
  int cg;  // gathered channels per group
  int m, k, kp, mp, j;
  // Column (oy, ox, img) goes to pixel (out_oy + out_s*oy, out_ox + out_s*ox) of an
  // out_h x out_w output; plain = 1 when that is simply column j.
  int out_h, out_w, out_s, out_oy, out_ox, plain;
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

// The epilogue of the forward / backward-data GEMMs: bias, ReLU, conversion to TOut and the
// stores of a thread's accumulators acc[mt][nt][0..3], which hold (row0 + 16 mt, col0 + 8 nt
// + {0, 1}) and (row0 + 16 mt + 8, same columns): the mma.sync m16n8 C layout, which wgmma's
// accumulators repeat (so both kernels end here). row0 includes the block's first row;
// rows are per group g.
template <class TOut, int kMT, int kNT>
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
        if (p.bias != nullptr) {
          const float b = p.bias[g * p.m + row];
          v0 += b;
          v1 += b;
        }
        if (p.relu) {
          v0 = fmaxf(v0, 0.0f);
          v1 = fmaxf(v1, 0.0f);
        }
        TOut* orow = out + row * row_stride;
        if (p.pair_out && second) {
          StoreOut2(orow + d0, v0, v1);
        } else {
          StoreOut(orow + d0, v0);
          if (second) StoreOut(orow + d1, v1);
        }
      }
  }
}

// Kernel TcGemmKernel<Math, Tl, TIn, TOut, kVec>
//   in : (G*cg) x h x w x n   CHWN, storage TIn (x for forward, dy for backward data)
//   at : G x mp x kp          filters in Math::Smem (bf16, or tf32-rounded float), K contiguous
//   out: (G*m) x out_h x out_w x n   CHWN, storage TOut; + bias, ReLU (forward)
// Grid: x = ceil(j / BN) column tiles, y = mp / BM row tiles, z = group. Block: Tl::T threads,
// warp w computes rows (w / WN) * MT*16 .. and columns (w % WN) * NT*8 .. of the block tile.
// Shared memory: S stages of As[BM][BK] (K-contiguous) and Bs[BK][BN] (N-contiguous).
// Loads per stage: thread t copies A chunks t + T*i (row q / 4, chunk q % 4) and B chunks
// t + T*i: K-row q / (BN/E), column chunk t % (BN/E) (fixed: E consecutive images of one
// pixel with kVec, else E columns gathered one by one).
// Long because the pipeline prologue, the main loop and the epilogue share the fragment
// registers and the stage ring; each part is a commented block below.
template <class Math, class Tl, class TIn, class TOut, bool kVec>
__global__ void __launch_bounds__(Tl::T, Tl::kBlocksPerSM) TcGemmKernel(const TcGemmParams p) {
  using S = typename Math::Smem;
  constexpr int E = Math::kE, BK = 2 * Math::kMmaK;
  constexpr int BM = Tl::BM, BN = Tl::BN, T = Tl::T, ST = Tl::S;
  constexpr int kRowChunksA = BK / E;  // 4
  constexpr int kRowChunksB = BN / E;
  constexpr int kAChunks = BM * kRowChunksA / T;
  constexpr int kBChunks = BK * kRowChunksB / T;
  constexpr int kBRowStep = T / kRowChunksB;
  constexpr bool kAsyncB = kVec && sizeof(TIn) == sizeof(S);
  constexpr int kStageA = BM * BK, kStageB = BK * BN;
  static_assert(BM * kRowChunksA % T == 0 && BK * kRowChunksB % T == 0, "chunks per thread");
  static_assert(T % kRowChunksB == 0, "a thread keeps one column chunk");
  static_assert(kRowChunksB >= 8, "N-contiguous swizzle needs 8 chunks per row");

  COLONNADE_DYNAMIC_SMEM(smem_raw);
  S* const As = reinterpret_cast<S*>(smem_raw);
  S* const Bs = As + ST * kStageA;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tl::WN, wn = warp % Tl::WN;
  const int g = blockIdx.z;
  const int j0 = blockIdx.x * BN;
  const int m0 = blockIdx.y * BM;
  const int hwn = p.h * p.w * p.n;
  const TIn* in = static_cast<const TIn*>(p.in) + static_cast<int64_t>(g) * p.cg * hwn;
  const S* at = static_cast<const S*>(p.at) + (static_cast<int64_t>(g) * p.mp + m0) * p.kp;

  // ---- loaders ----
  const int bcc = tid % kRowChunksB;
  const int brow0 = tid / kRowChunksB;
  constexpr int kCols = kVec ? 1 : E;
  GatherColumn cols[kCols];
#pragma unroll
  for (int e = 0; e < kCols; ++e) cols[e] = MakeColumn(p, j0 + bcc * E + e);

  auto issue_a = [&](int kt, int st) {
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int q = tid + T * i;
      const int row = q / kRowChunksA, c = q % kRowChunksA;
      CpAsync16(As + st * kStageA + row * BK + SwizzleK<kRowChunksA>(row, c) * E,
                at + static_cast<int64_t>(row) * p.kp + kt * BK + c * E, true);
    }
  };
  RawChunk<Math, TIn> rb[kAsyncB ? 1 : kBChunks];
  auto b_dst = [&](int st, int row) {
    return Bs + st * kStageB + row * BN + SwizzleN<Math>(row, bcc) * E;
  };
  // Issues (cp.async) or loads into registers the B chunks of K-tile kt.
  auto load_b = [&](int kt, int st) {
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      const int row = brow0 + kBRowStep * i;
      const GatherTap tap = MakeTap(p, kt * BK + row);
      if constexpr (kVec) {
        bool ok;
        const int off = GatherOffset(p, hwn, tap, cols[0], &ok);
        if constexpr (kAsyncB) {
          CpAsync16(b_dst(st, row), ok ? in + off : in, ok);
        } else if (ok) {
          rb[i].LoadVec(in + off);
        } else {
          rb[i].Zero();
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          bool ok;
          const int off = GatherOffset(p, hwn, tap, cols[e], &ok);
          rb[i].LoadOne(e, in + (ok ? off : 0), ok);
        }
      }
    }
  };
  auto store_b = [&](int st) {
    if constexpr (!kAsyncB) {
#pragma unroll
      for (int i = 0; i < kBChunks; ++i)
        *reinterpret_cast<uint4*>(b_dst(st, brow0 + kBRowStep * i)) = rb[i].Convert();
    }
  };

  float acc[Tl::MT][Tl::NT][4];
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < Tl::NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  auto compute = [&](int st) {
    const S* as = As + st * kStageA;
    const S* bs = Bs + st * kStageB;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t a[Tl::MT][4], b[Tl::NT][2];
      LoadFragsK<Math, Tl::MT, false>(a, as, wm * Tl::MT * 16, ks, lane);
      LoadFragsBN<Math, Tl::NT, BN>(b, bs, wn * Tl::NT * 8, ks, lane);
#pragma unroll
      for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tl::NT; ++nt) Mma<Math>(acc[mt][nt], a[mt], b[nt]);
    }
  };

  // ---- pipeline ----
  const int ktiles = p.kp / BK;
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < ktiles) {
      issue_a(s, s);
      if constexpr (kAsyncB) {
        load_b(s, s);
      } else if (s < ST - 2) {
        load_b(s, s);
        store_b(s);
      }
    }
    CpAsyncCommit();
  }
  if constexpr (!kAsyncB) {
    if (ST - 2 < ktiles) load_b(ST - 2, 0);
  }
  for (int t = 0; t < ktiles; ++t) {
    CpAsyncWait<ST - 2>();  // this thread's copies of slice t have landed
    __syncthreads();        // everyone's have; everyone is done with slice t - 1
    const int tn = t + ST - 1;
    if constexpr (!kAsyncB) {
      if (tn - 1 < ktiles) store_b((tn - 1) % ST);  // slice t + ST - 2, loaded last iteration
      if (tn < ktiles) load_b(tn, 0);
    }
    if (tn < ktiles) {
      issue_a(tn, tn % ST);
      if constexpr (kAsyncB) load_b(tn, tn % ST);
    }
    CpAsyncCommit();
    if (!(p.fault == 1 && t == 0)) compute(t % ST);
  }

  StoreAccumulators<TOut>(p, g, acc, m0 + wm * Tl::MT * 16 + lane / 4,
                          j0 + wn * Tl::NT * 8 + 2 * (lane % 4));
}

// ============================================================================================
// Implicit GEMMs on wgmma (sm_90a, bf16 operands in bf16 storage, batch a multiple of 8: the
// training path): forward and backward data (TcWgmmaKernel: the GEMM, gather and epilogue of
// TcGemmKernel) and backward filter (TcWgmmaWgradKernel, below TcWgradKernel). What changes
// is who multiplies: each of the block's two warpgroups issues wgmma.mma_async m64nNk16 on
// operands that stay in shared memory (no ldmatrix, no fragment registers), so the tensor
// cores are fed at the rate wgmma was built for rather than at mma.sync's.
// ============================================================================================

// Block tile of the wgmma kernels: kWGM x kWGN warpgroups, each 64 rows x kNW columns (one
// wgmma of N = kNW per K-step of 16); BK = 64 (one 128-byte line of bf16 per filter row);
// kStages of shared memory, kMinBlocks blocks (8 warps each) per multiprocessor.
template <int kWGM, int kWGN, int kNW, int kStages, int kMinBlocks = 1>
struct WgTile {
  static constexpr int WGN = kWGN, NW = kNW, S = kStages, kBlocksPerSM = kMinBlocks;
  static constexpr int BM = 64 * kWGM, BN = kWGN * kNW, BK = 64, T = 256;
  static constexpr int kStageA = BM * BK * 2, kStageB = BK * BN * 2;  // bytes
  // + 1 KiB to align the stages to the swizzle's 1024-byte period
  static constexpr size_t kSmem = size_t(kStages) * (kStageA + kStageB) + 1024;
  static_assert(kWGM * kWGN == 2, "two warpgroups (256 threads)");
  static_assert(kNW == 128 || kNW == 256, "wgmma N");
};
using WgTileL = WgTile<2, 1, 128, 6>;  // 128 x 128, 6 x 32 KiB
using WgTileS = WgTile<1, 2, 128, 5>;  // 64 x 256, 5 x 40 KiB: M <= 64 (conv2's backward data)
using WgTileW = WgTile<2, 1, 256, 4>;  // 128 x 256, 4 x 48 KiB, 128 accumulators per thread
// 128 x 128 in 3 x 32 KiB, two blocks per multiprocessor (124 registers a thread): for GEMMs
// of few K slices (ChooseWgmmaTile), so that a second resident block can multiply while one
// fills its pipeline or writes its tile.
using WgTileL3 = WgTile<2, 1, 128, 3, 2>;

// Shared-memory layouts, both in the 128-byte swizzle of the wgmma canonical layouts (PTX
// ISA, "Shared Memory Matrix Layout"; the emulator decodes the descriptors from the ISA's
// formulas, independently of these): the 16-byte chunk c of a 128-byte line l sits at chunk
// c ^ (l % 8) of its line.
//   A (filters, K-major): row r of the stage is line r (64 bf16 of K); 8-row blocks 1024
//     bytes apart (SBO); a K-step ks starts 32 ks bytes into the lines.
//   B (gathered activations, MN-major): element (k, n) in the 64-column atom n / 64, line
//     k % 8 of k-group k / 8: atom a at 8 KiB a (LBO = 64 k-rows x 128 bytes), k-group at
//     1 KiB (SBO), chunk n % 64 / 8 of the line; a K-step ks starts at 2 KiB ks.
__device__ __forceinline__ uint32_t WgOffsetA(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}
__device__ __forceinline__ uint32_t WgOffsetB(int k, int chunk) {
  return static_cast<uint32_t>((chunk >> 3) * 8192 + (k >> 3) * 1024 + (k & 7) * 128 +
                               (((chunk & 7) ^ (k & 7)) << 4));
}

// The stages of a wgmma kernel in the block's dynamic shared memory, from its first 1024-byte
// boundary (the 128-byte swizzle repeats every 1024 bytes of address): S A-stages, then S
// B-stages.
template <class Tl>
struct WgStages {
  unsigned char* a;
  unsigned char* b;
  uint32_t a_addr, b_addr;  // their shared-memory addresses (for descriptors)
};
template <class Tl>
__device__ __forceinline__ WgStages<Tl> MakeWgStages(unsigned char* smem_raw) {
  WgStages<Tl> s;
  s.a = smem_raw + ((1024u - (tc::SmemAddress(smem_raw) & 1023u)) & 1023u);
  s.b = s.a + Tl::S * Tl::kStageA;
  s.a_addr = tc::SmemAddress(s.a);
  s.b_addr = tc::SmemAddress(s.b);
  return s;
}

// The main loop of both wgmma kernels over ktiles K-slices of 64. issue(kt, st) starts the
// cp.async copies of slice kt into stage st; desc_b(st, ks) is the B descriptor of K-step ks
// of stage st for this thread's warpgroup (A's is the same in both kernels: K-major, rows
// wgm * 64 ..). Slice t waits for its copies (cp.async.wait_group S - 3), a proxy fence and a
// barrier publish them to the tensor cores; slice t + S - 2 is issued into the stage of slice
// t - 2, whose wgmma every warpgroup retired before that barrier (wait_group 1 at the end of
// each iteration); then slice t's four wgmma are issued and committed, and they run while the
// next iteration waits for its copies. On return the accumulators d are complete.
template <class Tl, int kTransB, class Issue, class DescB>
__device__ __forceinline__ void WgmmaMainLoop(int ktiles, int fault, uint32_t a_addr, int wgm,
                                              const Issue& issue, const DescB& desc_b,
                                              float (&d)[Tl::NW / 2]) {
  constexpr int ST = Tl::S;
  static_assert(ST >= 3, "the refill distance is S - 2 slices");
#pragma unroll
  for (int s = 0; s < ST - 2; ++s) {
    if (s < ktiles) issue(s, s);
    CpAsyncCommit();
  }
  for (int t = 0; t < ktiles; ++t) {
    CpAsyncWait<ST - 3>();  // this thread's copies of slice t have landed
    tc::FenceProxyAsync();  // ... and are visible to the tensor cores' (async proxy) reads
    __syncthreads();        // everyone's; every warpgroup has retired slice t - 2
    const int tn = t + ST - 2;
    if (tn < ktiles) issue(tn, tn % ST);
    CpAsyncCommit();
    const int st = t % ST;
    tc::WgmmaFence();
    if (!(fault == 1 && t == 0)) {
#pragma unroll
      for (int ks = 0; ks < Tl::BK / 16; ++ks) {
        const uint64_t da =
            tc::SmemDesc128B(a_addr + st * Tl::kStageA + wgm * 64 * 128 + ks * 32, 16, 1024);
        if constexpr (Tl::NW == 128)
          tc::WgmmaBf16N128<kTransB>(d, da, desc_b(st, ks));
        else
          tc::WgmmaBf16N256<kTransB>(d, da, desc_b(st, ks));
      }
    }
    tc::WgmmaCommit();
    tc::WgmmaWait<1>();  // slice t - 1's products are done: its stage is free after the barrier
  }
  tc::WgmmaWait<0>();
  tc::WgmmaFenceOperands(d);
}

// Kernel TcWgmmaKernel<Tl, TOut>
//   in : (G*cg) x h x w x n   CHWN bf16, n % 8 == 0, 16-byte aligned
//   at : G x mp x kp          bf16 filters, K contiguous, kp a multiple of 64
//   out: (G*m) x out_h x out_w x n   CHWN, storage TOut; + bias, ReLU (forward)
// Grid as TcGemmKernel. Block: 256 threads = warpgroups wg = 0, 1 at (wg / WGN, wg % WGN)
// of the block tile; B (the gathered activations) MN-major. Pipeline: WgmmaMainLoop.
template <class Tl, class TOut>
__global__ void __launch_bounds__(256, Tl::kBlocksPerSM) TcWgmmaKernel(const TcGemmParams p) {
#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BN = Tl::BN, BK = Tl::BK, T = Tl::T;
  constexpr int kRowChunksB = BN / 8;
  constexpr int kAChunks = Tl::BM * (BK / 8) / T, kBChunks = BK * kRowChunksB / T;
  constexpr int kBRowStep = T / kRowChunksB;

  COLONNADE_DYNAMIC_SMEM(smem_raw);
  const WgStages<Tl> sm = MakeWgStages<Tl>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int wgm = wg / Tl::WGN, wgn = wg % Tl::WGN;
  const int g = blockIdx.z;
  const int j0 = blockIdx.x * BN;
  const int m0 = blockIdx.y * Tl::BM;
  const int hwn = p.h * p.w * p.n;
  const __nv_bfloat16* in =
      static_cast<const __nv_bfloat16*>(p.in) + static_cast<int64_t>(g) * p.cg * hwn;
  const uint16_t* at =
      static_cast<const uint16_t*>(p.at) + (static_cast<int64_t>(g) * p.mp + m0) * p.kp;

  // Loaders: A chunk q = tid + T i is (row q / 8, chunk q % 8); B: a fixed column chunk (8
  // images of one pixel) per thread, K-rows brow0 + kBRowStep i.
  const int bcc = tid % kRowChunksB, brow0 = tid / kRowChunksB;
  const GatherColumn col = MakeColumn(p, j0 + bcc * 8);
  auto issue = [&](int kt, int st) {
    unsigned char* const as = sm.a + st * Tl::kStageA;
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int q = tid + T * i, row = q / 8, c = q % 8;
      CpAsync16(as + WgOffsetA(row, c), at + static_cast<int64_t>(row) * p.kp + kt * BK + c * 8,
                true);
    }
    unsigned char* const bs = sm.b + st * Tl::kStageB;
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      const int row = brow0 + kBRowStep * i;
      bool ok;
      const int off = GatherOffset(p, hwn, MakeTap(p, kt * BK + row), col, &ok);
      CpAsync16(bs + WgOffsetB(row, bcc), ok ? in + off : in, ok);
    }
  };
  auto desc_b = [&](int st, int ks) {
    return tc::SmemDesc128B(sm.b_addr + st * Tl::kStageB + wgn * (Tl::NW / 64) * 8192 + ks * 2048,
                            8192, 1024);
  };

  float acc[1][Tl::NW / 8][4];
  float(&d)[Tl::NW / 2] = *reinterpret_cast<float(*)[Tl::NW / 2]>(&acc[0][0][0]);
#pragma unroll
  for (int i = 0; i < Tl::NW / 2; ++i) d[i] = 0.0f;
  WgmmaMainLoop<Tl, 1>(p.kp / BK, p.fault, sm.a_addr, wgm, issue, desc_b, d);
  StoreAccumulators<TOut>(p, g, acc, m0 + wgm * 64 + (warp % 4) * 16 + lane / 4,
                          j0 + wgn * Tl::NW + 2 * (lane % 4));
#endif
}

// Kernel TcArrangeWeightsKernel: the filter operand of TcGemmKernel
//   at : G x mp x kp (bf16 bits, or tf32-rounded float bits), at[g][m][k] = W(g, m, k), zero
//        beyond m or k. Forward: W(g, f, (c,ky,kx)) = w[g*M+f][c][ky][kx]. Backward data
//        (transposed): rows are input channels, k = (f, ty, tx) over the group's filters and
//        the taps of one stride phase, flipped (as ArrangeWeightsKernel in conv_kernels.cu).
// Grid-stride loop, one thread per element of at (writes coalesce along k).
struct TcArrangeParams {
  const float* w;
  void* at;
  int groups, fg, cg, kh, kw;
  int tkh, tkw, ky0, kx0, step;
  int m, k, kp, mp;
  int transposed, tf32;
};

__global__ void TcArrangeWeightsKernel(const TcArrangeParams p) {
  const int64_t total = static_cast<int64_t>(p.groups) * p.mp * p.kp;
  const int khkw = p.kh * p.kw, taps = p.tkh * p.tkw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int kk = static_cast<int>(i % p.kp);
    const int mm = static_cast<int>((i / p.kp) % p.mp);
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
    if (p.tf32) {
      static_cast<uint32_t*>(p.at)[i] = Tf32Round(v);
    } else {
      static_cast<uint16_t*>(p.at)[i] = FloatToBf16(v);
    }
  }
}

// ============================================================================================
// Backward filter.
// ============================================================================================
struct TcWgradParams {
  const void* x;   // (G*cg) x h x w x n, storage TX
  const void* dy;  // (G*m) x oh x ow x n, storage TD
  float* out;      // splits == 1: dw, (G*m) x ncol; else workspace G x splits x m x ncol
  int n, h, w, oh, ow, kh, kw, stride, pad_h, pad_w;
  int cg, m, ncol, jtot;  // ncol = cg*kh*kw, jtot = oh*ow*n (the reduction length)
  int splits, ksplit;     // ksplit: reduction length per split, a multiple of BK
  int pair_out;           // ncol even and out 8-byte aligned: float2 stores
  int fault;              // tests: 1 skips the first K slice
  FastDiv div_n, div_ow, div_kw, div_khkw;
};

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

// Kernel TcWgradKernel<Math, Tl, TX, TD, kVec>
//   x  : (G*cg) x h x w x n (TX),  dy : (G*m) x oh x ow x n (TD)   (CHWN)
//   out: dw[(g*m + f)][(c*kh + ky)*kw + kx] (FP32; or the split-K workspace, same rows)
// GEMM per group: rows f, columns (c, ky, kx), reduction over j = (oy, ox, img) in
// [split*ksplit, min(jtot, (split+1)*ksplit)). Both operands are K-contiguous tiles:
// As[BM][BK] = dy rows, Bs[BN][BK] = x gathered at the taps of BN columns.
// Grid: x = ceil(ncol / BN), y = ceil(m / BM), z = G * splits. Block: Tl::T threads; thread t
// loads A chunks (rows t / 4 + (T/4)*i, chunk t % 4) and B chunks (columns t / 4 + (T/4)*i,
// chunk t % 4): one j range per thread and slice, decomposed once (kVec: E images of one
// pixel) or per element.
// Long because, as in TcGemmKernel, the pipeline stages, the multiply and the split-K store
// share fragment registers; each part is a commented block below.
template <class Math, class Tl, class TX, class TD, bool kVec>
__global__ void __launch_bounds__(Tl::T, Tl::kBlocksPerSM) TcWgradKernel(const TcWgradParams p) {
  using S = typename Math::Smem;
  constexpr int E = Math::kE, BK = 2 * Math::kMmaK;
  constexpr int BM = Tl::BM, BN = Tl::BN, T = Tl::T, ST = Tl::S;
  constexpr int kRC = BK / E;  // 4 chunks per row
  constexpr int kRowStep = T / kRC;
  constexpr int kAChunks = BM / kRowStep, kBChunks = BN / kRowStep;
  constexpr bool kAsyncA = kVec && sizeof(TD) == sizeof(S);
  constexpr bool kAsyncB = kVec && sizeof(TX) == sizeof(S);
  constexpr int kStageA = BM * BK, kStageB = BN * BK;
  static_assert(BM % kRowStep == 0 && BN % kRowStep == 0, "rows per thread");

  COLONNADE_DYNAMIC_SMEM(smem_raw);
  S* const As = reinterpret_cast<S*>(smem_raw);
  S* const Bs = As + ST * kStageA;

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / Tl::WN, wn = warp % Tl::WN;
  const int g = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int c0 = blockIdx.x * BN;
  const int m0 = blockIdx.y * BM;
  const int kbeg = split * p.ksplit;
  const int kend = IMin(p.jtot, kbeg + p.ksplit);
  const int hwn = p.h * p.w * p.n;
  const TX* x = static_cast<const TX*>(p.x) + static_cast<int64_t>(g) * p.cg * hwn;
  const TD* dy = static_cast<const TD*>(p.dy) + static_cast<int64_t>(g) * p.m * p.jtot;

  const int cc = tid % kRC;    // this thread's chunk within a row (fixed)
  const int row0 = tid / kRC;  // rows row0 + kRowStep * i
  // B rows: filter taps (c, ky, kx) of columns c0 + row0 + kRowStep * i.
  WgradTap bt[kBChunks];
#pragma unroll
  for (int i = 0; i < kBChunks; ++i) bt[i] = MakeWgradTap(p, c0 + row0 + kRowStep * i, hwn);
  bool aok[kAChunks];
  const TD* arow[kAChunks];
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int row = m0 + row0 + kRowStep * i;
    aok[i] = row < p.m;
    arow[i] = dy + static_cast<int64_t>(aok[i] ? row : 0) * p.jtot;
  }

  RawChunk<Math, TD> ra[kAsyncA ? 1 : kAChunks];
  RawChunk<Math, TX> rb[kAsyncB ? 1 : kBChunks];
  auto a_dst = [&](int st, int i) {
    const int row = row0 + kRowStep * i;
    return As + st * kStageA + row * BK + SwizzleK<kRC>(row, cc) * E;
  };
  auto b_dst = [&](int st, int i) {
    const int row = row0 + kRowStep * i;
    return Bs + st * kStageB + row * BK + SwizzleK<kRC>(row, cc) * E;
  };
  auto load = [&](int kt, int st) {
    const int jj = kbeg + kt * BK + cc * E;
    // A: dy rows, contiguous along j.
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      if constexpr (kVec) {
        const bool ok = aok[i] && jj < kend;
        if constexpr (kAsyncA) {
          CpAsync16(a_dst(st, i), ok ? arow[i] + jj : arow[i], ok);
        } else if (ok) {
          ra[i].LoadVec(arow[i] + jj);
        } else {
          ra[i].Zero();
        }
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e) {
          const bool ok = aok[i] && jj + e < kend;
          ra[i].LoadOne(e, arow[i] + (ok ? jj + e : 0), ok);
        }
      }
    }
    // B: x gathered at this thread's taps.
    if constexpr (kVec) {
      const GatherColumn col = MakeColumnBelow(p, jj, kend);
#pragma unroll
      for (int i = 0; i < kBChunks; ++i) {
        bool ok;
        const int off = WgradOffset(p, bt[i], col, &ok);
        if constexpr (kAsyncB) {
          CpAsync16(b_dst(st, i), ok ? x + off : x, ok);
        } else if (ok) {
          rb[i].LoadVec(x + off);
        } else {
          rb[i].Zero();
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const GatherColumn col = MakeColumnBelow(p, jj + e, kend);
#pragma unroll
        for (int i = 0; i < kBChunks; ++i) {
          bool ok;
          const int off = WgradOffset(p, bt[i], col, &ok);
          rb[i].LoadOne(e, x + (ok ? off : 0), ok);
        }
      }
    }
  };
  auto store = [&](int st) {
    if constexpr (!kAsyncA) {
#pragma unroll
      for (int i = 0; i < kAChunks; ++i) *reinterpret_cast<uint4*>(a_dst(st, i)) = ra[i].Convert();
    }
    if constexpr (!kAsyncB) {
#pragma unroll
      for (int i = 0; i < kBChunks; ++i) *reinterpret_cast<uint4*>(b_dst(st, i)) = rb[i].Convert();
    }
  };
  constexpr bool kStaged = !kAsyncA || !kAsyncB;

  float acc[Tl::MT][Tl::NT][4];
#pragma unroll
  for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < Tl::NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  auto compute = [&](int st) {
    const S* as = As + st * kStageA;
    const S* bs = Bs + st * kStageB;
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t a[Tl::MT][4], b[Tl::NT][2];
      LoadFragsK<Math, Tl::MT, true>(a, as, wm * Tl::MT * 16, ks, lane);
      LoadFragsBK<Math, Tl::NT>(b, bs, wn * Tl::NT * 8, ks, lane);
#pragma unroll
      for (int mt = 0; mt < Tl::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < Tl::NT; ++nt) Mma<Math>(acc[mt][nt], a[mt], b[nt]);
    }
  };

  const int ktiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  // Prologue: slices 0 .. ST-2 (the staged operands of slices < ST-2 stored right away, that
  // of slice ST-2 kept in registers); the cp.async ones in groups 0 .. ST-2.
#pragma unroll
  for (int s = 0; s < ST - 1; ++s) {
    if (s < ktiles && (!kStaged || s < ST - 2)) {
      load(s, s);
      store(s);
    } else if (s < ktiles) {
      load(s, s);  // s == ST - 2: cp.async parts issued, staged parts kept in registers
    }
    CpAsyncCommit();
  }
  for (int t = 0; t < ktiles; ++t) {
    CpAsyncWait<ST - 2>();
    __syncthreads();
    const int tn = t + ST - 1;
    if constexpr (kStaged) {
      if (tn - 1 < ktiles) store((tn - 1) % ST);
    }
    if (tn < ktiles) load(tn, tn % ST);
    CpAsyncCommit();
    if (!(p.fault == 1 && t == 0)) compute(t % ST);
  }

  // ---- epilogue: FP32 partial sums ----
  StoreWgradAccumulators(p, (static_cast<int64_t>(g) * p.splits + split) * p.m, acc,
                         m0 + wm * Tl::MT * 16 + lane / 4, c0 + wn * Tl::NT * 8 + 2 * (lane % 4));
}

// Kernel TcWgmmaWgradKernel<Tl>: backward filter on wgmma (sm_90a), bf16 x and dy, n % 8 == 0,
// both 16-byte aligned. The GEMM, grid, split-K and epilogue of TcWgradKernel; both operands
// K-major (the reduction index j = (oy, ox, img) is contiguous in dy's rows and, 8 images at
// a time, in x at each tap), in the 128-byte-swizzled layout of WgOffsetA: A = dy rows, B =
// x gathered for BN filter columns (c, ky, kx). Thread t copies chunk t % 8 (8 images of one
// pixel) of rows t / 8 + 32 i of each. Pipeline: WgmmaMainLoop.
template <class Tl>
__global__ void __launch_bounds__(256, Tl::kBlocksPerSM) TcWgmmaWgradKernel(const TcWgradParams p) {
#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BK = Tl::BK, kRowStep = Tl::T / 8;
  constexpr int kAChunks = Tl::BM / kRowStep, kBChunks = Tl::BN / kRowStep;

  COLONNADE_DYNAMIC_SMEM(smem_raw);
  const WgStages<Tl> sm = MakeWgStages<Tl>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int wgm = wg / Tl::WGN, wgn = wg % Tl::WGN;
  const int g = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int c0 = blockIdx.x * Tl::BN;
  const int m0 = blockIdx.y * Tl::BM;
  const int kbeg = split * p.ksplit;
  const int kend = IMin(p.jtot, kbeg + p.ksplit);
  const int hwn = p.h * p.w * p.n;
  const __nv_bfloat16* x =
      static_cast<const __nv_bfloat16*>(p.x) + static_cast<int64_t>(g) * p.cg * hwn;
  const __nv_bfloat16* dy =
      static_cast<const __nv_bfloat16*>(p.dy) + static_cast<int64_t>(g) * p.m * p.jtot;

  const int cc = tid % 8, row0 = tid / 8;
  WgradTap bt[kBChunks];
#pragma unroll
  for (int i = 0; i < kBChunks; ++i) bt[i] = MakeWgradTap(p, c0 + row0 + kRowStep * i, hwn);
  bool aok[kAChunks];
  const __nv_bfloat16* arow[kAChunks];
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int row = m0 + row0 + kRowStep * i;
    aok[i] = row < p.m;
    arow[i] = dy + static_cast<int64_t>(aok[i] ? row : 0) * p.jtot;
  }
  auto issue = [&](int kt, int st) {
    const int jj = kbeg + kt * BK + cc * 8;
    unsigned char* const as = sm.a + st * Tl::kStageA;
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const bool ok = aok[i] && jj < kend;
      CpAsync16(as + WgOffsetA(row0 + kRowStep * i, cc), ok ? arow[i] + jj : arow[i], ok);
    }
    const GatherColumn col = MakeColumnBelow(p, jj, kend);
    unsigned char* const bs = sm.b + st * Tl::kStageB;
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      bool ok;
      const int off = WgradOffset(p, bt[i], col, &ok);
      CpAsync16(bs + WgOffsetA(row0 + kRowStep * i, cc), ok ? x + off : x, ok);
    }
  };
  auto desc_b = [&](int st, int ks) {
    return tc::SmemDesc128B(sm.b_addr + st * Tl::kStageB + wgn * Tl::NW * 128 + ks * 32, 16, 1024);
  };

  float acc[1][Tl::NW / 8][4];
  float(&d)[Tl::NW / 2] = *reinterpret_cast<float(*)[Tl::NW / 2]>(&acc[0][0][0]);
#pragma unroll
  for (int i = 0; i < Tl::NW / 2; ++i) d[i] = 0.0f;
  const int ktiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  WgmmaMainLoop<Tl, 0>(ktiles, p.fault, sm.a_addr, wgm, issue, desc_b, d);
  StoreWgradAccumulators(p, (static_cast<int64_t>(g) * p.splits + split) * p.m, acc,
                         m0 + wgm * 64 + (warp % 4) * 16 + lane / 4,
                         c0 + wgn * Tl::NW + 2 * (lane % 4));
#endif
}

// Kernel TcReduceSplitsKernel: dw[g][r] = sum_{s < splits} ws[g][s][r] in order s = 0, 1, ...
// (FP32, a fixed order: deterministic). Grid-stride loop, one thread per element of dw.
struct TcReduceParams {
  const float* ws;
  float* dw;
  int groups, splits;
  int64_t per_group;
};
__global__ void TcReduceSplitsKernel(const TcReduceParams p) {
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

// ---- float <-> bf16 ----------------------------------------------------------------------------
struct ConvertParams {
  const void* x;
  void* y;
  int64_t n;
};
__global__ void FloatToBf16Kernel(const ConvertParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    static_cast<uint16_t*>(p.y)[i] = FloatToBf16(static_cast<const float*>(p.x)[i]);
}
// Four elements per thread (16-byte loads, 8-byte stores): a bandwidth-bound pass that the
// bf16 training step runs once per convolution operand (CudaOps::ConvLayerForward/Backward).
__global__ void FloatToBf16x4Kernel(const ConvertParams p) {
  const int64_t n4 = p.n / 4;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float4 v = static_cast<const float4*>(p.x)[i];
    uint2 o;
    o.x = uint32_t(FloatToBf16(v.x)) | (uint32_t(FloatToBf16(v.y)) << 16);
    o.y = uint32_t(FloatToBf16(v.z)) | (uint32_t(FloatToBf16(v.w)) << 16);
    static_cast<uint2*>(p.y)[i] = o;
  }
}
__global__ void Bf16ToFloatKernel(const ConvertParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    static_cast<float*>(p.y)[i] = Bf16ToFloat(static_cast<const uint16_t*>(p.x)[i]);
}

// ---- host-side dispatch ---------------------------------------------------------------------

bool Aligned(const void* p, size_t bytes) { return (reinterpret_cast<uintptr_t>(p) % bytes) == 0; }

dim3 GridFor(const DeviceContext& ctx, int64_t n) {
  return dim3(static_cast<unsigned>(std::max<int64_t>(
      1, std::min<int64_t>(CeilDiv(n, 256), static_cast<int64_t>(ctx.sm_count) * 16))));
}

void CheckSizes(const ConvDims& d) {
  const int64_t lim = int64_t(1) << 31;
  CHECK(int64_t(d.c) * d.h * d.w * d.n < lim && int64_t(d.f) * d.oh * d.ow * d.n < lim)
      << "convolution tensors must have fewer than 2^31 elements";
}

size_t StorageBytes(StorageType t) { return t == StorageType::kBF16 ? 2 : 4; }
int ChunkElems(MathMode m) { return m == MathMode::kBF16 ? 8 : 4; }
int SliceK(MathMode m) { return m == MathMode::kBF16 ? 32 : 16; }

template <class Tl, class Math>
constexpr size_t GemmSmem() {
  return size_t(Tl::S) * (Tl::BM + Tl::BN) * 2 * Math::kMmaK * sizeof(typename Math::Smem);
}

// Kernel pointers by run-time choice. Storage types: float or __nv_bfloat16.
using GemmFn = void (*)(TcGemmParams);
using WgradFn = void (*)(TcWgradParams);

template <class Math, class Tl, class TIn, class TOut>
GemmFn GemmFor(bool vec) {
  return vec ? TcGemmKernel<Math, Tl, TIn, TOut, true> : TcGemmKernel<Math, Tl, TIn, TOut, false>;
}
template <class Math, class Tl, class TIn>
GemmFn GemmFor(StorageType out, bool vec) {
  return out == StorageType::kBF16 ? GemmFor<Math, Tl, TIn, __nv_bfloat16>(vec)
                                   : GemmFor<Math, Tl, TIn, float>(vec);
}
template <class Math, class Tl>
GemmFn GemmFor(StorageType in, StorageType out, bool vec) {
  return in == StorageType::kBF16 ? GemmFor<Math, Tl, __nv_bfloat16>(out, vec)
                                  : GemmFor<Math, Tl, float>(out, vec);
}

template <class Math, class Tl, class TX, class TD>
WgradFn WgradFor(bool vec) {
  return vec ? TcWgradKernel<Math, Tl, TX, TD, true> : TcWgradKernel<Math, Tl, TX, TD, false>;
}
template <class Math, class Tl, class TX>
WgradFn WgradFor(StorageType dy, bool vec) {
  return dy == StorageType::kBF16 ? WgradFor<Math, Tl, TX, __nv_bfloat16>(vec)
                                  : WgradFor<Math, Tl, TX, float>(vec);
}
template <class Math, class Tl>
WgradFn WgradFor(StorageType x, StorageType dy, bool vec) {
  return x == StorageType::kBF16 ? WgradFor<Math, Tl, __nv_bfloat16>(dy, vec)
                                 : WgradFor<Math, Tl, float>(dy, vec);
}

// ---- tile choice ----
// 0: automatic; mma.sync tiles 1: 128 x 128, 2: 64 x 128, 3: 128 x 256 (automatic: the row
// tile that pads the fewest rows, ties to the larger: 128 x 128 for M = 96, 128, 256, 384;
// 64 x 128 for M = 48, 64, 192); wgmma tiles (bf16 math on bf16 operands, batch a multiple
// of 8; otherwise the automatic mma.sync tile) 4: 128 x 128, 5: 64 x 256, 6: 128 x 256,
// 7: 128 x 128 in 3 stages, two blocks per multiprocessor (automatic: ChooseWgmmaTile).
// Also COLONNADE_TC_TILE=128x128|64x128|128x256|wg128x128|wg64x256|wg128x256|wg128x128s3, and
// COLONNADE_TC_SHORTK=S: the most K slices of 64 for which the automatic choice takes tile 7
// (kShortKSlices; 0: never). The automatic choice takes wgmma where it applies unless turned off
// (SetTcWgmma(false), COLONNADE_TC_WGMMA=0); on the CPU emulator it is off unless asked for,
// as an emulated wgmma costs 128 fibers' scalar products and the emulator's whole-net tests
// would take several times longer (TcWgmmaTest asks for it; src/cuda/TC_NOTES.md).
std::mutex g_tile_mu;
int g_tile = -1;
int g_wgmma = -1;
#if defined(COLONNADE_CUDA_EMULATE)
constexpr int kWgmmaByDefault = 0;
#else
constexpr int kWgmmaByDefault = 1;
#endif
constexpr int kShortKSlices = 4;  // ChooseWgmmaTile

int TileSetting() {
  std::lock_guard<std::mutex> lock(g_tile_mu);
  if (g_tile < 0) {
    const char* e = std::getenv("COLONNADE_TC_TILE");
    const std::string v = e == nullptr ? "" : e;
    const char* names[] = {"",          "128x128",  "64x128",    "128x256",
                           "wg128x128", "wg64x256", "wg128x256", "wg128x128s3"};
    g_tile = 0;
    for (int i = 1; i < 8; ++i)
      if (v == names[i]) g_tile = i;
  }
  return g_tile;
}

bool WgmmaAuto() {
  std::lock_guard<std::mutex> lock(g_tile_mu);
  if (g_wgmma < 0) {
    const char* e = std::getenv("COLONNADE_TC_WGMMA");
    const std::string v = e == nullptr ? "" : e;
    g_wgmma = v == "1" ? 1 : v == "0" ? 0 : kWgmmaByDefault;
  }
  return g_wgmma == 1;
}

// Whether this process can run the wgmma kernels: built for sm_90a (the build defines
// COLONNADE_WGMMA_BUILT when CMAKE_CUDA_ARCHITECTURES holds 90a) and the device is a
// compute capability 9.0 part (sm_90a code runs on no other). Always on the emulator.
bool WgmmaAvailable() {
#if defined(COLONNADE_CUDA_EMULATE)
  return true;
#elif defined(COLONNADE_WGMMA_BUILT)
  static const bool ok = [] {
    int dev = 0;
    cudaDeviceProp prop{};
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaGetDeviceProperties(&prop, dev) == cudaSuccess && prop.major == 9 && prop.minor == 0;
  }();
  return ok;
#else
  return false;
#endif
}

// The mma.sync tile for M rows: the setting, or the one that pads fewer rows.
int ChooseTile(int m) {
  const int t = TileSetting();
  if (t >= 1 && t <= 3) return t;
  return CeilDiv(m, TileS::BM) * TileS::BM < CeilDiv(m, TileL::BM) * TileL::BM ? 2 : 1;
}
// The wgmma tile (4-7) for an M x N GEMM (`groups` of them side by side), or 0 for mma.sync;
// eligible: bf16 math on bf16 operands with 16-byte chunk loads. Automatic: the tile whose
// padded M x N area is smallest, ties to 128 x 256, then 128 x 128. bench_layers on an H100
// (2026-12-05, experiments/mixed_precision/results_layers/bench_layers_bf16_9a8f4df.log):
// 128 x 256 was the fastest wgmma tile on every AlexNet GEMM where it pads no more than the
// others, by 5-25%; 64 x 256 where M <= 64 (conv2's backward data: 0.65 ms, 128 x 128 0.90);
// 128 x 128 where N pads less (conv1's backward filter, N = 363: 0.25 ms, 128 x 256 0.29).
// Not 128 x 256 for a forward or backward-data GEMM whose blocks would leave multiprocessors
// idle (one block per multiprocessor; backward filter fills them by splitting K).
// A forward or backward-data GEMM of at most ShortKSlices() slices of 64 (1 x 1
// convolutions of 64-256 channels: 1-4 slices) takes tile 7 instead of 128 x 128 or
// 128 x 256, so that two blocks share a multiprocessor. Measured on an H100
// (experiments/mixed_precision/results_layers/shortk_b219d93.jsonl): GoogLeNet +3% (its
// inception reductions), ResNet-50 and AlexNet unchanged; ResNet-50's K = 64 GEMMs (46
// TFLOP/s) are no faster with two resident blocks, so their pipeline fill is not what
// bounds them (TC_NOTES.md).
int ShortKSlices() {
  static const int v = [] {
    const char* e = std::getenv("COLONNADE_TC_SHORTK");
    return e == nullptr ? kShortKSlices : std::atoi(e);
  }();
  return v;
}
int ChooseWgmmaTile(int64_t m, int64_t n, int64_t k, int64_t groups, int sms, bool split_k,
                    bool eligible) {
  if (!eligible || !WgmmaAvailable()) return 0;
  const int t = TileSetting();
  if (t >= 4) return t;
  if (t != 0 || !WgmmaAuto()) return 0;
  struct Candidate {
    int tile, bm, bn;
  };
  const Candidate order[] = {
      {6, WgTileW::BM, WgTileW::BN}, {4, WgTileL::BM, WgTileL::BN}, {5, WgTileS::BM, WgTileS::BN}};
  int best = 0;
  int64_t best_area = 0;
  for (const Candidate& c : order) {
    const int64_t rows = CeilDiv(m, c.bm), cols = CeilDiv(n, c.bn);
    if (c.tile == 6 && !split_k && rows * cols * groups < sms) continue;
    const int64_t area = rows * c.bm * cols * c.bn;
    if (best == 0 || area < best_area) {
      best = c.tile;
      best_area = area;
    }
  }
  if (!split_k && best != 5 && CeilDiv(k, int64_t(WgTileL::BK)) <= ShortKSlices()) return 7;
  return best;
}

struct Picked {
  GemmFn gemm = nullptr;
  WgradFn wgrad = nullptr;
  size_t smem = 0;
  int bm = 0, bn = 0, stages = 0, threads = 0;
};
template <class Math, class Tl>
Picked PickFor(bool wgrad, StorageType a, StorageType b, bool vec) {
  Picked r;
  if (wgrad)
    r.wgrad = WgradFor<Math, Tl>(a, b, vec);
  else
    r.gemm = GemmFor<Math, Tl>(a, b, vec);
  r.smem = GemmSmem<Tl, Math>();
  r.bm = Tl::BM;
  r.bn = Tl::BN;
  r.stages = Tl::S;
  r.threads = Tl::T;
  return r;
}
template <class Math>
Picked PickMath(int tile, bool wgrad, StorageType a, StorageType b, bool vec) {
  if (tile == 2) return PickFor<Math, TileS>(wgrad, a, b, vec);
  if (tile == 3) return PickFor<Math, TileW>(wgrad, a, b, vec);
  return PickFor<Math, TileL>(wgrad, a, b, vec);
}
// a, b: storage of (in, out) for the GEMM kernel, of (x, dy) for the wgrad kernel.
Picked Pick(MathMode math, int m, bool wgrad, StorageType a, StorageType b, bool vec) {
  CHECK(math == MathMode::kBF16 || math == MathMode::kTF32) << "tensor-core math mode";
  const int tile = ChooseTile(m);
  return math == MathMode::kBF16 ? PickMath<Bf16Math>(tile, wgrad, a, b, vec)
                                 : PickMath<Tf32Math>(tile, wgrad, a, b, vec);
}
template <class Tl>
Picked PickWgmmaFor(bool wgrad, StorageType out) {
  Picked r;
  if (wgrad)
    r.wgrad = TcWgmmaWgradKernel<Tl>;
  else if (out == StorageType::kBF16)
    r.gemm = TcWgmmaKernel<Tl, __nv_bfloat16>;
  else
    r.gemm = TcWgmmaKernel<Tl, float>;
  r.smem = Tl::kSmem;
  r.bm = Tl::BM;
  r.bn = Tl::BN;
  r.stages = Tl::S;
  r.threads = Tl::T;
  return r;
}
// out: the GEMM kernel's output storage (wgrad: dw is FP32).
Picked PickWgmma(int tile, bool wgrad, StorageType out) {
  if (tile == 5) return PickWgmmaFor<WgTileS>(wgrad, out);
  if (tile == 6) return PickWgmmaFor<WgTileW>(wgrad, out);
  if (tile == 7) return PickWgmmaFor<WgTileL3>(wgrad, out);
  return PickWgmmaFor<WgTileL>(wgrad, out);
}

// Runs one implicit GEMM (forward, or one phase of backward data): arranges the filter
// operand described by `ap` and launches. Row tile: PickBM.
TcLaunchInfo RunTcGemm(const DeviceContext& ctx, MathMode math, TcGemmParams q, int groups,
                       TcArrangeParams ap, StorageType in_type, StorageType out_type) {
  const bool bf16 = math == MathMode::kBF16;
  const int E = ChunkElems(math);
  const bool vec = q.n % E == 0 && Aligned(q.in, 16);
  const int wg_tile = ChooseWgmmaTile(q.m, q.j, q.k, groups, ctx.sm_count, /*split_k=*/false,
                                      bf16 && in_type == StorageType::kBF16 && vec);
  const int BK = wg_tile != 0 ? WgTileL::BK : SliceK(math);
  const Picked pk = wg_tile != 0 ? PickWgmma(wg_tile, false, out_type)
                                 : Pick(math, q.m, false, in_type, out_type, vec);
  TcLaunchInfo info;
  info.bm = pk.bm;
  info.bn = pk.bn;
  info.stages = pk.stages;
  info.vec = vec;
  info.wgmma = wg_tile != 0;
  q.kp = static_cast<int>(CeilDiv(q.k, BK) * BK);
  q.mp = static_cast<int>(CeilDiv(q.m, info.bm) * info.bm);
  q.plain = (q.out_s == 1 && q.out_oy == 0 && q.out_ox == 0 && q.out_h == q.oh && q.out_w == q.ow)
                ? 1
                : 0;
  const size_t ob = StorageBytes(out_type);
  q.pair_out = ((q.plain ? q.j % 2 == 0 : q.n % 2 == 0) && Aligned(q.out, 2 * ob)) ? 1 : 0;
  const size_t elem = bf16 ? 2 : 4;
  Scratch at(ctx.alloc, elem * size_t(groups) * q.kp * q.mp);
  ap.at = at.f();
  ap.m = q.m;
  ap.k = q.k;
  ap.kp = q.kp;
  ap.mp = q.mp;
  ap.tf32 = bf16 ? 0 : 1;
  Launch(TcArrangeWeightsKernel, GridFor(ctx, int64_t(groups) * q.kp * q.mp), dim3(256), ctx.stream,
         ap);
  q.at = at.f();
  q.div_n = FastDiv(q.n);
  q.div_ow = FastDiv(q.ow);
  q.div_kw = FastDiv(q.kw);
  q.div_khkw = FastDiv(q.kh * q.kw);
  const dim3 grid(static_cast<unsigned>(CeilDiv(q.j, info.bn)),
                  static_cast<unsigned>(q.mp / info.bm), static_cast<unsigned>(groups));
  LaunchDynamicSmem(pk.gemm, grid, dim3(pk.threads), pk.smem, ctx.stream, q);
  return info;
}

}  // namespace

void SetTcTile(int tile) {
  std::lock_guard<std::mutex> lock(g_tile_mu);
  g_tile = tile;
}

void SetTcWgmma(bool on) {
  std::lock_guard<std::mutex> lock(g_tile_mu);
  g_wgmma = on ? 1 : 0;
}

bool TcWgmmaAvailable() { return WgmmaAvailable(); }

bool TcWgmmaEnabled() { return WgmmaAuto() && WgmmaAvailable(); }

const char* MathModeName(MathMode m) {
  switch (m) {
    case MathMode::kFP32:
      return "fp32";
    case MathMode::kTF32:
      return "tf32";
    case MathMode::kBF16:
      return "bf16";
  }
  return "?";
}

TcLaunchInfo ConvForwardTc(const DeviceContext& ctx, const TcConvArgs& a) {
  const ConvDims& d = a.dims;
  const ConvParams& p = a.conv;
  CheckSizes(d);
  const int groups = p.groups;
  TcGemmParams q{};
  q.in = a.x.data;
  q.out = a.y.data;
  q.bias = a.bias;
  q.relu = a.relu ? 1 : 0;
  q.fault = a.fault;
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
  TcArrangeParams ap{};
  ap.w = a.w;
  ap.groups = groups;
  ap.fg = q.m;
  ap.cg = q.cg;
  ap.kh = ap.tkh = q.kh;
  ap.kw = ap.tkw = q.kw;
  ap.step = 1;
  ap.transposed = 0;
  return RunTcGemm(ctx, a.math, q, groups, ap, a.x.type, a.y.type);
}

// Stride phases as in ConvBackwardDataGpu (conv_kernels.cu): the input pixels (ry + s*qy,
// rx + s*qx) of phase (ry, rx) receive only the taps ky = ky0 + s*t, ky0 = (ry + pad) mod s,
// from a stride-1 convolution of dy; each phase is one GEMM writing its pixels in place,
// phases that no tap reaches are zeros.
TcLaunchInfo ConvBackwardDataTc(const DeviceContext& ctx, const TcConvArgs& a) {
  const ConvDims& d = a.dims;
  const ConvParams& p = a.conv;
  CheckSizes(d);
  CHECK(a.bias == nullptr && !a.relu) << "backward data has no epilogue";
  const int groups = p.groups, s = p.stride;
  const int fg = d.f / groups, cg = d.c / groups;
  TcLaunchInfo info;
  bool zero_first = false;
  for (int ry = 0; ry < s && ry < d.h; ++ry)
    for (int rx = 0; rx < s && rx < d.w; ++rx)
      if ((ry + p.pad) % s >= p.kernel_h || (rx + p.pad) % s >= p.kernel_w) zero_first = true;
  if (zero_first) {
    COLONNADE_CUDA_CHECK(cudaMemsetAsync(
        a.dx.data, 0, StorageBytes(a.dx.type) * size_t(d.c) * d.h * d.w * d.n, ctx.stream));
  }
  for (int ry = 0; ry < s && ry < d.h; ++ry) {
    for (int rx = 0; rx < s && rx < d.w; ++rx) {
      const int ky0 = (ry + p.pad) % s, kx0 = (rx + p.pad) % s;
      if (ky0 >= p.kernel_h || kx0 >= p.kernel_w) continue;
      const int tkh = (p.kernel_h - ky0 + s - 1) / s, tkw = (p.kernel_w - kx0 + s - 1) / s;
      const int cy = (ry + p.pad - ky0) / s, cx = (rx + p.pad - kx0) / s;
      TcGemmParams q{};
      q.in = a.dy.data;
      q.out = a.dx.data;
      q.fault = a.fault;
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
      TcArrangeParams ap{};
      ap.w = a.w;
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
      info = RunTcGemm(ctx, a.math, q, groups, ap, a.dy.type, a.dx.type);
    }
  }
  return info;
}

TcLaunchInfo ConvBackwardFilterTc(const DeviceContext& ctx, const TcConvArgs& a) {
  const ConvDims& d = a.dims;
  const ConvParams& p = a.conv;
  CheckSizes(d);
  const int groups = p.groups;
  TcWgradParams q{};
  q.x = a.x.data;
  q.dy = a.dy.data;
  q.fault = a.fault;
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

  const int E = ChunkElems(a.math);
  const bool vec = d.n % E == 0 && Aligned(a.x.data, 16) && Aligned(a.dy.data, 16);
  const int wg_tile = ChooseWgmmaTile(q.m, q.ncol, q.jtot, groups, ctx.sm_count, /*split_k=*/true,
                                      a.math == MathMode::kBF16 && a.x.type == StorageType::kBF16 &&
                                          a.dy.type == StorageType::kBF16 && vec);
  const int BK = wg_tile != 0 ? WgTileL::BK : SliceK(a.math);
  const Picked pk = wg_tile != 0 ? PickWgmma(wg_tile, true, StorageType::kFloat)
                                 : Pick(a.math, q.m, true, a.x.type, a.dy.type, vec);
  TcLaunchInfo info;
  info.bm = pk.bm;
  info.bn = pk.bn;
  info.stages = pk.stages;
  info.vec = vec;
  info.wgmma = wg_tile != 0;
  // Split the reduction so that about four blocks per multiprocessor are in flight, each
  // split at least 16 slices long.
  const int64_t tiles = CeilDiv(q.ncol, info.bn) * CeilDiv(q.m, info.bm) * groups;
  const int64_t want = std::max<int64_t>(1, CeilDiv(int64_t(ctx.sm_count) * 4, tiles));
  const int64_t max_splits = std::max<int64_t>(1, q.jtot / (16 * BK));
  int64_t splits = std::min(want, max_splits);
  q.ksplit = static_cast<int>(CeilDiv(CeilDiv(q.jtot, splits), BK) * BK);
  splits = CeilDiv(q.jtot, q.ksplit);
  q.splits = static_cast<int>(splits);
  info.splits = q.splits;

  std::unique_ptr<Scratch> ws;
  if (q.splits > 1) {
    ws = std::make_unique<Scratch>(ctx.alloc,
                                   sizeof(float) * size_t(groups) * q.splits * q.m * q.ncol);
    q.out = ws->f();
  } else {
    q.out = a.dw;
  }
  q.pair_out = (q.ncol % 2 == 0 && Aligned(q.out, 8)) ? 1 : 0;
  const dim3 grid(static_cast<unsigned>(CeilDiv(q.ncol, info.bn)),
                  static_cast<unsigned>(CeilDiv(q.m, info.bm)),
                  static_cast<unsigned>(groups * q.splits));
  LaunchDynamicSmem(pk.wgrad, grid, dim3(pk.threads), pk.smem, ctx.stream, q);
  if (q.splits > 1) {
    TcReduceParams rp{ws->f(), a.dw, groups, q.splits, int64_t(q.m) * q.ncol};
    Launch(TcReduceSplitsKernel, GridFor(ctx, groups * rp.per_group), dim3(256), ctx.stream, rp);
  }
  return info;
}

void FloatToBf16Gpu(const DeviceContext& ctx, const float* x, void* y, int64_t n) {
  if (n <= 0) return;
  int64_t done = 0;
  if (n >= 4 && Aligned(x, 16) && Aligned(y, 8)) {
    done = n / 4 * 4;
    Launch(FloatToBf16x4Kernel, GridFor(ctx, n / 4), dim3(256), ctx.stream,
           ConvertParams{x, y, done});
  }
  if (done < n)
    Launch(FloatToBf16Kernel, GridFor(ctx, n - done), dim3(256), ctx.stream,
           ConvertParams{x + done, static_cast<uint16_t*>(y) + done, n - done});
}
void Bf16ToFloatGpu(const DeviceContext& ctx, const void* x, float* y, int64_t n) {
  Launch(Bf16ToFloatKernel, GridFor(ctx, n), dim3(256), ctx.stream, ConvertParams{x, y, n});
}

}  // namespace colonnade::cuda
