#include "data/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "data/limits.h"

namespace colonnade::data {

int EvalBoxOf(const PipelineOptions& o, const DatasetInfo& info) {
  if (!(o.eval_crop_fraction > 0)) return 0;
  return static_cast<int>(std::lround(o.eval_crop_fraction * std::min(info.height, info.width)));
}

namespace {

// The random-resized crop, cutout and resized eval crop options against the dataset (checked
// for every pipeline, also where a mode ignores them, as pad is).
absl::Status CheckRecipeAugment(const PipelineOptions& o, const DatasetInfo& info, int crop_side) {
  const AugmentConfig::ResizedCrop& rc = o.resized_crop;
  if (rc.on) {
    if (!(rc.scale_min > 0 && rc.scale_min <= rc.scale_max && rc.scale_max <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("random-resized crop scale %g,%g must satisfy 0 < min <= max <= 1",
                          rc.scale_min, rc.scale_max));
    }
    if (!(rc.ratio_min > 0 && rc.ratio_min <= rc.ratio_max && std::isfinite(rc.ratio_max))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("random-resized crop ratio %g,%g must satisfy 0 < min <= max (finite)",
                          rc.ratio_min, rc.ratio_max));
    }
    if (o.pad != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pad %d and the random-resized crop exclude each other (its box lies inside the image)",
          o.pad));
    }
  }
  if (o.cutout < 0 || o.cutout > crop_side) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cutout %d must be >= 0 and at most the crop side %d", o.cutout, crop_side));
  }
  if (!(o.eval_crop_fraction >= 0 && o.eval_crop_fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("eval crop fraction %g must be in [0, 1]", o.eval_crop_fraction));
  }
  if (o.eval_crop_fraction > 0 && EvalBoxOf(o, info) < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("eval crop fraction %g of the %dx%d images of %s is less than one pixel",
                        o.eval_crop_fraction, info.height, info.width, info.path));
  }
  return absl::OkStatus();
}

// Images per work item. 16 floats = one 64-byte cache line of a CHWN row, so with
// chunk-aligned starts two threads rarely write the same line.
constexpr int64_t kChunk = 16;
}  // namespace

struct BatchPipeline::Job {
  Batch batch;
  int64_t local_begin = 0;  // global positions [cursor.position + local_begin, ... + n)
  int64_t n = 0;
  std::shared_ptr<const std::vector<int64_t>> order;  // nullptr = identity
  int64_t next_chunk = 0, chunks = 0, chunks_done = 0;
  absl::Status status;
  bool complete() const { return chunks_done == chunks; }
};

absl::StatusOr<std::unique_ptr<BatchPipeline>> BatchPipeline::Create(Dataset* ds,
                                                                     const PipelineOptions& o,
                                                                     Cursor start) {
  if (ds == nullptr) return absl::InvalidArgumentError("batch pipeline: no dataset");
  const DatasetInfo& info = ds->info();
  auto bad = [](const std::string& m) {
    return absl::InvalidArgumentError("batch pipeline: " + m);
  };
  if (o.global_batch <= 0)
    return bad(absl::StrCat("global_batch ", o.global_batch, " must be > 0"));
  if (o.dp_size <= 0 || o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    return bad(absl::StrFormat("dp_rank %d / dp_size %d is invalid", o.dp_rank, o.dp_size));
  }
  if (o.global_batch % o.dp_size != 0) {
    return bad(absl::StrFormat("global_batch %d is not divisible by dp_size %d", o.global_batch,
                               o.dp_size));
  }
  if (info.size <= 0) return bad(absl::StrCat(info.path, ": the dataset is empty"));
  if (o.crop < 0 || o.crop > info.height || o.crop > info.width) {
    return bad(absl::StrFormat("crop %d does not fit the %dx%d images of %s", o.crop, info.height,
                               info.width, info.path));
  }
  // pad < crop side keeps at least one image row and column in every crop (and 2*pad far
  // from overflowing the span). Checked for eval pipelines too, where pad is unused.
  const int crop_side = o.crop > 0 ? o.crop : std::min(info.height, info.width);
  if (o.pad < 0 || (o.pad > 0 && o.pad >= crop_side)) {
    return bad(
        absl::StrFormat("pad %d must be >= 0 and smaller than the crop side %d of the "
                        "%dx%d images of %s",
                        o.pad, crop_side, info.height, info.width, info.path));
  }
  if (absl::Status s = CheckRecipeAugment(o, info, crop_side); !s.ok())
    return bad(std::string(s.message()));
  absl::StatusOr<MeanMode> mean = ParseMeanMode(o.mean);
  if (!mean.ok()) return bad(std::string(mean.status().message()));
  if (!(o.lighting >= 0.f)) return bad("lighting sigma must be >= 0");
  if (o.lighting > 0.f && info.channels != 3) {
    return bad(absl::StrCat("PCA lighting needs 3 channels, the dataset has ", info.channels));
  }
  if (!(o.scale > 0.f) && !(o.scale < 0.f)) return bad("scale must be non-zero");
  if (o.threads < 1) return bad(absl::StrCat("threads ", o.threads, " must be >= 1"));
  if (o.queue_depth < 1) return bad(absl::StrCat("queue_depth ", o.queue_depth, " must be >= 1"));
  if (o.epochs < 0) return bad("epochs must be >= 0");
  if (o.pinned && !o.pinned_allocator) {
    return bad(
        "pinned=true needs PipelineOptions::pinned_allocator (this module does not "
        "link CUDA)");
  }
  if (o.output == BatchOutput::kEncoded && info.encoding != "jpeg") {
    return bad(
        absl::StrFormat("%s stores %s images: encoded batches (GPU JPEG decoding) need JPEG shards",
                        info.path, info.encoding));
  }
  if (o.pinned && o.output == BatchOutput::kSourceUint8 && !o.pinned_bytes_allocator) {
    return bad("pinned=true with uint8 output needs PipelineOptions::pinned_bytes_allocator");
  }
  // The batch tensor of this rank (queue_depth + 2 of them live at once): its size is
  // checked before anything is allocated, with overflow-checked products.
  {
    const int64_t side_h = o.crop > 0 ? o.crop : info.height;
    const int64_t side_w = o.crop > 0 ? o.crop : info.width;
    int64_t values = 0;
    if (!CheckedMul(side_h * side_w, info.channels, &values) ||
        !CheckedMul(values, o.global_batch / o.dp_size, &values) || values > kMaxBatchValues) {
      return bad(absl::StrFormat(
          "a batch of %d images of %dx%dx%d per rank is more than the limit of %d values "
          "(docs/LIMITS.md)",
          o.global_batch / o.dp_size, info.channels, side_h, side_w, kMaxBatchValues));
    }
    // The uint8 output holds the uncropped source images (and the encoded output is
    // decoded into such a batch on the device): the same limit, in bytes.
    int64_t bytes = 0;
    if ((o.output == BatchOutput::kSourceUint8 || o.output == BatchOutput::kEncoded) &&
        (!CheckedMul(static_cast<int64_t>(info.height) * info.width, info.channels, &bytes) ||
         !CheckedMul(bytes, o.global_batch / o.dp_size, &bytes) || bytes > kMaxBatchValues)) {
      return bad(absl::StrFormat(
          "a uint8 batch of %d source images of %dx%dx%d per rank is more than the limit of "
          "%d bytes (docs/LIMITS.md)",
          o.global_batch / o.dp_size, info.height, info.width, info.channels, kMaxBatchValues));
    }
  }
  const size_t image_values = static_cast<size_t>(info.height) * info.width * info.channels;
  if (!o.mean_image.empty() && o.mean_image.size() != image_values) {
    return bad(absl::StrFormat("mean_image has %d values, the images have %dx%dx%d",
                               o.mean_image.size(), info.height, info.width, info.channels));
  }
  if (o.mean_image.empty() && *mean != MeanMode::kNone && ds->mean_image().size() != image_values) {
    return bad(absl::StrCat(info.path, ": the dataset's mean image has the wrong size"));
  }
  const bool drop_last = o.train && o.drop_last;
  if (drop_last && info.size < o.global_batch) {
    return bad(absl::StrFormat("%s has %d images, fewer than one global batch of %d (drop_last)",
                               info.path, info.size, o.global_batch));
  }
  if (start.epoch < 0 || start.position < 0 || start.position > info.size) {
    return bad(absl::StrFormat("start cursor %s is outside the dataset of %d images",
                               start.ToString(), info.size));
  }
  std::unique_ptr<BatchPipeline> p(new BatchPipeline(ds, o, start));
  p->cfg_.mean = *mean;
  return p;
}

BatchPipeline::BatchPipeline(Dataset* ds, const PipelineOptions& o, Cursor start)
    : ds_(ds),
      o_(o),
      sampler_(ds->info().size, o.global_batch, o.seed, o.train && o.shuffle,
               o.train && o.drop_last) {
  const DatasetInfo& info = ds->info();
  start_ = sampler_.Normalize(start);
  next_job_cursor_ = start_;
  cfg_.height = info.height;
  cfg_.width = info.width;
  cfg_.channels = info.channels;
  cfg_.crop_h = o.crop > 0 ? o.crop : info.height;
  cfg_.crop_w = o.crop > 0 ? o.crop : info.width;
  cfg_.pad = o.train ? o.pad : 0;  // eval crops are never padded
  if (o.train) {
    cfg_.resized_crop = o.resized_crop;
    cfg_.cutout = o.cutout;
  } else if (o.eval_crop_fraction > 0) {
    cfg_.eval_box = EvalBoxOf(o, info);
  }
  cfg_.scale = o.scale;
  cfg_.mean = ParseMeanMode(o.mean).value_or(MeanMode::kNone);
  if (cfg_.mean != MeanMode::kNone) {
    cfg_.mean_image = o.mean_image.empty() ? ds->mean_image() : o.mean_image;
    cfg_.channel_mean.assign(info.channels, 0.f);
    std::vector<double> sum(info.channels, 0.0);
    const int64_t pixels = static_cast<int64_t>(info.height) * info.width;
    for (int64_t i = 0; i < pixels; ++i) {
      for (int c = 0; c < info.channels; ++c) sum[c] += cfg_.mean_image[i * info.channels + c];
    }
    for (int c = 0; c < info.channels; ++c)
      cfg_.channel_mean[c] = static_cast<float>(sum[c] / pixels);
  }
  if (!o.train) {
    o_.mirror = false;
    o_.lighting = 0.f;
  }
  for (int t = 0; t < o.threads; ++t) threads_.emplace_back([this] { WorkerLoop(); });
}

BatchPipeline::~BatchPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  ready_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

int64_t BatchPipeline::batches_per_epoch() const { return sampler_.batches_per_epoch(); }

Tensor BatchPipeline::AllocateLocked(const Shape& shape, bool images) {
  std::vector<Tensor>& pool = images ? free_images_ : free_labels_;
  for (size_t i = 0; i < pool.size(); ++i) {
    if (pool[i].shape() == shape) {
      Tensor t = std::move(pool[i]);
      pool.erase(pool.begin() + i);
      return t;
    }
  }
  if (o_.pinned) return o_.pinned_allocator(shape);
  return Tensor(shape, Device::kCPU);
}

HostBytes BatchPipeline::AllocateBytesLocked(size_t bytes) {
  for (size_t i = 0; i < free_pixels_.size(); ++i) {
    if (free_pixels_[i].size() == bytes) {
      HostBytes b = std::move(free_pixels_[i]);
      free_pixels_.erase(free_pixels_.begin() + i);
      return b;
    }
  }
  if (o_.pinned) return o_.pinned_bytes_allocator(bytes);
  return HostBytes(bytes);
}

void BatchPipeline::Recycle(Batch&& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  // Keep at most a queue's worth: enough to reach a steady state without allocations.
  const size_t cap = static_cast<size_t>(o_.queue_depth) + 2;
  if (!batch.pixels.empty() && free_pixels_.size() < cap) {
    free_pixels_.push_back(std::move(batch.pixels));
  }
  if (!batch.images.empty() && free_images_.size() < cap) {
    free_images_.push_back(std::move(batch.images));
  }
  if (!batch.encoded.empty() && free_encoded_.size() < cap) {
    free_encoded_.push_back(std::move(batch.encoded));
  }
  if (!batch.labels.empty() && free_labels_.size() < cap) {
    free_labels_.push_back(std::move(batch.labels));
  }
}

bool BatchPipeline::MaybeCreateJobLocked() {
  if (end_of_data_ || static_cast<int>(jobs_.size()) >= o_.queue_depth) return false;
  const Cursor c = next_job_cursor_;
  if (o_.epochs > 0 && c.epoch >= start_.epoch + o_.epochs) {
    end_of_data_ = true;
    return false;
  }
  auto job = std::make_unique<Job>();
  const int64_t count = sampler_.BatchCount(c);
  int64_t begin, end;
  RankSlice(count, o_.dp_rank, o_.dp_size, &begin, &end);
  job->local_begin = begin;
  job->n = end - begin;
  job->order = sampler_.Order(c.epoch);
  job->chunks = (job->n + kChunk - 1) / kChunk;
  Batch& b = job->batch;
  b.epoch = c.epoch;
  b.index_in_epoch = c.position / o_.global_batch;
  b.cursor = c;
  b.next = sampler_.Advance(c);
  b.global_count = count;
  if (o_.output == BatchOutput::kFloatCHWN) {
    b.images = AllocateLocked(Shape::CHWN(cfg_.channels, cfg_.crop_h, cfg_.crop_w, job->n), true);
  } else {
    b.augments.resize(job->n);
  }
  if (o_.output == BatchOutput::kSourceUint8) {
    b.pixels = AllocateBytesLocked(static_cast<size_t>(job->n) * ImageBytes());
  }
  if (o_.output == BatchOutput::kEncoded) {
    if (!free_encoded_.empty()) {
      b.encoded = std::move(free_encoded_.back());
      free_encoded_.pop_back();
    }
    b.encoded.resize(job->n);
  }
  b.labels = AllocateLocked(Shape::CHWN(1, 1, 1, job->n), false);
  b.indices.resize(job->n);
  next_job_cursor_ = b.next;
  jobs_.push_back(std::move(job));
  if (jobs_.back()->complete()) ready_cv_.notify_all();  // a rank with 0 images
  return true;
}

void BatchPipeline::WorkerLoop() {
  std::vector<std::vector<uint8_t>> pixels(kChunk);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (stop_) return;
    Job* job = nullptr;
    for (auto& j : jobs_) {
      if (j->next_chunk < j->chunks) {
        job = j.get();
        break;
      }
    }
    if (job == nullptr) {
      if (MaybeCreateJobLocked()) continue;
      work_cv_.wait(lock);
      continue;
    }
    const int64_t chunk = job->next_chunk++;
    const int64_t begin = chunk * kChunk, end = std::min(job->n, begin + kChunk);
    lock.unlock();
    ProcessChunk(job, begin, end, &pixels);  // the job stays alive: only Next() pops it,
                                             // and only once every chunk is done
    lock.lock();
    ++job->chunks_done;
    if (job->complete() && job == jobs_.front().get()) ready_cv_.notify_all();
  }
}

void BatchPipeline::ProcessChunk(Job* job, int64_t begin, int64_t end,
                                 std::vector<std::vector<uint8_t>>* px) {
  Batch& b = job->batch;
  const int count = static_cast<int>(end - begin);
  const uint8_t* ptrs[kChunk];
  ImageAugment augs[kChunk];
  float* labels = b.labels.data();
  const size_t image_bytes = ImageBytes();
  for (int j = 0; j < count; ++j) {
    const int64_t n = begin + j;
    const int64_t position = b.cursor.position + job->local_begin + n;  // global position
    const int64_t index = job->order ? (*job->order)[position] : position;
    absl::StatusOr<int> label =
        o_.output == BatchOutput::kIndicesOnly ? absl::StatusOr<int>(ds_->Label(index))
        : o_.output == BatchOutput::kEncoded   ? ds_->ReadEncoded(index, &b.encoded[n])
                                               : ds_->Read(index, &(*px)[j]);
    if (!label.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (job->status.ok()) job->status = label.status();
      return;
    }
    b.indices[n] = index;
    labels[n] = static_cast<float>(*label);
    ptrs[j] = (*px)[j].data();
    augs[j] =
        DrawAugment(cfg_, o_.seed, b.cursor.epoch, position, o_.train, o_.mirror, o_.lighting);
    if (o_.output != BatchOutput::kFloatCHWN) b.augments[n] = augs[j];
    if (o_.output == BatchOutput::kSourceUint8) {
      std::memcpy(b.pixels.data() + static_cast<size_t>(n) * image_bytes, ptrs[j], image_bytes);
    }
  }
  if (o_.output == BatchOutput::kFloatCHWN) {
    WriteChunkCHWN(ptrs, augs, count, cfg_, b.images.data(), job->n, begin);
  }
}

absl::StatusOr<Batch> BatchPipeline::Next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  if (!failed_.ok()) return failed_;
  if (jobs_.empty()) {
    // Let a worker create the job (or find out that the data has ended).
    if (!MaybeCreateJobLocked() && end_of_data_) {
      return absl::OutOfRangeError(
          absl::StrFormat("batch pipeline: end of data after %d epoch(s)", o_.epochs));
    }
    work_cv_.notify_all();
  }
  ready_cv_.wait(lock, [this] { return stop_ || (!jobs_.empty() && jobs_.front()->complete()); });
  if (stop_) return absl::CancelledError("batch pipeline stopped");
  std::unique_ptr<Job> job = std::move(jobs_.front());
  jobs_.pop_front();
  work_cv_.notify_all();  // room for another job
  if (!job->status.ok()) {
    failed_ = job->status;
    return failed_;
  }
  Batch b = std::move(job->batch);
  b.wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return b;
}

}  // namespace colonnade::data
