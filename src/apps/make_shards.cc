// make_shards: converts CIFAR-10 binary batches, image-folder trees or the synthetic
// dataset into Colonnade's HDF5 shard directories (docs/DATA.md), or re-encodes one.
//
//   make_shards --source=cifar10 --input=cifar-10-batches-bin --output=data/cifar10
//   make_shards --source=folder --input=imagenet/train --output=data/imagenet/train
//               --resize=256 --encoding=jpeg
//   make_shards --source=synthetic --output=data/synth --size=50000 --test_size=10000
//   make_shards --source=shards --input=data/cifar10/train --output=data/cifar10_raw/train
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "core/status_macros.h"
#include "data/converters.h"
#include "data/image.h"
#include "data/limits.h"

ABSL_FLAG(std::string, source, "",
          "What to convert: 'cifar10' (the official binary batches data_batch_1.bin ... "
          "test_batch.bin in --input; writes OUTPUT/train and OUTPUT/test), 'folder' (an "
          "image-folder tree --input/<class>/*.jpg|jpeg|png; writes OUTPUT, or OUTPUT/train and "
          "OUTPUT/val with --val_fraction), 'synthetic' (writes OUTPUT/train and OUTPUT/test) "
          "or 'shards' (re-encodes the shard dataset --input as --encoding into OUTPUT: the "
          "same images, labels and mean, e.g. raw shards of small JPEG images, which read "
          "faster than they decode)");
ABSL_FLAG(std::string, input, "", "Input directory (cifar10, folder and shards sources)");
ABSL_FLAG(std::string, output, "", "Output directory");
ABSL_FLAG(std::string, encoding, "raw",
          "Storage of the images: 'raw' (decoded uint8 HxWxC, fastest to read) or 'jpeg' "
          "(compressed, decoded by the reader threads)");
ABSL_FLAG(int32_t, jpeg_quality, 90, "JPEG quality 1..100 when images are (re-)encoded");
ABSL_FLAG(bool, jpeg_passthrough, true,
          "folder + jpeg: keep a source JPEG's bytes when it needs no resize (no second "
          "compression)");
ABSL_FLAG(int32_t, resize, 0,
          "folder: scale the shorter side to this many pixels and keep the central square "
          "(AlexNet: 256); 0 = off");
ABSL_FLAG(std::string, resize_exact, "",
          "folder: resize every image to exactly HxW (e.g. 224x224, or 32 for 32x32), "
          "ignoring the aspect ratio; empty = off");
ABSL_FLAG(int32_t, channels, 3, "folder: stored channels, 3 (RGB; grayscale is replicated) or 1");
ABSL_FLAG(int64_t, shard_size, 10000, "Images per shard file");
ABSL_FLAG(int32_t, threads, 0, "Decode/encode threads, at most 1024; 0 = all cores");
ABSL_FLAG(bool, strict, false,
          "folder: stop at the first undecodable image instead of skipping and counting it");
ABSL_FLAG(bool, force, false,
          "Overwrite dataset files (dataset.h5, shard-*.h5) already in an output directory");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of the storage order (folder), the --val_fraction split and synthetic data");
ABSL_FLAG(bool, shuffle, true,
          "folder: store the images in a seeded random order rather than sorted by class");
ABSL_FLAG(double, val_fraction, 0.0,
          "folder: hold out this fraction of each class as OUTPUT/val (OUTPUT/train gets the "
          "rest); 0 = write everything to OUTPUT");
ABSL_FLAG(std::string, mean_from, "",
          "Store the mean image of this dataset directory instead of computing it (e.g. the "
          "training split's mean for a test split)");
ABSL_FLAG(bool, progress, true, "Show a progress bar on stderr");
ABSL_FLAG(int64_t, size, 50000, "synthetic: training images");
ABSL_FLAG(int64_t, test_size, 10000, "synthetic: held-out test images (0 = none)");
ABSL_FLAG(int32_t, height, 32, "synthetic: image height");
ABSL_FLAG(int32_t, width, 32, "synthetic: image width");
ABSL_FLAG(int32_t, classes, 10, "synthetic: number of classes");
ABSL_FLAG(double, noise, 24.0, "synthetic: pixel noise amplitude (0..255 units)");

namespace {

void Fail(const absl::Status& s) {
  std::fprintf(stderr, "make_shards: %s\n", std::string(s.message()).c_str());
  std::exit(1);
}

class ProgressBar {
 public:
  ProgressBar() : tty_(::isatty(2)), start_(std::chrono::steady_clock::now()) {}
  void Update(const std::string& split, int64_t done, int64_t total) {
    if (split != split_) {
      split_ = split;
      start_ = std::chrono::steady_clock::now();
      last_decile_ = -1;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    double rate = secs > 0 ? done / secs : 0;
    int width = 30, filled = total > 0 ? static_cast<int>(width * done / total) : width;
    if (tty_) {
      std::fprintf(stderr, "\r%s [%s%s] %lld/%lld images  %.0f img/s  ETA %.0fs   ", split.c_str(),
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   static_cast<long long>(done), static_cast<long long>(total), rate,
                   rate > 0 ? (total - done) / rate : 0.0);
      if (done == total) std::fprintf(stderr, "\n");
    } else {
      int decile = total > 0 ? static_cast<int>(10 * done / total) : 10;
      if (decile != last_decile_) {
        last_decile_ = decile;
        std::fprintf(stderr, "%s: %lld/%lld images (%.0f img/s)\n", split.c_str(),
                     static_cast<long long>(done), static_cast<long long>(total), rate);
      }
    }
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  std::string split_;
  int last_decile_ = -1;
};

// What one run converts, read from the flags.
struct Job {
  std::string source, input, output;
  colonnade::data::ConvertOptions convert;
  colonnade::data::SyntheticOptions synthetic;  // --source=synthetic
  int64_t test_size = 0;                        // --source=synthetic
};

absl::Status Usage(const std::string& message) { return absl::InvalidArgumentError(message); }

// "--resize=20000: 20000x20000 is larger than ..." when h x w exceeds the image limits
// (docs/LIMITS.md), else empty.
std::string SizeProblem(const std::string& flag, int64_t h, int64_t w,
                        const colonnade::data::ImageLimits& limits) {
  std::string why = colonnade::data::ImageSizeProblem(h, w, limits);
  return why.empty() ? why : flag + ": " + why;
}

// --resize_exact=HxW or N into *h, *w; false when malformed.
bool ParseExactSize(const std::string& text, int* h, int* w) {
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  if (parts.size() == 1) parts.push_back(parts[0]);  // N means NxN
  return parts.size() == 2 && absl::SimpleAtoi(parts[0], h) && absl::SimpleAtoi(parts[1], w) &&
         *h > 0 && *w > 0;
}

// The conversion flags, checked: every size flag against the image limits, so an absurd
// value is one line and exit 2, never an allocation failure or a dataset the reader refuses.
absl::Status ReadConvertOptions(colonnade::data::ConvertOptions* o) {
  ASSIGN_OR_RETURN(o->limits, colonnade::data::ImageLimitsFromEnvironment());
  o->encoding = absl::GetFlag(FLAGS_encoding);
  if (o->encoding != "raw" && o->encoding != "jpeg") return Usage("--encoding must be raw or jpeg");
  o->jpeg_quality = absl::GetFlag(FLAGS_jpeg_quality);
  if (o->jpeg_quality < 1 || o->jpeg_quality > 100) {
    return Usage("--jpeg_quality must be in 1..100");
  }
  o->jpeg_passthrough = absl::GetFlag(FLAGS_jpeg_passthrough);
  o->resize = absl::GetFlag(FLAGS_resize);
  if (o->resize < 0) return Usage("--resize must be >= 0");
  if (o->resize > 0) {
    std::string why =
        SizeProblem("--resize=" + std::to_string(o->resize), o->resize, o->resize, o->limits);
    if (!why.empty()) return Usage(why);
  }
  if (const std::string exact = absl::GetFlag(FLAGS_resize_exact); !exact.empty()) {
    int h = 0, w = 0;
    if (!ParseExactSize(exact, &h, &w)) {
      return Usage("--resize_exact must be HxW or N with positive integers");
    }
    if (o->resize > 0) return Usage("--resize and --resize_exact are mutually exclusive");
    std::string why = SizeProblem("--resize_exact=" + exact, h, w, o->limits);
    if (!why.empty()) return Usage(why);
    o->resize_height = h;
    o->resize_width = w;
  }
  o->channels = absl::GetFlag(FLAGS_channels);
  if (o->channels != 1 && o->channels != 3) return Usage("--channels must be 1 or 3");
  o->shard_size = absl::GetFlag(FLAGS_shard_size);
  if (o->shard_size <= 0 || o->shard_size > colonnade::data::kMaxDatasetImages) {
    return Usage("--shard_size must be in 1.." +
                 std::to_string(colonnade::data::kMaxDatasetImages));
  }
  o->threads = absl::GetFlag(FLAGS_threads);
  if (o->threads < 0 || o->threads > colonnade::data::kMaxConvertThreads) {
    return Usage("--threads must be in 0.." + std::to_string(colonnade::data::kMaxConvertThreads) +
                 " (0 = all cores)");
  }
  if (o->threads == 0) {
    o->threads = static_cast<int>(std::min<unsigned>(
        colonnade::data::kMaxConvertThreads, std::max(1u, std::thread::hardware_concurrency())));
  }
  o->strict = absl::GetFlag(FLAGS_strict);
  o->force = absl::GetFlag(FLAGS_force);
  o->seed = absl::GetFlag(FLAGS_seed);
  o->shuffle = absl::GetFlag(FLAGS_shuffle);
  o->val_fraction = absl::GetFlag(FLAGS_val_fraction);
  if (!(o->val_fraction >= 0 && o->val_fraction < 1)) {
    return Usage("--val_fraction must be in [0, 1)");
  }
  o->mean_from = absl::GetFlag(FLAGS_mean_from);
  return absl::OkStatus();
}

// The --source=synthetic flags, checked.
absl::Status ReadSyntheticOptions(Job* job) {
  colonnade::data::SyntheticOptions& so = job->synthetic;
  so.size = absl::GetFlag(FLAGS_size);
  so.height = absl::GetFlag(FLAGS_height);
  so.width = absl::GetFlag(FLAGS_width);
  so.num_classes = absl::GetFlag(FLAGS_classes);
  so.noise = static_cast<float>(absl::GetFlag(FLAGS_noise));
  so.seed = job->convert.seed;
  so.channels = 3;
  const int64_t max_images = colonnade::data::kMaxDatasetImages;
  if (so.size <= 0 || so.size > max_images) {
    return Usage("--size must be in 1.." + std::to_string(max_images));
  }
  job->test_size = absl::GetFlag(FLAGS_test_size);
  if (job->test_size < 0 || job->test_size > max_images) {
    return Usage("--test_size must be in 0.." + std::to_string(max_images));
  }
  if (so.height <= 0 || so.width <= 0) return Usage("--height and --width must be > 0");
  std::string why = SizeProblem("--height x --width", so.height, so.width, job->convert.limits);
  if (!why.empty()) return Usage(why);
  if (so.num_classes <= 0 || so.num_classes > colonnade::data::kMaxClasses) {
    return Usage("--classes must be in 1.." + std::to_string(colonnade::data::kMaxClasses));
  }
  // Checked as a double: a cast of NaN or 1e300 to float proves nothing.
  const double noise = absl::GetFlag(FLAGS_noise);
  if (!(noise >= 0 && noise <= 255)) return Usage("--noise must be in 0..255 (pixel units)");
  return colonnade::data::CheckSyntheticOptions(so);
}

// The flags as a Job, or the usage error of the first bad one.
absl::StatusOr<Job> ReadJob() {
  Job job;
  job.source = absl::GetFlag(FLAGS_source);
  job.input = absl::GetFlag(FLAGS_input);
  job.output = absl::GetFlag(FLAGS_output);
  if (job.source != "cifar10" && job.source != "folder" && job.source != "synthetic" &&
      job.source != "shards") {
    return Usage("--source must be cifar10, folder, synthetic or shards");
  }
  if (job.output.empty()) return Usage("--output is required");
  if (job.source != "synthetic" && job.input.empty()) {
    return Usage("--input is required for --source=" + job.source);
  }
  RETURN_IF_ERROR(ReadConvertOptions(&job.convert));
  if (job.source == "synthetic") RETURN_IF_ERROR(ReadSyntheticOptions(&job));
  return job;
}

void PrintReport(const colonnade::data::ConvertReport& report) {
  for (size_t i = 0; i < report.output_dirs.size(); ++i) {
    std::printf("wrote %s: %lld images\n", report.output_dirs[i].c_str(),
                static_cast<long long>(report.written[i]));
  }
  if (report.skipped > 0) {
    std::printf("skipped %lld undecodable file(s) (--strict makes them fatal):\n",
                static_cast<long long>(report.skipped));
    for (const std::string& m : report.skipped_messages) std::printf("  %s\n", m.c_str());
  }
  if (report.ignored > 0) {
    std::printf("ignored %lld non-image entries\n", static_cast<long long>(report.ignored));
  }
  std::printf("done in %.1f s\n", report.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  const colonnade::Cli cli = {
      "make_shards",
      "src/apps/make_shards",
      "writes HDF5 shard datasets (docs/DATA.md) from CIFAR-10 binary batches, "
      "image folders, synthetic data or another shard dataset (re-encoded).\n"
      "  make_shards --source=cifar10 --input=DIR --output=OUT\n"
      "  make_shards --source=folder --input=ROOT --output=OUT [--resize=256] [--encoding=jpeg]\n"
      "  make_shards --source=synthetic --output=OUT [--size=N --test_size=N]\n"
      "  make_shards --source=shards --input=DIR --output=OUT --encoding=raw|jpeg\n"
      "Output is deterministic. Existing datasets are not overwritten without --force.\n"
      "A failed conversion leaves no dataset behind. Images larger than 16384 pixels per side\n"
      "or 2^27 pixels are refused (skipped and counted); COLONNADE_MAX_IMAGE_SIDE and\n"
      "COLONNADE_MAX_IMAGE_PIXELS raise the limits (docs/LIMITS.md).\n"
      "Exit codes: 0 done, 1 conversion failed (unreadable input, disk), 2 bad flags.\n"
      "PNG input is supported when built with libpng (this build: " +
          std::string(colonnade::data::HavePngSupport() ? "yes" : "no, 'png unsupported'") + ").",
      {},
      colonnade::UsageStyle::kSeeHelp};
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli)) return *code;
  absl::StatusOr<Job> job = ReadJob();
  if (!job.ok()) return colonnade::UsageError(cli, job.status().message());

  ProgressBar bar;
  if (absl::GetFlag(FLAGS_progress)) {
    job->convert.progress = [&bar](const std::string& split, int64_t done, int64_t total) {
      bar.Update(split, done, total);
    };
  }
  absl::StatusOr<colonnade::data::ConvertReport> report;
  if (job->source == "cifar10") {
    report = colonnade::data::ConvertCifar10Binary(job->input, job->output, job->convert);
  } else if (job->source == "folder") {
    report = colonnade::data::ConvertImageFolder(job->input, job->output, job->convert);
  } else if (job->source == "shards") {
    report = colonnade::data::ConvertShards(job->input, job->output, job->convert);
  } else {
    report = colonnade::data::WriteSyntheticShards(job->synthetic, job->test_size, job->output,
                                                   job->convert);
  }
  if (!report.ok()) Fail(report.status());
  PrintReport(*report);
  return 0;
}
