// bench_data: images/s of the batch pipeline (raw and JPEG shards, AlexNet-style
// 256 -> 224 random crops with mirror, mean image and PCA lighting) for 1..N reader
// threads, next to the floor of a plain memcpy of the same output bytes. With a GPU it
// also measures the whole feed to the device: uint8 batches copied and augmented there
// (gpu_uint8), or JPEG streams decoded there by nvJPEG (gpu_nvjpeg).
//
//   bench_data --data_dir=/tmp/bench_shards --threads_list=1,2 --csv=results.csv
//   bench_data --dataset=shards/imagenette_train --outputs=uint8,gpu_uint8,gpu_nvjpeg
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/device_feed.h"
#include "apps/output_file.h"
#include "core/backend.h"
#include "core/paths.h"
#include "cuda/cuda_backend.h"
#include "data/converters.h"
#include "data/pipeline.h"
#include "data/shard_format.h"

ABSL_FLAG(std::string, data_dir, "/tmp/colonnade_bench_data",
          "Where the benchmark's synthetic shard datasets live (<data_dir>/raw, "
          "<data_dir>/jpeg); created on first use and reused afterwards");
ABSL_FLAG(int64_t, images, 4096, "Images per benchmark dataset");
ABSL_FLAG(int32_t, image_size, 256, "Stored image height = width");
ABSL_FLAG(int32_t, crop, 224, "Output crop (random, with mirror)");
ABSL_FLAG(bool, random_resized_crop, false,
          "Crop as the trainer's --random_resized_crop does (a random box of the image resized "
          "to the crop, docs/DATA.md section 5) instead of at a random offset");
ABSL_FLAG(int64_t, batch, 128, "Global batch size (dp = 1)");
ABSL_FLAG(std::string, threads_list, "",
          "Comma-separated reader thread counts to measure; empty = 1, 2, 4, ... up to the "
          "number of cores");
ABSL_FLAG(std::string, encodings, "raw,jpeg", "Comma-separated shard encodings to measure");
ABSL_FLAG(std::string, dataset, "",
          "A shard directory (make_shards) to measure instead of the synthetic datasets of "
          "--data_dir; --encodings, --images and --image_size are then the dataset's");
ABSL_FLAG(std::string, outputs, "float,uint8",
          "Comma-separated pipeline outputs to measure: float (the host augments and writes "
          "the CHWN float batch), uint8 (what a GPU run's pipeline does under "
          "--gpu_augment: decode only, the source images as uint8 plus each image's "
          "augmentation draw; the device augments), and with a GPU gpu_uint8 (uint8 "
          "batches through the trainer's GPU feed: copied and augmented on the device) "
          "and gpu_nvjpeg (JPEG shards only: the host reads the compressed streams, the "
          "GPU feed decodes them with nvJPEG and augments; a build with nvJPEG)");
ABSL_FLAG(int32_t, batches, 12,
          "Measured batches per configuration (after queue_depth + 3 warm-up batches)");
ABSL_FLAG(int32_t, jpeg_quality, 90, "JPEG quality of the benchmark's JPEG shards");
ABSL_FLAG(std::string, csv, "", "Also write the results as CSV to this file");

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Fail(const absl::Status& s) {
  std::fprintf(stderr, "bench_data: %s\n", std::string(s.message()).c_str());
  std::exit(1);
}

// Images/s of copying `bytes_per_image` per image with one memcpy per batch.
double MemcpyImagesPerSecond(size_t bytes_per_image, int64_t batch) {
  const size_t bytes = bytes_per_image * batch;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in
  const int reps = 8;
  auto t0 = Clock::now();
  for (int r = 0; r < reps; ++r) {
    src[r] = static_cast<char>(r);
    std::memcpy(dst.data(), src.data(), bytes);
  }
  double s = Seconds(t0, Clock::now());
  volatile char sink = dst[bytes / 2];
  (void)sink;
  return reps * batch / s;
}

// What to measure, read from the flags.
struct Settings {
  std::string dir;
  int64_t images = 0, batch = 0;
  int size = 0, crop = 0, batches = 0;
  int cores = 1;
  std::vector<int> threads;
  std::vector<std::string> encodings;
  std::vector<std::string> outputs;
  std::string dataset;  // --dataset
};

absl::Status Usage(const std::string& message) { return absl::InvalidArgumentError(message); }

// The flags as Settings, or the usage error of the first bad one.
absl::StatusOr<Settings> ReadSettings() {
  Settings s;
  s.dir = absl::GetFlag(FLAGS_data_dir);
  s.dataset = absl::GetFlag(FLAGS_dataset);
  s.images = absl::GetFlag(FLAGS_images);
  s.size = absl::GetFlag(FLAGS_image_size);
  s.crop = absl::GetFlag(FLAGS_crop);
  s.batch = absl::GetFlag(FLAGS_batch);
  s.batches = absl::GetFlag(FLAGS_batches);
  if (s.images <= 0 || s.size <= 0 || s.batch <= 0 || s.batches <= 0) {
    return Usage("--images, --image_size, --batch and --batches must be > 0");
  }
  if (s.crop <= 0 || s.crop > s.size) return Usage("--crop must be in 1..--image_size");
  if (s.images < s.batch) return Usage("--images must be >= --batch");
  s.cores = std::max(1u, std::thread::hardware_concurrency());
  if (absl::GetFlag(FLAGS_threads_list).empty()) {
    for (int t = 1; t < s.cores; t *= 2) s.threads.push_back(t);
    s.threads.push_back(s.cores);
  } else {
    for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_threads_list), ',')) {
      int t;
      if (!absl::SimpleAtoi(p, &t) || t <= 0) {
        return Usage("--threads_list must be positive integers");
      }
      s.threads.push_back(t);
    }
  }
  s.encodings = absl::StrSplit(absl::GetFlag(FLAGS_encodings), ',');
  for (const std::string& e : s.encodings) {
    if (e != "raw" && e != "jpeg") return Usage("--encodings must list raw and/or jpeg");
  }
  s.outputs = absl::StrSplit(absl::GetFlag(FLAGS_outputs), ',');
  for (const std::string& o : s.outputs) {
    if (o != "float" && o != "uint8" && o != "gpu_uint8" && o != "gpu_nvjpeg") {
      return Usage("--outputs must list float, uint8, gpu_uint8 and/or gpu_nvjpeg");
    }
    if (o.rfind("gpu_", 0) == 0 && !colonnade::cuda::Available()) {
      return Usage("--outputs=" + o + " needs a CUDA GPU (this build or machine has none)");
    }
  }
  return s;
}

colonnade::data::BatchOutput OutputOf(const std::string& output) {
  if (output == "float") return colonnade::data::BatchOutput::kFloatCHWN;
  if (output == "gpu_nvjpeg") return colonnade::data::BatchOutput::kEncoded;
  return colonnade::data::BatchOutput::kSourceUint8;
}

// The dataset of one encoding: --dataset, else the synthetic shards of --data_dir
// (written on first use).
std::unique_ptr<colonnade::data::Dataset> OpenBenchDataset(const Settings& st,
                                                           const std::string& enc) {
  if (!st.dataset.empty()) {
    absl::StatusOr<std::unique_ptr<colonnade::data::Dataset>> ds =
        colonnade::data::OpenDataset(st.dataset);
    if (!ds.ok()) Fail(ds.status());
    return std::move(*ds);
  }
  const std::string path = colonnade::JoinPath(st.dir, enc);
  absl::StatusOr<std::unique_ptr<colonnade::data::Dataset>> ds =
      colonnade::data::OpenDataset(colonnade::JoinPath(path, "train"));
  bool usable = ds.ok() && (*ds)->info().size == st.images && (*ds)->info().height == st.size;
  if (usable) return std::move(*ds);
  colonnade::data::SyntheticOptions so;
  so.size = st.images;
  so.height = so.width = st.size;
  so.num_classes = 100;
  so.noise = 8.0f;  // closer to photos' JPEG sizes than heavy noise
  colonnade::data::ConvertOptions co;
  co.encoding = enc;
  co.jpeg_quality = absl::GetFlag(FLAGS_jpeg_quality);
  co.threads = st.cores;
  co.force = true;
  co.shard_size = 1024;
  std::fprintf(stderr, "writing %s shards to %s ...\n", enc.c_str(), path.c_str());
  absl::StatusOr<colonnade::data::ConvertReport> r =
      colonnade::data::WriteSyntheticShards(so, 0, path, co);
  if (!r.ok()) Fail(r.status());
  ds = colonnade::data::OpenDataset(colonnade::JoinPath(path, "train"));
  if (!ds.ok()) Fail(ds.status());
  return std::move(*ds);
}

struct Measured {
  double images_per_s = 0, wait_s = 0;
};

// Images/s of `batches` batches of one pipeline configuration after a warm-up long enough
// that every queued buffer has been recycled once (the steady state: no fresh allocations
// or page faults). With `gpu` each batch goes through the GPU feed into device tensors,
// and the clock stops when the device has finished.
Measured MeasurePipeline(colonnade::data::Dataset* ds, const colonnade::data::PipelineOptions& po,
                         bool gpu, int batches) {
  using colonnade::Device;
  absl::StatusOr<std::unique_ptr<colonnade::data::BatchPipeline>> p =
      colonnade::data::BatchPipeline::Create(ds, po);
  if (!p.ok()) Fail(p.status());
  std::unique_ptr<colonnade::DeviceFeed> feed;
  colonnade::Tensor images, labels;
  if (gpu) {
    absl::StatusOr<std::unique_ptr<colonnade::DeviceFeed>> f =
        colonnade::DeviceFeed::Create(*ds, p->get());
    if (!f.ok()) Fail(f.status());
    feed = std::move(*f);
    const colonnade::data::AugmentConfig& a = (*p)->augment_config();
    const int64_t n = (*p)->local_batch();
    images =
        colonnade::Tensor(colonnade::Shape::CHWN(a.channels, a.crop_h, a.crop_w, n), Device::kCUDA);
    labels = colonnade::Tensor(colonnade::Shape::CHWN(1, 1, 1, n), Device::kCUDA);
  }
  auto one = [&](double* wait) {
    absl::StatusOr<colonnade::data::Batch> b = (*p)->Next();
    if (!b.ok()) Fail(b.status());
    *wait += b->wait_seconds;
    if (!feed) return (*p)->Recycle(std::move(*b));
    if (absl::Status s = feed->Stage(*b); !s.ok()) Fail(s);
    if (absl::Status s = feed->Produce(&images, &labels); !s.ok()) Fail(s);
    feed->Recycle(std::move(*b));
  };
  double wait = 0;
  for (int w = 0; w < po.queue_depth + 3; ++w) one(&wait);
  if (gpu) colonnade::GetBackend(Device::kCUDA)->Synchronize();
  wait = 0;
  auto t0 = Clock::now();
  for (int i = 0; i < batches; ++i) one(&wait);
  if (gpu) colonnade::GetBackend(Device::kCUDA)->Synchronize();
  const double secs = Seconds(t0, Clock::now());
  return {batches * static_cast<double>(po.global_batch) / secs, wait};
}

}  // namespace

int main(int argc, char** argv) {
  const colonnade::Cli cli = {
      "bench_data",
      "src/apps/bench_data",
      "measures the data pipeline's images/s on synthetic raw and JPEG shards "
      "(random crop + mirror + mean image + PCA lighting) for several reader thread counts, "
      "next to a single-threaded memcpy of the same output bytes; with a GPU, the feed to "
      "the device too (gpu_uint8, gpu_nvjpeg).",
      {},
      colonnade::UsageStyle::kSeeHelp};
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli)) return *code;
  absl::StatusOr<Settings> settings = ReadSettings();
  if (!settings.ok()) return colonnade::UsageError(cli, settings.status().message());
  if (!settings->dataset.empty()) {  // its size and image side replace the flags'
    const std::unique_ptr<colonnade::data::Dataset> ds = OpenBenchDataset(*settings, "");
    settings->images = ds->info().size;
    settings->size = ds->info().height;
    if (settings->crop > settings->size || settings->batch > settings->images) {
      return colonnade::UsageError(cli, "--crop and --batch must fit the images of --dataset");
    }
  }
  const int64_t images = settings->images, batch = settings->batch;
  const int size = settings->size, crop = settings->crop, batches = settings->batches;
  const int cores = settings->cores;

  // Bytes per image the pipeline hands over: the float crop, or the uint8 source image.
  auto out_bytes_of = [&](const std::string& output) {
    return output == "float" ? static_cast<size_t>(3) * crop * crop * sizeof(float)
                             : static_cast<size_t>(3) * size * size;
  };
  const bool resized_crop = absl::GetFlag(FLAGS_random_resized_crop);
  std::printf("bench_data: %lld images %dx%d -> %scrop %d, batch %lld, %d cores\n",
              static_cast<long long>(images), size, size, resized_crop ? "random-resized " : "",
              crop, static_cast<long long>(batch), cores);
  std::map<std::string, double> memcpy_rate;
  for (const std::string& o : settings->outputs) {
    memcpy_rate[o] = MemcpyImagesPerSecond(out_bytes_of(o), batch);
    std::printf("memcpy floor (1 thread, %.0f KB %s output per image): %.0f images/s\n",
                out_bytes_of(o) / 1024.0, o.c_str(), memcpy_rate[o]);
  }
  std::printf("%-6s %-10s %8s %12s %12s %14s %10s\n", "enc", "output", "threads", "images/s",
              "MB/s out", "memcpy img/s", "% of copy");
  std::string csv =
      "encoding,output,threads,batch,image_size,crop,images_per_s,mb_per_s_out,"
      "memcpy_images_per_s,fraction_of_memcpy,consumer_wait_s\n";
  if (std::any_of(settings->outputs.begin(), settings->outputs.end(),
                  [](const std::string& o) { return o.rfind("gpu_", 0) == 0; })) {
    if (absl::Status s = colonnade::cuda::RegisterBackend(0); !s.ok()) Fail(s);
    std::printf("GPU: %s\n", colonnade::cuda::DeviceDescription().c_str());
  }
  const std::vector<std::string> encodings =
      settings->dataset.empty() ? settings->encodings : std::vector<std::string>{"dataset"};
  for (const std::string& enc_name : encodings) {
    std::unique_ptr<colonnade::data::Dataset> ds = OpenBenchDataset(*settings, enc_name);
    const std::string enc = ds->info().encoding;
    for (const std::string& output : settings->outputs) {
      if (output == "gpu_nvjpeg" && enc != "jpeg") continue;  // nothing to decode
      const bool gpu = output.rfind("gpu_", 0) == 0;
      for (int t : settings->threads) {
        colonnade::data::PipelineOptions po;
        po.output = OutputOf(output);
        po.global_batch = batch;
        po.seed = 7;
        po.crop = crop;
        po.resized_crop.on = resized_crop;
        po.mirror = true;
        po.lighting = 0.1f;
        po.threads = t;
        po.queue_depth = std::max(4, t / 4);
        if (gpu) {  // as the trainer's GPU feed: page-locked batches
          po.pinned = true;
          po.pinned_allocator = [](const colonnade::Shape& s) {
            return colonnade::Tensor::PinnedHost(s, colonnade::Device::kCUDA);
          };
          po.pinned_bytes_allocator = colonnade::PinnedBytesAllocator(colonnade::Device::kCUDA);
        }
        const Measured m = MeasurePipeline(ds.get(), po, gpu, batches);
        const double rate = m.images_per_s;
        const double mbs = rate * out_bytes_of(output) / 1e6;
        const double floor = memcpy_rate[output];
        std::printf("%-6s %-10s %8d %12.0f %12.0f %14.0f %9.1f%%\n", enc.c_str(), output.c_str(), t,
                    rate, mbs, floor, 100.0 * rate / floor);
        std::fflush(stdout);
        csv +=
            absl::StrFormat("%s,%s,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.4f,%.3f\n", enc, output, t, batch,
                            ds->info().height, crop, rate, mbs, floor, rate / floor, m.wait_s);
      }
    }
  }
  const std::string csv_path = absl::GetFlag(FLAGS_csv);
  if (!csv_path.empty()) {
    // Replaces an earlier table, never a dataset, checkpoint or device; a failed write,
    // flush or close is an error (output_file.h).
    absl::Status s = colonnade::WriteTextOutputFile(csv_path, "--csv",
                                                    colonnade::ExistingOutput::kReplaceText, csv);
    if (!s.ok()) Fail(s);
    std::printf("wrote %s\n", csv_path.c_str());
  }
  return 0;
}
