// The HDF5 shard format (version 1), documented in docs/DATA.md.
//
//   DIR/dataset.h5        index: attributes (format, version, encoding, height, width,
//                         channels, num_classes, size, num_shards, mean_source) and datasets
//                         /class_names (vlen UTF-8 strings), /class_counts int64 [K],
//                         /mean_image float32 [H][W][C], /shard_files (strings),
//                         /shard_sizes int64 [S]
//   DIR/shard-00000.h5    attributes (format, version, encoding, height, width, channels,
//                         num_classes, count, shard_index) and datasets
//                         raw:  /images uint8 [n][H][W][C], chunked one image per chunk
//                         jpeg: /images uint8 [total_bytes] (contiguous JPEG streams)
//                               /offsets int64 [n+1] (image i = bytes [off[i], off[i+1]))
//                         /labels int32 [n]
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/hdf5_util.h"

namespace colonnade::data {

inline constexpr int kShardFormatVersion = 1;
inline constexpr char kDatasetFormat[] = "colonnade-dataset";
inline constexpr char kShardFormat[] = "colonnade-shard";
inline constexpr char kIndexFileName[] = "dataset.h5";

std::string ShardFileName(int index);  // "shard-00003.h5"
std::string JoinPath(const std::string& dir, const std::string& name);

// ---- writing ------------------------------------------------------------------------

struct DatasetWriterOptions {
  std::string dir;
  std::string encoding = "raw";  // "raw" or "jpeg"
  int height = 0, width = 0, channels = 3;
  int num_classes = 0;
  std::vector<std::string> class_names;  // num_classes entries
  int64_t shard_size = 10000;            // images per shard file
  bool force = false;                    // replace an existing dataset in `dir`
};

// Writes a dataset directory image by image, in order. Output bytes depend only on the
// sequence of Add calls (HDF5 object timestamps are off).
class DatasetWriter {
 public:
  // Creates `dir` if needed. Refuses (FailedPrecondition) when `dir` already holds a
  // dataset.h5 or shard files, unless `force`, which deletes exactly those files.
  static absl::StatusOr<std::unique_ptr<DatasetWriter>> Create(const DatasetWriterOptions& o);
  ~DatasetWriter();

  // `pixels`: height*width*channels uint8 (stored for raw; always used for the mean).
  // `encoded`: the JPEG stream to store (required for encoding "jpeg", ignored for raw).
  absl::Status Add(const uint8_t* pixels, const std::string* encoded, int label);

  // Closes the last shard and writes dataset.h5. `mean` (height*width*channels), when
  // given, is stored instead of the mean of the added images, e.g. the training split's
  // mean for a test split; `mean_source` is recorded with it. Fails on an empty dataset.
  absl::Status Finish(const std::vector<float>* mean = nullptr,
                      const std::string& mean_source = "");

  int64_t count() const { return total_; }
  const DatasetWriterOptions& options() const { return o_; }

 private:
  explicit DatasetWriter(DatasetWriterOptions o);
  absl::Status OpenShard();
  absl::Status CloseShard();

  DatasetWriterOptions o_;
  int64_t image_bytes_ = 0;
  int64_t total_ = 0;
  std::vector<double> sum_;
  std::vector<int64_t> class_counts_;
  std::vector<std::string> shard_files_;
  std::vector<int64_t> shard_sizes_;
  // The open shard.
  h5::Handle file_, images_;
  std::vector<int32_t> labels_;
  std::string jpeg_bytes_;
  std::vector<int64_t> offsets_;
  bool finished_ = false;
};

// ---- reading and validation -----------------------------------------------------------

struct DatasetIndex {
  DatasetInfo info;
  std::vector<float> mean_image;
  std::string mean_source;
  std::vector<std::string> shard_files;  // names relative to info.path
  std::vector<int64_t> shard_sizes;
};

// Reads and validates DIR/dataset.h5.
absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& dir);

struct ShardContents {
  std::vector<int32_t> labels;
  std::vector<int64_t> offsets;  // jpeg: n+1 entries
};
// Opens and validates shard `shard_index` of `index`: attributes against the index,
// dtypes and shapes of every dataset, JPEG offsets, every label in [0, num_classes).
absl::StatusOr<ShardContents> ValidateShard(const DatasetIndex& index, int shard_index);

// Random-access reads from validated shards. Keeps up to `max_open_files` files open
// (least recently used closed first). Thread-safe (HDF5 calls are serialised).
class ShardFileCache {
 public:
  ShardFileCache(const DatasetIndex* index, int max_open_files = 64);
  ~ShardFileCache();
  // raw: copies image `local` of shard `shard` into `out` (H*W*C bytes).
  absl::Status ReadRaw(int shard, int64_t local, uint8_t* out);
  // jpeg: copies bytes [begin, end) of the shard's /images into `out`.
  absl::Status ReadBytes(int shard, int64_t begin, int64_t end, std::string* out);

 private:
  struct Open;
  absl::StatusOr<Open*> Get(int shard);  // under the h5 lock
  const DatasetIndex* index_;
  int max_open_;
  uint64_t tick_ = 0;
  std::vector<std::unique_ptr<Open>> open_;
};

}  // namespace colonnade::data
