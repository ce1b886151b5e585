// rrc_draws H W SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX COUNT SEED
//
// Prints the random-resized crop boxes data::DrawAugment draws for positions 0..COUNT-1 of
// epoch 0 of an H x W image, one "i j h w" line each (torchvision's get_params order: top,
// left, height, width), for tests/data/rrc_distribution_test.py, which compares their
// distribution with torchvision's RandomResizedCrop.get_params.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/augment.h"

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: rrc_draws H W SCALE_MIN SCALE_MAX RATIO_MIN RATIO_MAX COUNT SEED\n");
    return 2;
  }
  colonnade::data::AugmentConfig cfg;
  cfg.height = std::atoi(argv[1]);
  cfg.width = std::atoi(argv[2]);
  cfg.channels = 3;
  cfg.crop_h = cfg.crop_w = 1;
  cfg.resized_crop.on = true;
  cfg.resized_crop.scale_min = std::atof(argv[3]);
  cfg.resized_crop.scale_max = std::atof(argv[4]);
  cfg.resized_crop.ratio_min = std::atof(argv[5]);
  cfg.resized_crop.ratio_max = std::atof(argv[6]);
  const long long count = std::atoll(argv[7]);
  const uint64_t seed = std::stoull(argv[8]);
  for (long long p = 0; p < count; ++p) {
    const colonnade::data::ImageAugment a =
        colonnade::data::DrawAugment(cfg, seed, 0, p, /*train=*/true, false, 0.f);
    std::printf("%d %d %d %d\n", a.y0, a.x0, a.box_h, a.box_w);
  }
  return 0;
}
