#include "data/shard_format.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "data/files.h"

namespace colonnade::data {

std::string ShardFileName(int index) { return absl::StrFormat("shard-%05d.h5", index); }

namespace {

// Shard files name their attributes 'height' in messages ("<file>: attribute 'height' is
// missing"), as docs/DATA.md and the tests spell them.
absl::StatusOr<std::string> ReadStringAttribute(hdf5::Id f, const std::string& path,
                                                const char* name) {
  return hdf5::ReadStringAttr(f, name, path, absl::StrCat("'", name, "'"));
}

absl::StatusOr<int64_t> ReadIntAttribute(hdf5::Id f, const std::string& path, const char* name) {
  return hdf5::ReadIntAttr(f, name, path, absl::StrCat("'", name, "'"));
}

// A new shard or index file (truncating one there), with the message shards always gave.
absl::StatusOr<hdf5::Handle> CreateShardFile(const std::string& path) {
  absl::StatusOr<hdf5::Handle> f = hdf5::CreateFile(path);
  if (!f.ok()) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create file"));
  return f;
}

bool IsShardName(const std::string& n) {
  return absl::StartsWith(n, "shard-") && absl::EndsWith(n, ".h5");
}

}  // namespace

// ---- DatasetWriter --------------------------------------------------------------------

DatasetWriter::DatasetWriter(DatasetWriterOptions o) : o_(std::move(o)) {}

DatasetWriter::~DatasetWriter() {
  hdf5::Scope lock;
  images_.Reset();
  file_.Reset();
  if (!committed_ && !discarded_) Discard();
}

void DatasetWriter::Discard() {
  hdf5::Scope lock;
  images_.Reset();
  file_.Reset();
  // Only files this writer created: Create refused (or, with force, deleted) every dataset
  // file that was in the directory before. The index goes first, so an interrupted
  // discard never leaves an index without its shards.
  std::vector<std::string> paths;
  if (committed_) paths.push_back(JoinPath(o_.dir, kIndexFileName));
  paths.push_back(TempIndexPath());
  for (const std::string& name : shard_files_) paths.push_back(JoinPath(o_.dir, name));
  for (const std::string& p : paths) ::unlink(p.c_str());
  committed_ = false;
  discarded_ = true;
}

std::string DatasetWriter::TempIndexPath() const {
  return JoinPath(o_.dir, kIndexFileName) + ".tmp";
}

absl::StatusOr<std::unique_ptr<DatasetWriter>> DatasetWriter::Create(
    const DatasetWriterOptions& o) {
  if (o.encoding != "raw" && o.encoding != "jpeg") {
    return absl::InvalidArgumentError(
        absl::StrCat("encoding '", o.encoding, "' is not raw or jpeg"));
  }
  if (o.height <= 0 || o.width <= 0 || (o.channels != 1 && o.channels != 3)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "image size %dx%dx%d is invalid (channels must be 1 or 3)", o.height, o.width, o.channels));
  }
  // The reader's limits: never write a dataset that OpenDataset would refuse.
  if (std::string why = ImageSizeProblem(o.height, o.width, o.limits); !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(o.dir, ": image size ", why));
  }
  if (o.num_classes <= 0 || o.num_classes > kMaxClasses ||
      static_cast<int>(o.class_names.size()) != o.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("num_classes %d with %d class names (at most %d classes)", o.num_classes,
                        o.class_names.size(), kMaxClasses));
  }
  if (o.shard_size <= 0 || o.shard_size > kMaxDatasetImages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("shard_size %d is outside 1..%d", o.shard_size, kMaxDatasetImages));
  }
  RETURN_IF_ERROR(MakeDirs(o.dir, "directory"));
  // Existing dataset files: refuse, or delete exactly those with force.
  std::vector<std::string> ours;
  if (DIR* d = ::opendir(o.dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == kIndexFileName || IsShardName(n)) ours.push_back(n);
    }
    ::closedir(d);
  } else {
    return absl::PermissionDeniedError(absl::StrCat(o.dir, ": cannot list directory"));
  }
  if (!ours.empty()) {
    if (!o.force) {
      return absl::FailedPreconditionError(
          absl::StrCat(o.dir, ": already holds a dataset (", ours.size(), " files such as ",
                       ours.front(), "); pass --force to overwrite"));
    }
    for (const std::string& n : ours) {
      std::string p = JoinPath(o.dir, n);
      if (::unlink(p.c_str()) != 0) {
        return absl::PermissionDeniedError(
            absl::StrCat(p, ": cannot delete: ", std::strerror(errno)));
      }
    }
  }
  std::unique_ptr<DatasetWriter> w(new DatasetWriter(o));
  w->image_bytes_ = static_cast<int64_t>(o.height) * o.width * o.channels;
  w->sum_.assign(w->image_bytes_, 0.0);
  w->class_counts_.assign(o.num_classes, 0);
  return w;
}

absl::Status DatasetWriter::OpenShard() {
  std::string name = ShardFileName(static_cast<int>(shard_files_.size()));
  std::string path = JoinPath(o_.dir, name);
  ASSIGN_OR_RETURN(file_, CreateShardFile(path));
  // The string attributes first, while the file is small: their checksum reads the file
  // back (hdf5.h).
  absl::Status s = hdf5::WriteStringAttr(file_.get(), "format", kShardFormat);
  if (s.ok()) s = hdf5::WriteStringAttr(file_.get(), "encoding", o_.encoding);
  if (!s.ok()) return absl::InternalError(absl::StrCat(path, ": ", s.message()));
  labels_.clear();
  jpeg_bytes_.clear();
  offsets_.assign(1, 0);
  if (o_.encoding == "raw") {
    // One image per chunk: a random read touches exactly one chunk, uncompressed, so it
    // is a single contiguous read of H*W*C bytes with no decompression.
    absl::StatusOr<hdf5::Handle> images =
        hdf5::CreateGrowableDataset(file_.get(), "/images", hdf5::Dtype::kUint8,
                                    {o_.shard_size, o_.height, o_.width, o_.channels});
    if (!images.ok()) {
      return absl::InternalError(absl::StrCat(path, ": /images: cannot create dataset"));
    }
    images_ = *std::move(images);
  }
  shard_files_.push_back(name);
  shard_sizes_.push_back(0);
  return absl::OkStatus();
}

absl::Status DatasetWriter::CloseShard() {
  const std::string path = JoinPath(o_.dir, shard_files_.back());
  const int64_t n = static_cast<int64_t>(labels_.size());
  const hdf5::Id f = file_.get();
  absl::Status s;
  if (o_.encoding == "raw") {
    if (!hdf5::SetExtent(images_.get(), {n, o_.height, o_.width, o_.channels}).ok()) {
      return absl::InternalError(absl::StrCat(path, ": /images: cannot set extent"));
    }
    images_.Reset();
  } else {
    s = hdf5::WriteDataset(f, "/images", "/images", hdf5::Dtype::kUint8,
                           {static_cast<int64_t>(jpeg_bytes_.size())}, jpeg_bytes_.data());
    if (s.ok()) {
      s = hdf5::WriteDataset(f, "/offsets", "/offsets", hdf5::Dtype::kInt64, {n + 1},
                             offsets_.data());
    }
  }
  if (s.ok()) {
    s = hdf5::WriteDataset(f, "/labels", "/labels", hdf5::Dtype::kInt32, {n}, labels_.data());
  }
  if (s.ok()) s = hdf5::WriteIntAttr(f, "version", kShardFormatVersion);
  if (s.ok()) s = hdf5::WriteIntAttr(f, "height", o_.height);
  if (s.ok()) s = hdf5::WriteIntAttr(f, "width", o_.width);
  if (s.ok()) s = hdf5::WriteIntAttr(f, "channels", o_.channels);
  if (s.ok()) s = hdf5::WriteIntAttr(f, "num_classes", o_.num_classes);
  if (s.ok()) s = hdf5::WriteIntAttr(f, "count", n);
  if (s.ok()) {
    s = hdf5::WriteIntAttr(f, "shard_index", static_cast<int64_t>(shard_files_.size()) - 1);
  }
  if (!s.ok()) return absl::InternalError(absl::StrCat(path, ": ", s.message()));
  if (!hdf5::Flush(f).ok()) return absl::InternalError(absl::StrCat(path, ": flush failed"));
  file_.Reset();
  jpeg_bytes_.clear();
  jpeg_bytes_.shrink_to_fit();
  return absl::OkStatus();
}

absl::Status DatasetWriter::Add(const uint8_t* pixels, const std::string* encoded, int label) {
  if (finished_) return absl::FailedPreconditionError("DatasetWriter::Add after Finish");
  if (label < 0 || label >= o_.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("label %d of image %d is outside [0, %d)", label, total_, o_.num_classes));
  }
  if (o_.encoding == "jpeg" && (encoded == nullptr || encoded->empty())) {
    return absl::InvalidArgumentError("encoding jpeg needs the encoded bytes of every image");
  }
  if (total_ >= kMaxDatasetImages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: more than %d images (the largest dataset the reader accepts)", o_.dir,
                        kMaxDatasetImages));
  }
  hdf5::Scope lock;
  if (!file_.valid()) {
    RETURN_IF_ERROR(OpenShard());
  }
  const int64_t local = static_cast<int64_t>(labels_.size());
  if (o_.encoding == "raw") {
    if (!hdf5::WriteBlock(images_.get(), {local, 0, 0, 0}, {1, o_.height, o_.width, o_.channels},
                          hdf5::Dtype::kUint8, pixels)
             .ok()) {
      return absl::InternalError(absl::StrCat(JoinPath(o_.dir, shard_files_.back()),
                                              ": /images: write failed (disk full?)"));
    }
  } else {
    jpeg_bytes_.append(*encoded);
    offsets_.push_back(static_cast<int64_t>(jpeg_bytes_.size()));
  }
  labels_.push_back(label);
  for (int64_t i = 0; i < image_bytes_; ++i) sum_[i] += pixels[i];
  ++class_counts_[label];
  ++shard_sizes_.back();
  ++total_;
  if (static_cast<int64_t>(labels_.size()) == o_.shard_size) return CloseShard();
  return absl::OkStatus();
}

absl::Status DatasetWriter::Finish(const std::vector<float>* mean, const std::string& mean_source) {
  absl::Status s = Prepare(mean, mean_source);
  if (s.ok()) s = Commit();
  return s;
}

absl::Status DatasetWriter::Commit() {
  if (!prepared_ || committed_ || discarded_) {
    return absl::FailedPreconditionError("DatasetWriter::Commit needs one successful Prepare");
  }
  const std::string path = JoinPath(o_.dir, kIndexFileName);
  if (::rename(TempIndexPath().c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", std::strerror(errno)));
  }
  committed_ = true;
  return absl::OkStatus();
}

absl::Status DatasetWriter::Prepare(const std::vector<float>* mean,
                                    const std::string& mean_source) {
  if (finished_) {
    return absl::FailedPreconditionError("DatasetWriter: Prepare (or Finish) called twice");
  }
  finished_ = true;
  hdf5::Scope lock;
  if (file_.valid()) {
    RETURN_IF_ERROR(CloseShard());
  }
  if (total_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(o_.dir, ": no images to write (empty dataset)"));
  }
  std::vector<float>& mean_image = mean_image_;
  mean_image.assign(image_bytes_, 0.f);
  std::string source = "computed";
  if (mean != nullptr) {
    if (static_cast<int64_t>(mean->size()) != image_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("given mean image has %d values, expected %dx%dx%d", mean->size(),
                          o_.height, o_.width, o_.channels));
    }
    mean_image = *mean;
    source = mean_source.empty() ? "given" : mean_source;
  } else {
    for (int64_t i = 0; i < image_bytes_; ++i) {
      mean_image[i] = static_cast<float>(sum_[i] / static_cast<double>(total_));
    }
  }
  // Written to a temporary name and renamed by Commit: dataset.h5 appears only when
  // complete.
  const std::string tmp = TempIndexPath();
  {
    ASSIGN_OR_RETURN(hdf5::Handle f, CreateShardFile(tmp));
    const hdf5::Id id = f.get();
    // The string attributes before the data: their checksum reads the file back (hdf5.h).
    absl::Status s = hdf5::WriteStringAttr(id, "format", kDatasetFormat);
    if (s.ok()) s = hdf5::WriteStringAttr(id, "encoding", o_.encoding);
    if (s.ok()) s = hdf5::WriteStringAttr(id, "mean_source", source);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "version", kShardFormatVersion);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "height", o_.height);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "width", o_.width);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "channels", o_.channels);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "num_classes", o_.num_classes);
    if (s.ok()) s = hdf5::WriteIntAttr(id, "size", total_);
    if (s.ok()) {
      s = hdf5::WriteIntAttr(id, "num_shards", static_cast<int64_t>(shard_files_.size()));
    }
    if (s.ok()) s = hdf5::WriteStrings(id, "/class_names", o_.class_names);
    if (s.ok()) {
      s = hdf5::WriteDataset(id, "/class_counts", "/class_counts", hdf5::Dtype::kInt64,
                             {o_.num_classes}, class_counts_.data());
    }
    if (s.ok()) {
      s = hdf5::WriteDataset(id, "/mean_image", "/mean_image", hdf5::Dtype::kFloat32,
                             {o_.height, o_.width, o_.channels}, mean_image.data());
    }
    if (s.ok()) s = hdf5::WriteStrings(id, "/shard_files", shard_files_);
    if (s.ok()) {
      s = hdf5::WriteDataset(id, "/shard_sizes", "/shard_sizes", hdf5::Dtype::kInt64,
                             {static_cast<int64_t>(shard_sizes_.size())}, shard_sizes_.data());
    }
    if (!s.ok()) return absl::InternalError(absl::StrCat(tmp, ": ", s.message()));
    if (!hdf5::Flush(id).ok() || !f.Close()) {
      return absl::InternalError(absl::StrCat(tmp, ": flush failed (disk full?)"));
    }
  }
  prepared_ = true;
  return absl::OkStatus();
}

// ---- reading ----------------------------------------------------------------------------

namespace {

absl::Status Mismatch(const std::string& where, const char* attr, int64_t got, int64_t want,
                      const char* from) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: attribute '%s' is %d, expected %d%s", where, attr, got, want, from));
}

}  // namespace

namespace {

// The root attributes of dataset.h5 into idx.info (all but path), idx.mean_source and
// `num_shards`, each claimed size bounded before anything is allocated for it (docs/LIMITS.md).
absl::Status ReadIndexAttributes(hdf5::Id f, const std::string& path, const ImageLimits& limits,
                                 DatasetIndex& idx, int64_t* num_shards) {
  ASSIGN_OR_RETURN(std::string format, ReadStringAttribute(f, path, "format"));
  if (format != kDatasetFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": attribute 'format' is '", format,
                                                   "', expected '", kDatasetFormat, "'"));
  }
  ASSIGN_OR_RETURN(int64_t version, ReadIntAttribute(f, path, "version"));
  if (version != kShardFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'version' is %d; this build reads version %d", path, version,
                        kShardFormatVersion));
  }
  ASSIGN_OR_RETURN(std::string encoding, ReadStringAttribute(f, path, "encoding"));
  if (encoding != "raw" && encoding != "jpeg") {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": attribute 'encoding' is '", encoding, "', expected raw or jpeg"));
  }
  int64_t vals[6];
  const char* names[6] = {"height", "width", "channels", "num_classes", "size", "num_shards"};
  for (int i = 0; i < 6; ++i) {
    ASSIGN_OR_RETURN(vals[i], ReadIntAttribute(f, path, names[i]));
  }
  const int64_t H = vals[0], W = vals[1], C = vals[2], K = vals[3], N = vals[4], S = vals[5];
  if (std::string why = ImageSizeProblem(H, W, limits); !why.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attributes 'height'x'width': %s", path, why));
  }
  if (C != 1 && C != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'channels' is %d, must be 1 or 3", path, C));
  }
  if (K <= 0 || K > kMaxClasses) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: attribute 'num_classes' is %d, must be in 1..%d", path, K, kMaxClasses));
  }
  if (N < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'size' is %d, must be a positive image count", path, N));
  }
  if (N == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'size' is 0: the dataset is empty", path));
  }
  if (N > kMaxDatasetImages) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'size' is %d, more than the limit of %d images", path, N,
                        kMaxDatasetImages));
  }
  if (S <= 0 || S > kMaxShards) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: attribute 'num_shards' is %d, must be in 1..%d", path, S, kMaxShards));
  }
  ASSIGN_OR_RETURN(idx.mean_source, ReadStringAttribute(f, path, "mean_source"));
  idx.info.size = N;
  idx.info.height = static_cast<int>(H);
  idx.info.width = static_cast<int>(W);
  idx.info.channels = static_cast<int>(C);
  idx.info.num_classes = static_cast<int>(K);
  idx.info.encoding = encoding;
  *num_shards = S;
  return absl::OkStatus();
}

// Reads int64 dataset `name` of `n` entries (each >= 0) into `out` and checks that they
// sum to `total` (attribute 'size'); `what` names an entry in messages ("count", "size").
absl::Status ReadCounts(hdf5::Id f, const std::string& path, const char* name, int64_t n,
                        const char* what, const char* of, int64_t total,
                        std::vector<int64_t>* out) {
  ASSIGN_OR_RETURN(hdf5::Handle d,
                   hdf5::OpenChecked(f, path, name, hdf5::Dtype::kInt64, {n}, nullptr));
  out->resize(n);
  RETURN_IF_ERROR(hdf5::ReadAll(d.get(), path, name, hdf5::Dtype::kInt64, out->data()));
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((*out)[i] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %s: %s %d of %s %d is negative", path,
                                                        name, what, (*out)[i], of, i));
    }
    if (!CheckedAdd(sum, (*out)[i], &sum)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s: %ss overflow a 64-bit sum", path, name, what));
    }
  }
  if (sum != total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s: %ss sum to %d, but attribute 'size' is %d", path, name, what, sum, total));
  }
  return absl::OkStatus();
}

// The datasets of dataset.h5, after ReadIndexAttributes has bounded their shapes.
absl::Status ReadIndexDatasets(hdf5::Id f, const std::string& path, int64_t S, DatasetIndex& idx) {
  const int64_t H = idx.info.height, W = idx.info.width, C = idx.info.channels;
  const int64_t K = idx.info.num_classes, N = idx.info.size;
  {
    ASSIGN_OR_RETURN(hdf5::Handle d, hdf5::OpenChecked(f, path, "/class_names",
                                                       hdf5::Dtype::kString, {K}, nullptr));
    ASSIGN_OR_RETURN(idx.info.class_names, hdf5::ReadStrings(d.get(), path, "/class_names", K));
  }
  RETURN_IF_ERROR(
      ReadCounts(f, path, "/class_counts", K, "count", "class", N, &idx.info.class_counts));
  {
    ASSIGN_OR_RETURN(hdf5::Handle d, hdf5::OpenChecked(f, path, "/mean_image",
                                                       hdf5::Dtype::kFloat32, {H, W, C}, nullptr));
    idx.mean_image.resize(H * W * C);
    RETURN_IF_ERROR(
        hdf5::ReadAll(d.get(), path, "/mean_image", hdf5::Dtype::kFloat32, idx.mean_image.data()));
  }
  for (size_t i = 0; i < idx.mean_image.size(); ++i) {
    float m = idx.mean_image[i];
    if (!(m >= 0.f && m <= 255.f)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: /mean_image: value %g at index %d is outside [0, 255]", path, m, i));
    }
  }
  {
    ASSIGN_OR_RETURN(hdf5::Handle d, hdf5::OpenChecked(f, path, "/shard_files",
                                                       hdf5::Dtype::kString, {S}, nullptr));
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     hdf5::ReadStrings(d.get(), path, "/shard_files", S));
    for (const std::string& name : files) {
      if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": /shard_files: '", name, "' is not a plain file name"));
      }
    }
    idx.shard_files = std::move(files);
  }
  return ReadCounts(f, path, "/shard_sizes", S, "size", "shard", N, &idx.shard_sizes);
}

}  // namespace

absl::StatusOr<DatasetIndex> ReadDatasetIndex(const std::string& dir_in,
                                              const ImageLimits& limits) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string path = JoinPath(dir, kIndexFileName);
  if (!IsDirectory(dir)) {
    struct stat st;
    if (stat(dir.c_str(), &st) == 0) {
      return absl::NotFoundError(absl::StrCat(
          dir,
          ": is a file, not a dataset directory (give the directory make_shards wrote, "
          "which holds dataset.h5 and its shards)"));
    }
    return absl::NotFoundError(absl::StrCat(dir, ": dataset directory not found"));
  }
  hdf5::Scope lock;
  absl::StatusOr<hdf5::Handle> file = hdf5::OpenFileReadOnly(path);
  if (!file.ok()) {
    if (absl::IsNotFound(file.status())) {
      return absl::NotFoundError(
          absl::StrCat(path, ": file not found (not a dataset directory written by make_shards?)"));
    }
    return file.status();
  }
  DatasetIndex idx;
  int64_t num_shards = 0;
  RETURN_IF_ERROR(ReadIndexAttributes(file->get(), path, limits, idx, &num_shards));
  RETURN_IF_ERROR(ReadIndexDatasets(file->get(), path, num_shards, idx));
  idx.info.path = dir;
  return idx;
}

namespace {

// A JPEG shard's /offsets: n + 1 increasing offsets from 0 to the bytes of /images.
absl::Status ReadJpegOffsets(hdf5::Id f, const std::string& path, int64_t n,
                             std::vector<int64_t>* offsets) {
  std::vector<int64_t> dims;
  int64_t total = 0;
  {
    ASSIGN_OR_RETURN(hdf5::Handle d,
                     hdf5::OpenChecked(f, path, "/images", hdf5::Dtype::kUint8, {-1}, &dims));
    total = dims[0];
  }
  ASSIGN_OR_RETURN(hdf5::Handle o,
                   hdf5::OpenChecked(f, path, "/offsets", hdf5::Dtype::kInt64, {n + 1}, &dims));
  offsets->resize(n + 1);
  RETURN_IF_ERROR(hdf5::ReadAll(o.get(), path, "/offsets", hdf5::Dtype::kInt64, offsets->data()));
  const std::vector<int64_t>& off = *offsets;
  if (off[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: /offsets: first offset is %d, expected 0", path, off[0]));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (off[i + 1] <= off[i]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: /offsets: image %d has %d bytes (offsets must increase)", path, i,
                          off[i + 1] - off[i]));
    }
  }
  if (off[n] != total) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: /offsets: last offset is %d, but /images holds %d bytes", path, off[n], total));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardContents> ValidateShard(const DatasetIndex& index, int shard_index) {
  const DatasetInfo& info = index.info;
  const std::string path = JoinPath(info.path, index.shard_files[shard_index]);
  const int64_t n = index.shard_sizes[shard_index];
  hdf5::Scope lock;
  ASSIGN_OR_RETURN(hdf5::Handle file, hdf5::OpenFileReadOnly(path));
  const hdf5::Id f = file.get();
  ASSIGN_OR_RETURN(std::string format, ReadStringAttribute(f, path, "format"));
  if (format != kShardFormat) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": attribute 'format' is '", format,
                                                   "', expected '", kShardFormat, "'"));
  }
  ASSIGN_OR_RETURN(std::string encoding, ReadStringAttribute(f, path, "encoding"));
  if (encoding != info.encoding) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": attribute 'encoding' is '", encoding,
                                                   "', expected '", info.encoding,
                                                   "' (from dataset.h5)"));
  }
  struct Expect {
    const char* name;
    int64_t want;
  } expects[] = {
      {"version", kShardFormatVersion}, {"height", info.height},           {"width", info.width},
      {"channels", info.channels},      {"num_classes", info.num_classes}, {"count", n},
      {"shard_index", shard_index}};
  for (const Expect& e : expects) {
    ASSIGN_OR_RETURN(int64_t v, ReadIntAttribute(f, path, e.name));
    if (v != e.want) return Mismatch(path, e.name, v, e.want, " (from dataset.h5)");
  }
  ShardContents out;
  if (info.encoding == "raw") {
    RETURN_IF_ERROR(hdf5::OpenChecked(f, path, "/images", hdf5::Dtype::kUint8,
                                      {n, info.height, info.width, info.channels}, nullptr)
                        .status());
  } else {
    RETURN_IF_ERROR(ReadJpegOffsets(f, path, n, &out.offsets));
  }
  ASSIGN_OR_RETURN(hdf5::Handle l,
                   hdf5::OpenChecked(f, path, "/labels", hdf5::Dtype::kInt32, {n}, nullptr));
  out.labels.resize(n);
  RETURN_IF_ERROR(hdf5::ReadAll(l.get(), path, "/labels", hdf5::Dtype::kInt32, out.labels.data()));
  for (int64_t i = 0; i < n; ++i) {
    int32_t v = out.labels[i];
    if (v < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: /labels: label %d at index %d is negative", path, v, i));
    }
    if (v >= info.num_classes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: /labels: label %d at index %d is >= num_classes %d", path, v, i, info.num_classes));
    }
  }
  return out;
}

// ---- ShardFileCache -------------------------------------------------------------------

struct ShardFileCache::Open {
  int shard = -1;
  uint64_t last_use = 0;
  hdf5::Handle file;
  hdf5::DatasetReader images;
};

struct ShardFileCache::Resident {
  std::once_flag once;
  absl::Status status;  // of the load; written once, inside `once`
  std::unique_ptr<uint8_t[]> bytes;
  int64_t size = 0;
};

ShardFileCache::ShardFileCache(const DatasetIndex* index, int max_open_files,
                               std::vector<int64_t> resident_bytes)
    : index_(index),
      max_open_(std::max(1, max_open_files)),
      resident_bytes_(std::move(resident_bytes)) {
  if (!resident_bytes_.empty()) {
    resident_ = std::make_unique<Resident[]>(resident_bytes_.size());
  }
}

ShardFileCache::~ShardFileCache() {
  hdf5::Scope lock;
  open_.clear();
}

absl::StatusOr<ShardFileCache::Open*> ShardFileCache::Get(int shard) {
  ++tick_;
  for (auto& o : open_) {
    if (o->shard == shard) {
      o->last_use = tick_;
      return o.get();
    }
  }
  const std::string path = JoinPath(index_->info.path, index_->shard_files[shard]);
  ASSIGN_OR_RETURN(hdf5::Handle file, hdf5::OpenFileReadOnly(path));
  // Validated on open; checked again in case the file was replaced since.
  if (std::string why = hdf5::NonHardLinkReason(file.get(), "/images"); !why.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": /images: ", why));
  }
  // No chunk cache: every chunk (one image) is read straight into the caller's buffer.
  absl::StatusOr<hdf5::DatasetReader> images = hdf5::DatasetReader::Open(file.get(), "/images");
  if (!images.ok()) return absl::DataLossError(absl::StrCat(path, ": /images: cannot open"));
  auto o = std::make_unique<Open>();
  o->shard = shard;
  o->last_use = tick_;
  o->file = std::move(file);
  o->images = *std::move(images);
  if (static_cast<int>(open_.size()) >= max_open_) {
    auto lru = std::min_element(open_.begin(), open_.end(), [](const auto& a, const auto& b) {
      return a->last_use < b->last_use;
    });
    *lru = std::move(o);
    return lru->get();
  }
  open_.push_back(std::move(o));
  return open_.back().get();
}

absl::Status ShardFileCache::LoadResident(int shard, Resident* r) {
  const std::string path = JoinPath(index_->info.path, index_->shard_files[shard]);
  const int64_t want = resident_bytes_[shard];
  hdf5::Scope lock;
  ASSIGN_OR_RETURN(Open * o, Get(shard));
  // The file may have been replaced since it was validated: its /images must still hold
  // exactly the bytes the dataset's budget was reserved for.
  const int64_t got = o->images.Elements();
  if (got != want) {
    return absl::DataLossError(absl::StrFormat(
        "%s: /images: holds %d bytes, expected %d (file changed since it was opened?)", path, got,
        want));
  }
  r->bytes.reset(new uint8_t[std::max<int64_t>(want, 1)]);  // no zero fill: all overwritten
  if (want > 0 && !o->images.ReadAll(hdf5::Dtype::kUint8, r->bytes.get()).ok()) {
    r->bytes.reset();
    return absl::DataLossError(absl::StrFormat(
        "%s: /images: reading all %d bytes failed (truncated or corrupt data)", path, want));
  }
  r->size = want;
  return absl::OkStatus();
}

absl::StatusOr<const ShardFileCache::Resident*> ShardFileCache::ResidentImages(int shard) {
  Resident* r = &resident_[shard];
  std::call_once(r->once, [&] { r->status = LoadResident(shard, r); });
  if (!r->status.ok()) return r->status;
  return r;
}

absl::Status ShardFileCache::CopyResident(int shard, int64_t begin, int64_t end, uint8_t* out) {
  ASSIGN_OR_RETURN(const Resident* r, ResidentImages(shard));
  if (begin < 0 || begin > end || end > r->size) {
    return absl::DataLossError(absl::StrFormat(
        "%s: /images: bytes [%d, %d) are outside the %d bytes stored",
        JoinPath(index_->info.path, index_->shard_files[shard]), begin, end, r->size));
  }
  std::memcpy(out, r->bytes.get() + begin, static_cast<size_t>(end - begin));
  return absl::OkStatus();
}

absl::Status ShardFileCache::ReadRaw(int shard, int64_t local, uint8_t* out) {
  const DatasetInfo& info = index_->info;
  if (resident_ != nullptr) {
    const int64_t bytes = int64_t{info.height} * info.width * info.channels;
    return CopyResident(shard, local * bytes, (local + 1) * bytes, out);
  }
  hdf5::Scope lock;
  ASSIGN_OR_RETURN(Open * o, Get(shard));
  if (!o->images
           .ReadBlock({local, 0, 0, 0}, {1, info.height, info.width, info.channels},
                      hdf5::Dtype::kUint8, out)
           .ok()) {
    return absl::DataLossError(
        absl::StrFormat("%s: /images: reading image %d failed (truncated or corrupt data)",
                        JoinPath(info.path, index_->shard_files[shard]), local));
  }
  return absl::OkStatus();
}

absl::Status ShardFileCache::ReadBytes(int shard, int64_t begin, int64_t end, std::string* out) {
  if (resident_ != nullptr) {
    out->resize(end - begin);
    return CopyResident(shard, begin, end, reinterpret_cast<uint8_t*>(out->data()));
  }
  hdf5::Scope lock;
  ASSIGN_OR_RETURN(Open * o, Get(shard));
  out->resize(end - begin);
  if (!o->images.ReadBlock({begin}, {end - begin}, hdf5::Dtype::kUint8, out->data()).ok()) {
    return absl::DataLossError(
        absl::StrFormat("%s: /images: reading bytes [%d, %d) failed (truncated or corrupt data)",
                        JoinPath(index_->info.path, index_->shard_files[shard]), begin, end));
  }
  return absl::OkStatus();
}

}  // namespace colonnade::data
