// Augmentation and the conversion of one HxWxC uint8 image into one column of a CHWN
// float batch: pad, crop, horizontal mirror, mean subtraction, AlexNet PCA lighting, scale.
//
//   out[c][y][x][n] = (pixel[sy][sx][c] - mean[sy][sx][c] + light[c]) * scale,
//   sy = y0 + y, sx = x0 + x (or x0 + crop_w - 1 - x when mirrored)
//   out[c][y][x][n] = 0.0f where (sy, sx) lies outside the image (padding)
//
// The mean image is indexed at the source pixel, i.e. it is subtracted from the full image
// before cropping and mirroring, as in AlexNet.
//
// Padding (training only, AugmentConfig::pad = P): the image is conceptually padded by P
// pixels on each side with pixels whose OUTPUT value is 0, i.e. mean-valued pixels (after
// mean subtraction they are 0); lighting noise is not added to padded pixels. A crop of
// crop_h x crop_w is then taken at a uniformly random offset of the padded image, so y0 and
// x0 may be negative or the crop may run past the image. The crop may equal the full image
// size: the CIFAR recipe pad 4 on 32x32 images gives random 32x32 crops of the 40x40 padded
// image. Mirroring applies to the crop as without padding. Eval ignores pad (centre crop).
//
// Every random draw is a pure function of
// (seed, purpose, epoch, global position within the epoch), so it does not depend on the
// dp layout or on which thread builds the image.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace colonnade::data {

enum class MeanMode { kImage, kChannel, kNone };
absl::StatusOr<MeanMode> ParseMeanMode(const std::string& s);  // "image" | "channel" | "none"

// The standard ImageNet RGB PCA used for AlexNet-style lighting noise (Krizhevsky et al.
// 2012, section 4.1), with eigenvalues and eigenvectors as published with fb.resnet.torch
// (datasets/transforms.lua, "Lighting") and used by most reimplementations since; they are
// for RGB values in [0, 1], so the noise is multiplied by 255 for our 0..255 pixels.
// Columns of kImagenetEigvec are the eigenvectors; rows are R, G, B.
inline constexpr float kImagenetEigval[3] = {0.2175f, 0.0188f, 0.0045f};
inline constexpr float kImagenetEigvec[3][3] = {
    {-0.5675f, 0.7192f, 0.4009f}, {-0.5808f, -0.0045f, -0.8140f}, {-0.5836f, -0.6948f, 0.4203f}};
// delta[i] = 255 * sum_j eigvec[i][j] * alpha[j] * eigval[j], added to channel i.
void LightingDelta(const float alpha[3], float delta[3]);

// Geometry and normalisation shared by all images of a pipeline.
struct AugmentConfig {
  int height = 0, width = 0, channels = 0;  // source image
  int crop_h = 0, crop_w = 0;               // output
  int pad = 0;  // training: zero-valued (mean-valued) pixels added on every side before the
                // random crop; ignored in eval. 0 <= pad < min(crop_h, crop_w).
  MeanMode mean = MeanMode::kImage;
  std::vector<float> mean_image;    // height*width*channels (for kImage)
  std::vector<float> channel_mean;  // channels (for kChannel)
  float scale = 1.0f / 255.0f;
};

// Per-image random choices.
struct ImageAugment {
  int y0 = 0, x0 = 0;  // crop origin in image coordinates; negative or past the image only
                       // with padding
  bool mirror = false;
  float light[3] = {0.f, 0.f, 0.f};  // pixel units
};

// Draws the augmentation of the image at `position` of `epoch`. Train: uniform crop offset
// in [-pad, H-crop_h+pad] x [-pad, W-crop_w+pad] (RandomPurpose::kCrop; with pad 0 the
// draws are exactly those of the unpadded pipeline), mirror with probability 1/2 if
// `mirror` (kMirror), lighting alpha ~ N(0, lighting_sigma^2) per component if sigma > 0
// (kLighting). Eval (train=false): centre crop (cfg.pad ignored), no mirror, no lighting.
ImageAugment DrawAugment(const AugmentConfig& cfg, uint64_t seed, int64_t epoch, int64_t position,
                         bool train, bool mirror, float lighting_sigma);

// Writes image `hwc` (cfg.height x cfg.width x cfg.channels) as column n of the CHWN
// tensor data `out` with batch size N (shape channels x crop_h x crop_w x N). Output
// pixels whose source lies outside the image (padding) are written as 0.0f.
void WriteImageCHWN(const uint8_t* hwc, const AugmentConfig& cfg, const ImageAugment& aug,
                    float* out, int64_t N, int64_t n);

// The same for `count` images at once into columns [n0, n0 + count): the pipeline's
// version, which writes runs of `count` consecutive floats (whole cache lines for 16
// images) instead of one float per cache line. Bitwise equal to WriteImageCHWN.
void WriteChunkCHWN(const uint8_t* const* hwc, const ImageAugment* augs, int count,
                    const AugmentConfig& cfg, float* out, int64_t N, int64_t n0);

// AlexNet's ten test crops of a batch of full images (CHWN, C x H x W x N, already
// normalised, e.g. from a pipeline with crop = 0 in eval mode): returns 10 tensors of
// C x crop x crop x N in the order centre, top-left, top-right, bottom-left, bottom-right,
// then the same five mirrored horizontally. Average the network's softmax outputs over
// the ten to get the paper's 10-view prediction.
absl::StatusOr<std::vector<Tensor>> TenCrops(const Tensor& images, int crop);

}  // namespace colonnade::data
