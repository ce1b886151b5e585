#include "data/dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "data/image.h"
#include "data/shard_format.h"

namespace colonnade::data {

Dataset::~Dataset() = default;

absl::StatusOr<int> Dataset::ReadEncoded(int64_t, std::string*) {
  return absl::UnimplementedError(absl::StrFormat(
      "%s: its images are stored %s, not encoded: only JPEG shards can be decoded on the GPU",
      info().path, info().encoding));
}

namespace {

absl::Status AsDataLoss(const absl::Status& s) {
  return s.ok() || absl::IsDataLoss(s) ? s : absl::DataLossError(s.message());
}

// Bytes of shard images reserved by the resident shard datasets open in this process.
std::atomic<int64_t> g_resident_bytes{0};

// Reserves `bytes` if they fit `budget` together with what is reserved already.
bool ReserveResident(int64_t bytes, int64_t budget) {
  int64_t held = g_resident_bytes.load();
  do {
    if (bytes > budget - held) return false;
  } while (!g_resident_bytes.compare_exchange_weak(held, held + bytes));
  return true;
}

// The stored /images bytes of each shard (validated at open): raw n*H*W*C, jpeg the last
// offset. Empty when their sum overflows (such a dataset is never resident).
std::vector<int64_t> StoredImageBytes(const DatasetIndex& idx,
                                      const std::vector<std::vector<int64_t>>& offsets) {
  const DatasetInfo& info = idx.info;
  const int64_t image = int64_t{info.height} * info.width * info.channels;
  std::vector<int64_t> bytes(idx.shard_sizes.size());
  int64_t total = 0;
  for (size_t s = 0; s < bytes.size(); ++s) {
    if (info.encoding == "raw") {
      if (!CheckedMul(idx.shard_sizes[s], image, &bytes[s])) return {};
    } else {
      bytes[s] = offsets[s].back();
    }
    if (!CheckedAdd(total, bytes[s], &total)) return {};
  }
  return bytes;
}

// A validated shard directory. Labels (and JPEG offsets) of every shard are held in
// memory after validation. Read touches HDF5 once per image (under the lock) and decodes
// outside it; a resident dataset (its images fit the budget) reads each shard's images with
// one HDF5 call on first use and every image from memory after.
class ShardDataset : public Dataset {
 public:
  // Errors: NotFound when the directory or its dataset.h5 does not exist (a wrong path:
  // a usage error); DataLoss, with the message of the check that failed, for a dataset
  // whose files are unreadable or invalid (docs/OPERATIONS.md: unreadable data).
  static absl::StatusOr<std::unique_ptr<Dataset>> Open(const std::string& dir,
                                                       const ImageLimits& limits,
                                                       int64_t resident_budget) {
    absl::StatusOr<DatasetIndex> index = ReadDatasetIndex(dir, limits);
    if (!index.ok()) {
      return absl::IsNotFound(index.status()) ? index.status() : AsDataLoss(index.status());
    }
    std::unique_ptr<ShardDataset> ds(new ShardDataset());
    ds->index_ = std::move(*index);
    ds->limits_ = limits;
    const DatasetIndex& idx = ds->index_;
    const int S = static_cast<int>(idx.shard_files.size());
    // No reserve for the claimed size: labels are appended as the shards prove they hold
    // them, so memory follows the bytes present, never a crafted 'size' attribute.
    ds->shard_start_.push_back(0);
    std::vector<int64_t> counts(idx.info.num_classes, 0);
    for (int s = 0; s < S; ++s) {
      absl::StatusOr<ShardContents> c = ValidateShard(idx, s);
      if (!c.ok()) return AsDataLoss(c.status());
      for (int32_t l : c->labels) ++counts[l];
      ds->labels_.insert(ds->labels_.end(), c->labels.begin(), c->labels.end());
      ds->offsets_.push_back(std::move(c->offsets));
      ds->shard_start_.push_back(ds->shard_start_.back() + idx.shard_sizes[s]);
    }
    for (int k = 0; k < idx.info.num_classes; ++k) {
      if (counts[k] != idx.info.class_counts[k]) {
        return absl::DataLossError(absl::StrFormat(
            "%s: /class_counts: class %d has count %d, but the shards hold %d labels %d",
            JoinPath(idx.info.path, kIndexFileName), k, idx.info.class_counts[k], counts[k], k));
      }
    }
    std::vector<int64_t> resident = StoredImageBytes(idx, ds->offsets_);
    int64_t total = 0;
    for (int64_t b : resident) total += b;
    if (resident.empty() || !ReserveResident(total, resident_budget)) {
      resident.clear();  // too large: the per-image path, as without a budget
    } else {
      ds->reserved_ = total;
    }
    ds->cache_ = std::make_unique<ShardFileCache>(&ds->index_, 64, std::move(resident));
    return std::unique_ptr<Dataset>(std::move(ds));
  }

  ~ShardDataset() override { g_resident_bytes -= reserved_; }  // releases the budget

  const DatasetInfo& info() const override { return index_.info; }
  const std::vector<float>& mean_image() const override { return index_.mean_image; }
  int Label(int64_t index) const override { return labels_[index]; }

  absl::StatusOr<int> Read(int64_t index, std::vector<uint8_t>* pixels) override {
    const DatasetInfo& info = index_.info;
    int shard = 0;
    int64_t local = 0;
    RETURN_IF_ERROR(Locate(index, &shard, &local));
    const size_t bytes = static_cast<size_t>(info.height) * info.width * info.channels;
    if (info.encoding == "raw") {
      pixels->resize(bytes);
      RETURN_IF_ERROR(cache_->ReadRaw(shard, local, pixels->data()));
      return labels_[index];
    }
    thread_local std::string encoded;
    thread_local Image decoded;
    ASSIGN_OR_RETURN(int label, ReadEncoded(index, &encoded));
    absl::Status s = DecodeJpeg(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size(),
                                info.channels, &decoded, 0, 0, limits_);
    if (!s.ok()) return ImageError(shard, local, std::string(s.message()));
    if (decoded.height != info.height || decoded.width != info.width ||
        decoded.pixels.size() != bytes) {
      return ImageError(shard, local,
                        absl::StrFormat("decoded to %dx%d, expected %dx%d", decoded.height,
                                        decoded.width, info.height, info.width));
    }
    pixels->assign(decoded.pixels.begin(), decoded.pixels.end());
    return label;
  }

  absl::StatusOr<int> ReadEncoded(int64_t index, std::string* bytes) override {
    const DatasetInfo& info = index_.info;
    if (info.encoding != "jpeg") return Dataset::ReadEncoded(index, bytes);
    int shard = 0;
    int64_t local = 0;
    RETURN_IF_ERROR(Locate(index, &shard, &local));
    const std::vector<int64_t>& off = offsets_[shard];
    RETURN_IF_ERROR(cache_->ReadBytes(shard, off[local], off[local + 1], bytes));
    // The header must declare the dataset's size before anything is decoded: a stream of
    // another size is an error (never silently resized), and a header claiming a huge
    // image costs no memory.
    int h = 0, w = 0;
    absl::Status s =
        JpegSize(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), &h, &w);
    if (!s.ok()) return ImageError(shard, local, std::string(s.message()));
    if (h != info.height || w != info.width) {
      return ImageError(shard, local,
                        absl::StrFormat("JPEG is %dx%d, but the dataset's images are %dx%d "
                                        "(height x width)",
                                        h, w, info.height, info.width));
    }
    return labels_[index];
  }

 private:
  ShardDataset() = default;

  // The shard holding image `index` (binary search over the start offsets) and its
  // position there.
  absl::Status Locate(int64_t index, int* shard, int64_t* local) const {
    const DatasetInfo& info = index_.info;
    if (index < 0 || index >= info.size) {
      return absl::OutOfRangeError(
          absl::StrFormat("%s: image index %d is outside [0, %d)", info.path, index, info.size));
    }
    *shard = static_cast<int>(std::upper_bound(shard_start_.begin(), shard_start_.end(), index) -
                              shard_start_.begin() - 1);
    *local = index - shard_start_[*shard];
    return absl::OkStatus();
  }

  absl::Status ImageError(int shard, int64_t local, const std::string& what) const {
    return absl::DataLossError(
        absl::StrFormat("%s: /images: image %d: %s",
                        JoinPath(index_.info.path, index_.shard_files[shard]), local, what));
  }
  DatasetIndex index_;
  ImageLimits limits_;
  std::vector<int32_t> labels_;
  std::vector<std::vector<int64_t>> offsets_;
  std::vector<int64_t> shard_start_;
  std::unique_ptr<ShardFileCache> cache_;
  int64_t reserved_ = 0;  // of g_resident_bytes
};

}  // namespace

absl::StatusOr<std::unique_ptr<Dataset>> OpenDataset(const std::string& spec,
                                                     const SyntheticOptions& synth) {
  if (spec == "synthetic") return MakeSyntheticDataset(synth);
  if (spec == "synthetic:train" || spec == "synthetic:test") {
    SyntheticOptions o = synth;
    o.held_out = spec == "synthetic:test";
    return MakeSyntheticDataset(o);
  }
  if (absl::StartsWith(spec, "synthetic:")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dataset spec '", spec, "': expected synthetic, synthetic:train or synthetic:test"));
  }
  std::string dir = spec;
  if (absl::EndsWith(dir, std::string("/") + kIndexFileName)) {
    dir = dir.substr(0, dir.size() - std::string(kIndexFileName).size() - 1);
  } else if (dir == kIndexFileName) {
    dir = ".";
  }
  absl::StatusOr<ImageLimits> limits = ImageLimitsFromEnvironment();
  if (!limits.ok()) return limits.status();
  absl::StatusOr<int64_t> budget = ShardCacheBytesFromEnvironment();
  if (!budget.ok()) return budget.status();
  return ShardDataset::Open(dir, *limits, *budget);
}

int64_t ResidentShardBytes() { return g_resident_bytes.load(); }

}  // namespace colonnade::data
