// Converters that write shard directories (the library side of the make_shards tool):
// CIFAR-10's official binary batches, image-folder trees (ROOT/<class>/*.jpg|jpeg|png),
// and the synthetic dataset. All output is deterministic: the same input and options give
// byte-identical files for any thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/limits.h"

namespace colonnade::data {

struct ConvertOptions {
  std::string encoding = "raw";  // "raw" (decoded uint8) or "jpeg"
  int jpeg_quality = 90;         // when (re-)encoding JPEG
  // Folder source with encoding jpeg: store a source JPEG's original bytes when it needs
  // no resize and decodes to the stored channel count directly (no second compression).
  bool jpeg_passthrough = true;
  int resize = 0;  // folder: shorter side -> resize, then centre crop (AlexNet: 256)
  int resize_height = 0, resize_width = 0;  // folder: exact resize (ignores aspect ratio)
  int channels = 3;                         // stored channels (grayscale sources are replicated)
  int64_t shard_size = 10000;               // images per shard file
  int threads = 2;                          // decode/encode threads, 1..kMaxConvertThreads
  bool strict = false;        // folder: an undecodable file is fatal (default: skip + count)
  bool force = false;         // overwrite existing dataset files in the output dirs
  uint64_t seed = 1;          // storage shuffle, validation split, synthetic data
  bool shuffle = true;        // store images in a seeded random order (not class-sorted)
  double val_fraction = 0.0;  // folder/synthetic: hold out this fraction as OUT/val
  std::string mean_from;      // store this dataset dir's mean image instead of computing
  // Largest image decoded or written (source images beyond it are skipped and counted, or
  // fatal with strict; resize targets beyond it are refused).
  ImageLimits limits;
  // Called from the writing thread with (output directory, images done, images total);
  // first with done = 0 when a split starts.
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

// More decode threads than any machine's hardware threads gain nothing; each also holds
// a decoded image (docs/LIMITS.md).
inline constexpr int kMaxConvertThreads = 1024;

// Every converter writes all its splits before it commits any index: a conversion that
// fails (a bad input, a full disk, --strict) leaves no dataset.h5 and no shard files of its
// own behind. Input files are read only when they are regular files (a FIFO is skipped
// and counted like an undecodable image).
struct ConvertReport {
  std::vector<std::string> output_dirs;       // one per split written
  std::vector<int64_t> written;               // images per split
  int64_t skipped = 0;                        // undecodable files skipped (non-strict)
  std::vector<std::string> skipped_messages;  // first 20 "path: reason"
  int64_t ignored = 0;                        // files without an image extension
  double seconds = 0;
};

// input_dir holds data_batch_1.bin ... data_batch_5.bin and test_batch.bin (and optionally
// batches.meta.txt with the class names). Writes OUT/train (50,000) and OUT/test (10,000;
// it stores the training mean image, mean_source "train").
absl::StatusOr<ConvertReport> ConvertCifar10Binary(const std::string& input_dir,
                                                   const std::string& output_dir,
                                                   const ConvertOptions& o);

// root/<class>/<file>: classes are the sorted sub-directory names, label = rank in that
// order; files with extension .jpg/.jpeg/.png (any case) are images, others are ignored
// (counted). Without resize options every image must have the first image's size. With
// val_fraction > 0 writes OUT/train and OUT/val (a stratified, seeded split; val stores
// the train mean), otherwise OUT itself.
absl::StatusOr<ConvertReport> ConvertImageFolder(const std::string& root,
                                                 const std::string& output_dir,
                                                 const ConvertOptions& o);

// Writes OUT/train (synth, held_out=false) and OUT/test (test_size images of the
// held-out split; stores the train mean).
absl::StatusOr<ConvertReport> WriteSyntheticShards(const SyntheticOptions& synth, int64_t test_size,
                                                   const std::string& output_dir,
                                                   const ConvertOptions& o);

// Re-encodes the shard dataset `input_dir` (make_shards output) as o.encoding into
// OUT: the same images (decoded as the trainer's readers decode them), labels, class
// names and mean image (mean_source "input"). For example raw shards of tiny JPEG
// images, which read faster than they decode (CIFAR-10 at 250k images/s). With o.shuffle
// the stored order is reshuffled by o.seed; without it, kept.
absl::StatusOr<ConvertReport> ConvertShards(const std::string& input_dir,
                                            const std::string& output_dir, const ConvertOptions& o);

// The mean image stored in a dataset directory (for --mean_from).
absl::StatusOr<std::vector<float>> ReadMeanImage(const std::string& dir, int height, int width,
                                                 int channels,
                                                 const ImageLimits& limits = ImageLimits());

}  // namespace colonnade::data
