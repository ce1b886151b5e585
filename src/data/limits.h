// The size limits of the data module (docs/LIMITS.md says why each is what it is).
//
// Every size a file or a flag claims is checked against these before anything is
// allocated for it, with overflow-checked arithmetic, so a crafted shard or image header
// is refused with a one-line error instead of exhausting memory.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colonnade::data {

// Largest number of images in one dataset (the index attribute 'size' and every shard's
// count). Per image, each rank holds its label (4 bytes) and the shuffled order of two
// epochs (16 bytes), plus the JPEG offset (8 bytes): 2^31 images are ~60 GiB per rank.
inline constexpr int64_t kMaxDatasetImages = (int64_t{1} << 31) - 1;
// Largest number of shard files of one dataset.
inline constexpr int64_t kMaxShards = (int64_t{1} << 24);
// Largest class count: labels travel to the network as float32, which holds every integer
// exactly only up to 2^24.
inline constexpr int64_t kMaxClasses = int64_t{1} << 24;
// Largest batch image tensor the pipeline builds for one rank, in float32 values
// (channels x crop x crop x local batch): 2^31 - 1 values = 8 GiB, of which the pipeline
// keeps queue_depth + 2 in host memory at once.
inline constexpr int64_t kMaxBatchValues = (int64_t{1} << 31) - 1;

// Largest decoded image accepted by the decoders (image header sizes, checked before any
// pixel buffer is allocated), make_shards' sizes, and a dataset's height x width.
struct ImageLimits {
  // 16384: larger than any camera's side; an RGB image at the limit on both sides would
  // still need 805 MB (and a progressive JPEG as much again while decoding).
  int64_t max_side = 16384;
  // 2^27 pixels (134 MP, a 400 MB RGB image; 11585 x 11585): every digital camera's photo
  // fits, while make_shards' decode threads and the reader's per-image buffers stay bounded.
  int64_t max_pixels = int64_t{1} << 27;
};
inline constexpr char kMaxImageSideEnv[] = "COLONNADE_MAX_IMAGE_SIDE";
inline constexpr char kMaxImagePixelsEnv[] = "COLONNADE_MAX_IMAGE_PIXELS";

// The limits in force: ImageLimits{} overridden by the environment variables
// COLONNADE_MAX_IMAGE_SIDE and COLONNADE_MAX_IMAGE_PIXELS (positive integers; the pixel
// limit at most 2^40). A value that is not such an integer is an InvalidArgument error
// naming the variable.
absl::StatusOr<ImageLimits> ImageLimitsFromEnvironment();

// Resident shard images (docs/DATA.md, "Resident shard images"): a shard dataset whose
// stored image bytes fit this budget is read into memory one whole shard /images at a
// time, so image reads skip the process-wide HDF5 lock. The budget covers every shard
// dataset open in the process at once (train and test split together).
inline constexpr char kShardCacheMbEnv[] = "COLONNADE_SHARD_CACHE_MB";
// The default budget: min(8192 MB, physical RAM / 16), so that eight ranks on one host hold
// at most half its memory in resident shards.
inline constexpr int64_t kDefaultShardCacheMaxMb = 8192;
// The budget in bytes: COLONNADE_SHARD_CACHE_MB (an integer in 0..2^24 MB; 0 disables
// resident shards) or the default. Any other value is an InvalidArgument error naming the
// variable.
absl::StatusOr<int64_t> ShardCacheBytesFromEnvironment();

// "" when an image of height x width fits `limits`, else why not, e.g. "60000x60000 is
// larger than the limit of 16384 pixels per side (COLONNADE_MAX_IMAGE_SIDE)".
std::string ImageSizeProblem(int64_t height, int64_t width, const ImageLimits& limits);

// a * b and a + b for non-negative sizes: false when the result does not fit in int64_t.
bool CheckedMul(int64_t a, int64_t b, int64_t* out);
bool CheckedAdd(int64_t a, int64_t b, int64_t* out);

}  // namespace colonnade::data
