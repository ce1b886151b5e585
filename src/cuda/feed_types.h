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
