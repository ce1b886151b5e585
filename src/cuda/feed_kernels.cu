// The GPU feed's kernels (declared in feed_kernels.h): the augmentation of a uint8 batch
// into the CHWN float batch, and the synthetic dataset's images generated on the device.
//
// Both must equal the CPU's results bit for bit (data/augment.cc, data/synthetic.cc), so
// every float operation is written as an explicitly rounded intrinsic (__fadd_rn, ...)
// in the CPU's order of evaluation, and the file is also built with --fmad=false: nothing
// is contracted into an FMA, which rounds once where the CPU rounds twice.

#include <algorithm>
#include <cstdint>

#include "core/bilinear.h"
#include "core/philox.h"
#include "cuda/feed_kernels.h"
#include "cuda/port.h"

namespace colonnade::cuda {
namespace {

// ---- augmentation ------------------------------------------------------------------------

constexpr int kAugImages = 32;  // images per block (threadIdx.x)
constexpr int kAugCols = 8;     // output columns per block (threadIdx.y)

struct AugmentParams {
  FeedGeometry g;
  FeedSource source;
  bool use_same;     // every image takes `same`, not its augment (a ten-crop view)
  FeedAugment same;  // (TenCropViewGpu)
  int n;
  float* out;         // C x crop_h x crop_w x n
  float* labels_out;  // n, or null
};

// The launch's batch (FeedSource): read by every thread at its start, from the slot table
// in a graphed step.
__device__ __forceinline__ FeedBatchBuffers BatchOf(const AugmentParams& p) {
  return p.source.slot_on_device != nullptr ? p.source.slots[*p.source.slot_on_device]
                                            : p.source.direct;
}

// The labels' copy, by the first block of the launch: one launch where a copy would be a
// second operation on the stream, outside the step graph.
__device__ __forceinline__ void CopyLabels(const AugmentParams& p, const FeedBatchBuffers& in,
                                           int thread, int threads) {
  if (p.labels_out == nullptr || blockIdx.x != 0 || blockIdx.y != 0 || blockIdx.z != 0) return;
  for (int j = thread; j < p.n; j += threads) p.labels_out[j] = in.labels[j];
}

// One output value from its source value `v` (the byte, or the bilinear value of four:
// exact floats): WriteImageCHWN's arithmetic, v -= mean (image mode); (v + offset) * scale,
// offset = light (- channel mean), with `mean` the pixel's C mean-image values (read in
// kImage mode only). Every augmentation kernel calls this, so their values are the same
// expression, operation for operation.
__device__ __forceinline__ float AugmentValue(const FeedGeometry& g, const FeedAugment& a, float v,
                                              const float* mean, int c) {
  float offset = c < 3 ? a.light[c] : 0.0f;
  if (g.mean == FeedMean::kChannel) offset = __fsub_rn(offset, g.channel_mean[c]);
  if (g.mean == FeedMean::kImage) v = __fsub_rn(v, mean[c]);
  return __fmul_rn(__fadd_rn(v, offset), g.scale);
}

// Whether output pixel (y, x) lies in the image's cutout square (then it is 0).
__device__ __forceinline__ bool InCutout(const FeedAugment& a, int y, int x) {
  return y >= a.cut_y0 && y < a.cut_y1 && x >= a.cut_x0 && x < a.cut_x1;
}

// What one thread of the per-pixel kernels (AugmentKernel, AugmentResizeKernel; block (32,
// 8), grid (ceil(crop_w / 8), crop_h, ceil(n / 32))) works on: output pixel (y, x) of image
// j, with that image's augment. Every thread first takes its share of the label copy; false
// for a thread past the batch or the crop's width, which then has nothing more to do.
struct PixelTask {
  int j, x, y;
  FeedBatchBuffers in;
  FeedAugment a;
};
__device__ __forceinline__ bool BeginPixel(const AugmentParams& p, PixelTask* t) {
  t->j = blockIdx.z * kAugImages + threadIdx.x;
  t->x = blockIdx.x * kAugCols + threadIdx.y;
  t->y = blockIdx.y;
  t->in = BatchOf(p);
  CopyLabels(p, t->in, threadIdx.y * kAugImages + threadIdx.x, kAugImages * kAugCols);
  if (t->j >= p.n || t->x >= p.g.crop_w) return false;
  t->a = p.use_same ? p.same : t->in.augs[t->j];
  return true;
}

// The general kernel (any channel count; the tiled kernel below covers C <= 4).
// Block (32, 8), grid (ceil(crop_w / 8), crop_h, ceil(n / 32)): thread (j, x) of block
// (bx, y, bz) writes output pixel (y, bx * 8 + x) of image bz * 32 + j for every channel.
// Consecutive threads take consecutive images, so each store of a CHWN row coalesces, but
// each load instruction gathers one byte from 32 different images (32 sectors).
__global__ void __launch_bounds__(kAugImages* kAugCols) AugmentKernel(AugmentParams p) {
  const FeedGeometry& g = p.g;
  PixelTask t;
  if (!BeginPixel(p, &t)) return;
  const int j = t.j, x = t.x, y = t.y;
  const FeedBatchBuffers& in = t.in;
  const FeedAugment& a = t.a;
  const int sy = a.y0 + y;
  const int sx = a.mirror ? a.x0 + g.crop_w - 1 - x : a.x0 + x;
  const bool inside = sy >= 0 && sy < g.height && sx >= 0 && sx < g.width && !InCutout(a, y, x);
  const int64_t plane = static_cast<int64_t>(g.crop_h) * g.crop_w * p.n;  // one channel
  float* dst = p.out + (static_cast<int64_t>(y) * g.crop_w + x) * p.n + j;
  const int64_t e = inside ? (static_cast<int64_t>(sy) * g.width + sx) * g.channels : 0;
  const uint8_t* px = in.pixels + static_cast<int64_t>(j) * g.height * g.width * g.channels + e;
  const float* mean = g.mean == FeedMean::kImage ? g.mean_image + e : nullptr;
  for (int c = 0; c < g.channels; ++c) {  // 0: padding or cutout
    dst[c * plane] = inside ? AugmentValue(g, a, static_cast<float>(px[c]), mean, c) : 0.0f;
  }
}

// Resized crops (FeedGeometry::resize: random-resized crops, a resized eval crop), any
// channel count. Block (32, 8), grid (ceil(crop_w / 8), crop_h, ceil(n / 32)) as
// AugmentKernel: thread (j, x) of block (bx, y, bz) writes output pixel (y, bx * 8 + x) of
// image bz * 32 + j. Its value is core/bilinear.h's interpolation of the four source bytes
// around the box position it samples (mirrored: the position of column crop_w - 1 - x),
// exact in float, minus the mean image at the nearest of them: data::WriteImageCHWN's
// resize path, operation for operation. The box lies inside the image (checked on the host),
// so nothing is padding. Gathers four pixels of 32 images per warp: not tiled (yet).
__global__ void __launch_bounds__(kAugImages* kAugCols) AugmentResizeKernel(AugmentParams p) {
  const FeedGeometry& g = p.g;
  PixelTask t;
  if (!BeginPixel(p, &t)) return;
  const int j = t.j, x = t.x, y = t.y;
  const FeedBatchBuffers& in = t.in;
  const FeedAugment& a = t.a;
  const int64_t plane = static_cast<int64_t>(g.crop_h) * g.crop_w * p.n;  // one channel
  float* dst = p.out + (static_cast<int64_t>(y) * g.crop_w + x) * p.n + j;
  if (InCutout(a, y, x)) {
    for (int c = 0; c < g.channels; ++c) dst[c * plane] = 0.0f;
    return;
  }
  const BilinearTap ty = BilinearTapOf(y, g.crop_h, a.box_h > 0 ? a.box_h : g.crop_h);
  const BilinearTap tx =
      BilinearTapOf(a.mirror ? g.crop_w - 1 - x : x, g.crop_w, a.box_w > 0 ? a.box_w : g.crop_w);
  const int C = g.channels;
  const int64_t row0 = static_cast<int64_t>(a.y0 + ty.i0) * g.width;
  const int64_t row1 = static_cast<int64_t>(a.y0 + ty.i1) * g.width;
  const int c0 = a.x0 + tx.i0, c1 = a.x0 + tx.i1;
  const uint8_t* img = in.pixels + static_cast<int64_t>(j) * g.height * g.width * C;
  const uint8_t* p00 = img + (row0 + c0) * C;
  const uint8_t* p01 = img + (row0 + c1) * C;
  const uint8_t* p10 = img + (row1 + c0) * C;
  const uint8_t* p11 = img + (row1 + c1) * C;
  const float* mean =
      g.mean == FeedMean::kImage
          ? g.mean_image +
                ((static_cast<int64_t>(a.y0 + ty.nearest()) * g.width) + a.x0 + tx.nearest()) * C
          : nullptr;
  for (int c = 0; c < C; ++c) {
    const float v = BilinearValue(BilinearFixed(p00[c], p01[c], p10[c], p11[c], tx.f, ty.f));
    dst[c * plane] = AugmentValue(g, a, v, mean, c);
  }
}

// ---- the tiled augmentation kernel ---------------------------------------------------------
//
// Why: in CHWN the image index is innermost, so the general kernel's warp reads 32 images'
// bytes per load (32 sectors for 32 bytes): at AlexNet's batch it ran at 4-5x its
// bandwidth floor, the gathers the likely cause (not profiled). Here a block owns one output row y,
// kTileCols output columns and kTileImages images. Phase 1: each warp copies whole source row
// segments (the kTileCols * C contiguous bytes of one image's row sy that the tile needs, in source
// order, clipped to the image) into shared memory, lane by lane over consecutive bytes, so
// a load instruction touches 1-2 sectors; in kImage mode also the mean image's floats of
// the same pixels (each image crops elsewhere, so per-element mean reads would gather
// too). Shared rows are padded by one word so that the images' rows start in different
// banks. Phase 2: each thread turns staged bytes into
// floats (AugmentValue, the general kernel's arithmetic) and stores them, as float4 over 4
// consecutive images when n % 4 == 0 (kVec4) and one float per thread otherwise; either
// way a warp's stores cover whole CHWN row segments. The per-image augments sit in shared
// memory, read once per block.
constexpr int kTileImages = 32;
constexpr int kTileCols = 32;
constexpr int kTileMaxChannels = 4;
constexpr int kTileThreads = 256;

// Where output pixel (y, x = xb + xx) of a tile image comes from: whether it lies inside
// the source image (else it is padding, 0) and its staged column k.
struct TileTexel {
  bool inside;
  int k;  // staged column
};

__device__ __forceinline__ TileTexel LocateTexel(const FeedGeometry& g, const FeedAugment& a, int y,
                                                 int x, int xx) {
  const int sy = a.y0 + y;
  const int sx = a.mirror ? a.x0 + g.crop_w - 1 - x : a.x0 + x;
  TileTexel t;
  t.inside = sy >= 0 && sy < g.height && sx >= 0 && sx < g.width && !InCutout(a, y, x);
  t.k = a.mirror ? kTileCols - 1 - xx : xx;
  return t;
}

// Block kTileThreads, grid (ceil(crop_w / kTileCols), crop_h, ceil(n / kTileImages)).
template <bool kVec4>
__global__ void __launch_bounds__(kTileThreads) AugmentTileKernel(AugmentParams p) {
  __shared__ FeedAugment s_aug[kTileImages];
  __shared__ uint8_t s_px[kTileImages][kTileCols * kTileMaxChannels + 4];
  __shared__ float s_mean[kTileImages][kTileCols * kTileMaxChannels + 1];  // kImage only
  const FeedGeometry& g = p.g;
  const int C = g.channels;
  const int xb = blockIdx.x * kTileCols, y = blockIdx.y, jb = blockIdx.z * kTileImages;
  const int images = p.n - jb < kTileImages ? p.n - jb : kTileImages;
  const int t = threadIdx.x;
  const FeedBatchBuffers in = BatchOf(p);
  CopyLabels(p, in, t, kTileThreads);
  if (t < images) s_aug[t] = p.use_same ? p.same : in.augs[jb + t];
  __syncthreads();

  // Phase 1: stage. Staged column k of image jj is source column lo + k, where lo is the
  // tile's leftmost source column (its rightmost output column when mirrored).
  const int seg = kTileCols * C, row_bytes = g.width * C;
  for (int jj = t / 32; jj < images; jj += kTileThreads / 32) {
    const FeedAugment& a = s_aug[jj];
    const int sy = a.y0 + y;
    if (sy < 0 || sy >= g.height) continue;  // a padding row: nothing is read
    const int lo = a.mirror ? a.x0 + g.crop_w - xb - kTileCols : a.x0 + xb;
    const uint8_t* row = in.pixels + (static_cast<int64_t>(jb + jj) * g.height + sy) * row_bytes;
    const float* mean_row =
        g.mean == FeedMean::kImage ? g.mean_image + static_cast<int64_t>(sy) * row_bytes : nullptr;
    for (int r = t % 32; r < seg; r += 32) {
      const int b = lo * C + r;
      if (b < 0 || b >= row_bytes) continue;  // padding columns
      s_px[jj][r] = row[b];
      if (g.mean == FeedMean::kImage) s_mean[jj][r] = __ldg(mean_row + b);
    }
  }
  __syncthreads();

  // Phase 2: convert and store.
  const int64_t plane = static_cast<int64_t>(g.crop_h) * g.crop_w * p.n;  // one channel
  if (kVec4) {
    constexpr int kQuads = kTileImages / 4;
    for (int i = t; i < kTileCols * kQuads; i += kTileThreads) {
      const int j0 = (i % kQuads) * 4, xx = i / kQuads, x = xb + xx;
      if (x >= g.crop_w || j0 >= images) continue;  // n % 4 == 0: quads are whole
      TileTexel tx[4];
      for (int q = 0; q < 4; ++q) tx[q] = LocateTexel(g, s_aug[j0 + q], y, x, xx);
      float* dst = p.out + (static_cast<int64_t>(y) * g.crop_w + x) * p.n + jb + j0;
      for (int c = 0; c < C; ++c) {
        float v[4];
        for (int q = 0; q < 4; ++q) {
          v[q] = tx[q].inside ? AugmentValue(g, s_aug[j0 + q],
                                             static_cast<float>(s_px[j0 + q][tx[q].k * C + c]),
                                             &s_mean[j0 + q][tx[q].k * C], c)
                              : 0.0f;
        }
        *reinterpret_cast<float4*>(dst + c * plane) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  } else {
    for (int i = t; i < kTileCols * kTileImages; i += kTileThreads) {
      const int jj = i % kTileImages, xx = i / kTileImages, x = xb + xx;
      if (x >= g.crop_w || jj >= images) continue;
      const FeedAugment& a = s_aug[jj];
      const TileTexel tx = LocateTexel(g, a, y, x, xx);
      float* dst = p.out + (static_cast<int64_t>(y) * g.crop_w + x) * p.n + jb + jj;
      for (int c = 0; c < C; ++c) {
        dst[c * plane] = tx.inside ? AugmentValue(g, a, static_cast<float>(s_px[jj][tx.k * C + c]),
                                                  &s_mean[jj][tx.k * C], c)
                                   : 0.0f;
      }
    }
  }
}

// ---- synthetic images ----------------------------------------------------------------------

constexpr int kSynthBlock = 256;
constexpr int kGrid = 4;  // data::SyntheticRecipe::kGrid
constexpr int kMaxGridY = 65535;

struct SynthParams {
  SyntheticGeometry g;
  const int64_t* indices;  // n
  int n;
  int64_t groups;  // ceil(H * W * C / 8): 8-byte groups per image
  uint8_t* out;    // n x H x W x C
  bool words;      // H * W * C % 8 == 0 and out 8-byte aligned: 8-byte stores
};

// One grid coordinate of SyntheticDataset::BuildPatterns' bilinear interpolation: pixel
// v of `size` falls between grid lines i0 and i1 (periodic) at fraction t, ut = 1 - t.
// Computed once per pixel, not per byte of it (each takes a division).
struct GridCoord {
  int i0, i1;
  float t, ut;
};

__device__ __forceinline__ GridCoord GridCoordOf(int v, int size) {
  const float f = __fdiv_rn(__fmul_rn(static_cast<float>(v), static_cast<float>(kGrid)),
                            static_cast<float>(size));
  GridCoord r;
  r.i0 = static_cast<int>(f);
  r.t = __fsub_rn(f, static_cast<float>(r.i0));
  r.i1 = (r.i0 + 1) % kGrid;
  r.ut = __fsub_rn(1.0f, r.t);
  return r;
}

// Pattern value of class grid `cells` (kGrid x kGrid x 3) at grid coordinates (gy, gx),
// channel c: BuildPatterns' interpolation, operation by operation.
__device__ __forceinline__ float PatternValue(const float* cells, const GridCoord& gy,
                                              const GridCoord& gx, int c) {
  auto cell = [&](int y, int x) { return __ldg(cells + (y * kGrid + x) * 3 + c); };
  const float top =
      __fadd_rn(__fmul_rn(gx.ut, cell(gy.i0, gx.i0)), __fmul_rn(gx.t, cell(gy.i0, gx.i1)));
  const float bottom =
      __fadd_rn(__fmul_rn(gx.ut, cell(gy.i1, gx.i0)), __fmul_rn(gx.t, cell(gy.i1, gx.i1)));
  return __fadd_rn(__fmul_rn(gy.ut, top), __fmul_rn(gy.t, bottom));
}

// Block 256, grid (ceil(groups / 256), min(n, 65535)), striding over images by gridDim.y:
// each thread makes the 8 consecutive bytes of one image that share one Philox noise
// block (SyntheticDataset::Generate draws block e / 8 for element e). The per-image
// parameters (one Philox block) are recomputed by every thread: ten rounds of integer
// work, cheaper than a second kernel or a shared-memory broadcast. The thread walks its
// 8 bytes' (y, x, c) incrementally (one division up front, not four per byte), takes the
// grid coordinates once per pixel, and stores the 8 bytes as one 8-byte word when the
// image size is a multiple of 8.
__global__ void __launch_bounds__(kSynthBlock) SyntheticKernel(SynthParams p) {
  const SyntheticGeometry& g = p.g;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kSynthBlock + threadIdx.x;
  if (t >= p.groups) return;
  const int64_t elems = static_cast<int64_t>(g.height) * g.width * g.channels;
  const int count = elems - t * 8 < 8 ? static_cast<int>(elems - t * 8) : 8;
  const int64_t pixel0 = t * 8 / g.channels;
  const int c0 = static_cast<int>(t * 8 - pixel0 * g.channels);
  const int x0 = static_cast<int>(pixel0 % g.width), y0 = static_cast<int>(pixel0 / g.width);
  for (int j = blockIdx.y; j < p.n; j += gridDim.y) {
    const int64_t index = p.indices[j];
    const uint64_t u = static_cast<uint64_t>(index);
    const float* cells = g.grid + (index % g.num_classes) * kGrid * kGrid * 3;
    const Philox4 r = Philox4x32(g.image_key, 0, u);
    const uint64_t span = static_cast<uint64_t>(2 * g.max_shift + 1);
    const int dy = static_cast<int>((static_cast<uint64_t>(r.v[0]) * span) >> 32) - g.max_shift;
    const int dx = static_cast<int>((static_cast<uint64_t>(r.v[1]) * span) >> 32) - g.max_shift;
    const float contrast = __fadd_rn(0.75f, __fmul_rn(0.5f, UniformFromBits(r.v[2])));
    const float brightness = __fadd_rn(-20.f, __fmul_rn(40.f, UniformFromBits(r.v[3])));
    const Philox4 noise = Philox4x32(g.image_key, 1 + u, static_cast<uint64_t>(t));
    uint32_t packed[2] = {0, 0};  // the 8 bytes, little-endian (selected, not indexed)
    int c = c0, x = x0, y = y0;
    GridCoord gy, gx;
    for (int i = 0; i < count; ++i) {
      if (i == 0 || c == 0) {  // a new pixel
        gy = GridCoordOf(((y + dy) % g.height + g.height) % g.height, g.height);
        gx = GridCoordOf(((x + dx) % g.width + g.width) % g.width, g.width);
      }
      const float pattern = PatternValue(cells, gy, gx, c);
      const uint32_t word = i < 2   ? noise.v[0]
                            : i < 4 ? noise.v[1]
                            : i < 6 ? noise.v[2]
                                    : noise.v[3];
      const int shift = (i % 2) * 16;
      const float tri =
          __fsub_rn(__fdiv_rn(__fadd_rn(static_cast<float>((word >> shift) & 0xFF),
                                        static_cast<float>((word >> (shift + 8)) & 0xFF)),
                              255.f),
                    1.f);
      // 128 + (pattern - 128) * contrast + brightness + noise * tri, left to right.
      float v = __fadd_rn(128.f, __fmul_rn(__fsub_rn(pattern, 128.f), contrast));
      v = __fadd_rn(v, brightness);
      v = __fadd_rn(v, __fmul_rn(g.noise, tri));
      v = 0.f < v ? v : 0.f;      // std::max(0.f, v)
      v = v < 255.f ? v : 255.f;  // std::min(255.f, v)
      const uint32_t byte = static_cast<uint8_t>(static_cast<int>(__fadd_rn(v, 0.5f)));
      if (i < 4) {
        packed[0] |= byte << (8 * i);
      } else {
        packed[1] |= byte << (8 * (i - 4));
      }
      if (++c == g.channels) {
        c = 0;
        if (++x == g.width) x = 0, ++y;
      }
    }
    uint8_t* out = p.out + j * elems + t * 8;
    if (p.words) {
      uint2 w;
      w.x = packed[0];
      w.y = packed[1];
      *reinterpret_cast<uint2*>(out) = w;
    } else {
      for (int i = 0; i < count; ++i) {
        out[i] = static_cast<uint8_t>((i < 4 ? packed[0] >> (8 * i) : packed[1] >> (8 * (i - 4))) &
                                      0xFF);
      }
    }
  }
}

// The augmentation's grid over the output; no launch for an empty batch. The tiled kernel
// for up to kTileMaxChannels channels (float4 stores when n % 4 == 0 and the output is
// 16-byte aligned), the general one otherwise.
void LaunchAugment(cudaStream_t stream, const AugmentParams& p) {
  if (p.n <= 0 || p.g.crop_h <= 0 || p.g.crop_w <= 0) return;
  if (p.g.resize) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.g.crop_w, kAugCols)),
                    static_cast<unsigned>(p.g.crop_h),
                    static_cast<unsigned>(CeilDiv(p.n, kAugImages)));
    Launch(AugmentResizeKernel, grid, dim3(kAugImages, kAugCols), stream, p);
    return;
  }
  if (p.g.channels >= 1 && p.g.channels <= kTileMaxChannels) {
    const dim3 grid(static_cast<unsigned>(CeilDiv(p.g.crop_w, kTileCols)),
                    static_cast<unsigned>(p.g.crop_h),
                    static_cast<unsigned>(CeilDiv(p.n, kTileImages)));
    const bool vec4 = p.n % 4 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0;
    Launch(vec4 ? &AugmentTileKernel<true> : &AugmentTileKernel<false>, grid, dim3(kTileThreads),
           stream, p);
    return;
  }
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.g.crop_w, kAugCols)),
                  static_cast<unsigned>(p.g.crop_h),
                  static_cast<unsigned>(CeilDiv(p.n, kAugImages)));
  Launch(AugmentKernel, grid, dim3(kAugImages, kAugCols), stream, p);
}

}  // namespace

void AugmentBatchGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src, int n,
                     float* out, float* labels_out) {
  LaunchAugment(stream, AugmentParams{g, src, false, FeedAugment{}, n, out, labels_out});
}

void TenCropViewGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src, int view,
                    int n, float* out, float* labels_out) {
  ViewGpu(stream, g, src, TenCropView(view, g.height, g.width, g.crop_h, g.crop_w), n, out,
          labels_out);
}

void ViewGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src,
             const FeedAugment& view, int n, float* out, float* labels_out) {
  LaunchAugment(stream, AugmentParams{g, src, true, view, n, out, labels_out});
}

// out[j] = pool[indices[j]] for images of `bytes` bytes (a multiple of 16 with 16-byte
// aligned buffers: uint4 copies, else bytes). Block 256, grid (ceil(words / 256),
// min(n, 65535)) striding over images.
struct GatherParams {
  const uint8_t* pool;
  const int64_t* indices;
  int n;
  int64_t bytes;
  uint8_t* out;
  bool vec;
};
__global__ void __launch_bounds__(kSynthBlock) GatherImagesKernel(GatherParams p) {
  const int64_t words = p.vec ? p.bytes / 16 : p.bytes;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * kSynthBlock + threadIdx.x;
  if (w >= words) return;
  for (int j = blockIdx.y; j < p.n; j += gridDim.y) {
    const uint8_t* src = p.pool + p.indices[j] * p.bytes;
    uint8_t* dst = p.out + static_cast<int64_t>(j) * p.bytes;
    if (p.vec) {
      reinterpret_cast<uint4*>(dst)[w] = reinterpret_cast<const uint4*>(src)[w];
    } else {
      dst[w] = src[w];
    }
  }
}

void GatherImagesGpu(cudaStream_t stream, const uint8_t* pool, const int64_t* indices, int n,
                     int64_t bytes, uint8_t* out) {
  if (n <= 0 || bytes <= 0) return;
  const bool vec = bytes % 16 == 0 && reinterpret_cast<uintptr_t>(pool) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const GatherParams p{pool, indices, n, bytes, out, vec};
  const dim3 grid(static_cast<unsigned>(CeilDiv(vec ? bytes / 16 : bytes, kSynthBlock)),
                  static_cast<unsigned>(std::min(n, kMaxGridY)));
  Launch(GatherImagesKernel, grid, dim3(kSynthBlock), stream, p);
}

void SyntheticImagesGpu(cudaStream_t stream, const SyntheticGeometry& g, const int64_t* indices,
                        int n, uint8_t* out) {
  if (n <= 0) return;
  const int64_t elems = static_cast<int64_t>(g.height) * g.width * g.channels;
  const bool words = elems % 8 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
  SynthParams p{g, indices, n, CeilDiv(elems, 8), out, words};
  const dim3 grid(static_cast<unsigned>(CeilDiv(p.groups, kSynthBlock)),
                  static_cast<unsigned>(std::min(n, kMaxGridY)));
  Launch(SyntheticKernel, grid, dim3(kSynthBlock), stream, p);
}

}  // namespace colonnade::cuda
