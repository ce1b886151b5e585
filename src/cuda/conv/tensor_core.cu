// The tensor-core convolutions' driver: ConvForwardTc, ConvBackwardDataTc and
// ConvBackwardFilterTc (conv.h) select a configuration (catalogue.h) of the mma.sync family
// (mma.cu) or the wgmma family (wgmma.cu), arrange the FP32 master filters into its operand
// (bf16 or tf32, K contiguous, zero-padded to the tile: TcArrangeRowsKernel for forward,
// TcArrangeTransposedKernel for backward data, TcArrangeWeightsKernel otherwise), size
// backward filter's split-K and launch; plus the float <-> bf16 conversions of the operands.
// Precision, resources and measurements: src/cuda/TC_NOTES.md.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/log.h"
#include "cuda/conv/common.h"
#include "cuda/conv/conv.h"
#include "cuda/conv/tensor_core.h"
#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda {
namespace conv {
namespace {

using tc::Bf16ToFloat;
using tc::FloatToBf16;
using tc::Tf32Round;

// The arranged value's store: bf16 bits, or tf32-rounded float bits.
__device__ __forceinline__ void StoreArranged(const ArrangeParams& p, int64_t i, float v) {
  if (p.tf32) {
    static_cast<uint32_t*>(p.at)[i] = Tf32Round(v);
  } else {
    static_cast<uint16_t*>(p.at)[i] = FloatToBf16(v);
  }
}

// Kernel TcArrangeWeightsKernel: the filter operand of both tensor-core families
//   at : G x mp x kp (bf16 bits, or tf32-rounded float bits), at[g][m][k] = W(g, m, k) of
//        common.h's ArrangeParams, zero beyond m or k.
// Grid-stride loop, one thread per element of at (writes coalesce along k).
__global__ void TcArrangeWeightsKernel(const ArrangeParams p) {
  const int64_t total = static_cast<int64_t>(p.groups) * p.mp * p.kp;
  const int khkw = p.kh * p.kw, taps = p.tkh * p.tkw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int kk = static_cast<int>(i % p.kp);
    const int mm = static_cast<int>((i / p.kp) % p.mp);
    const int g = static_cast<int>(i / (static_cast<int64_t>(p.mp) * p.kp));
    StoreArranged(p, i, FilterValue(p, g, mm, kk, khkw, taps));
  }
}

// Kernel TcArrangeRowsKernel: TcArrangeWeightsKernel's values where the filters are already
// rows of K (forward): at[g][mm][kk] = w[g][mm][kk] in (channel, tap) K order, zero beyond m
// or k; in (tap, channel) order (tap_major) each thread's 4 values are 4 channels of one tap.
// blockIdx.y walks the G x mp rows, a thread 4 consecutive kk of a row (kp is a multiple of the K
// slice): 32-bit index arithmetic once per row, 4 loads in flight, one 8- or 16-byte store. Why:
// the flat kernel's two 64-bit divisions per element made its larger launches compute-bound
// (ResNet-50's layer4 filters 14-26 us where the bytes take 3-5; experiments/resnet_kernels).
constexpr int kArrangeBlock = 256;
__global__ void TcArrangeRowsKernel(const ArrangeParams p) {
  const int kk0 = (blockIdx.x * kArrangeBlock + threadIdx.x) * 4;
  if (kk0 >= p.kp) return;
  for (int row = blockIdx.y; row < p.groups * p.mp; row += gridDim.y) {
    const int g = row / p.mp, mm = row - g * p.mp;
    const float* const src = p.w + (static_cast<int64_t>(g) * p.fg + mm) * p.k;
    float v[4];
    if (p.tap_major) {  // kk0 .. kk0 + 3: channels ch .. ch + 3 of one tap (cpad % 4 == 0)
      const int taps = p.kh * p.kw, tap = kk0 / p.cpad, ch = kk0 - tap * p.cpad;
#pragma unroll
      for (int u = 0; u < 4; ++u)
        v[u] = mm < p.m && ch + u < p.k / taps ? src[(ch + u) * taps + tap] : 0.0f;
    } else {
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = mm < p.m && kk0 + u < p.k ? src[kk0 + u] : 0.0f;
    }
    const int64_t at = static_cast<int64_t>(row) * p.kp + kk0;
    if (p.tf32) {
      *reinterpret_cast<uint4*>(static_cast<uint32_t*>(p.at) + at) =
          make_uint4(Tf32Round(v[0]), Tf32Round(v[1]), Tf32Round(v[2]), Tf32Round(v[3]));
    } else {
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p.at) + at) =
          make_uint2(uint32_t(FloatToBf16(v[0])) | (uint32_t(FloatToBf16(v[1])) << 16),
                     uint32_t(FloatToBf16(v[2])) | (uint32_t(FloatToBf16(v[3])) << 16));
    }
  }
}

// Kernel TcArrangeTransposedKernel: TcArrangeWeightsKernel's values for backward data (K in
// (filter, tap) order, each tap flipped and of this stride phase): at[g][c][f * taps + r] =
// w[g][f][c][ky(r)][kx(r)]. A block moves the filters f0 .. f0 + tf of channels c0 .. c0 + 32
// (at most kArrangeTile floats of w: 4 per thread, loaded at once) through shared memory: it
// reads each filter's run of 32 channels x kh kw taps (contiguous in w), then writes each
// channel's tf x taps run of at (contiguous in at). Rows of the tile are padded by one float,
// so the threads of a write, one filter apart, fall on distinct banks. Why: one thread per
// element of at read w with a stride of cg kh kw floats (a 1 x 1 convolution's backward data is
// a transpose), a sector per element; and a tile much larger than this one left too few blocks
// with loads in flight (ResNet-50's layer1 3 x 3 in 6 blocks: 21 us under ncu).
constexpr int kArrangeTileC = 32;
constexpr int kArrangeTile = 4 * kArrangeBlock;
struct TransposedArrange {
  ArrangeParams p;
  int tf;  // filters per block: tf x 32 x kh kw <= kArrangeTile
};
__global__ void TcArrangeTransposedKernel(const TransposedArrange a) {
  __shared__ float tile[kArrangeTile + 32];
  const ArrangeParams& p = a.p;
  const int tf = a.tf;
  const int g = blockIdx.z, c0 = blockIdx.y * kArrangeTileC, f0 = blockIdx.x * tf;
  const int khkw = p.kh * p.kw, taps = p.tkh * p.tkw, run = kArrangeTileC * khkw, pitch = run + 1;
  const int cs = IMin(kArrangeTileC, p.m - c0);  // channels of the tile that exist
  float v[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int i = threadIdx.x + u * kArrangeBlock, f = i / run, rest = i - f * run;
    v[u] = i < tf * run && f0 + f < p.fg && rest < cs * khkw
               ? p.w[((static_cast<int64_t>(g) * p.fg + f0 + f) * p.cg + c0) * khkw + rest]
               : 0.0f;
  }
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int i = threadIdx.x + u * kArrangeBlock, f = i / run;
    if (i < tf * run) tile[f * pitch + i - f * run] = v[u];
  }
  __syncthreads();
  const int width = tf * taps;  // a channel's values of at (at most 32)
  const int k_end = IMin(p.kp - f0 * taps, width);
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int i = threadIdx.x + u * kArrangeBlock, c = i / width, q = i - c * width;
    if (c >= kArrangeTileC || c0 + c >= p.mp) continue;
    // (filter, tap) K order: q is f * taps + r, a run at f0 taps; tap-major (kk = r cpad + f,
    // no channel padding past the tiles' filters): q is r * tf + f, taps runs of tf.
    const int f = p.tap_major ? q % tf : q / taps, r = p.tap_major ? q / tf : q - f * taps;
    if (p.tap_major ? f0 + f >= p.cpad : q >= k_end) continue;
    int ky, kx;
    FlippedTap(p, r, &ky, &kx);
    const float x =
        c0 + c < p.m && f0 + f < p.k / taps ? tile[f * pitch + c * khkw + ky * p.kw + kx] : 0.0f;
    const int kk = p.tap_major ? r * p.cpad + f0 + f : f0 * taps + q;
    StoreArranged(p, (static_cast<int64_t>(g) * p.mp + c0 + c) * p.kp + kk, x);
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

// ---- host side ------------------------------------------------------------------------------

// Fills ap.at (ap complete, Finish'ed): the row or the transposing kernel where they apply, the
// flat one otherwise (backward data of kernels past 32 taps: first layers, which training never
// runs).
void ArrangeWeights(const DeviceContext& ctx, const ArrangeParams& ap) {
  const int64_t elems = int64_t(ap.groups) * ap.kp * ap.mp;
  const int khkw = ap.kh * ap.kw;
  if (!ap.transposed && ap.kp % 4 == 0 && (!ap.tap_major || ap.cpad % 4 == 0) &&
      int64_t(ap.groups) * ap.mp < (int64_t(1) << 31)) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(ap.kp, 4 * kArrangeBlock)),
                    static_cast<unsigned>(std::min<int64_t>(int64_t(ap.groups) * ap.mp, 65535)));
    Launch(TcArrangeRowsKernel, grid, dim3(kArrangeBlock), ctx.stream, ap);
    return;
  }
  if (ap.transposed && kArrangeTileC * khkw <= kArrangeTile && ap.groups <= 65535) {
    const int taps = ap.tkh * ap.tkw;
    const int tf = std::min(kArrangeTileC, kArrangeTile / (kArrangeTileC * khkw));
    const int64_t fcols = CeilDiv(ap.kp, taps);  // filters' columns, padding included
    const dim3 grid(static_cast<unsigned>(CeilDiv(fcols, tf)),
                    static_cast<unsigned>(CeilDiv(ap.mp, kArrangeTileC)),
                    static_cast<unsigned>(ap.groups));
    Launch(TcArrangeTransposedKernel, grid, dim3(kArrangeBlock), ctx.stream,
           TransposedArrange{ap, tf});
    return;
  }
  Launch(TcArrangeWeightsKernel, ElementwiseGrid(ctx, elems), dim3(kArrangeBlock), ctx.stream, ap);
}

int ChunkElems(MathMode m) { return m == MathMode::kBF16 ? 8 : 4; }

// Runs one implicit GEMM (forward, or one phase of backward data): selects the configuration,
// arranges the filter operand for it and launches.
ConvLaunchInfo RunGemm(const DeviceContext& ctx, ConvProblem problem, MathMode math, ConvGemm gemm,
                       int groups, const TcInput& in, const TcOutput& out, const float* bias,
                       bool relu, float* stats, const void* mask, bool add, int fault) {
  CHECK(math == MathMode::kBF16 || math == MathMode::kTF32) << "tensor-core math mode";
  const bool bf16 = math == MathMode::kBF16;
  const bool vec = gemm.geo.n % ChunkElems(math) == 0 && Aligned(in.data, 16);
  ConvGemmDesc desc = Describe(gemm.geo, groups, ctx, math, vec, in.type == StorageType::kBF16);
  desc.epilogue_reads = mask != nullptr || add;
  const ConvConfig& c =
      problem == ConvProblem::kForward ? SelectForwardConfig(desc) : SelectBackwardDataConfig(desc);
  Finish(&gemm, c.bm, c.bk);
  TcGemmParams q{};
  static_cast<GemmGeometry&>(q) = gemm.geo;
  q.in = in.data;
  q.out = out.data;
  q.bias = bias;
  q.relu = relu ? 1 : 0;
  q.groups = groups;
  q.fault = fault;
  const size_t ob = StorageBytes(out.type);
  q.pair_out = ((q.plain ? q.j % 2 == 0 : q.n % 2 == 0) && Aligned(q.out, 2 * ob)) ? 1 : 0;
  const int64_t row_bytes = int64_t(q.out_h) * q.out_w * q.n * int64_t(ob);
  // The wgmma kernels mask only bf16 outputs (WgmmaGemmKernel's kMask); otherwise the caller
  // masks after (ConvLaunchInfo::masked).
  if (mask != nullptr && c.family == ConvFamily::kWgmma && out.type != StorageType::kBF16) {
    CHECK(!add) << "backward data: a mask the caller applies after cannot precede the add";
    mask = nullptr;
    stats = nullptr;  // they would not be the masked values' sums
  }
  // Staged: 16-byte chunks of a row's columns land in one run of the output (plain columns, or
  // a stride phase's pixel of n images when n fills whole chunks).
  const int64_t run_bytes = (q.plain ? q.j : q.n) * int64_t(ob);
  q.staged = (Aligned(q.out, 16) && row_bytes % 16 == 0 && run_bytes % 16 == 0 &&
              (mask == nullptr || Aligned(mask, 16)))
                 ? 1
                 : 0;
  q.mask = mask;
  q.add = add ? 1 : 0;
  if (add) stats = nullptr;  // the sums would not be of the values stored
  // A TMA tile on a convolution that is not a plain GEMM: the filters in (ky, kx, c) K order,
  // each tap's channels padded to whole slices, so that every K slice is one tap's box of the
  // activations (wgmma.cu, IssueGemmB).
  // The cp.async wgmma tiles gather in that order too where the channels fill whole slices
  // (WgmmaGemmKernel: one tap's address and bounds check a slice instead of a chunk).
  const int taps = q.kh * q.kw, channels = q.k / taps;
  const bool tap_gather = c.family == ConvFamily::kWgmma && !c.tma && !desc.plain &&
                          channels % c.bk == 0 && channels == q.cg;
  if ((c.tma && !desc.plain) || tap_gather) {
    CHECK(desc.tap_boxes || tap_gather)
        << c.name << ": neither a plain GEMM nor one of whole-box taps";
    const int cpad = static_cast<int>(CeilDiv(channels, c.bk) * c.bk);
    q.kp = taps * cpad;
    q.tap_boxes = 1;
    q.cblocks = cpad / c.bk;
    gemm.arrange.kp = q.kp;
    gemm.arrange.tap_major = 1;
    gemm.arrange.cpad = cpad;
  }
  const int64_t elems = int64_t(groups) * q.kp * q.mp;
  Scratch at(ctx.alloc, (bf16 ? 2 : 4) * size_t(elems));
  gemm.arrange.at = at.f();
  gemm.arrange.tf32 = bf16 ? 0 : 1;
  ArrangeWeights(ctx, gemm.arrange);
  q.at = at.f();
  dim3 grid(static_cast<unsigned>(CeilDiv(q.j, c.bn)), static_cast<unsigned>(q.mp / c.bm),
            static_cast<unsigned>(groups));
  int stats_tiles = 0;
  if (stats != nullptr && c.family == ConvFamily::kWgmma && q.staged && c.bn >= 128) {
    q.stats = stats;
    stats_tiles = static_cast<int>(grid.x);
  }
  // A persistent configuration: one block per multiprocessor at most, each taking tiles in
  // turn (wgmma.cu, WgmmaPersistentGemmKernel).
  if (c.persistent) {
    const int64_t tiles = int64_t(grid.x) * grid.y * grid.z;
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(tiles, std::max(1, ctx.sm_count))));
  }
  if (c.family == ConvFamily::kWgmma) {
    LaunchWgmmaGemm(c, out.type, grid, ctx.stream, q);
  } else {
    LaunchMmaGemm(c, in.type, out.type, vec, grid, ctx.stream, q);
  }
  ConvLaunchInfo info = LaunchInfo(c, vec, 1);
  info.stats_tiles = stats_tiles;
  info.masked = mask != nullptr;
  return info;
}

}  // namespace
}  // namespace conv

int64_t StatsCapacity(const ConvDims& d) {
  return 2 * int64_t(d.f) * CeilDiv(int64_t(d.oh) * d.ow * d.n, int64_t(128));
}
int64_t StatsCapacityDx(const ConvDims& d) {
  return 2 * int64_t(d.c) * CeilDiv(int64_t(d.h) * d.w * d.n, int64_t(128));
}

ConvLaunchInfo ConvForwardTc(const DeviceContext& ctx, const TcConvArgs& a) {
  conv::CheckSizes(a.dims);
  return conv::RunGemm(ctx, ConvProblem::kForward, a.math, conv::ForwardGemm(a.dims, a.conv, a.w),
                       a.conv.groups, a.x, a.y, a.bias, a.relu, a.stats, nullptr, false, a.fault);
}

ConvLaunchInfo ConvBackwardDataTc(const DeviceContext& ctx, const TcConvArgs& a) {
  const ConvDims& d = a.dims;
  conv::CheckSizes(d);
  CHECK(a.bias == nullptr && !a.relu) << "backward data has no bias or ReLU";
  CHECK(a.dx_mask.data == nullptr || a.dx_mask.type == a.dx.type)
      << "backward data: the mask is stored as dx";
  bool zero_first = false;
  const std::vector<conv::ConvGemm> gemms = conv::BackwardDataGemms(d, a.conv, a.w, &zero_first);
  CHECK(!(a.dx_add && zero_first)) << "backward data: dx_add where the GEMMs leave pixels zero";
  if (zero_first) {
    COLONNADE_CUDA_CHECK(cudaMemsetAsync(
        a.dx.data, 0, StorageBytes(a.dx.type) * size_t(d.c) * d.h * d.w * d.n, ctx.stream));
  }
  ConvLaunchInfo info;
  // The sums only where one GEMM writes all of dx (stride 1): phases would leave partial tiles.
  float* const stats = gemms.size() == 1 ? a.stats : nullptr;
  bool masked = true;
  for (const conv::ConvGemm& gemm : gemms) {
    info = conv::RunGemm(ctx, ConvProblem::kBackwardData, a.math, gemm, a.conv.groups, a.dy, a.dx,
                         nullptr, false, stats, a.dx_mask.data, a.dx_add, a.fault);
    masked = masked && info.masked;
  }
  info.masked = masked;
  if (!masked) info.stats_tiles = 0;  // the caller masks dx after: the sums are not its
  return info;
}

bool BackwardDataCoversDx(const ConvDims& d, const ConvParams& p) {
  return !conv::PhasesLeaveZeros(d, p);
}

ConvLaunchInfo ConvBackwardFilterTc(const DeviceContext& ctx, const TcConvArgs& a) {
  const ConvDims& d = a.dims;
  conv::CheckSizes(d);
  CHECK(a.math == MathMode::kBF16 || a.math == MathMode::kTF32) << "tensor-core math mode";
  const int groups = a.conv.groups;
  conv::TcWgradParams q{};
  static_cast<conv::WgradGeometry&>(q) = conv::BackwardFilterGeometry(d, a.conv);
  q.x = a.x.data;
  q.dy = a.dy.data;
  q.fault = a.fault;
  const bool vec = d.n % conv::ChunkElems(a.math) == 0 && conv::Aligned(a.x.data, 16) &&
                   conv::Aligned(a.dy.data, 16);
  const bool bf16_operands = a.x.type == StorageType::kBF16 && a.dy.type == StorageType::kBF16;
  const ConvConfig& c =
      SelectBackwardFilterConfig(conv::Describe(q, groups, ctx, a.math, vec, bf16_operands));
  conv::SplitK(&q, c.bm, c.bn, groups, ctx, conv::kWgradMinSlices, c.bk);
  const conv::SplitKOutput output(ctx, q, groups, a.dw);
  q.out = output.out();
  q.pair_out = (q.ncol % 2 == 0 && conv::Aligned(q.out, 8)) ? 1 : 0;
  const dim3 grid(static_cast<unsigned>(CeilDiv(q.ncol, c.bn)),
                  static_cast<unsigned>(CeilDiv(q.m, c.bm)),
                  static_cast<unsigned>(groups * q.splits));
  if (c.family == ConvFamily::kWgmma) {
    conv::LaunchWgmmaWgrad(c, grid, ctx.stream, q);
  } else {
    conv::LaunchMmaWgrad(c, a.x.type, a.dy.type, vec, grid, ctx.stream, q);
  }
  output.Reduce(ctx, /*two_level=*/true);
  return conv::LaunchInfo(c, vec, q.splits);
}

void FloatToBf16Gpu(const DeviceContext& ctx, const float* x, void* y, int64_t n) {
  if (n <= 0) return;
  int64_t done = 0;
  if (n >= 4 && conv::Aligned(x, 16) && conv::Aligned(y, 8)) {
    done = n / 4 * 4;
    Launch(conv::FloatToBf16x4Kernel, conv::ElementwiseGrid(ctx, n / 4), dim3(256), ctx.stream,
           conv::ConvertParams{x, y, done});
  }
  if (done < n)
    Launch(conv::FloatToBf16Kernel, conv::ElementwiseGrid(ctx, n - done), dim3(256), ctx.stream,
           conv::ConvertParams{x + done, static_cast<uint16_t*>(y) + done, n - done});
}
void Bf16ToFloatGpu(const DeviceContext& ctx, const void* x, float* y, int64_t n) {
  Launch(conv::Bf16ToFloatKernel, conv::ElementwiseGrid(ctx, n), dim3(256), ctx.stream,
         conv::ConvertParams{x, y, n});
}

}  // namespace colonnade::cuda
