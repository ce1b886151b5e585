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
// Random-resized crop (training, AugmentConfig::resized_crop): instead of a crop at a random
// offset, a box of random area and aspect ratio (Inception's, as torchvision's
// RandomResizedCrop draws it) is resized to crop_h x crop_w by the bilinear resize of
// core/bilinear.h; the mean image is then read at each output pixel's nearest source pixel.
// Evaluation with AugmentConfig::eval_box resizes the centre eval_box x eval_box square the
// same way (the resize-then-centre-crop convention of the ImageNet recipes).
//
// Cutout (training, AugmentConfig::cutout = S): the output pixels of one S x S square at a
// random centre are set to 0 (mean-valued pixels, no lighting), after crop, resize and
// mirror; the square is clipped to the output.
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
  // Training: Inception's random-resized crop (RandomPurpose::kResizedCrop) in place of the
  // crop at a random offset; `pad` must then be 0.
  struct ResizedCrop {
    bool on = false;
    double scale_min = 0.08, scale_max = 1.0;             // area fraction of the source image
    double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // box width / height
  } resized_crop;
  int cutout = 0;  // training: side of the square of zeros (kCutout); 0 = off
  // Evaluation: the centre eval_box x eval_box square of the source, resized to
  // crop_h x crop_w; 0 = the centre crop_h x crop_w crop itself (no resize).
  int eval_box = 0;
};

// Per-image random choices.
struct ImageAugment {
  int y0 = 0, x0 = 0;  // crop origin in image coordinates; negative or past the image only
                       // with padding
  // The source box [y0, y0 + box_h) x [x0, x0 + box_w) resized to crop_h x crop_w (a
  // random-resized crop, a resized eval crop); 0: crop_h x crop_w, no resize.
  int box_h = 0, box_w = 0;
  bool mirror = false;
  float light[3] = {0.f, 0.f, 0.f};  // pixel units
  // Cutout: output rows [cut_y0, cut_y1) x columns [cut_x0, cut_x1) are 0; empty when
  // cut_y0 >= cut_y1.
  int cut_y0 = 0, cut_x0 = 0, cut_y1 = 0, cut_x1 = 0;
  // Whether the box differs from the crop (the resize path of the writers).
  bool resized(const AugmentConfig& cfg) const {
    return (box_h != 0 && box_h != cfg.crop_h) || (box_w != 0 && box_w != cfg.crop_w);
  }
};

// torchvision's RandomResizedCrop.get_params on a height x width image: up to 10 tries of
// an area fraction uniform in [scale_min, scale_max] and a log aspect ratio uniform in
// [ln ratio_min, ln ratio_max], the box's sides rounded half to even; the first box that
// fits is placed uniformly; after 10 misses, the centre crop of the whole image clamped to
// the ratio range. Try t draws Philox block (key, epoch, 10 * position + t). Returns the
// box as (y0, x0, box_h, box_w) of an ImageAugment.
void DrawResizedCropBox(const AugmentConfig::ResizedCrop& rc, int height, int width, uint64_t key,
                        uint64_t epoch, uint64_t position, ImageAugment* a);

// Draws the augmentation of the image at `position` of `epoch`. Train: uniform crop offset
// in [-pad, H-crop_h+pad] x [-pad, W-crop_w+pad] (RandomPurpose::kCrop; with pad 0 the
// draws are exactly those of the unpadded pipeline), or with cfg.resized_crop.on a
// random-resized crop box (kResizedCrop, DrawResizedCropBox); mirror with probability 1/2
// if `mirror` (kMirror), lighting alpha ~ N(0, lighting_sigma^2) per component if sigma > 0
// (kLighting); with cfg.cutout = S the square's centre uniform over the output pixels
// (kCutout), rows [cy - S/2, cy - S/2 + S) clipped, columns likewise. Eval (train=false):
// centre crop (cfg.pad ignored), or the centre eval_box square resized; no mirror, no
// lighting, no cutout.
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

// The horizontal mirror of a CHWN batch (host): the second view of --eval_views=2, equal to
// the eval pipeline's batch drawn with the mirror flag set (mirroring commutes with the
// crop, the resize and the normalisation).
absl::StatusOr<Tensor> MirrorCHWN(const Tensor& images);

}  // namespace colonnade::data
