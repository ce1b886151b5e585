#include "data/augment.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/bilinear.h"
#include "core/philox.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <emmintrin.h>
#include <xmmintrin.h>
#endif

namespace colonnade::data {

absl::StatusOr<MeanMode> ParseMeanMode(const std::string& s) {
  if (s == "image") return MeanMode::kImage;
  if (s == "channel") return MeanMode::kChannel;
  if (s == "none") return MeanMode::kNone;
  return absl::InvalidArgumentError(
      absl::StrCat("mean mode '", s, "' is not one of image, channel, none"));
}

void LightingDelta(const float alpha[3], float delta[3]) {
  for (int i = 0; i < 3; ++i) {
    float d = 0.f;
    for (int j = 0; j < 3; ++j) d += kImagenetEigvec[i][j] * alpha[j] * kImagenetEigval[j];
    delta[i] = 255.f * d;
  }
}

namespace {

// Uniform integer in [0, n) from 32 random bits (multiply-shift).
int UniformInt(uint32_t bits, int n) {
  return static_cast<int>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(n)) >> 32);
}

uint64_t PurposeKey(uint64_t seed, RandomPurpose p) {
  return MixKey(seed, static_cast<uint64_t>(p));
}

}  // namespace

void DrawResizedCropBox(const AugmentConfig::ResizedCrop& rc, int height, int width, uint64_t key,
                        uint64_t epoch, uint64_t position, ImageAugment* a) {
  const double area = static_cast<double>(height) * width;
  const double log_lo = std::log(rc.ratio_min), log_hi = std::log(rc.ratio_max);
  constexpr double kWord = 1.0 / 4294967296.0;  // a 32-bit word -> [0, 1)
  for (uint64_t t = 0; t < 10; ++t) {
    const Philox4 r = Philox4x32(key, epoch, 10 * position + t);
    const double target = area * (rc.scale_min + (rc.scale_max - rc.scale_min) * (r.v[0] * kWord));
    const double aspect = std::exp(log_lo + (log_hi - log_lo) * (r.v[1] * kWord));
    // Python's round(): half to even, as std::nearbyint in the default rounding mode.
    const double w = std::nearbyint(std::sqrt(target * aspect));
    const double h = std::nearbyint(std::sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      a->box_h = static_cast<int>(h);
      a->box_w = static_cast<int>(w);
      a->y0 = UniformInt(r.v[2], height - a->box_h + 1);
      a->x0 = UniformInt(r.v[3], width - a->box_w + 1);
      return;
    }
  }
  // torchvision's fallback: the whole image, cut to the nearest ratio in range, centred.
  const double in_ratio = static_cast<double>(width) / height;
  int w = width, h = height;
  if (in_ratio < rc.ratio_min) {
    h = static_cast<int>(std::nearbyint(w / rc.ratio_min));
  } else if (in_ratio > rc.ratio_max) {
    w = static_cast<int>(std::nearbyint(h * rc.ratio_max));
  }
  a->box_h = std::max(1, std::min(h, height));
  a->box_w = std::max(1, std::min(w, width));
  a->y0 = (height - a->box_h) / 2;
  a->x0 = (width - a->box_w) / 2;
}

ImageAugment DrawAugment(const AugmentConfig& cfg, uint64_t seed, int64_t epoch, int64_t position,
                         bool train, bool mirror, float lighting_sigma) {
  ImageAugment a;
  const uint64_t e = static_cast<uint64_t>(epoch), p = static_cast<uint64_t>(position);
  if (!train) {
    if (cfg.eval_box > 0) {  // the centre square, resized to the crop
      a.box_h = a.box_w = cfg.eval_box;
      a.y0 = (cfg.height - cfg.eval_box) / 2;
      a.x0 = (cfg.width - cfg.eval_box) / 2;
    } else {
      a.y0 = (cfg.height - cfg.crop_h) / 2;
      a.x0 = (cfg.width - cfg.crop_w) / 2;
    }
    return a;
  }
  if (cfg.resized_crop.on) {
    DrawResizedCropBox(cfg.resized_crop, cfg.height, cfg.width,
                       PurposeKey(seed, RandomPurpose::kResizedCrop), e, p, &a);
  } else {
    // Number of crop positions in the padded image. With pad 0 these are the unpadded
    // spans, so the draws (and checkpoint resume of older runs) stay bit-identical; span 1
    // means a single position, and then nothing is drawn, as before.
    const int pad = cfg.pad;
    const int span_y = cfg.height - cfg.crop_h + 1 + 2 * pad;
    const int span_x = cfg.width - cfg.crop_w + 1 + 2 * pad;
    if (span_y > 1 || span_x > 1) {
      Philox4 r = Philox4x32(PurposeKey(seed, RandomPurpose::kCrop), e, p);
      a.y0 = UniformInt(r.v[0], span_y) - pad;
      a.x0 = UniformInt(r.v[1], span_x) - pad;
    }
  }
  if (mirror) {
    a.mirror = PhiloxUniform(PurposeKey(seed, RandomPurpose::kMirror), e, p) < 0.5f;
  }
  if (lighting_sigma > 0.f && cfg.channels == 3) {
    const uint64_t key = PurposeKey(seed, RandomPurpose::kLighting);
    float alpha[3];
    for (int j = 0; j < 3; ++j) alpha[j] = lighting_sigma * PhiloxNormal(key, e, 3 * p + j);
    LightingDelta(alpha, a.light);
  }
  if (cfg.cutout > 0) {
    const Philox4 r = Philox4x32(PurposeKey(seed, RandomPurpose::kCutout), e, p);
    const int cy = UniformInt(r.v[0], cfg.crop_h), cx = UniformInt(r.v[1], cfg.crop_w);
    const int top = cy - cfg.cutout / 2, left = cx - cfg.cutout / 2;
    a.cut_y0 = std::max(0, top);
    a.cut_y1 = std::min(cfg.crop_h, top + cfg.cutout);
    a.cut_x0 = std::max(0, left);
    a.cut_x1 = std::min(cfg.crop_w, left + cfg.cutout);
  }
  return a;
}

namespace {

// Whether output row y of an image crosses its cutout square.
bool CutRow(const ImageAugment& a, int y) { return y >= a.cut_y0 && y < a.cut_y1; }

// The horizontal taps of a resized crop's output columns, mirrored when a.mirror: column x
// samples the box at output position (mirror ? crop_w - 1 - x : x).
void ColumnTaps(const AugmentConfig& cfg, const ImageAugment& a, BilinearTap* taps) {
  const int cw = cfg.crop_w, bw = a.box_w > 0 ? a.box_w : cw;
  for (int x = 0; x < cw; ++x) taps[x] = BilinearTapOf(a.mirror ? cw - 1 - x : x, cw, bw);
}

// Output row y of a resized crop, every channel: value (c, x) goes to t[c * c_step + x *
// x_step]. The bilinear value of the four source bytes (exact, core/bilinear.h), minus the
// mean image at the nearest of them (kImage), plus offset[c], times the scale: the GPU
// feed's AugmentResizeKernel, operation for operation.
void ResizedRow(const uint8_t* hwc, const AugmentConfig& cfg, const ImageAugment& a,
                const BilinearTap* xt, const float* offset, int y, float* t, int64_t c_step,
                int64_t x_step) {
  const int W = cfg.width, C = cfg.channels, cw = cfg.crop_w;
  const BilinearTap yt = BilinearTapOf(y, cfg.crop_h, a.box_h > 0 ? a.box_h : cfg.crop_h);
  const int64_t row0 = static_cast<int64_t>(a.y0 + yt.i0) * W,
                row1 = static_cast<int64_t>(a.y0 + yt.i1) * W;
  const int64_t mrow = static_cast<int64_t>(a.y0 + yt.nearest()) * W;
  for (int x = 0; x < cw; ++x) {
    const BilinearTap& tx = xt[x];
    const int64_t c0 = a.x0 + tx.i0, c1 = a.x0 + tx.i1;
    const uint8_t* p00 = hwc + (row0 + c0) * C;
    const uint8_t* p01 = hwc + (row0 + c1) * C;
    const uint8_t* p10 = hwc + (row1 + c0) * C;
    const uint8_t* p11 = hwc + (row1 + c1) * C;
    const float* mean = cfg.mean == MeanMode::kImage
                            ? cfg.mean_image.data() + (mrow + a.x0 + tx.nearest()) * C
                            : nullptr;
    for (int c = 0; c < C; ++c) {
      float v = BilinearValue(BilinearFixed(p00[c], p01[c], p10[c], p11[c], tx.f, yt.f));
      if (mean) v -= mean[c];
      t[c * c_step + x * x_step] = (v + offset[c]) * cfg.scale;
    }
  }
}

// The unresized crop (with padding) of WriteImageCHWN.
void WriteCropped(const uint8_t* hwc, const AugmentConfig& cfg, const ImageAugment& aug, float* out,
                  int64_t N, int64_t n) {
  const int H = cfg.height, W = cfg.width, C = cfg.channels, ch = cfg.crop_h, cw = cfg.crop_w;
  const float scale = cfg.scale;
  for (int c = 0; c < C; ++c) {
    // Per-channel constant part: (light - channel mean), then per pixel - mean image.
    float offset = aug.light[c];
    if (cfg.mean == MeanMode::kChannel) offset -= cfg.channel_mean[c];
    for (int y = 0; y < ch; ++y) {
      const int sy = aug.y0 + y;
      float* dst = out + (static_cast<int64_t>(c) * ch + y) * cw * N + n;
      if (sy < 0 || sy >= H) {  // a padding row
        for (int x = 0; x < cw; ++x) dst[x * N] = 0.0f;
        continue;
      }
      const uint8_t* row = hwc + static_cast<int64_t>(sy) * W * C + c;
      const float* mrow = cfg.mean == MeanMode::kImage
                              ? cfg.mean_image.data() + static_cast<int64_t>(sy) * W * C + c
                              : nullptr;
      for (int x = 0; x < cw; ++x) {
        const int sx = aug.mirror ? aug.x0 + cw - 1 - x : aug.x0 + x;
        if (sx < 0 || sx >= W) {  // a padding column
          dst[x * N] = 0.0f;
          continue;
        }
        float v = static_cast<float>(row[sx * C]);
        if (mrow) v -= mrow[sx * C];
        dst[x * N] = (v + offset) * scale;
      }
    }
  }
}

// The resized crop of WriteImageCHWN.
void WriteResized(const uint8_t* hwc, const AugmentConfig& cfg, const ImageAugment& aug, float* out,
                  int64_t N, int64_t n) {
  const int C = cfg.channels, ch = cfg.crop_h, cw = cfg.crop_w;
  std::vector<BilinearTap> taps(cw);
  ColumnTaps(cfg, aug, taps.data());
  std::vector<float> offset(C);
  for (int c = 0; c < C; ++c) {
    offset[c] = c < 3 ? aug.light[c] : 0.f;
    if (cfg.mean == MeanMode::kChannel) offset[c] -= cfg.channel_mean[c];
  }
  const int64_t plane = static_cast<int64_t>(ch) * cw * N;  // one output channel
  for (int y = 0; y < ch; ++y) {
    ResizedRow(hwc, cfg, aug, taps.data(), offset.data(), y,
               out + static_cast<int64_t>(y) * cw * N + n, plane, N);
  }
}

}  // namespace

void WriteImageCHWN(const uint8_t* hwc, const AugmentConfig& cfg, const ImageAugment& aug,
                    float* out, int64_t N, int64_t n) {
  if (aug.resized(cfg)) {
    WriteResized(hwc, cfg, aug, out, N, n);
  } else {
    WriteCropped(hwc, cfg, aug, out, N, n);
  }
  const int ch = cfg.crop_h, cw = cfg.crop_w;
  for (int y = aug.cut_y0; y < aug.cut_y1; ++y) {  // cutout: after crop, resize and mirror
    for (int c = 0; c < cfg.channels; ++c) {
      float* dst = out + (static_cast<int64_t>(c) * ch + y) * cw * N + n;
      for (int x = aug.cut_x0; x < aug.cut_x1; ++x) dst[x * N] = 0.0f;
    }
  }
}

namespace {

constexpr int kChunkMax = 16;  // images per WriteChunkCHWN pass: a 64-byte line of floats

// Cutout in WriteChunkCHWN's row buffer tmp[c][x][j] (kChunkMax images innermost): the
// cut columns of output row y are 0, after crop, resize and mirror.
void ZeroCutoutRow(const ImageAugment* augs, int count, int y, int C, int cw, float* tmp) {
  for (int j = 0; j < count; ++j) {
    const ImageAugment& a = augs[j];
    if (!CutRow(a, y)) continue;
    for (int c = 0; c < C; ++c) {
      float* t = tmp + static_cast<size_t>(c) * cw * kChunkMax + j;
      for (int x = a.cut_x0; x < a.cut_x1; ++x) t[x * kChunkMax] = 0.0f;
    }
  }
}

// WriteChunkCHWN's second step for one output row: for each (c, x) the `count` values of
// tmp go to `count` consecutive floats of the CHWN row (row_out: the row of channel 0,
// `plane` floats apart per channel, images from n0); a whole cache line of 16 aligned images
// with streaming stores.
void StoreChunkRow(const float* tmp, int count, int C, int cw, float* row_out, int64_t N,
                   int64_t plane, int64_t n0) {
  for (int c = 0; c < C; ++c) {
    const float* t = tmp + static_cast<size_t>(c) * cw * kChunkMax;
    float* dst = row_out + c * plane + n0;
#if defined(__SSE2__)
    if (count == kChunkMax && (reinterpret_cast<uintptr_t>(dst) & 15) == 0 && (N & 3) == 0) {
      for (int x = 0; x < cw; ++x) {
        float* d = dst + static_cast<int64_t>(x) * N;
        const float* s = t + x * kChunkMax;
        _mm_stream_ps(d, _mm_loadu_ps(s));
        _mm_stream_ps(d + 4, _mm_loadu_ps(s + 4));
        _mm_stream_ps(d + 8, _mm_loadu_ps(s + 8));
        _mm_stream_ps(d + 12, _mm_loadu_ps(s + 12));
      }
      continue;
    }
#endif
    for (int x = 0; x < cw; ++x) {
      float* d = dst + static_cast<int64_t>(x) * N;
      const float* s = t + x * kChunkMax;
      for (int j = 0; j < count; ++j) d[j] = s[j];
    }
  }
}

}  // namespace

void WriteChunkCHWN(const uint8_t* const* hwc, const ImageAugment* augs, int count,
                    const AugmentConfig& cfg, float* out, int64_t N, int64_t n0) {
  constexpr int kMax = kChunkMax;
  if (count > kMax) {
    for (int i = 0; i < count; i += kMax) {
      WriteChunkCHWN(hwc + i, augs + i, std::min(kMax, count - i), cfg, out, N, n0 + i);
    }
    return;
  }
  const int H = cfg.height, W = cfg.width, C = cfg.channels, ch = cfg.crop_h, cw = cfg.crop_w;
  const float scale = cfg.scale;
  // Two steps per output row y: (1) each image's crop row, all channels, from one pass over
  // its interleaved source row into tmp[c][x][j] (image j innermost); (2) for each (c, x),
  // the `count` values of tmp go to `count` consecutive floats of the CHWN row. With 16
  // images and 64-byte aligned rows that is one whole cache line, written with streaming
  // stores (no read-for-ownership of the batch, which is far larger than the caches). The
  // arithmetic per value is exactly WriteImageCHWN's, so the result is bitwise the same.
  thread_local std::vector<float> tmp;
  tmp.resize(static_cast<size_t>(C) * cw * kMax);
  float offset[kMax][4];
  for (int j = 0; j < count; ++j) {
    for (int c = 0; c < C; ++c) {
      offset[j][c] = augs[j].light[c];
      if (cfg.mean == MeanMode::kChannel) offset[j][c] -= cfg.channel_mean[c];
    }
  }
  // Resized crops (a random-resized crop, a resized eval crop): their column taps, once per
  // image for all rows.
  thread_local std::vector<BilinearTap> taps;
  bool any_resized = false;
  for (int j = 0; j < count; ++j) any_resized |= augs[j].resized(cfg);
  if (any_resized) {
    taps.resize(static_cast<size_t>(cw) * kMax);
    for (int j = 0; j < count; ++j) {
      if (augs[j].resized(cfg)) ColumnTaps(cfg, augs[j], taps.data() + static_cast<size_t>(j) * cw);
    }
  }
  for (int y = 0; y < ch; ++y) {
    for (int j = 0; j < count; ++j) {
      const ImageAugment& a = augs[j];
      if (a.resized(cfg)) {
        ResizedRow(hwc[j], cfg, a, taps.data() + static_cast<size_t>(j) * cw, offset[j], y,
                   tmp.data() + j, static_cast<int64_t>(cw) * kMax, kMax);
        continue;
      }
      const int sy = a.y0 + y;
      // Padding: the crop columns [xa, xb) come from the image, the rest (and whole rows
      // outside it) are 0. Without padding xa = 0, xb = cw and the loops below are the
      // unpadded ones.
      int xa = 0, xb = 0;
      if (sy >= 0 && sy < H) {
        // sx(x) = x0 + x, or x0 + cw - 1 - x when mirrored, must lie in [0, W).
        const int lo = a.mirror ? a.x0 + cw - W : -a.x0;
        const int hi = a.mirror ? a.x0 + cw : W - a.x0;
        xa = std::max(0, lo);
        xb = std::max(xa, std::min(cw, hi));
      }
      if (xa > 0 || xb < cw) {
        for (int c = 0; c < C; ++c) {
          float* t = tmp.data() + static_cast<size_t>(c) * cw * kMax + j;
          for (int x = 0; x < xa; ++x) t[x * kMax] = 0.0f;
          for (int x = xb; x < cw; ++x) t[x * kMax] = 0.0f;
        }
        if (xa == xb) continue;
      }
      // Offsets relative to the start of source row sy; e0 is the element of crop column xa.
      const int64_t start = static_cast<int64_t>(sy) * W * C;
      const uint8_t* src = hwc[j] + start;
      const float* mean = cfg.mean == MeanMode::kImage ? cfg.mean_image.data() + start : nullptr;
      const int step = a.mirror ? -1 : 1;
      const int e0 = (a.mirror ? a.x0 + cw - 1 - xa : a.x0 + xa) * C;
      if (C == 3) {  // RGB: one pass over the interleaved row for all three channels
        float* t0 = tmp.data() + j;
        float* t1 = t0 + static_cast<size_t>(cw) * kMax;
        float* t2 = t1 + static_cast<size_t>(cw) * kMax;
        const float o0 = offset[j][0], o1 = offset[j][1], o2 = offset[j][2];
        if (mean) {
          for (int x = xa, e = e0; x < xb; ++x, e += 3 * step) {
            t0[x * kMax] = (static_cast<float>(src[e]) - mean[e] + o0) * scale;
            t1[x * kMax] = (static_cast<float>(src[e + 1]) - mean[e + 1] + o1) * scale;
            t2[x * kMax] = (static_cast<float>(src[e + 2]) - mean[e + 2] + o2) * scale;
          }
        } else {
          for (int x = xa, e = e0; x < xb; ++x, e += 3 * step) {
            t0[x * kMax] = (static_cast<float>(src[e]) + o0) * scale;
            t1[x * kMax] = (static_cast<float>(src[e + 1]) + o1) * scale;
            t2[x * kMax] = (static_cast<float>(src[e + 2]) + o2) * scale;
          }
        }
        continue;
      }
      for (int c = 0; c < C; ++c) {
        float* t = tmp.data() + static_cast<size_t>(c) * cw * kMax + j;
        const float off = offset[j][c];
        for (int x = xa, e = e0 + c; x < xb; ++x, e += C * step) {
          float v = static_cast<float>(src[e]);
          if (mean) v -= mean[e];
          t[x * kMax] = (v + off) * scale;
        }
      }
    }
    ZeroCutoutRow(augs, count, y, C, cw, tmp.data());
    StoreChunkRow(tmp.data(), count, C, cw, out + static_cast<int64_t>(y) * cw * N, N,
                  static_cast<int64_t>(ch) * cw * N, n0);
  }
#if defined(__SSE2__)
  _mm_sfence();  // streaming stores are weakly ordered: publish them before returning
#endif
}

absl::StatusOr<std::vector<Tensor>> TenCrops(const Tensor& images, int crop) {
  if (images.shape().rank() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("TenCrops: images must be CHWN, got ", images.shape().ToString()));
  }
  if (images.device() != Device::kCPU) {
    return absl::InvalidArgumentError("TenCrops: images must be a host tensor");
  }
  const int64_t C = images.c(), H = images.h(), W = images.w(), N = images.n();
  if (crop <= 0 || crop > H || crop > W) {
    return absl::InvalidArgumentError(
        absl::StrFormat("TenCrops: crop %d does not fit images of %dx%d", crop, H, W));
  }
  const int64_t offs[5][2] = {
      {(H - crop) / 2, (W - crop) / 2}, {0, 0}, {0, W - crop}, {H - crop, 0}, {H - crop, W - crop}};
  std::vector<Tensor> out;
  const float* src = images.data();
  for (int m = 0; m < 2; ++m) {
    for (int k = 0; k < 5; ++k) {
      Tensor t(Shape::CHWN(C, crop, crop, N));
      float* dst = t.data();
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t y = 0; y < crop; ++y) {
          for (int64_t x = 0; x < crop; ++x) {
            const int64_t sx = offs[k][1] + (m ? crop - 1 - x : x);
            const float* s = src + ((c * H + offs[k][0] + y) * W + sx) * N;
            float* d = dst + ((c * crop + y) * crop + x) * N;
            std::copy(s, s + N, d);
          }
        }
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

absl::StatusOr<Tensor> MirrorCHWN(const Tensor& images) {
  if (images.shape().rank() != 4 || images.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MirrorCHWN: images must be a host CHWN tensor, got ", images.shape().ToString()));
  }
  const int64_t C = images.c(), H = images.h(), W = images.w(), N = images.n();
  Tensor out(images.shape());
  const float* src = images.data();
  float* dst = out.data();
  for (int64_t row = 0; row < C * H; ++row) {
    for (int64_t x = 0; x < W; ++x) {
      const float* s = src + (row * W + W - 1 - x) * N;
      std::copy(s, s + N, dst + (row * W + x) * N);
    }
  }
  return out;
}

}  // namespace colonnade::data
