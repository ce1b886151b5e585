// The HDF5 shard format (version 1), documented in docs/DATA.md.
//
//   DIR/dataset.h5        index: attributes (format, version, encoding, height, width,
//                         channels, num_classes, size, num_shards, mean_source) and datasets
//                         /class_names (UTF-8 strings, hdf5.h), /class_counts int64 [K],
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
#include "hdf5/hdf5.h"
#include "core/paths.h"  // JoinPath, used with the names below
#include "data/limits.h"

namespace colonnade::data {

inline constexpr int kShardFormatVersion = 1;
inline constexpr char kDatasetFormat[] = "colonnade-dataset";
inline constexpr char kShardFormat[] = "colonnade-shard";
inline constexpr char kIndexFileName[] = "dataset.h5";

std::string ShardFileName(int index);  // "shard-00003.h5"

// ---- writing ------------------------------------------------------------------------

struct DatasetWriterOptions {
  std::string dir;
  std::string encoding = "raw";  // "raw" or "jpeg"
  int height = 0, width = 0, channels = 3;
  int num_classes = 0;
  std::vector<std::string> class_names;  // num_classes entries
  int64_t shard_size = 10000;            // images per shard file
  bool force = false;                    // replace an existing dataset in `dir`
  ImageLimits limits;                    // height x width must fit (the reader's limits)
};

// Writes a dataset directory image by image, in order. Output bytes depend only on the
// sequence of Add calls (HDF5 object timestamps are off).
//
// A writer that is destroyed before its index is committed deletes every file it wrote
// (shards and the temporary index): a failed conversion leaves no dataset behind.
class DatasetWriter {
 public:
  // Creates `dir` if needed. Refuses (FailedPrecondition) when `dir` already holds a
  // dataset.h5 or shard files, unless `force`, which deletes exactly those files. Refuses
  // (InvalidArgument) options the reader would refuse (image size beyond `limits`, more
  // than kMaxClasses classes).
  static absl::StatusOr<std::unique_ptr<DatasetWriter>> Create(const DatasetWriterOptions& o);
  ~DatasetWriter();

  // `pixels`: height*width*channels uint8 (stored for raw; always used for the mean).
  // `encoded`: the JPEG stream to store (required for encoding "jpeg", ignored for raw).
  absl::Status Add(const uint8_t* pixels, const std::string* encoded, int label);

  // Prepare() then Commit().
  absl::Status Finish(const std::vector<float>* mean = nullptr,
                      const std::string& mean_source = "");
  // Closes the last shard and writes the index under a temporary name (dataset.h5.tmp).
  // `mean` (height*width*channels), when given, is stored instead of the mean of the added
  // images, e.g. the training split's mean for a test split; `mean_source` is recorded with
  // it. Fails on an empty dataset.
  absl::Status Prepare(const std::vector<float>* mean = nullptr,
                       const std::string& mean_source = "");
  // Renames the prepared index to dataset.h5: the dataset now exists. A converter writing
  // several splits prepares them all, then commits them, so no split is left behind when
  // another fails.
  absl::Status Commit();
  // Deletes every file this writer wrote, the committed index included.
  void Discard();

  int64_t count() const { return total_; }
  const DatasetWriterOptions& options() const { return o_; }
  // The mean image stored in the index (after Prepare), height*width*channels.
  const std::vector<float>& mean_image() const { return mean_image_; }

 private:
  explicit DatasetWriter(DatasetWriterOptions o);
  absl::Status OpenShard();
  absl::Status CloseShard();
  std::string TempIndexPath() const;

  DatasetWriterOptions o_;
  int64_t image_bytes_ = 0;
  int64_t total_ = 0;
  std::vector<double> sum_;
  std::vector<int64_t> class_counts_;
  std::vector<std::string> shard_files_;
  std::vector<int64_t> shard_sizes_;
  // The open shard.
  hdf5::Handle file_, images_;
  std::vector<int32_t> labels_;
  std::string jpeg_bytes_;
  std::vector<int64_t> offsets_;
  std::vector<float> mean_image_;
  bool finished_ = false, prepared_ = false, committed_ = false, discarded_ = false;
};

// ---- reading and validation -----------------------------------------------------------

struct DatasetIndex {
  DatasetInfo info;
  std::vector<float> mean_image;
  std::string mean_source;
  std::vector<std::string> shard_files;  // names relative to info.path
  std::vector<int64_t> shard_sizes;
};

// Reads and validates DIR/dataset.h5. Height x width must fit `limits`; size, classes and
// shards must fit kMaxDatasetImages, kMaxClasses and kMaxShards; every dataset is read only
// after its stored bytes are checked to cover its shape. Errors: NotFound when `dir` or its
// dataset.h5 does not exist, other codes for an index that is unreadable or invalid.
absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& dir,
                                              const ImageLimits& limits = ImageLimits());

struct ShardContents {
  std::vector<int32_t> labels;
  std::vector<int64_t> offsets;  // jpeg: n+1 entries
};
// Opens and validates shard `shard_index` of `index`: attributes against the index,
// dtypes and shapes of every dataset, JPEG offsets, every label in [0, num_classes).
absl::StatusOr<ShardContents> ValidateShard(const DatasetIndex& index, int shard_index);

// Random-access reads from validated shards. Keeps up to `max_open_files` files open
// (least recently used closed first). Thread-safe (HDF5 calls are serialised).
//
// Resident mode (`resident_bytes` non-empty: the stored bytes of each shard's /images, as
// validated at open): on the first read of a shard, its whole /images is read into memory
// with one HDF5 read under the HDF5 lock; every later read of that shard copies from memory
// without taking the lock. Loading happens on first use, not at construction, so opening a
// dataset stays as cheap as before (tools that read a few images never load the rest) and
// the loads are spread over the reader threads; a shard loads exactly once (std::call_once),
// concurrent readers of it wait for that load. A failed load is remembered: every later
// read of that shard returns the same error.
class ShardFileCache {
 public:
  ShardFileCache(const DatasetIndex* index, int max_open_files = 64,
                 std::vector<int64_t> resident_bytes = {});
  ~ShardFileCache();
  // raw: copies image `local` of shard `shard` into `out` (H*W*C bytes).
  absl::Status ReadRaw(int shard, int64_t local, uint8_t* out);
  // jpeg: copies bytes [begin, end) of the shard's /images into `out`.
  absl::Status ReadBytes(int shard, int64_t begin, int64_t end, std::string* out);
  bool resident() const { return resident_ != nullptr; }

 private:
  struct Open;
  struct Resident;
  absl::StatusOr<Open*> Get(int shard);  // under the h5 lock
  // The shard's /images in memory, loaded on the first call (resident mode only).
  absl::StatusOr<const Resident*> ResidentImages(int shard);
  absl::Status LoadResident(int shard, Resident* r);
  // Bytes [begin, end) of a resident shard into `out`.
  absl::Status CopyResident(int shard, int64_t begin, int64_t end, uint8_t* out);
  const DatasetIndex* index_;
  int max_open_;
  uint64_t tick_ = 0;
  std::vector<std::unique_ptr<Open>> open_;
  std::vector<int64_t> resident_bytes_;
  std::unique_ptr<Resident[]> resident_;  // one per shard; null unless resident
};

}  // namespace colonnade::data
