// Plain parameter types of the GPU feed (feed_kernels.h, batch_feed.h), free of CUDA
// headers so that a build without CUDA compiles the code that fills them.
#pragma once

#include <cstdint>

namespace colonnade::cuda {

// One image's augmentation: data::ImageAugment with an int for the mirror flag.
struct FeedAugment {
  int y0 = 0, x0 = 0;  // crop origin in source coordinates (negative / past the image only
                       // with padding)
  int mirror = 0;
  float light[3] = {0.f, 0.f, 0.f};  // lighting delta per channel, pixel units
  // The source box [y0, y0 + box_h) x [x0, x0 + box_w) resized to the crop (read only when
  // FeedGeometry::resize); 0: the crop's own size.
  int box_h = 0, box_w = 0;
  // Cutout: output rows [cut_y0, cut_y1) x columns [cut_x0, cut_x1) are 0 (empty when
  // cut_y0 >= cut_y1).
  int cut_y0 = 0, cut_x0 = 0, cut_y1 = 0, cut_x1 = 0;
};

// AlexNet's ten test views of a full image, in data::TenCrops' order: 0 centre, 1 top-left,
// 2 top-right, 3 bottom-left, 4 bottom-right, 5..9 the same five mirrored horizontally.
constexpr int kTenCropViews = 10;

// View `view`'s crop of crop_h x crop_w from a height x width image as an augmentation
// (origin and mirror flag, no lighting): applied by AugmentBatchGpu it gives
// data::TenCrops' view of the normalised full image, bit for bit (the per-pixel
// arithmetic does not depend on where the crop lies). The centre is the eval pipeline's
// centre crop, floor((H - crop) / 2). Needs 0 <= view < 10 and crops that fit.
inline FeedAugment TenCropView(int view, int height, int width, int crop_h, int crop_w) {
  FeedAugment a;
  const int k = view % 5;  // position: centre, then the corners
  if (k == 0) {
    a.y0 = (height - crop_h) / 2;
    a.x0 = (width - crop_w) / 2;
  } else {
    a.y0 = k >= 3 ? height - crop_h : 0;     // bottom row of corners
    a.x0 = k % 2 == 0 ? width - crop_w : 0;  // right column: 2 and 4
  }
  a.mirror = view >= 5 ? 1 : 0;
  return a;
}

// The device buffers of one staged batch (a BatchFeed slot).
struct FeedBatchBuffers {
  const uint8_t* pixels = nullptr;    // n x H x W x C
  const FeedAugment* augs = nullptr;  // n (ignored by a ten-crop view)
  const float* labels = nullptr;      // n, copied to the net's labels by the same launch
};

// Where an augmentation launch finds its batch: `direct`, or, in a training step captured
// as a CUDA graph (whose launch arguments are fixed while the batch moves from slot to
// slot), slots[*slot_on_device]: a device table of the feed's slots indexed by the step's
// StepScalars::feed_slot (core/ops.h), written before each replay.
struct FeedSource {
  FeedBatchBuffers direct;
  const FeedBatchBuffers* slots = nullptr;  // device
  const int32_t* slot_on_device = nullptr;  // device; null: `direct`
};

enum class FeedMean : int { kImage = 0, kChannel = 1, kNone = 2 };

// Geometry and normalisation of a batch (data::AugmentConfig); pointers are device memory.
struct FeedGeometry {
  int height = 0, width = 0, channels = 0;  // source images
  int crop_h = 0, crop_w = 0;               // output
  FeedMean mean = FeedMean::kNone;
  float scale = 1.0f;
  const float* mean_image = nullptr;    // height x width x channels (kImage)
  const float* channel_mean = nullptr;  // channels (kChannel)
  // The augments' boxes are resized to the crop (random-resized crops, a resized eval crop;
  // core/bilinear.h): a kernel that reads four source pixels per output pixel. Boxes of the
  // crop's size give the unresized crop's values either way, bit for bit.
  int resize = 0;
};

// The synthetic dataset's recipe (data::SyntheticRecipe); `grid` is device memory,
// num_classes x 4 x 4 x 3 floats.
struct SyntheticGeometry {
  int height = 0, width = 0, channels = 0;
  int num_classes = 0;
  uint64_t image_key = 0;
  int max_shift = 0;
  float noise = 0.f;
  const float* grid = nullptr;
};

}  // namespace colonnade::cuda
