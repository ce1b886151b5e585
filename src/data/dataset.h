// Random-access image classification datasets: HDF5 shard directories (docs/DATA.md) and
// an in-memory synthetic dataset that a small CNN can learn.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colonnade::data {

struct DatasetInfo {
  int64_t size = 0;  // number of images
  int height = 0, width = 0, channels = 0;
  int num_classes = 0;
  std::vector<std::string> class_names;  // num_classes entries
  std::string encoding;                  // "raw", "jpeg" (shards) or "synthetic"
  std::string path;                      // shard directory, or the synthetic spec
  std::vector<int64_t> class_counts;     // images per class
};

struct SyntheticRecipe;

class Dataset {  // random access; Read is thread-safe
 public:
  virtual ~Dataset();
  virtual const DatasetInfo& info() const = 0;
  // Decodes image `index` into height x width x channels uint8 (interleaved, RGB), and
  // returns its label. Errors name the file and the field.
  virtual absl::StatusOr<int> Read(int64_t index, std::vector<uint8_t>* pixels) = 0;
  // The stored, still encoded bytes of image `index` (encoding "jpeg": its JPEG stream,
  // whose header is checked to declare the dataset's height x width), for a consumer that
  // decodes elsewhere (the GPU feed's nvJPEG decoder); returns its label. Unimplemented
  // for datasets that store no encoded images (raw shards, synthetic).
  virtual absl::StatusOr<int> ReadEncoded(int64_t index, std::string* bytes);
  // Label only, without decoding (cheap; labels are held in memory).
  virtual int Label(int64_t index) const = 0;
  // Mean image (height x width x channels float, pixel units 0..255) as stored with the
  // dataset; synthetic: computed at construction (see SyntheticOptions).
  virtual const std::vector<float>& mean_image() const = 0;
  // For a dataset whose images are a pure function of their index that another device
  // can compute (the synthetic one): how Read makes them. nullptr for stored datasets.
  virtual const SyntheticRecipe* synthetic_recipe() const { return nullptr; }
};

// The synthetic dataset: class k is a smooth random colour pattern keyed by (seed, k);
// image i of a split is that pattern under a random circular shift, contrast and
// brightness change plus pixel noise, all keyed by (seed, split, i). Labels are i mod
// num_classes (balanced). The held-out split draws other images of the same classes, so
// the train and held-out splits never share an image. Everything is a pure function of
// the options (Philox), so Read is cheap, thread-safe and reproducible anywhere.
struct SyntheticOptions {
  int64_t size = 10000;
  int height = 32, width = 32, channels = 3;
  int num_classes = 10;
  uint64_t seed = 1;
  bool held_out = false;  // the held-out (test) split
  float noise = 24.0f;    // amplitude of the per-pixel noise, in pixel units (0..255)
  int max_shift = -1;     // largest circular shift in pixels; -1 = width / 8
  // mean_image() is computed (on its first call) over the first min(size, mean_images)
  // images.
  int64_t mean_images = 4096;
};

// Everything SyntheticDataset::Read computes an image from, as plain values, so that a GPU
// kernel (src/cuda/feed_kernels.cu) can generate the same bytes without this module
// linking CUDA. Image `index` (H x W x C uint8, interleaved):
//   class k = index mod num_classes; r = Philox4x32(image_key, 0, index);
//   dy, dx = multiply-shift of r.v[0], r.v[1] onto [0, 2*max_shift] - max_shift;
//   contrast = 0.75 + 0.5 * u(r.v[2]); brightness = -20 + 40 * u(r.v[3]);
//   pattern(y, x, c) = bilinear over the periodic kGrid x kGrid cell grid of class k at
//   fy = y * kGrid / H, fx = x * kGrid / W (float), the shifted pixel ((y+dy) mod H,
//   (x+dx) mod W); element e = (y*W + x)*C + c takes two bytes of noise word e of
//   Philox4x32(image_key, 1 + index, e / 8): tri = (b0 + b1) / 255 - 1;
//   v = 128 + (pattern - 128) * contrast + brightness + noise * tri, clamped to [0, 255],
//   rounded half up. All in float, each operation rounded on its own (no FMA).
struct SyntheticRecipe {
  static constexpr int kGrid = 4;
  int height = 0, width = 0, channels = 0;
  int num_classes = 0;
  uint64_t image_key = 0;
  int max_shift = 0;  // resolved (never -1)
  float noise = 0.f;
  // grid[((k * kGrid + gy) * kGrid + gx) * 3 + c]: the colour of cell (gy, gx) of class k
  // (3 entries per cell whatever the channel count; c < channels are used).
  std::vector<float> grid;
};

// spec: "synthetic" (options from `synth`), "synthetic:train" / "synthetic:test" (same,
// with held_out forced false / true), or a shard directory written by make_shards (or the
// path of its dataset.h5). Shard directories are validated completely on open: every
// attribute and dataset of every shard, and every label; sizes within docs/LIMITS.md
// (image limits from ImageLimitsFromEnvironment). Errors: NotFound when the directory or
// its dataset.h5 does not exist, InvalidArgument for a bad spec or limit variable
// (COLONNADE_SHARD_CACHE_MB included),
// DataLoss for a dataset whose files are unreadable or invalid (each message names the
// file and the field).
absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                                     const SyntheticOptions& synth = {});

// Shard datasets whose stored image bytes fit what is left of the process's resident-shard
// budget (ShardCacheBytesFromEnvironment, data/limits.h) reserve those bytes at open and
// hold each shard's images in memory from its first read (docs/DATA.md); the others read
// image by image from the files. This is the sum reserved by the shard datasets open now.
int64_t ResidentShardBytes();

// The synthetic dataset directly.
absl::StatusOr<std::unique_ptr<Dataset>> MakeSyntheticDataset(const SyntheticOptions& o);
// The checks MakeSyntheticDataset applies (InvalidArgument naming the option): sizes,
// classes, noise finite in 0..255. For tools that validate their flags up front.
absl::Status CheckSyntheticOptions(const SyntheticOptions& o);

}  // namespace colonnade::data
