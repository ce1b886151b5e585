// The wgmma family: the implicit GEMMs of the tensor-core convolutions on Hopper's wgmma
// (sm_90a; bf16 operands in bf16 storage, batch a multiple of 8: the training path):
// forward and backward data (WgmmaGemmKernel: the GEMM, gather and epilogue of mma.cu's
// MmaGemmKernel) and backward filter (WgmmaWgradKernel: MmaWgradKernel's). What changes is
// who multiplies: each of the block's two warpgroups issues wgmma.mma_async m64nNk16 on
// operands that stay in shared memory (no ldmatrix, no fragment registers), so the tensor
// cores are fed at the rate wgmma was built for rather than at mma.sync's.
// The forward / backward-data epilogue stages the tile through shared memory where the
// output is plain (StoreTileStaged: whole 16-byte row chunks, and the batch-norm tile sums).
// Configurations (catalogue.h): wgmma_<BM>x<BN>x64_<stages>, one WgTile each. The driver
// (tensor_core.cu) arranges the filters and calls LaunchWgmmaGemm / LaunchWgmmaWgrad; on
// other builds and devices (WgmmaAvailable) the kernels are traps that nothing launches.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/log.h"
#include "cuda/conv/tensor_core.h"
#include "cuda/conv/tma_map.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda::conv {
namespace {

// Block tile of the wgmma kernels: kWGM x kWGN warpgroups that multiply, each 64 rows x kNW
// columns (one wgmma of N = kNW per K-step of 16); BK = 64 (one 128-byte line of bf16 per
// filter row); kStages of shared memory, kMinBlocks blocks per multiprocessor.
// Cooperative (kWarpSpecialized false): the two multiplying warpgroups also load the stages
// (T = TL = 256 threads; WgmmaMainLoop). Warp-specialized: a third warpgroup (threads 256-383)
// only loads, paced by an mbarrier pair per stage, and the two others only multiply
// (WsProduce / WsConsume); setmaxnreg moves registers from the loader to them.
// TMA-fed (kTma, warp-specialized): one thread of the loader warpgroup issues a TMA box per
// operand tile and slice (cp.async.bulk.tensor, the "expect_tx" bytes completing the stage's
// full barrier), where the cp.async loader computes and issues 16-byte chunks: for GEMMs whose
// gathered operand is a plain matrix (1 x 1 convolutions of stride 1 without padding), where
// the K slices of both operands are tiles of 2-D matrices (ConvGemmDesc::plain), and for
// forward and backward data at a batch of a multiple of 64, where a slice of one tap is a box
// of the activations per 64 images (ConvGemmDesc::tap_boxes, IssueGemmB). Persistent
// (kPersistent): WgmmaPersistentGemmKernel.
// Registers per thread after setmaxnreg (warp-specialized): 72 x 128 + 208 x 256 = 61K of the
// multiprocessor's 64K, which the block has alone.
constexpr int kWsLoaderRegs = 72, kWsMultiplierRegs = 208;

template <int kWGM, int kWGN, int kNW, int kStages, int kMinBlocks = 1,
          bool kWarpSpecialized = false, bool kTma = false, bool kPersistent = false>
struct WgTile {
  static constexpr bool WS = kWarpSpecialized || kTma || kPersistent, TMA = kTma || kPersistent;
  static constexpr bool PERSISTENT = kPersistent;
  static constexpr int WGN = kWGN, NW = kNW, S = kStages, kBlocksPerSM = kMinBlocks;
  static constexpr int BM = 64 * kWGM, BN = kWGN * kNW, BK = 64, T = 256;
  static constexpr int kThreads = WS ? 384 : 256, TL = WS ? 128 : 256;          // all, the loaders
  static constexpr int kStageA = BM * BK * 2, kStageB = BK * BN * 2;            // bytes
  static constexpr size_t kBarriers = WS ? 2 * kStages * sizeof(uint64_t) : 0;  // full, empty
  // Persistent: the epilogue stages its tile in a region of its own (the loader fills the
  // stages with the next tile meanwhile): a float tile with padded rows, or a bf16 one and
  // its chunk sums (StoreTileStaged), whichever is larger.
  static constexpr size_t kEpilogue =
      kPersistent ? std::max(size_t(BM) * (BN + 8) * 4,
                             size_t(BM) * (BN + 8) * 2 + size_t(BN / 8) * (BM + 1) * 8)
                  : 0;
  // + 1 KiB to align the stages to the swizzle's 1024-byte period
  static constexpr size_t kSmem =
      size_t(kStages) * (kStageA + kStageB) + kEpilogue + kBarriers + 1024;
  static_assert(kWGM * kWGN == 2, "two multiplying warpgroups (256 threads)");
  static_assert(kNW == 128 || kNW == 256, "wgmma N");
  static_assert(!WS || kMinBlocks == 1, "setmaxnreg needs the whole register file");
  // TMA: the stage's bytes complete its full barrier (one box of A, BN / 64 boxes of B).
  static constexpr unsigned kStageBytes = unsigned(kStageA + kStageB);
};
using Wg128x128_6 = WgTile<2, 1, 128, 6>;  // 6 x 32 KiB
using Wg64x256_5 = WgTile<1, 2, 128, 5>;   // 5 x 40 KiB: M <= 64 (conv2's backward data)
using Wg128x256_4 = WgTile<2, 1, 256, 4>;  // 4 x 48 KiB, 128 accumulators per thread
// 128 x 128 in 3 x 32 KiB, two blocks per multiprocessor (124 registers a thread): for GEMMs
// of few K slices (catalogue.cc, ChooseWgmma), so that a second resident block can multiply
// while one fills its pipeline or writes its tile.
using Wg128x128_3 = WgTile<2, 1, 128, 3, 2>;
// Warp-specialized (384 threads): the cooperative tiles' shapes and depths.
using WgWs128x256_4 = WgTile<2, 1, 256, 4, 1, true>;
using WgWs128x128_6 = WgTile<2, 1, 128, 6, 1, true>;
// TMA-fed (384 threads, one of the loader's issuing): the same shapes and depths.
using WgTma128x256_4 = WgTile<2, 1, 256, 4, 1, true, true>;
using WgTma128x128_6 = WgTile<2, 1, 128, 6, 1, true, true>;
// TMA-fed 64 x 256 (the two warpgroups side by side in N): M <= 64 (ResNet's 64-filter layers).
using WgTma64x256_5 = WgTile<1, 2, 128, 5, 1, true, true>;
// Persistent and TMA-fed (forward and backward data): 4 x 32 KiB + a 68 KiB epilogue region.
using WgTmaP128x128_4 = WgTile<2, 1, 128, 4, 1, true, true, true>;

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
// B-stages, then (warp-specialized) S "full" and S "empty" mbarriers. MakeWgStages
// initialises the barriers (thread 0) and publishes them with a block barrier: full counts
// the loader's TL cp.async arrivals (TMA: the issuing thread's one arrival, plus the stage's
// transaction bytes), empty the T multiplying threads' releases.
template <class Tl>
struct WgStages {
  unsigned char* a;
  unsigned char* b;
  uint32_t a_addr, b_addr;  // their shared-memory addresses (for descriptors)
  uint64_t* full;           // WS: stage s holds its slice
  uint64_t* empty;          // WS: every multiplying warpgroup has retired stage s's wgmma
  unsigned char* epilogue;  // persistent: the epilogue's own region (else the stages)
};
template <class Tl>
__device__ __forceinline__ WgStages<Tl> MakeWgStages(unsigned char* smem_raw) {
  WgStages<Tl> s;
  s.a = smem_raw + ((1024u - (tc::SmemAddress(smem_raw) & 1023u)) & 1023u);
  s.b = s.a + Tl::S * Tl::kStageA;
  s.a_addr = tc::SmemAddress(s.a);
  s.b_addr = tc::SmemAddress(s.b);
  s.epilogue = Tl::PERSISTENT ? s.b + Tl::S * Tl::kStageB : s.a;
  s.full = reinterpret_cast<uint64_t*>(s.b + Tl::S * Tl::kStageB + Tl::kEpilogue);
  s.empty = s.full + Tl::S;
  if constexpr (Tl::WS) {
    if (threadIdx.x == 0)
      for (int i = 0; i < Tl::S; ++i) {
        tc::MbarInit(s.full + i, Tl::TMA ? 1 : Tl::TL);
        tc::MbarInit(s.empty + i, Tl::T);
      }
    __syncthreads();
  }
  return s;
}

// The block barrier of the multiplying threads: all of them (cooperative), or the two
// multiplying warpgroups without the loader (named barrier 1; warp-specialized).
template <class Tl>
__device__ __forceinline__ void ConsumerSync() {
  if constexpr (Tl::WS)
    tc::NamedBarrierSync<1, Tl::T>();
  else
    __syncthreads();
}

// The four wgmma (K-steps of 16) of stage st's slice for warpgroup row wgm (A K-major, rows
// wgm * 64 ..; B through desc_b(st, ks)), issued, not committed.
template <class Tl, int kTransB, class DescB>
__device__ __forceinline__ void WgmmaSlice(uint32_t a_addr, int st, int wgm, const DescB& desc_b,
                                           float (&d)[Tl::NW / 2]) {
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

// The main loop of both wgmma kernels over ktiles K-slices of 64. issue(kt, st) starts the
// cp.async copies of slice kt into stage st; desc_b(st, ks) is the B descriptor of K-step ks
// of stage st for this thread's warpgroup (A's is the same in both kernels: K-major, rows
// wgm * 64 ..). Slice t waits for its copies (cp.async.wait_group S - 3), a proxy fence and a
// barrier publish them to the tensor cores; slice t's four wgmma are issued and committed;
// then slice t + S - 2 is issued into the stage of slice t - 2, whose wgmma every warpgroup
// retired before that barrier (wait_group 1 at the end of each iteration). The multiplies go
// first so that the tensor cores have slice t queued while the warps compute the next slice's
// gather addresses (a few hundred instructions a warp; issued before them, the tensor cores
// waited for those). On return the accumulators d are complete.
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
    const int st = t % ST;
    tc::WgmmaFence();
    if (!(fault == 1 && t == 0)) WgmmaSlice<Tl, kTransB>(a_addr, st, wgm, desc_b, d);
    tc::WgmmaCommit();
    const int tn = t + ST - 2;
    if (tn < ktiles) issue(tn, tn % ST);
    CpAsyncCommit();
    tc::WgmmaWait<1>();  // slice t - 1's products are done: its stage is free after the barrier
  }
  tc::WgmmaWait<0>();
  tc::WgmmaFenceOperands(d);
}

// The warp-specialized pipeline. Why: in WgmmaMainLoop the warps that issue the wgmma also
// compute the gather addresses of the next slices and meet at a block barrier every slice,
// and the tensor cores wait for both. Here the loader warpgroup runs ahead by up to S slices
// and the multiplying warpgroups only wait for their slice's barrier.
// Loader (WsProduce): slice t goes into stage t % S once the multiplying warpgroups have
// released that stage's previous slice t - S (phase t / S - 1 of its empty barrier); its
// copies complete phase t / S of the stage's full barrier (cp.async arrive-on, no count
// increment: full expects TL arrivals).
// TMA (TmaProduce, the loader's first thread alone; the other loader threads leave at once):
// the stage's bytes announced on its full barrier (expect_tx, the one arrival), then the boxes
// (issue(t, st)) that complete them. `it` counts the slices the block has run before these
// (a persistent kernel's earlier tiles: the stages and phases go on from there); on return it
// has grown by ktiles.
template <class Tl, class Issue>
__device__ __forceinline__ void TmaProduce(int ktiles, const WgStages<Tl>& sm, int& it,
                                           const Issue& issue) {
  for (int t = 0; t < ktiles; ++t, ++it) {
    const int st = it % Tl::S;
    if (it >= Tl::S) tc::MbarWait(sm.empty + st, (it / Tl::S - 1) & 1);
    tc::MbarArriveExpectTx(sm.full + st, Tl::kStageBytes);
    issue(t, st);
  }
}
template <class Tl, class Issue>
__device__ __forceinline__ void WsProduce(int ktiles, const WgStages<Tl>& sm, const Issue& issue) {
  if constexpr (Tl::TMA) {
    int it = 0;
    if (threadIdx.x == Tl::T) TmaProduce<Tl>(ktiles, sm, it, issue);
    return;
  }
  for (int t = 0; t < ktiles; ++t) {
    const int st = t % Tl::S;
    if (t >= Tl::S) tc::MbarWait(sm.empty + st, (t / Tl::S - 1) & 1);
    issue(t, st);
    tc::CpAsyncMbarArrive(sm.full + st);
  }
  CpAsyncWait<0>();
}
// Multiplying warpgroups (WsConsume): slice t once phase t / S of its stage's full barrier
// has completed; a proxy fence then makes the loader's cp.async writes (generic proxy)
// visible to this thread's wgmma reads (async proxy). Slice t's wgmma run while slice t - 1's
// are retired (wait_group 1) and its stage released (empty barrier). On return the
// accumulators d are complete. `it` as in TmaProduce; with release_last the last slice's stage
// is released too (a persistent kernel's loader goes on into it).
template <class Tl, int kTransB, class DescB>
__device__ __forceinline__ void WsConsume(int ktiles, int fault, const WgStages<Tl>& sm, int wgm,
                                          const DescB& desc_b, float (&d)[Tl::NW / 2], int& it,
                                          bool release_last) {
  for (int t = 0; t < ktiles; ++t, ++it) {
    const int st = it % Tl::S;
    tc::MbarWait(sm.full + st, (it / Tl::S) & 1);
    tc::FenceProxyAsync();
    tc::WgmmaFence();
    if (!(fault == 1 && t == 0)) WgmmaSlice<Tl, kTransB>(sm.a_addr, st, wgm, desc_b, d);
    tc::WgmmaCommit();
    tc::WgmmaWait<1>();
    if (t > 0) tc::MbarArrive(sm.empty + (it - 1) % Tl::S);
  }
  tc::WgmmaWait<0>();
  tc::WgmmaFenceOperands(d);
  if (release_last && ktiles > 0) tc::MbarArrive(sm.empty + (it - 1) % Tl::S);
}

// Runs a wgmma kernel's pipeline over ktiles slices and then epilogue() in the multiplying
// threads: cooperatively, or warp-specialized with the loader warpgroup (threads T ..) leaving
// after its last slice. d starts at zero.
template <class Tl, int kTransB, class Issue, class DescB, class Epilogue>
__device__ __forceinline__ void WgmmaPipeline(int ktiles, int fault, const WgStages<Tl>& sm,
                                              int wgm, const Issue& issue, const DescB& desc_b,
                                              float (&d)[Tl::NW / 2], const Epilogue& epilogue) {
#pragma unroll
  for (int i = 0; i < Tl::NW / 2; ++i) d[i] = 0.0f;
  if constexpr (Tl::WS) {
    if (threadIdx.x >= Tl::T) {
      tc::SetMaxRegsDec<kWsLoaderRegs>();
      WsProduce<Tl>(ktiles, sm, issue);
    } else {
      tc::SetMaxRegsInc<kWsMultiplierRegs>();
      int it = 0;
      WsConsume<Tl, kTransB>(ktiles, fault, sm, wgm, desc_b, d, it, false);
      epilogue();
    }
  } else {
    WgmmaMainLoop<Tl, kTransB>(ktiles, fault, sm.a_addr, wgm, issue, desc_b, d);
    epilogue();
  }
}

// The epilogue of WgmmaGemmKernel for staged outputs (TcGemmParams::staged): the block's
// BM x BN tile goes through shared memory (the pipeline's stages, free once every warpgroup
// has retired its last wgmma) so that each row leaves in whole 16-byte chunks, a warp writing
// 512 contiguous bytes per instruction. Why: the accumulator layout stores 4-byte pairs, 16
// contiguous bytes per row and warp instruction, and the short-K 1 x 1 GEMMs (one or two K
// slices, output-bound) wrote at about a third of the copy bandwidth that way
// (experiments/mixed_precision, layer1_0_conv3). Rows are padded by 8 elements (16 or 32
// bytes), so the 8 rows a warp writes per accumulator pair fall on distinct banks. With
// p.stats, each row's sum and sum of squares (FP32) for the batch norm that reads this output,
// or (backward data) the bias gradient of the layer before. With kMask (backward data under a
// ReLU) each chunk is masked on its way out, and summed as masked; with p.add (backward data
// into a gradient that holds other layers' part) added to out's chunk (no sums then).

// A 16-byte chunk of TOut values as words: word i holds elements 2i, 2i + 1 (bf16) or
// element i (float). Bit operations on the words, not TOut pointers into the chunk: those
// alias a uint4 (undefined, and the emulator's optimised build read stale values).
template <class TOut>
__device__ __forceinline__ uint4 MaskChunk(uint4 v, const uint4& m) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
  const uint32_t mw[4] = {m.x, m.y, m.z, m.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      if (!(__uint_as_float(mw[i]) > 0.0f)) w[i] = 0u;
    } else {
      const uint32_t lo =
          tc::Bf16ToFloat(static_cast<uint16_t>(mw[i] & 0xffffu)) > 0.0f ? 0xffffu : 0u;
      const uint32_t hi =
          tc::Bf16ToFloat(static_cast<uint16_t>(mw[i] >> 16)) > 0.0f ? 0xffff0000u : 0u;
      w[i] &= lo | hi;
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// old + v per element (TcGemmParams::add): Add's float sum of the stored values, rounded to
// TOut (v holds values rounded to TOut already, as the tile does).
template <class TOut>
__device__ __forceinline__ uint4 AddChunk(const uint4& old, const uint4& v) {
  const uint32_t ow[4] = {old.x, old.y, old.z, old.w};
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      w[i] = __float_as_uint(__uint_as_float(ow[i]) + __uint_as_float(w[i]));
    } else {
      const float lo = tc::Bf16ToFloat(static_cast<uint16_t>(ow[i] & 0xffffu)) +
                       tc::Bf16ToFloat(static_cast<uint16_t>(w[i] & 0xffffu));
      const float hi = tc::Bf16ToFloat(static_cast<uint16_t>(ow[i] >> 16)) +
                       tc::Bf16ToFloat(static_cast<uint16_t>(w[i] >> 16));
      w[i] = tc::PackBf16x2(lo, hi);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// The sum and sum of squares of a chunk's values (FP32, in element order).
template <class TOut>
__device__ __forceinline__ void ChunkSums(const uint4& v, float& s, float& s2) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  s = s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      const float x = __uint_as_float(w[i]);
      s += x;
      s2 += x * x;
    } else {
      const float lo = tc::Bf16ToFloat(static_cast<uint16_t>(w[i] & 0xffffu));
      const float hi = tc::Bf16ToFloat(static_cast<uint16_t>(w[i] >> 16));
      s += lo;
      s2 += lo * lo;
      s += hi;
      s2 += hi * hi;
    }
  }
}

// smem: the staging region (the stages, or a persistent kernel's epilogue region); tile_x:
// the block's column tile (the stats' index; blockIdx.x but in a persistent kernel).
template <class Tl, class TOut, bool kMask>
__device__ __forceinline__ void StoreTileStaged(const TcGemmParams& p, int g,
                                                const float (&acc)[1][Tl::NW / 8][4],
                                                unsigned char* smem, int r0, int c0, int m0, int j0,
                                                int tile_x) {
  constexpr int kPitch = Tl::BN + 8;  // elements
  constexpr int kChunk = 16 / static_cast<int>(sizeof(TOut));
  constexpr int kRowChunks = Tl::BN / kChunk;
  constexpr size_t kTileBytes = size_t(Tl::BM) * kPitch * sizeof(TOut);
  constexpr size_t kRegionBytes =
      Tl::PERSISTENT ? Tl::kEpilogue : size_t(Tl::S) * (Tl::kStageA + Tl::kStageB);
  static_assert(kTileBytes <= kRegionBytes, "the staged tile fits in its region");
  // The sums: each thread leaves the (sum, sum of squares) of every chunk it stores in
  // part[chunk][row] (pitch BM + 1: conflict-free both ways) after the tile, and thread t then
  // adds row t's kRowChunks of them in order: 16 or 32 additions where a thread summing its
  // row of the tile made 128 or 256 (the forward's bn_sums and backward data's bias sums paid
  // that in every block). Where the partials do not fit beside the tile (float 128 x 256),
  // thread t sums its row of the tile.
  constexpr size_t kPartBytes = size_t(kRowChunks) * (Tl::BM + 1) * sizeof(float2);
  constexpr bool kChunkSums = kTileBytes + kPartBytes <= kRegionBytes;
  TOut* const tile = reinterpret_cast<TOut*>(smem);
  float2* const part = reinterpret_cast<float2*>(smem + kTileBytes);
  ConsumerSync<Tl>();  // every warpgroup's wgmma has read its last stage
#pragma unroll
  for (int nt = 0; nt < Tl::NW / 8; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + 8 * h;
      float v0 = acc[0][nt][2 * h], v1 = acc[0][nt][2 * h + 1];
      BiasRelu(p, g, m0 + row, v0, v1);
      StoreOut2(tile + row * kPitch + c0 + nt * 8, v0, v1);
    }
  ConsumerSync<Tl>();
  const int64_t row_stride = static_cast<int64_t>(p.out_h) * p.out_w * p.n;
  const int64_t group = static_cast<int64_t>(g) * p.m * row_stride;
  TOut* const out = static_cast<TOut*>(p.out) + group;
  if (!kMask && p.stats == nullptr && !p.add) {  // the plain store (most forward GEMMs)
    for (int q = threadIdx.x; q < Tl::BM * kRowChunks; q += Tl::T) {
      const int row = q / kRowChunks, col = (q % kRowChunks) * kChunk;
      if (m0 + row < p.m && j0 + col < p.j)
        *reinterpret_cast<uint4*>(out + (m0 + row) * row_stride + OutColumn(p, j0 + col)) =
            *reinterpret_cast<const uint4*>(tile + row * kPitch + col);
    }
    return;
  }
  // A thread's chunks in batches of kBatch: every global load of a batch (the mask, the
  // gradient added to) is issued before any of its stores. Why: one chunk at a time, a load
  // could not move above the previous chunk's store to out (the compiler cannot rule out that
  // they alias), so each chunk waited a whole memory latency: VGG-16's conv1_2 backward data
  // (12,544 blocks of 64 x 256, eight chunks a thread) ran at 18% tensor-pipe activity, stalled
  // on long scoreboards, 1.71 ms against its forward's 1.22 under ncu
  // (experiments/resnet_kernels/results/details_vgg16_b64_a46f4c7.txt).
  constexpr int kChunks = Tl::BM * kRowChunks, kBatch = 8;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int q0 = threadIdx.x; q0 < kChunks; q0 += kBatch * Tl::T) {
    int64_t at[kBatch];
    uint4 mv[kBatch], ov[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int q = q0 + b * Tl::T, row = q / kRowChunks, col = (q % kRowChunks) * kChunk;
      const bool in = q < kChunks && m0 + row < p.m && j0 + col < p.j;
      at[b] = in ? (m0 + row) * row_stride + OutColumn(p, j0 + col) : -1;
      mv[b] = ov[b] = zero;
      if constexpr (kMask) {
        if (in)
          mv[b] = *reinterpret_cast<const uint4*>(static_cast<const TOut*>(p.mask) + group + at[b]);
      }
      if (in && p.add) ov[b] = *reinterpret_cast<const uint4*>(out + at[b]);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int q = q0 + b * Tl::T, row = q / kRowChunks, chunk = q % kRowChunks;
      const int col = chunk * kChunk;
      if (q >= kChunks) continue;
      uint4 v = zero;
      if (at[b] >= 0) {
        v = *reinterpret_cast<const uint4*>(tile + row * kPitch + col);
        if constexpr (kMask) {
          v = MaskChunk<TOut>(v, mv[b]);
          if (!kChunkSums) *reinterpret_cast<uint4*>(tile + row * kPitch + col) = v;
        }
        if (p.add) v = AddChunk<TOut>(ov[b], v);
        *reinterpret_cast<uint4*>(out + at[b]) = v;
      }
      if (kChunkSums && p.stats != nullptr) {
        float s, s2;
        ChunkSums<TOut>(v, s, s2);
        part[chunk * (Tl::BM + 1) + row] = make_float2(s, s2);
      }
    }
  }
  if (p.stats == nullptr) return;
  if (kChunkSums || kMask) ConsumerSync<Tl>();  // the sums read the partials (masked rows)
  if (threadIdx.x < Tl::BM && m0 + static_cast<int>(threadIdx.x) < p.m) {
    const int row = threadIdx.x;
    float s = 0.0f, s2 = 0.0f;
    if constexpr (kChunkSums) {
      for (int c = 0; c < kRowChunks; ++c) {
        const float2 v = part[c * (Tl::BM + 1) + row];
        s += v.x;
        s2 += v.y;
      }
    } else {
      const TOut* const r = tile + row * kPitch;
      for (int c = 0, cols = IMin(Tl::BN, p.j - j0); c < cols; ++c) {
        const float v = LoadOut(r + c);
        s += v;
        s2 += v * v;
      }
    }
    float* const st =
        p.stats + (static_cast<int64_t>(tile_x) * p.groups * p.m + g * p.m + m0 + row) * 2;
    st[0] = s;
    st[1] = s2;
  }
}

// A wgmma kernel's parameters: the problem's, and (TMA tiles) the tensor maps of its two
// operands (LaunchGemm, LaunchWgrad), read by the TMA unit from the kernel's parameter space.
template <class P>
struct WgArgs {
  P p;
  tc::TmaMap a, b;
};

// The B boxes of slice kt of a TMA tile at column j0 of group g, completing on bar. A plain
// GEMM's in is a G x cg x (h w n) matrix: one box of 64 K-rows x 64 columns per atom. Else
// (p.tap_boxes: any convolution, n % 64 == 0) the filters are in (ky, kx, c) K order with
// the channels padded to cblocks slices a tap (RunGemm), so slice kt is channels
// 64 (kt % cblocks) .. of tap kt / cblocks, and atom a (64 images of one output pixel) is the
// box of in (G x cg x h x w x n) at that pixel shifted by the tap: padding, channels past cg
// and rows past the image read as zero from outside the tensor. (Columns past p.j read
// whatever pixel they name; the epilogue drops them.)
// The B descriptor of K-step ks of stage st for warpgroup column wgn of a forward /
// backward-data GEMM (MN-major B: 64-column atoms 8 KiB apart, K-steps 2 KiB apart).
template <class Tl>
__device__ __forceinline__ uint64_t GemmDescB(const WgStages<Tl>& sm, int wgn, int st, int ks) {
  return tc::SmemDesc128B(sm.b_addr + st * Tl::kStageB + wgn * (Tl::NW / 64) * 8192 + ks * 2048,
                          8192, 1024);
}

// (IssueGemmSlice: with A's box, the whole slice into stage st.)
template <class Tl>
__device__ __forceinline__ void IssueGemmB(const WgArgs<TcGemmParams>& args, unsigned char* bs,
                                           int kt, int j0, int g, uint64_t* bar) {
  const TcGemmParams& p = args.p;
  if (!p.tap_boxes) {
#pragma unroll
    for (int a = 0; a < Tl::BN / 64; ++a)
      tc::TmaLoad3D(bs + a * 8192, &args.b, j0 + 64 * a, kt * Tl::BK, g, bar);
    return;
  }
  const int tap = kt / p.cblocks, c0 = (kt - tap * p.cblocks) * 64;
  const int ky = tap / p.kw, kx = tap - ky * p.kw;
#pragma unroll
  for (int a = 0; a < Tl::BN / 64; ++a) {
    const int jj = j0 + 64 * a, pix = jj / p.n, img = jj - pix * p.n;
    const int oy = pix / p.ow, ox = pix - oy * p.ow;
    tc::TmaLoad5D(bs + a * 8192, &args.b, img, ox * p.stride - p.pad_w + kx,
                  oy * p.stride - p.pad_h + ky, c0, g, bar);
  }
}
template <class Tl>
__device__ __forceinline__ void IssueGemmSlice(const WgArgs<TcGemmParams>& args,
                                               const WgStages<Tl>& sm, int st, int kt, int m0,
                                               int j0, int g) {
  tc::TmaLoad3D(sm.a + st * Tl::kStageA, &args.a, kt * Tl::BK, m0, g, sm.full + st);
  IssueGemmB<Tl>(args, sm.b + st * Tl::kStageB, kt, j0, g, sm.full + st);
}

// Kernel WgmmaGemmKernel<Tl, TOut, kMask>
//   in : (G*cg) x h x w x n   CHWN bf16, n % 8 == 0, 16-byte aligned
//   at : G x mp x kp          bf16 filters, K contiguous, kp a multiple of 64
//   out: (G*m) x out_h x out_w x n   CHWN, storage TOut; + bias, ReLU (forward)
//   kMask (bf16 out only): out masked by p.mask (backward data under a ReLU; a template
//   argument so that the other kernels compile without it)
// Grid as MmaGemmKernel. Block: the multiplying warpgroups wg = 0, 1 at (wg / WGN, wg % WGN)
// of the block tile (+ the loader, warp-specialized); B (the gathered activations) MN-major.
// Pipeline: WgmmaPipeline. TMA tiles: args.a maps at as G x mp x kp; a slice is one box of A
// (BM rows of 64 K) and BN / 64 boxes of B, each one 8 KiB atom of WgOffsetB's layout, from
// args.b (IssueGemmB: a plain in as a G x cg x (h w n) matrix, or in as G x cg x h x w x n
// with one tap's box per 64-image atom); rows past cg read as zero.
template <class Tl, class TOut, bool kMask>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kBlocksPerSM)
    WgmmaGemmKernel(const COLONNADE_GRID_CONSTANT WgArgs<TcGemmParams> args) {
#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const TcGemmParams& p = args.p;
  constexpr int BN = Tl::BN, BK = Tl::BK, T = Tl::TL;  // T: the loading threads
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

  // Loaders (lt: the thread among the T that load): A chunk q = lt + T i is (row q / 8, chunk
  // q % 8); B: a fixed column chunk (8 images of one pixel) per thread, K-rows brow0 +
  // kBRowStep i.
  const int lt = tid % T;
  const int bcc = lt % kRowChunksB, brow0 = lt / kRowChunksB;
  const GatherColumn col = MakeColumn(p, j0 + bcc * 8);
  auto issue = [&](int kt, int st) {
    if constexpr (Tl::TMA) {
      IssueGemmSlice<Tl>(args, sm, st, kt, m0, j0, g);
      return;
    }
    unsigned char* const as = sm.a + st * Tl::kStageA;
    unsigned char* const bs = sm.b + st * Tl::kStageB;
#pragma unroll
    for (int i = 0; i < kAChunks; ++i) {
      const int q = lt + T * i, row = q / 8, c = q % 8;
      CpAsync16(as + WgOffsetA(row, c), at + static_cast<int64_t>(row) * p.kp + kt * BK + c * 8,
                true);
    }
    if (p.tap_boxes) {
      // (ky, kx, c) K order, cg a multiple of 64 (RunGemm): slice kt is channels c0 .. c0 + 63
      // of tap kt / cblocks, so the thread's pixel, its bounds check and its first chunk's
      // address are the slice's, and its chunks lie kBRowStep channels apart. Why: the
      // (c, ky, kx) gather below spends ~30 integer instructions a chunk on them, which made
      // the ALU the busiest pipe of the 3 x 3 layers (experiments/resnet_kernels).
      const int tap = kt / p.cblocks, c0 = (kt - tap * p.cblocks) * BK + brow0;
      const int ky = Div(tap, p.div_kw), kx = tap - ky * p.kw;
      const int sy = col.sy + ky, sx = col.sx + kx;
      const bool ok = col.ok && static_cast<unsigned>(sy) < static_cast<unsigned>(p.h) &&
                      static_cast<unsigned>(sx) < static_cast<unsigned>(p.w);
      const __nv_bfloat16* const src = in + c0 * hwn + col.base + (ky * p.w + kx) * p.n;
#pragma unroll
      for (int i = 0; i < kBChunks; ++i)
        CpAsync16(bs + WgOffsetB(brow0 + kBRowStep * i, bcc),
                  ok ? src + static_cast<int64_t>(kBRowStep * i) * hwn : in, ok);
      return;
    }
#pragma unroll
    for (int i = 0; i < kBChunks; ++i) {
      const int row = brow0 + kBRowStep * i;
      bool ok;
      const int off = GatherOffset(p, hwn, MakeTap(p, kt * BK + row), col, &ok);
      CpAsync16(bs + WgOffsetB(row, bcc), ok ? in + off : in, ok);
    }
  };
  auto desc_b = [&](int st, int ks) { return GemmDescB<Tl>(sm, wgn, st, ks); };

  float acc[1][Tl::NW / 8][4];
  float(&d)[Tl::NW / 2] = *reinterpret_cast<float(*)[Tl::NW / 2]>(&acc[0][0][0]);
  WgmmaPipeline<Tl, 1>(p.kp / BK, p.fault, sm, wgm, issue, desc_b, d, [&] {
    if (p.staged) {
      StoreTileStaged<Tl, TOut, kMask>(p, g, acc, sm.a, wgm * 64 + (warp % 4) * 16 + lane / 4,
                                       wgn * Tl::NW + 2 * (lane % 4), m0, j0, blockIdx.x);
    } else {
      StoreAccumulators<TOut, kMask>(p, g, acc, m0 + wgm * 64 + (warp % 4) * 16 + lane / 4,
                                     j0 + wgn * Tl::NW + 2 * (lane % 4));
    }
  });
#endif
}

// Kernel WgmmaPersistentGemmKernel<Tl, TOut, kMask>: WgmmaGemmKernel's plain GEMM (TMA
// tiles only) with blocks that stay: block b takes output tiles b, b + gridDim.x, ... (tile t:
// the M tile fastest, so that consecutive tiles share the larger B operand's column tile in L2;
// then the column tile, then the group). Why: a short-K 1 x 1 GEMM (4-16 slices) spends much
// of each block's life filling its pipeline and writing its tile with the tensor cores idle;
// here the loader runs on into the next tile's slices (one slice count and mbarrier phase
// sequence over the block's whole life) while the multiplying warpgroups store this one
// through the epilogue's own region (or, where the output is not plain, from the accumulators).
// Each multiplying thread releases every slice's stage once (the tile's last after its loop).
template <class Tl, class TOut, bool kMask>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kBlocksPerSM)
    WgmmaPersistentGemmKernel(const COLONNADE_GRID_CONSTANT WgArgs<TcGemmParams> args) {
#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(Tl::PERSISTENT && Tl::TMA && Tl::WS, "a persistent TMA tile");
  const TcGemmParams& p = args.p;
  constexpr int BN = Tl::BN, BM = Tl::BM, BK = Tl::BK;
  COLONNADE_DYNAMIC_SMEM(smem_raw);
  const WgStages<Tl> sm = MakeWgStages<Tl>(smem_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int wgm = wg / Tl::WGN, wgn = wg % Tl::WGN;
  const int tiles_m = p.mp / BM, tiles_n = (p.j + BN - 1) / BN;
  const int tiles = tiles_m * tiles_n * p.groups, ktiles = p.kp / BK;
  struct Tile {
    int g, m0, tx;
  };
  auto tile_of = [&](int t) {
    return Tile{t / (tiles_m * tiles_n), (t % tiles_m) * BM, (t / tiles_m) % tiles_n};
  };
  if (tid >= Tl::T) {  // the loader: one thread issues every box
    tc::SetMaxRegsDec<kWsLoaderRegs>();
    if (tid != Tl::T) return;
    int it = 0;  // slices issued over the block's life
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const Tile tl = tile_of(t);
      TmaProduce<Tl>(ktiles, sm, it, [&](int kt, int st) {
        IssueGemmSlice<Tl>(args, sm, st, kt, tl.m0, tl.tx * BN, tl.g);
      });
    }
    return;
  }
  tc::SetMaxRegsInc<kWsMultiplierRegs>();
  auto desc_b = [&](int st, int ks) { return GemmDescB<Tl>(sm, wgn, st, ks); };
  float acc[1][Tl::NW / 8][4];
  float(&d)[Tl::NW / 2] = *reinterpret_cast<float(*)[Tl::NW / 2]>(&acc[0][0][0]);
  int it = 0;  // slices consumed over the block's life
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const Tile tl = tile_of(t);
#pragma unroll
    for (int i = 0; i < Tl::NW / 2; ++i) d[i] = 0.0f;
    WsConsume<Tl, 1>(ktiles, p.fault, sm, wgm, desc_b, d, it, /*release_last=*/true);
    if (p.staged) {
      StoreTileStaged<Tl, TOut, kMask>(p, tl.g, acc, sm.epilogue,
                                       wgm * 64 + (warp % 4) * 16 + lane / 4,
                                       wgn * Tl::NW + 2 * (lane % 4), tl.m0, tl.tx * BN, tl.tx);
    } else {  // (a stride phase of backward data)
      StoreAccumulators<TOut, kMask>(p, tl.g, acc, tl.m0 + wgm * 64 + (warp % 4) * 16 + lane / 4,
                                     tl.tx * BN + wgn * Tl::NW + 2 * (lane % 4));
    }
  }
#endif
}

// Kernel WgmmaWgradKernel<Tl>: backward filter on wgmma (sm_90a), bf16 x and dy, n % 8 == 0,
// both 16-byte aligned. The GEMM, grid, split-K and epilogue of MmaWgradKernel; both operands
// K-major (the reduction index j = (oy, ox, img) is contiguous in dy's rows and, 8 images at
// a time, in x at each tap), in the 128-byte-swizzled layout of WgOffsetA: A = dy rows, B =
// x gathered for BN filter columns (c, ky, kx). Loading thread lt copies chunk lt % 8 (8
// images of one pixel) of rows lt / 8 + TL / 8 i of each. Pipeline: WgmmaPipeline. TMA tiles
// (1 x 1, stride 1, no padding: x's columns are the reduction index as dy's are): args.a maps
// dy as G x m x jtot, args.b x as G x cg x jtot; a slice is one box of each (BM or BN rows of
// 64 reduction columns), rows and columns outside them read as zero. (A split ends at a
// multiple of the slice or at jtot, so no box crosses into the next split.)
template <class Tl>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kBlocksPerSM)
    WgmmaWgradKernel(const COLONNADE_GRID_CONSTANT WgArgs<TcWgradParams> args) {
#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const TcWgradParams& p = args.p;
  constexpr int BK = Tl::BK, kRowStep = Tl::TL / 8;
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

  const int lt = tid % Tl::TL, cc = lt % 8, row0 = lt / 8;
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
    if constexpr (Tl::TMA) {
      tc::TmaLoad3D(sm.a + st * Tl::kStageA, &args.a, kbeg + kt * BK, m0, g, sm.full + st);
      tc::TmaLoad3D(sm.b + st * Tl::kStageB, &args.b, kbeg + kt * BK, c0, g, sm.full + st);
      return;
    }
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
  const int ktiles = kend > kbeg ? (kend - kbeg + BK - 1) / BK : 0;
  WgmmaPipeline<Tl, 0>(ktiles, p.fault, sm, wgm, issue, desc_b, d, [&] {
    StoreWgradAccumulators(p, (static_cast<int64_t>(g) * p.splits + split) * p.m, acc,
                           m0 + wgm * 64 + (warp % 4) * 16 + lane / 4,
                           c0 + wgn * Tl::NW + 2 * (lane % 4));
  });
#endif
}

// ---- host side ------------------------------------------------------------------------------

// The kernels of configuration c: f.template operator()<Tile>() with c's tile.
template <class F>
auto WithTile(const ConvConfig& c, const F& f) {
  CHECK(c.family == ConvFamily::kWgmma) << c.name << " is not a wgmma configuration";
  auto with = [&](auto tile) {
    using Tl = decltype(tile);
    CHECK(c.bm == Tl::BM && c.bn == Tl::BN && c.bk == Tl::BK && c.stages == Tl::S &&
          c.blocks_per_sm == Tl::kBlocksPerSM && c.warp_specialized == Tl::WS && c.tma == Tl::TMA &&
          c.persistent == Tl::PERSISTENT)
        << c.name << ": not its kernel's tile";
    return f.template operator()<Tl>();
  };
  if (c.persistent) return with(WgTmaP128x128_4{});
  if (c.tma && c.bm == 64) return with(WgTma64x256_5{});
  if (c.tma) return c.bn == 256 ? with(WgTma128x256_4{}) : with(WgTma128x128_6{});
  if (c.warp_specialized) return c.bn == 256 ? with(WgWs128x256_4{}) : with(WgWs128x128_6{});
  if (c.bm == 64) return with(Wg64x256_5{});
  if (c.bn == 256) return with(Wg128x256_4{});
  if (c.stages == 3) return with(Wg128x128_3{});
  return with(Wg128x128_6{});
}

struct LaunchGemm {
  StorageType out;
  dim3 grid;
  cudaStream_t stream;
  const TcGemmParams& q;
  template <class Tl>
  int operator()() const {
    // A mask only with bf16 out (RunGemm passes none otherwise).
    auto* kernel = out == StorageType::kFloat ? WgmmaGemmKernel<Tl, float, false>
                   : q.mask != nullptr        ? WgmmaGemmKernel<Tl, __nv_bfloat16, true>
                                              : WgmmaGemmKernel<Tl, __nv_bfloat16, false>;
    if constexpr (Tl::PERSISTENT) {
      kernel = out == StorageType::kFloat ? WgmmaPersistentGemmKernel<Tl, float, false>
               : q.mask != nullptr        ? WgmmaPersistentGemmKernel<Tl, __nv_bfloat16, true>
                                          : WgmmaPersistentGemmKernel<Tl, __nv_bfloat16, false>;
    }
    WgArgs<TcGemmParams> args{q, {}, {}};
    if constexpr (Tl::TMA) {
      CHECK(q.mp % Tl::BM == 0 && q.kp % Tl::BK == 0) << "a TMA tile on an unpadded operand";
      args.a = MakeMatrixMap(q.at, q.kp, q.mp, q.groups, Tl::BK, Tl::BM);
      if (q.tap_boxes) {
        CHECK(q.n % 64 == 0 && q.kp == q.kh * q.kw * q.cblocks * 64)
            << "TMA tap boxes need a batch of a multiple of 64 and the (ky, kx, c) K order";
        const int64_t dims[5] = {q.n, q.w, q.h, q.cg, q.groups};
        const int box[5] = {64, 1, 1, Tl::BK, 1};
        args.b = MakeTmaMap(q.in, 5, dims, box);
      } else {
        CHECK(PlainGather(q, q.j) && q.plain)
            << "a TMA configuration on a GEMM whose gathered operand is not a plain matrix";
        args.b = MakeMatrixMap(q.in, q.j, q.cg, q.groups, 64, Tl::BK);
      }
    }
    LaunchDynamicSmem(kernel, grid, dim3(Tl::kThreads), Tl::kSmem, stream, args);
    return 0;
  }
};
struct LaunchWgrad {
  dim3 grid;
  int groups;
  cudaStream_t stream;
  const TcWgradParams& q;
  template <class Tl>
  int operator()() const {
    WgArgs<TcWgradParams> args{q, {}, {}};
    if constexpr (Tl::TMA) {
      CHECK(PlainGather(q, q.jtot) && q.ksplit % Tl::BK == 0)
          << "a TMA configuration on a backward filter whose x is not a plain matrix";
      args.a = MakeMatrixMap(q.dy, q.jtot, q.m, groups, Tl::BK, Tl::BM);
      args.b = MakeMatrixMap(q.x, q.jtot, q.cg, groups, Tl::BK, Tl::BN);
    }
    LaunchDynamicSmem(WgmmaWgradKernel<Tl>, grid, dim3(Tl::kThreads), Tl::kSmem, stream, args);
    return 0;
  }
};

}  // namespace

void LaunchWgmmaGemm(const ConvConfig& c, StorageType out, dim3 grid, cudaStream_t stream,
                     const TcGemmParams& q) {
  WithTile(c, LaunchGemm{out, grid, stream, q});
}

void LaunchWgmmaWgrad(const ConvConfig& c, dim3 grid, cudaStream_t stream, const TcWgradParams& q) {
  WithTile(c, LaunchWgrad{grid, static_cast<int>(grid.z) / q.splits, stream, q});
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

}  // namespace colonnade::cuda::conv
