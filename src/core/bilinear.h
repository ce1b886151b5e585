// The one definition of the bilinear resize the augmentation uses (random-resized crops
// and the resized evaluation crop, docs/DATA.md §5): integer arithmetic only, so the host
// pipeline (data/augment.cc) and the GPU feed (cuda/feed_kernels.cu) include this header
// and get the same bits without depending on how either rounds floating point.
//
// A box of `box` source pixels is resized to `out` output pixels with half-pixel centres
// (PyTorch's align_corners=False, OpenCV's INTER_LINEAR): output pixel o samples the
// source coordinate s = (o + 0.5) * box / out - 0.5 inside the box, clamped to 0 at the
// left edge, in fixed point with kBilinearBits = 8 fractional bits (1/256 pixel), rounded
// down. Its taps are pixels i0 = floor(s) and i1 = min(i0 + 1, box - 1) with the weight
// f/256 of i1. Two taps per axis: no antialiasing filter when shrinking (torchvision's
// tensor resize antialiases by default; at the shrink factors of a random-resized crop,
// mostly below 2, the difference is small).
//
// The value of four source bytes is the integer
//   v = (p00 (256 - fx) + p01 fx) (256 - fy) + (p10 (256 - fx) + p11 fx) fy
// at most 255 * 2^16 < 2^24, so v and v * 2^-16 are exact floats: the interpolated pixel
// is BilinearValue(v) with no rounding at all, on any device. A box as large as the output
// gives taps (o, f = 0), i.e. exactly the source pixel: an unresized crop.
#pragma once

#include <cstdint>

#include "core/philox.h"  // COLONNADE_HD

namespace colonnade {

inline constexpr int kBilinearBits = 8;
inline constexpr int kBilinearOne = 1 << kBilinearBits;  // 256

// Where output pixel `o` of `out` samples a box of `box` source pixels: the taps i0, i1
// (offsets inside the box) and i1's weight f in [0, 256).
struct BilinearTap {
  int i0 = 0, i1 = 0;
  int f = 0;
  // The nearer tap (f >= 128: i1), where the mean image is read for a resized pixel.
  COLONNADE_HD int nearest() const { return f >= kBilinearOne / 2 ? i1 : i0; }
};

// Needs 0 <= o < out and box >= 1.
COLONNADE_HD BilinearTap BilinearTapOf(int o, int out, int box) {
  // s * 256 = ((2o + 1) * box - out) * 256 / (2 * out), floored; negative means s < 0.
  const int64_t num = (2 * static_cast<int64_t>(o) + 1) * box - out;
  const int64_t s = num <= 0 ? 0 : (num * kBilinearOne) / (2 * static_cast<int64_t>(out));
  BilinearTap t;
  t.i0 = static_cast<int>(s >> kBilinearBits);
  t.f = static_cast<int>(s & (kBilinearOne - 1));
  t.i1 = t.i0 + 1 < box ? t.i0 + 1 : box - 1;
  return t;
}

// The fixed-point value of four source bytes at weights fx (of p01, p11) and fy (of p10,
// p11); at most 255 * 2^16.
COLONNADE_HD int BilinearFixed(int p00, int p01, int p10, int p11, int fx, int fy) {
  return (p00 * (kBilinearOne - fx) + p01 * fx) * (kBilinearOne - fy) +
         (p10 * (kBilinearOne - fx) + p11 * fx) * fy;
}

// The interpolated pixel in 0..255 units: exact (v < 2^24, and the scale is a power of 2).
COLONNADE_HD float BilinearValue(int v) {
  return static_cast<float>(v) * (1.0f / static_cast<float>(kBilinearOne * kBilinearOne));
}

}  // namespace colonnade
