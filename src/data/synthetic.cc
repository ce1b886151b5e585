// The synthetic dataset (see SyntheticOptions in dataset.h).
#include <algorithm>
#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/philox.h"
#include "data/dataset.h"
#include "data/limits.h"

namespace colonnade::data {
namespace {

constexpr int kGrid = SyntheticRecipe::kGrid;  // class patterns are bilinear on a periodic
                                               // kGrid x kGrid grid

class SyntheticDataset : public Dataset {
 public:
  explicit SyntheticDataset(const SyntheticOptions& o) : o_(o) {
    info_.size = o.size;
    info_.height = o.height;
    info_.width = o.width;
    info_.channels = o.channels;
    info_.num_classes = o.num_classes;
    for (int k = 0; k < o.num_classes; ++k) info_.class_names.push_back(absl::StrCat("class", k));
    info_.encoding = "synthetic";
    info_.path = o.held_out ? "synthetic:test" : "synthetic:train";
    info_.class_counts.assign(o.num_classes, 0);
    for (int k = 0; k < o.num_classes; ++k) {
      info_.class_counts[k] = o.size / o.num_classes + (k < o.size % o.num_classes ? 1 : 0);
    }
    max_shift_ = o.max_shift >= 0 ? o.max_shift : o.width / 8;
    class_key_ = MixKey(MixKey(o.seed, static_cast<uint64_t>(RandomPurpose::kSynthetic)), 0);
    image_key_ = MixKey(MixKey(o.seed, static_cast<uint64_t>(RandomPurpose::kSynthetic)),
                        o.held_out ? 2 : 1);
    BuildRecipe();
    BuildPatterns();
  }

  const DatasetInfo& info() const override { return info_; }
  const std::vector<float>& mean_image() const override {
    std::call_once(mean_once_, [this] { ComputeMean(); });
    return mean_;
  }
  const SyntheticRecipe* synthetic_recipe() const override { return &recipe_; }
  int Label(int64_t index) const override { return static_cast<int>(index % o_.num_classes); }

  absl::StatusOr<int> Read(int64_t index, std::vector<uint8_t>* pixels) override {
    if (index < 0 || index >= info_.size) {
      return absl::OutOfRangeError(
          absl::StrFormat("%s: image index %d is outside [0, %d)", info_.path, index, info_.size));
    }
    Generate(index, pixels);
    return Label(index);
  }

 private:
  // The recipe's grid holds every class's cell colours; the patterns below are built from
  // it, so the host and a device that reads the recipe start from the same floats.
  void BuildRecipe() {
    recipe_.height = o_.height;
    recipe_.width = o_.width;
    recipe_.channels = o_.channels;
    recipe_.num_classes = o_.num_classes;
    recipe_.image_key = image_key_;
    recipe_.max_shift = max_shift_;
    recipe_.noise = o_.noise;
    recipe_.grid.assign(static_cast<size_t>(o_.num_classes) * kGrid * kGrid * 3, 0.f);
    for (int k = 0; k < o_.num_classes; ++k) {
      for (int gy = 0; gy < kGrid; ++gy) {
        for (int gx = 0; gx < kGrid; ++gx) {
          for (int c = 0; c < o_.channels; ++c) {
            recipe_.grid[((static_cast<size_t>(k) * kGrid + gy) * kGrid + gx) * 3 + c] =
                40.f + 175.f * PhiloxUniform(class_key_, k, (gy * kGrid + gx) * 3 + c);
          }
        }
      }
    }
  }

  // Class patterns at full resolution: values in [40, 215] from a periodic grid of random
  // colours, bilinearly interpolated (smooth, and periodic so circular shifts are seamless).
  void BuildPatterns() {
    const int H = o_.height, W = o_.width, C = o_.channels;
    patterns_.resize(static_cast<size_t>(o_.num_classes) * H * W * C);
    for (int k = 0; k < o_.num_classes; ++k) {
      const float(*grid)[kGrid][3] = reinterpret_cast<const float(*)[kGrid][3]>(
          recipe_.grid.data() + static_cast<size_t>(k) * kGrid * kGrid * 3);
      float* p = patterns_.data() + static_cast<size_t>(k) * H * W * C;
      for (int y = 0; y < H; ++y) {
        float fy = static_cast<float>(y) * kGrid / H;
        int y0 = static_cast<int>(fy);
        float ty = fy - y0;
        for (int x = 0; x < W; ++x) {
          float fx = static_cast<float>(x) * kGrid / W;
          int x0 = static_cast<int>(fx);
          float tx = fx - x0;
          int y1 = (y0 + 1) % kGrid, x1 = (x0 + 1) % kGrid;
          for (int c = 0; c < C; ++c) {
            float v = (1 - ty) * ((1 - tx) * grid[y0][x0][c] + tx * grid[y0][x1][c]) +
                      ty * ((1 - tx) * grid[y1][x0][c] + tx * grid[y1][x1][c]);
            p[(y * W + x) * C + c] = v;
          }
        }
      }
    }
  }

  void Generate(int64_t index, std::vector<uint8_t>* pixels) const {
    const int H = o_.height, W = o_.width, C = o_.channels;
    pixels->resize(static_cast<size_t>(H) * W * C);
    const int k = Label(index);
    const float* p = patterns_.data() + static_cast<size_t>(k) * H * W * C;
    // Per-image parameters: one Philox block.
    Philox4 r = Philox4x32(image_key_, 0, static_cast<uint64_t>(index));
    const int span = 2 * max_shift_ + 1;
    const int dy = static_cast<int>((static_cast<uint64_t>(r.v[0]) * span) >> 32) - max_shift_;
    const int dx = static_cast<int>((static_cast<uint64_t>(r.v[1]) * span) >> 32) - max_shift_;
    const float contrast = 0.75f + 0.5f * UniformFromBits(r.v[2]);
    const float brightness = -20.f + 40.f * UniformFromBits(r.v[3]);
    uint8_t* out = pixels->data();
    Philox4 noise{};
    int64_t e = 0;
    for (int y = 0; y < H; ++y) {
      const int sy = ((y + dy) % H + H) % H;
      for (int x = 0; x < W; ++x) {
        const int sx = ((x + dx) % W + W) % W;
        const float* src = p + (sy * W + sx) * C;
        for (int c = 0; c < C; ++c, ++e) {
          // Eight triangular noise values per Philox block (two bytes each).
          if (e % 8 == 0) {
            noise = Philox4x32(image_key_, 1 + static_cast<uint64_t>(index), e / 8);
          }
          const uint32_t word = noise.v[(e % 8) / 2];
          const int shift = static_cast<int>(e % 2) * 16;
          const float tri = (static_cast<float>((word >> shift) & 0xFF) +
                             static_cast<float>((word >> (shift + 8)) & 0xFF)) /
                                255.f -
                            1.f;
          float v = 128.f + (src[c] - 128.f) * contrast + brightness + o_.noise * tri;
          v = std::min(255.f, std::max(0.f, v));
          out[e] = static_cast<uint8_t>(static_cast<int>(v + 0.5f));  // v >= 0
        }
      }
    }
  }

  void ComputeMean() const {
    const int64_t n = std::min(o_.size, std::max<int64_t>(o_.mean_images, 1));
    const size_t bytes = static_cast<size_t>(o_.height) * o_.width * o_.channels;
    std::vector<double> sum(bytes, 0.0);
    std::vector<uint8_t> px;
    for (int64_t i = 0; i < n; ++i) {
      Generate(i, &px);
      for (size_t e = 0; e < bytes; ++e) sum[e] += px[e];
    }
    mean_.resize(bytes);
    for (size_t e = 0; e < bytes; ++e) mean_[e] = static_cast<float>(sum[e] / n);
  }

  SyntheticOptions o_;
  DatasetInfo info_;
  int max_shift_ = 0;
  uint64_t class_key_ = 0, image_key_ = 0;
  SyntheticRecipe recipe_;
  std::vector<float> patterns_;
  mutable std::once_flag mean_once_;
  mutable std::vector<float> mean_;  // computed on first use
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(const SyntheticOptions& o) {
  if (absl::Status s = CheckSyntheticOptions(o); !s.ok()) return s;
  return std::unique_ptr<Dataset>(new SyntheticDataset(o));
}

absl::Status CheckSyntheticOptions(const SyntheticOptions& o) {
  if (o.size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic dataset: size %d: the dataset is empty", o.size));
  }
  if (o.size > kMaxDatasetImages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic dataset: size %d is more than the limit of %d images", o.size,
                        kMaxDatasetImages));
  }
  // NaN would turn every pixel into 0 (a cast of NaN), silently.
  if (!(o.noise >= 0.f && o.noise <= 255.f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic dataset: noise %g is outside 0..255 (pixel units)", o.noise));
  }
  if (o.height <= 0 || o.width <= 0 || (o.channels != 1 && o.channels != 3)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic dataset: image size %dx%dx%d is invalid (channels 1 or 3)",
                        o.height, o.width, o.channels));
  }
  if (o.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("synthetic dataset: num_classes %d must be > 0", o.num_classes));
  }
  if (static_cast<double>(o.num_classes) * o.height * o.width * o.channels > (1 << 28)) {
    return absl::InvalidArgumentError(
        "synthetic dataset: num_classes x height x width x channels exceeds 2^28 pattern "
        "values");
  }
  if (o.max_shift > std::min(o.height, o.width)) {
    return absl::InvalidArgumentError("synthetic dataset: max_shift exceeds the image size");
  }
  return absl::OkStatus();
}

}  // namespace colonnade::data
