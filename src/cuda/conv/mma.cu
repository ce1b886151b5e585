// The mma.sync family: convolutions on CHWN tensors on the tensor cores (mixed precision),
// the implicit GEMMs of simt.cu with bf16 operands (mma.sync m16n8k16) or tf32 operands
// (mma.sync m16n8k8), FP32 accumulators everywhere. Per group g:
//   forward          y[f][(oy,ox,n)]  = sum_{(c,ky,kx)} W[f][(c,ky,kx)] *
//                                         x[c][oy*s-p+ky][ox*s-p+kx][n]
//   backward data    dx: one such GEMM per stride phase of dx, with the flipped, transposed
//                    filters of that phase's taps (common.h, BackwardDataGemms)
//   backward filter  dw[f][(c,ky,kx)] = sum_{(oy,ox,n)} dy[f][(oy,ox,n)] *
//                                         x[c][oy*s-p+ky][ox*s-p+kx][n]
//                    split over blocks along (oy,ox,n) into FP32 partial sums that one more
//                    kernel adds in a fixed order (deterministic; common.cu)
// Configurations (catalogue.h): mma_<math>_<BM>x<BN>x<BK>_<stages>, one MmaTile each, every
// one in both maths (BK = 32 bf16 or 16 tf32 elements: 64 bytes) and for every storage of
// the operands: MmaGemmKernel (forward, backward data), MmaWgradKernel (backward filter). The
// driver (tensor_core.cu) arranges the filters and calls LaunchMmaGemm / LaunchMmaWgrad.
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

#include <cstdint>
#include <type_traits>

#include "core/log.h"
#include "cuda/conv/tensor_core.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda::conv {
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
struct MmaTile {
  static constexpr int WM = kWarpsM, WN = kWarpsN, MT = kMT, NT = kNT, S = kStages;
  static constexpr int kBlocksPerSM = kMinBlocks;  // __launch_bounds__: registers per thread
  static constexpr int BM = WM * MT * 16, BN = WN * NT * 8, T = WM * WN * 32;
  static_assert(NT % 2 == 0, "B fragments come in pairs of n8 tiles (one ldmatrix.x4)");
};
// mma_<math>_128x128x<BK>_4: 8 warps of 64 x 32, 64 KiB, 2 blocks/SM.
using Mma128x128_4 = MmaTile<2, 4, 4, 4, 4, 2>;
// mma_<math>_64x128x<BK>_4: 8 warps of 32 x 32, 48 KiB, 2 blocks/SM.
using Mma64x128_4 = MmaTile<2, 4, 2, 4, 4, 2>;
// mma_<math>_128x256x<BK>_3: 8 warps of 64 x 64 (128 accumulators per thread), 3 stages = 72
// KiB, 1 block/SM: more reuse per shared-memory byte, fewer warps; only when asked for.
using Mma128x256_3 = MmaTile<2, 4, 4, 8, 3, 1>;

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
// Kernel MmaGemmKernel<Math, Tl, TIn, TOut, kVec>
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
__global__ void __launch_bounds__(Tl::T, Tl::kBlocksPerSM) MmaGemmKernel(const TcGemmParams p) {
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

  StoreAccumulators<TOut, true>(p, g, acc, m0 + wm * Tl::MT * 16 + lane / 4,
                                j0 + wn * Tl::NT * 8 + 2 * (lane % 4));
}

// ============================================================================================
// Backward filter.
// ============================================================================================
// Kernel MmaWgradKernel<Math, Tl, TX, TD, kVec>
//   x  : (G*cg) x h x w x n (TX),  dy : (G*m) x oh x ow x n (TD)   (CHWN)
//   out: dw[(g*m + f)][(c*kh + ky)*kw + kx] (FP32; or the split-K workspace, same rows)
// GEMM per group: rows f, columns (c, ky, kx), reduction over j = (oy, ox, img) in
// [split*ksplit, min(jtot, (split+1)*ksplit)). Both operands are K-contiguous tiles:
// As[BM][BK] = dy rows, Bs[BN][BK] = x gathered at the taps of BN columns.
// Grid: x = ceil(ncol / BN), y = ceil(m / BM), z = G * splits. Block: Tl::T threads; thread t
// loads A chunks (rows t / 4 + (T/4)*i, chunk t % 4) and B chunks (columns t / 4 + (T/4)*i,
// chunk t % 4): one j range per thread and slice, decomposed once (kVec: E images of one
// pixel) or per element.
// Long because, as in MmaGemmKernel, the pipeline stages, the multiply and the split-K store
// share fragment registers; each part is a commented block below.
template <class Math, class Tl, class TX, class TD, bool kVec>
__global__ void __launch_bounds__(Tl::T, Tl::kBlocksPerSM) MmaWgradKernel(const TcWgradParams p) {
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

// ---- host side ------------------------------------------------------------------------------

template <class Tl, class Math>
constexpr size_t GemmSmem() {
  return size_t(Tl::S) * (Tl::BM + Tl::BN) * 2 * Math::kMmaK * sizeof(typename Math::Smem);
}

// Kernel pointers by run-time choice. Storage types: float or __nv_bfloat16.
using GemmFn = void (*)(TcGemmParams);
using WgradFn = void (*)(TcWgradParams);

template <class Math, class Tl, class TIn, class TOut>
GemmFn GemmFor(bool vec) {
  return vec ? MmaGemmKernel<Math, Tl, TIn, TOut, true> : MmaGemmKernel<Math, Tl, TIn, TOut, false>;
}
template <class Math, class Tl, class TIn>
GemmFn GemmFor(StorageType out, bool vec) {
  return out == StorageType::kBF16 ? GemmFor<Math, Tl, TIn, __nv_bfloat16>(vec)
                                   : GemmFor<Math, Tl, TIn, float>(vec);
}
template <class Math, class Tl, class TX, class TD>
WgradFn WgradFor(bool vec) {
  return vec ? MmaWgradKernel<Math, Tl, TX, TD, true> : MmaWgradKernel<Math, Tl, TX, TD, false>;
}
template <class Math, class Tl, class TX>
WgradFn WgradFor(StorageType dy, bool vec) {
  return dy == StorageType::kBF16 ? WgradFor<Math, Tl, TX, __nv_bfloat16>(vec)
                                  : WgradFor<Math, Tl, TX, float>(vec);
}

// A kernel with its launch's dynamic shared memory and block size.
template <class Fn>
struct Kernel {
  Fn fn;
  size_t smem;
  int threads;
};

// f.template operator()<Math, Tile>() with configuration c's math and tile.
template <class F>
auto WithTile(const ConvConfig& c, const F& f) {
  CHECK(c.family == ConvFamily::kMma) << c.name << " is not an mma.sync configuration";
  auto with_math = [&](auto tile) {
    using Tl = decltype(tile);
    CHECK(c.bm == Tl::BM && c.bn == Tl::BN && c.stages == Tl::S &&
          c.blocks_per_sm == Tl::kBlocksPerSM)
        << c.name << ": not its kernel's tile";
    if (c.math == MathMode::kBF16) {
      CHECK_EQ(c.bk, 2 * Bf16Math::kMmaK) << c.name;
      return f.template operator()<Bf16Math, Tl>();
    }
    CHECK_EQ(c.bk, 2 * Tf32Math::kMmaK) << c.name;
    return f.template operator()<Tf32Math, Tl>();
  };
  if (c.bm == 64) return with_math(Mma64x128_4{});
  if (c.bn == 256) return with_math(Mma128x256_3{});
  return with_math(Mma128x128_4{});
}

// The kernels of a configuration for the operands' storage types.
struct PickGemm {
  StorageType in, out;
  bool vec;
  template <class Math, class Tl>
  Kernel<GemmFn> operator()() const {
    return {in == StorageType::kBF16 ? GemmFor<Math, Tl, __nv_bfloat16>(out, vec)
                                     : GemmFor<Math, Tl, float>(out, vec),
            GemmSmem<Tl, Math>(), Tl::T};
  }
};
struct PickWgrad {
  StorageType x, dy;
  bool vec;
  template <class Math, class Tl>
  Kernel<WgradFn> operator()() const {
    return {x == StorageType::kBF16 ? WgradFor<Math, Tl, __nv_bfloat16>(dy, vec)
                                    : WgradFor<Math, Tl, float>(dy, vec),
            GemmSmem<Tl, Math>(), Tl::T};
  }
};

}  // namespace

void LaunchMmaGemm(const ConvConfig& c, StorageType in, StorageType out, bool vec, dim3 grid,
                   cudaStream_t stream, const TcGemmParams& q) {
  const Kernel<GemmFn> k = WithTile(c, PickGemm{in, out, vec});
  LaunchDynamicSmem(k.fn, grid, dim3(k.threads), k.smem, stream, q);
}

void LaunchMmaWgrad(const ConvConfig& c, StorageType x, StorageType dy, bool vec, dim3 grid,
                    cudaStream_t stream, const TcWgradParams& q) {
  const Kernel<WgradFn> k = WithTile(c, PickWgrad{x, dy, vec});
  LaunchDynamicSmem(k.fn, grid, dim3(k.threads), k.smem, stream, q);
}

}  // namespace colonnade::cuda::conv
