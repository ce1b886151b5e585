#include "data/converters.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <optional>
#include <system_error>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/paths.h"
#include "core/philox.h"
#include "core/status_macros.h"
#include "data/files.h"
#include "data/image.h"
#include "data/sampler.h"
#include "data/shard_format.h"

namespace colonnade::data {
namespace {

using Clock = std::chrono::steady_clock;

// Runs produce(i) for i in [0, n) on `threads` threads and consume(i, result) on the
// calling thread in index order, with at most `window` results in flight (raised to
// `threads`): the window bounds the memory of results waiting for their turn. The first
// non-OK status from consume stops everything and is returned.
template <typename Result>
absl::Status RunOrdered(int64_t n, int threads, int64_t window,
                        const std::function<Result(int64_t)>& produce,
                        const std::function<absl::Status(int64_t, Result&)>& consume) {
  threads = std::max(1, threads);
  window = std::max<int64_t>(window, threads);
  std::vector<std::optional<Result>> slots(window);
  std::mutex mu;
  std::condition_variable produced_cv, consumed_cv;
  int64_t next = 0, consumed = 0;
  bool stop = false;
  auto worker = [&] {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      consumed_cv.wait(lock, [&] { return stop || next >= n || next < consumed + window; });
      if (stop || next >= n) return;
      const int64_t i = next++;
      lock.unlock();
      Result r = produce(i);
      lock.lock();
      slots[i % window] = std::move(r);
      produced_cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  auto stop_all = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    consumed_cv.notify_all();
    for (std::thread& t : pool) t.join();
  };
  for (int t = 0; t < threads; ++t) {
    // The system may refuse a thread (process limits): an error, not std::terminate.
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error& e) {
      stop_all();
      return absl::ResourceExhaustedError(absl::StrFormat(
          "cannot start %d decode threads (%s); use fewer --threads", threads, e.what()));
    }
  }
  absl::Status status;
  for (int64_t i = 0; i < n && status.ok(); ++i) {
    std::optional<Result> r;
    {
      std::unique_lock<std::mutex> lock(mu);
      produced_cv.wait(lock, [&] { return slots[i % window].has_value(); });
      r = std::move(slots[i % window]);
      slots[i % window].reset();
      consumed = i + 1;
    }
    consumed_cv.notify_all();
    status = consume(i, *r);
  }
  stop_all();
  return status;
}

// The largest image file read: any PNG or JPEG within the pixel limit is smaller (PNG at
// 16-bit RGBA stored uncompressed is 8 bytes per pixel), plus room for metadata.
int64_t MaxImageFileBytes(const ImageLimits& limits) {
  int64_t bytes = 0;
  if (!CheckedMul(limits.max_pixels, 8, &bytes) || !CheckedAdd(bytes, 64 << 20, &bytes)) {
    return INT64_MAX;
  }
  return bytes;
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": cannot open directory"));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.empty() || n[0] == '.') continue;
    names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool HasImageExtension(const std::string& name) {
  std::string lower = absl::AsciiStrToLower(name);
  return absl::EndsWith(lower, ".jpg") || absl::EndsWith(lower, ".jpeg") ||
         absl::EndsWith(lower, ".png");
}

// One image after decoding/resizing/encoding, or the reason it could not be.
struct Converted {
  absl::Status status;
  bool fatal = false;  // an error that --strict or not must stop the conversion
  Image image;
  std::string encoded;  // for encoding jpeg
};

// Fills c->encoded for jpeg output (unless already set by passthrough).
void EncodeIfNeeded(const ConvertOptions& o, Converted* c) {
  if (o.encoding != "jpeg" || !c->status.ok() || !c->encoded.empty()) return;
  absl::StatusOr<std::string> e = EncodeJpeg(c->image, o.jpeg_quality);
  if (!e.ok()) {
    c->status = e.status();
  } else {
    c->encoded = std::move(*e);
  }
}

absl::Status CheckOptions(const ConvertOptions& o) {
  if (o.encoding != "raw" && o.encoding != "jpeg") {
    return absl::InvalidArgumentError(
        absl::StrCat("encoding '", o.encoding, "' is not raw or jpeg"));
  }
  if (o.jpeg_quality < 1 || o.jpeg_quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("jpeg_quality ", o.jpeg_quality, " is outside 1..100"));
  }
  if (o.channels != 1 && o.channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("channels ", o.channels, " is not 1 or 3"));
  }
  if (o.shard_size <= 0) return absl::InvalidArgumentError("shard_size must be > 0");
  if (!(o.val_fraction >= 0.0 && o.val_fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("val_fraction ", o.val_fraction, " is outside [0, 1)"));
  }
  if (o.resize < 0 || o.resize_height < 0 || o.resize_width < 0) {
    return absl::InvalidArgumentError("resize sizes must be >= 0");
  }
  if (o.resize > 0 && (o.resize_height > 0 || o.resize_width > 0)) {
    return absl::InvalidArgumentError("resize and resize_exact are mutually exclusive");
  }
  if ((o.resize_height > 0) != (o.resize_width > 0)) {
    return absl::InvalidArgumentError("resize_exact needs both a height and a width");
  }
  if (o.resize > 0) {
    if (std::string why = ImageSizeProblem(o.resize, o.resize, o.limits); !why.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("resize ", o.resize, ": ", why));
    }
  }
  if (o.resize_height > 0) {
    std::string why = ImageSizeProblem(o.resize_height, o.resize_width, o.limits);
    if (!why.empty()) return absl::InvalidArgumentError(absl::StrCat("resize_exact ", why));
  }
  if (o.threads < 1 || o.threads > kMaxConvertThreads) {
    return absl::InvalidArgumentError(
        absl::StrFormat("threads %d is outside 1..%d", o.threads, kMaxConvertThreads));
  }
  return absl::OkStatus();
}

// Writes `n` produced images into one dataset directory and prepares its index; the
// caller commits it (CommitSplits) once every split of the conversion has succeeded.
absl::StatusOr<std::unique_ptr<DatasetWriter>> WriteSplit(
    const std::string& dir, const ConvertOptions& o, int height, int width,
    const std::vector<std::string>& class_names, int64_t n,
    const std::function<Converted(int64_t)>& produce, const std::function<int(int64_t)>& label_of,
    const std::vector<float>* mean, const std::string& mean_source, ConvertReport* report) {
  DatasetWriterOptions wo;
  wo.dir = dir;
  wo.encoding = o.encoding;
  wo.height = height;
  wo.width = width;
  wo.channels = o.channels;
  wo.num_classes = static_cast<int>(class_names.size());
  wo.class_names = class_names;
  wo.shard_size = o.shard_size;
  wo.force = o.force;
  wo.limits = o.limits;
  ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::Create(wo));
  int64_t last_progress = -1;
  auto last_time = Clock::now();
  if (o.progress) o.progress(dir, 0, n);
  std::function<absl::Status(int64_t, Converted&)> consume = [&](int64_t i, Converted& c) {
    if (!c.status.ok()) {
      if (o.strict || c.fatal) return c.status;
      ++report->skipped;
      if (report->skipped_messages.size() < 20) {
        report->skipped_messages.push_back(std::string(c.status.message()));
      }
    } else {
      RETURN_IF_ERROR(writer->Add(c.image.pixels.data(), &c.encoded, label_of(i)));
    }
    if (o.progress && (i + 1 == n || Clock::now() - last_time > std::chrono::milliseconds(200))) {
      last_time = Clock::now();
      if (i != last_progress) o.progress(dir, i + 1, n);
      last_progress = i;
    }
    return absl::OkStatus();
  };
  // Results in flight: the usual 8 per thread, fewer for big images (about 1 GiB of stored
  // images at most; the writer holds each until it is written in order).
  const int64_t image_bytes = static_cast<int64_t>(height) * width * o.channels;
  const int64_t window = std::min<int64_t>(std::max(64, 8 * o.threads),
                                           std::max<int64_t>(1, (int64_t{1} << 30) / image_bytes));
  RETURN_IF_ERROR(RunOrdered<Converted>(n, o.threads, window, produce, consume));
  RETURN_IF_ERROR(writer->Prepare(mean, mean_source));
  return writer;
}

// Commits the prepared splits, in order, and records them in the report. If one cannot be
// committed, every split is discarded (committed ones included): the conversion leaves no
// dataset behind, as when it fails earlier.
absl::Status CommitSplits(std::vector<std::unique_ptr<DatasetWriter>>* splits,
                          ConvertReport* report) {
  for (auto& w : *splits) {
    absl::Status s = w->Commit();
    if (!s.ok()) {
      for (auto& d : *splits) d->Discard();
      return s;
    }
  }
  for (auto& w : *splits) {
    report->output_dirs.push_back(w->options().dir);
    report->written.push_back(w->count());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> MeanFromOption(const ConvertOptions& o, int h, int w) {
  if (o.mean_from.empty()) return std::vector<float>();
  return ReadMeanImage(o.mean_from, h, w, o.channels, o.limits);
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadMeanImage(const std::string& dir, int height, int width,
                                                 int channels, const ImageLimits& limits) {
  ASSIGN_OR_RETURN(DatasetIndex idx, ReadDatasetIndex(dir, limits));
  if (idx.info.height != height || idx.info.width != width || idx.info.channels != channels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: /mean_image: shape is [%d, %d, %d], expected [%d, %d, %d]",
                        JoinPath(dir, kIndexFileName), idx.info.height, idx.info.width,
                        idx.info.channels, height, width, channels));
  }
  return std::move(idx.mean_image);
}

// ---- CIFAR-10 binary ------------------------------------------------------------------

absl::StatusOr<ConvertReport> ConvertCifar10Binary(const std::string& input_dir,
                                                   const std::string& output_dir,
                                                   const ConvertOptions& o_in) {
  ConvertOptions o = o_in;
  o.channels = 3;
  RETURN_IF_ERROR(CheckOptions(o));
  const auto t0 = Clock::now();
  constexpr int kRecord = 1 + 32 * 32 * 3;
  std::vector<std::string> class_names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                          "dog",      "frog",       "horse", "ship", "truck"};
  const std::string meta = JoinPath(input_dir, "batches.meta.txt");
  absl::StatusOr<std::string> m = ReadRegularFile(meta, 1 << 20);
  if (!m.ok() && !absl::IsNotFound(m.status())) return m.status();
  if (m.ok()) {
    std::vector<std::string> names;
    for (absl::string_view line : absl::StrSplit(*m, '\n')) {
      std::string t(absl::StripAsciiWhitespace(line));
      if (!t.empty()) names.push_back(t);
    }
    if (names.size() != 10) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: has %d class names, expected 10", meta, names.size()));
    }
    class_names = names;
  }
  ConvertReport report;
  std::vector<std::unique_ptr<DatasetWriter>> written;
  struct Split {
    const char* name;
    std::vector<std::string> files;
  } splits[2] = {{"train",
                  {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                   "data_batch_5.bin"}},
                 {"test", {"test_batch.bin"}}};
  for (const Split& split : splits) {
    std::string records;
    for (const std::string& f : split.files) {
      const std::string path = JoinPath(input_dir, f);
      ASSIGN_OR_RETURN(std::string data, ReadRegularFile(path, INT64_MAX));
      if (data.empty() || data.size() % kRecord != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: size %d bytes is not a positive multiple of the %d-byte record (truncated?)", path,
            data.size(), kRecord));
      }
      const int64_t n = static_cast<int64_t>(data.size() / kRecord);
      for (int64_t i = 0; i < n; ++i) {
        const int label = static_cast<uint8_t>(data[i * kRecord]);
        if (label >= 10) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "%s: label: label %d at index %d is >= num_classes 10", path, label, i));
        }
      }
      records += data;
    }
    const int64_t n = static_cast<int64_t>(records.size() / kRecord);
    std::function<Converted(int64_t)> produce = [&](int64_t i) {
      Converted c;
      const uint8_t* r = reinterpret_cast<const uint8_t*>(records.data()) + i * kRecord + 1;
      c.image.height = 32;
      c.image.width = 32;
      c.image.channels = 3;
      c.image.pixels.resize(32 * 32 * 3);
      // The record stores the red plane, then green, then blue (1024 bytes each).
      for (int p = 0; p < 1024; ++p) {
        for (int ch = 0; ch < 3; ++ch) c.image.pixels[p * 3 + ch] = r[ch * 1024 + p];
      }
      EncodeIfNeeded(o, &c);
      return c;
    };
    std::function<int(int64_t)> label_of = [&](int64_t i) {
      return static_cast<int>(static_cast<uint8_t>(records[i * kRecord]));
    };
    const bool is_test = std::string(split.name) == "test";
    ASSIGN_OR_RETURN(std::vector<float> given, MeanFromOption(o, 32, 32));
    const std::vector<float>* mean = nullptr;
    std::string mean_source;
    if (!given.empty()) {
      mean = &given;
      mean_source = o.mean_from;
    } else if (is_test) {
      mean = &written.front()->mean_image();
      mean_source = "train";
    }
    ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> w,
                     WriteSplit(JoinPath(output_dir, split.name), o, 32, 32, class_names, n,
                                produce, label_of, mean, mean_source, &report));
    written.push_back(std::move(w));
  }
  RETURN_IF_ERROR(CommitSplits(&written, &report));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

// ---- image folders ----------------------------------------------------------------------

namespace {

// One image file of a folder dataset and its class.
struct FolderItem {
  std::string path;
  int label;
};

// ROOT/<class>/<image files>: classes in name order, their image files (by extension),
// and everything else counted in report->ignored.
absl::Status ListClassFolders(const std::string& root, std::vector<std::string>* classes,
                              std::vector<FolderItem>* items, ConvertReport* report) {
  if (!IsDirectory(root)) {
    return absl::NotFoundError(absl::StrCat(root, ": directory not found"));
  }
  ASSIGN_OR_RETURN(std::vector<std::string> entries, ListDir(root));
  for (const std::string& e : entries) {
    const std::string dir = JoinPath(root, e);
    if (!IsDirectory(dir)) {
      ++report->ignored;
      continue;
    }
    ASSIGN_OR_RETURN(std::vector<std::string> files, ListDir(dir));
    const int label = static_cast<int>(classes->size());
    classes->push_back(e);
    for (const std::string& f : files) {
      if (HasImageExtension(f) && !IsDirectory(JoinPath(dir, f))) {
        items->push_back({JoinPath(dir, f), label});
      } else {
        ++report->ignored;
      }
    }
  }
  if (classes->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": no class directories (expected ROOT/<class>/<image files>)"));
  }
  if (items->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(root, ": no image files (.jpg, .jpeg, .png) in the class directories"));
  }
  return absl::OkStatus();
}

// Without --resize every image must have the size of the first decodable one: that size,
// and the path of that image in `source` (for the message about an image of another size).
absl::Status FirstImageSize(const std::string& root, const std::vector<FolderItem>& items,
                            const ConvertOptions& o, int* height, int* width, std::string* source) {
  for (const FolderItem& it : items) {
    absl::StatusOr<std::string> bytes = ReadRegularFile(it.path, MaxImageFileBytes(o.limits));
    if (!bytes.ok()) continue;
    Image img;
    if (DecodeImage(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), o.channels,
                    &img, 0, 0, o.limits)
            .ok()) {
      *height = img.height;
      *width = img.width;
      *source = it.path;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(root, ": no decodable image found"));
}

// The image at `path` as the dataset stores it: height x width (resized as the options
// say), and with --encoding=jpeg the source stream itself when it decodes to exactly that.
// `size_source` names the image that set the size when nothing is resized.
Converted ConvertFolderImage(const std::string& path, const ConvertOptions& o, int height,
                             int width, const std::string& size_source) {
  Converted c;
  const bool resizing = o.resize > 0 || o.resize_height > 0;
  // Not a regular file (a FIFO named *.jpg), too big, unreadable: skipped and counted
  // like an undecodable image (fatal with --strict).
  absl::StatusOr<std::string> bytes = ReadRegularFile(path, MaxImageFileBytes(o.limits));
  if (!bytes.ok()) {
    c.status = bytes.status();
    return c;
  }
  const uint8_t* data = reinterpret_cast<const uint8_t*>(bytes->data());
  Image img;
  absl::Status d = DecodeImage(data, bytes->size(), o.channels, &img, resizing ? height : 0,
                               resizing ? width : 0, o.limits);
  if (!d.ok()) {
    c.status = absl::Status(d.code(), absl::StrCat(path, ": ", d.message()));
    return c;
  }
  const bool same_size = img.height == height && img.width == width;
  if (same_size) {
    c.image = std::move(img);
    // Pass the source stream through only if it decodes to exactly c.image: a JPEG at
    // full resolution (DCT-domain downscaling may have produced this size from a larger
    // source).
    int src_h = 0, src_w = 0;
    if (o.encoding == "jpeg" && o.jpeg_passthrough &&
        SniffFormat(data, bytes->size()) == ImageFormat::kJpeg &&
        JpegSize(data, bytes->size(), &src_h, &src_w).ok() && src_h == height && src_w == width) {
      c.encoded = std::move(*bytes);
    }
  } else if (o.resize > 0) {
    c.image = ResizeShorterAndCenterCrop(img, o.resize);
  } else if (o.resize_height > 0) {
    c.image = Resize(img, o.resize_height, o.resize_width);
  } else {
    c.status = absl::InvalidArgumentError(
        absl::StrFormat("%s: image is %dx%d, but %s is %dx%d; pass --resize or --resize_exact",
                        path, img.width, img.height, size_source, width, height));
    c.fatal = true;
    return c;
  }
  EncodeIfNeeded(o, &c);
  if (!c.status.ok()) {
    c.status = absl::Status(c.status.code(), absl::StrCat(path, ": ", c.status.message()));
  }
  return c;
}

// --val_fraction: the first round(fraction * n_k) items of each class k (in storage order)
// go to `val`, the rest to `train`.
void SplitValidation(std::vector<FolderItem> items, size_t num_classes, double fraction,
                     std::vector<FolderItem>* train, std::vector<FolderItem>* val) {
  if (fraction <= 0) {
    *train = std::move(items);
    return;
  }
  std::vector<int64_t> per_class(num_classes, 0), val_target(num_classes, 0),
      val_taken(num_classes, 0);
  for (const FolderItem& it : items) ++per_class[it.label];
  for (size_t k = 0; k < num_classes; ++k) {
    val_target[k] = static_cast<int64_t>(std::llround(per_class[k] * fraction));
  }
  for (const FolderItem& it : items) {
    if (val_taken[it.label] < val_target[it.label]) {
      ++val_taken[it.label];
      val->push_back(it);
    } else {
      train->push_back(it);
    }
  }
}

}  // namespace

absl::StatusOr<ConvertReport> ConvertImageFolder(const std::string& root,
                                                 const std::string& output_dir,
                                                 const ConvertOptions& o) {
  RETURN_IF_ERROR(CheckOptions(o));
  const auto t0 = Clock::now();
  ConvertReport report;
  std::vector<std::string> classes;
  std::vector<FolderItem> items;
  RETURN_IF_ERROR(ListClassFolders(root, &classes, &items, &report));
  // Storage order: a seeded permutation, so shards are not sorted by class.
  if (o.shuffle) {
    std::vector<int64_t> perm = EpochPermutation(
        static_cast<int64_t>(items.size()), MixKey(o.seed, StringHash("make_shards order")), 0);
    std::vector<FolderItem> shuffled;
    shuffled.reserve(items.size());
    for (int64_t p : perm) shuffled.push_back(items[p]);
    items = std::move(shuffled);
  }
  int height = o.resize > 0 ? o.resize : o.resize_height;
  int width = o.resize > 0 ? o.resize : o.resize_width;
  std::string size_source;
  if (height == 0) RETURN_IF_ERROR(FirstImageSize(root, items, o, &height, &width, &size_source));
  std::vector<FolderItem> train, val;
  SplitValidation(std::move(items), classes.size(), o.val_fraction, &train, &val);
  ASSIGN_OR_RETURN(std::vector<float> given, MeanFromOption(o, height, width));
  const std::vector<float>* mean = given.empty() ? nullptr : &given;
  std::vector<std::unique_ptr<DatasetWriter>> written;
  auto write = [&](const std::string& dir, const std::vector<FolderItem>& list,
                   const std::vector<float>* m, const std::string& msrc) -> absl::Status {
    std::function<Converted(int64_t)> produce = [&](int64_t i) {
      return ConvertFolderImage(list[i].path, o, height, width, size_source);
    };
    std::function<int(int64_t)> label_of = [&list](int64_t i) { return list[i].label; };
    ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> w,
                     WriteSplit(dir, o, height, width, classes, static_cast<int64_t>(list.size()),
                                produce, label_of, m, msrc, &report));
    written.push_back(std::move(w));
    return absl::OkStatus();
  };
  if (o.val_fraction > 0) {
    RETURN_IF_ERROR(write(JoinPath(output_dir, "train"), train, mean, o.mean_from));
    RETURN_IF_ERROR(write(JoinPath(output_dir, "val"), val,
                          mean ? mean : &written.front()->mean_image(),
                          mean ? o.mean_from : "train"));
  } else {
    RETURN_IF_ERROR(write(output_dir, train, mean, o.mean_from));
  }
  RETURN_IF_ERROR(CommitSplits(&written, &report));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

// ---- synthetic ------------------------------------------------------------------------------

namespace {

// Image i of `d`, decoded by its reader and encoded as `o` asks: the producer of a split
// written from another dataset (`d` and `o` must outlive it).
std::function<Converted(int64_t)> ReadAndEncode(Dataset* d, const ConvertOptions& o) {
  return [d, &o](int64_t i) {
    const DatasetInfo& info = d->info();
    Converted c;
    c.image.height = info.height;
    c.image.width = info.width;
    c.image.channels = info.channels;
    absl::StatusOr<int> l = d->Read(i, &c.image.pixels);
    if (!l.ok()) c.status = l.status();
    EncodeIfNeeded(o, &c);
    return c;
  };
}

}  // namespace

absl::StatusOr<ConvertReport> ConvertShards(const std::string& input_dir,
                                            const std::string& output_dir,
                                            const ConvertOptions& o_in) {
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, OpenDataset(input_dir));
  Dataset* d = ds.get();
  const DatasetInfo& info = d->info();
  ConvertOptions o = o_in;
  o.channels = info.channels;
  RETURN_IF_ERROR(CheckOptions(o));
  const auto t0 = Clock::now();
  ConvertReport report;
  std::function<Converted(int64_t)> produce = ReadAndEncode(d, o);
  std::function<int(int64_t)> label_of = [d](int64_t i) { return d->Label(i); };
  std::vector<std::unique_ptr<DatasetWriter>> written;
  ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> w,
                   WriteSplit(output_dir, o, info.height, info.width, info.class_names, info.size,
                              produce, label_of, &d->mean_image(), "input", &report));
  written.push_back(std::move(w));
  RETURN_IF_ERROR(CommitSplits(&written, &report));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

absl::StatusOr<ConvertReport> WriteSyntheticShards(const SyntheticOptions& synth, int64_t test_size,
                                                   const std::string& output_dir,
                                                   const ConvertOptions& o_in) {
  ConvertOptions o = o_in;
  o.channels = synth.channels;
  RETURN_IF_ERROR(CheckOptions(o));
  const auto t0 = Clock::now();
  ConvertReport report;
  std::vector<std::unique_ptr<DatasetWriter>> written;
  for (int split = 0; split < 2; ++split) {
    SyntheticOptions so = synth;
    so.held_out = split == 1;
    if (split == 1) {
      if (test_size <= 0) break;
      so.size = test_size;
    }
    ASSIGN_OR_RETURN(std::unique_ptr<Dataset> ds, MakeSyntheticDataset(so));
    Dataset* d = ds.get();
    const DatasetInfo& info = d->info();
    std::function<Converted(int64_t)> produce = ReadAndEncode(d, o);
    std::function<int(int64_t)> label_of = [d](int64_t i) { return d->Label(i); };
    const char* name = split == 0 ? "train" : "test";
    ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> w,
                     WriteSplit(JoinPath(output_dir, name), o, info.height, info.width,
                                info.class_names, info.size, produce, label_of,
                                split == 1 ? &written.front()->mean_image() : nullptr,
                                split == 1 ? "train" : "", &report));
    written.push_back(std::move(w));
  }
  RETURN_IF_ERROR(CommitSplits(&written, &report));
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace colonnade::data
