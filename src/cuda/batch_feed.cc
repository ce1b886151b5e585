#include "cuda/batch_feed.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "cuda/cuda_backend.h"
#include "cuda/feed_kernels.h"
#include "cuda/port.h"

namespace colonnade::cuda {

// One device slot: the buffers a staged batch is copied into, the pinned staging of its
// augments and indices, and the two events that order the slot's reuse.
struct BatchFeed::Slot {
  uint8_t* pixels = nullptr;         // device, max_batch images (also the synthetic output)
  FeedAugment* augs = nullptr;       // device
  int64_t* indices = nullptr;        // device
  float* labels = nullptr;           // device
  FeedAugment* host_augs = nullptr;  // pinned
  int64_t* host_indices = nullptr;   // pinned
  cudaEvent_t copied = nullptr;      // copy stream: this slot's last copy has finished
  cudaEvent_t consumed = nullptr;    // compute stream: the last Produce from it has finished
  int n = 0;
  uint64_t ticket = 0;  // of the batch it holds (0: none yet)
  FeedBatchBuffers buffers() const { return FeedBatchBuffers{pixels, augs, labels}; }
};

namespace {
cudaStream_t AsStream(void* s) { return static_cast<cudaStream_t>(s); }
}  // namespace

absl::StatusOr<std::unique_ptr<BatchFeed>> BatchFeed::Create(const FeedConfig& cfg) {
  auto bad = [](const std::string& m) { return absl::InvalidArgumentError("GPU feed: " + m); };
  if (ComputeStream() == nullptr) {
    return absl::FailedPreconditionError("GPU feed: the CUDA backend is not registered");
  }
  if (cfg.height <= 0 || cfg.width <= 0 || cfg.channels <= 0 || cfg.channels > 4 ||
      cfg.crop_h <= 0 || cfg.crop_w <= 0 || cfg.max_batch <= 0 || cfg.slots < 1) {
    return bad(absl::StrFormat("invalid geometry %dx%dx%d crop %dx%d batch %d slots %d", cfg.height,
                               cfg.width, cfg.channels, cfg.crop_h, cfg.crop_w, cfg.max_batch,
                               cfg.slots));
  }
  const size_t image_values = static_cast<size_t>(cfg.height) * cfg.width * cfg.channels;
  if (cfg.mean == FeedMean::kImage && cfg.mean_image.size() != image_values) {
    return bad("the mean image has the wrong size");
  }
  if (cfg.mean == FeedMean::kChannel &&
      cfg.channel_mean.size() != static_cast<size_t>(cfg.channels)) {
    return bad("the channel mean has the wrong size");
  }
  if (cfg.synthetic) {
    const SyntheticGeometry& s = cfg.synthetic_geometry;
    if (s.height != cfg.height || s.width != cfg.width || s.channels != cfg.channels ||
        s.num_classes <= 0 || s.max_shift < 0 ||
        cfg.synthetic_grid.size() != static_cast<size_t>(s.num_classes) * 4 * 4 * 3) {
      return bad("the synthetic recipe does not match the images");
    }
  }
  if (cfg.jpeg && cfg.synthetic) return bad("a synthetic feed has no JPEG streams");
  if (cfg.synthetic_pool < 0 || (cfg.synthetic_pool > 0 && !cfg.synthetic)) {
    return bad(absl::StrFormat("a pool of %d images needs a synthetic feed", cfg.synthetic_pool));
  }
  std::unique_ptr<JpegDecoder> jpeg;
  if (cfg.jpeg) {
    absl::StatusOr<std::unique_ptr<JpegDecoder>> d = CreateJpegDecoder(cfg.channels, cfg.max_batch);
    if (!d.ok()) return d.status();
    jpeg = std::move(*d);
  }
  std::unique_ptr<BatchFeed> feed(new BatchFeed(cfg));
  feed->jpeg_ = std::move(jpeg);
  return feed;
}

BatchFeed::BatchFeed(const FeedConfig& cfg) : cfg_(cfg) {
  compute_stream_ = ComputeStream();
  cudaStream_t copy = nullptr;
  // The highest priority: the feed's few kernels (nvJPEG's, the synthetic generator) are
  // scheduled ahead of the step's blocks instead of waiting for SMs behind them, so the
  // next batch is ready when the step that needs it starts.
  int least = 0, greatest = 0;
  COLONNADE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  COLONNADE_CUDA_CHECK(cudaStreamCreateWithPriority(&copy, cudaStreamNonBlocking, greatest));
  copy_stream_ = copy;
  geometry_.height = cfg.height;
  geometry_.width = cfg.width;
  geometry_.channels = cfg.channels;
  geometry_.crop_h = cfg.crop_h;
  geometry_.crop_w = cfg.crop_w;
  geometry_.mean = cfg.mean;
  geometry_.scale = cfg.scale;
  geometry_.resize = cfg.resize ? 1 : 0;
  // The constant inputs, uploaded once (synchronously: they are small and used by every
  // batch).
  std::vector<float> means = cfg.mean_image;
  means.insert(means.end(), cfg.channel_mean.begin(), cfg.channel_mean.end());
  if (!means.empty()) {
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_mean_), means.size() * 4));
    COLONNADE_CUDA_CHECK(
        cudaMemcpy(device_mean_, means.data(), means.size() * 4, cudaMemcpyHostToDevice));
    geometry_.mean_image = device_mean_;
    geometry_.channel_mean = device_mean_ + cfg.mean_image.size();
  }
  if (cfg.synthetic) {
    synthetic_ = cfg.synthetic_geometry;
    const size_t bytes = cfg.synthetic_grid.size() * 4;
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_grid_), bytes));
    COLONNADE_CUDA_CHECK(
        cudaMemcpy(device_grid_, cfg.synthetic_grid.data(), bytes, cudaMemcpyHostToDevice));
    synthetic_.grid = device_grid_;
    if (cfg.synthetic_pool > 0) {  // generated once, here, in one launch
      const int64_t pool = cfg.synthetic_pool;
      const size_t image_bytes = static_cast<size_t>(cfg.height) * cfg.width * cfg.channels;
      COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_pool_), pool * image_bytes));
      std::vector<int64_t> ids(pool);
      for (int64_t i = 0; i < pool; ++i) ids[i] = i;
      int64_t* device_ids = nullptr;
      COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_ids), pool * 8));
      COLONNADE_CUDA_CHECK(cudaMemcpy(device_ids, ids.data(), pool * 8, cudaMemcpyHostToDevice));
      COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
      SyntheticImagesGpu(nullptr, synthetic_, device_ids, static_cast<int>(pool), device_pool_);
      COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
      COLONNADE_CUDA_CHECK(cudaFree(device_ids));
    }
  }
  const size_t n = static_cast<size_t>(cfg.max_batch);
  const size_t image_bytes = static_cast<size_t>(cfg.height) * cfg.width * cfg.channels;
  for (int i = 0; i < cfg.slots; ++i) {
    auto s = std::make_unique<Slot>();
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s->pixels), n * image_bytes));
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s->augs), n * sizeof(FeedAugment)));
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s->indices), n * sizeof(int64_t)));
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&s->labels), n * sizeof(float)));
    COLONNADE_CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&s->host_augs), n * sizeof(FeedAugment)));
    COLONNADE_CUDA_CHECK(
        cudaMallocHost(reinterpret_cast<void**>(&s->host_indices), n * sizeof(int64_t)));
    COLONNADE_CUDA_CHECK(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
    COLONNADE_CUDA_CHECK(cudaEventCreateWithFlags(&s->consumed, cudaEventDisableTiming));
    slots_.push_back(std::move(s));
  }
  // The slot table a graphed step's augmentation reads its batch from (FeedSource).
  std::vector<FeedBatchBuffers> table;
  for (const auto& s : slots_) table.push_back(s->buffers());
  const size_t table_bytes = table.size() * sizeof(FeedBatchBuffers);
  COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_slots_), table_bytes));
  COLONNADE_CUDA_CHECK(
      cudaMemcpy(device_slots_, table.data(), table_bytes, cudaMemcpyHostToDevice));
  // cudaMemcpy from pageable memory may return before its DMA has landed, and it is
  // ordered only on the legacy default stream, which the non-blocking compute stream does
  // not wait for: finish it before any kernel can read the constants.
  COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
}

BatchFeed::~BatchFeed() {
  for (auto& s : slots_) {
    COLONNADE_CUDA_CHECK(cudaEventSynchronize(s->copied));
    COLONNADE_CUDA_CHECK(cudaEventSynchronize(s->consumed));
    COLONNADE_CUDA_CHECK(cudaEventDestroy(s->copied));
    COLONNADE_CUDA_CHECK(cudaEventDestroy(s->consumed));
    COLONNADE_CUDA_CHECK(cudaFree(s->pixels));
    COLONNADE_CUDA_CHECK(cudaFree(s->augs));
    COLONNADE_CUDA_CHECK(cudaFree(s->indices));
    COLONNADE_CUDA_CHECK(cudaFree(s->labels));
    COLONNADE_CUDA_CHECK(cudaFreeHost(s->host_augs));
    COLONNADE_CUDA_CHECK(cudaFreeHost(s->host_indices));
  }
  COLONNADE_CUDA_CHECK(cudaFree(device_slots_));
  if (device_mean_) COLONNADE_CUDA_CHECK(cudaFree(device_mean_));
  if (device_grid_) COLONNADE_CUDA_CHECK(cudaFree(device_grid_));
  if (device_pool_) COLONNADE_CUDA_CHECK(cudaFree(device_pool_));
  COLONNADE_CUDA_CHECK(cudaStreamDestroy(AsStream(copy_stream_)));
}

absl::StatusOr<uint64_t> BatchFeed::Stage(const HostBatch& b) {
  if (staged_ >= static_cast<int>(slots_.size())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "GPU feed: all %d slots hold a staged batch; Produce one first", slots_.size()));
  }
  if (b.n < 0 || b.n > cfg_.max_batch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPU feed: batch of %d images, the feed holds %d", b.n, cfg_.max_batch));
  }
  const bool has_images = cfg_.synthetic ? b.indices != nullptr
                          : jpeg_        ? b.jpeg != nullptr && b.jpeg_sizes != nullptr
                                         : b.pixels != nullptr;
  if (b.n > 0 && (b.augments == nullptr || b.labels == nullptr || !has_images)) {
    return absl::InvalidArgumentError("GPU feed: the batch lacks a buffer");
  }
  const uint64_t ticket = tickets_ + 1;
  Slot& s = *slots_[(ticket - 1) % slots_.size()];
  cudaStream_t copy = AsStream(copy_stream_);
  // The staging buffers are refilled below: the slot's previous copy must have read them.
  COLONNADE_CUDA_CHECK(cudaEventSynchronize(s.copied));
  // The device buffers are overwritten: the compute stream must be done with them.
  COLONNADE_CUDA_CHECK(cudaStreamWaitEvent(copy, s.consumed, 0));
  const size_t n = static_cast<size_t>(b.n);
  // First, so that a refused batch is not staged: indices the pool holds.
  for (size_t j = 0; device_pool_ != nullptr && j < n; ++j) {
    if (b.indices[j] < 0 || b.indices[j] >= cfg_.synthetic_pool) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GPU feed: image %d is outside the synthetic pool of %d", b.indices[j],
                          cfg_.synthetic_pool));
    }
  }
  if (jpeg_ && n > 0) {  // first: a batch nvJPEG refuses is not staged
    absl::Status d = jpeg_->Decode(copy, b.jpeg, b.jpeg_sizes, b.n, cfg_.height, cfg_.width,
                                   s.pixels, b.indices);
    if (!d.ok()) return d;
  }
  tickets_ = ticket;
  s.n = b.n;
  s.ticket = ticket;
  if (n > 0) {
    std::memcpy(s.host_augs, b.augments, n * sizeof(FeedAugment));
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(s.augs, s.host_augs, n * sizeof(FeedAugment),
                                         cudaMemcpyHostToDevice, copy));
    if (cfg_.synthetic) {
      std::memcpy(s.host_indices, b.indices, n * sizeof(int64_t));
      COLONNADE_CUDA_CHECK(cudaMemcpyAsync(s.indices, s.host_indices, n * sizeof(int64_t),
                                           cudaMemcpyHostToDevice, copy));
      if (device_pool_ != nullptr) {
        // Gathered from the pool: a copy of the batch's bytes (50 MB for AlexNet's 256
        // images, tens of microseconds) instead of generating them beside every step
        // (0.65 ms of GPU time per batch, about 5% of a bf16 AlexNet step on the H200).
        GatherImagesGpu(copy, device_pool_, s.indices, b.n,
                        static_cast<int64_t>(cfg_.height) * cfg_.width * cfg_.channels, s.pixels);
      } else {
        // Generated here, on the copy stream, while the compute stream runs the current
        // step.
        SyntheticImagesGpu(copy, synthetic_, s.indices, b.n, s.pixels);
      }
    } else if (!jpeg_) {
      const size_t bytes = n * cfg_.height * cfg_.width * cfg_.channels;
      COLONNADE_CUDA_CHECK(
          cudaMemcpyAsync(s.pixels, b.pixels, bytes, cudaMemcpyHostToDevice, copy));
    }
    COLONNADE_CUDA_CHECK(
        cudaMemcpyAsync(s.labels, b.labels, n * sizeof(float), cudaMemcpyHostToDevice, copy));
  }
  COLONNADE_CUDA_CHECK(cudaEventRecord(s.copied, copy));
  ++staged_;
  return ticket;
}

absl::Status BatchFeed::Produce(Tensor* images, Tensor* labels) {
  if (staged_ == 0) return absl::FailedPreconditionError("GPU feed: no batch is staged");
  const int n = slots_[produced_ % slots_.size()]->n;
  RETURN_IF_ERROR(CheckOutputs(n, images, labels));  // a refused call consumes nothing
  RETURN_IF_ERROR(BeginProduce(n).status());
  absl::Status s = Augment(images, labels, /*slot_on_device=*/nullptr);
  EndProduce();
  return s;
}

absl::StatusOr<int> BatchFeed::BeginProduce(int n) {
  if (staged_ == 0) return absl::FailedPreconditionError("GPU feed: no batch is staged");
  if (begun_) return absl::FailedPreconditionError("GPU feed: BeginProduce twice");
  const int slot = static_cast<int>(produced_ % slots_.size());
  Slot& s = *slots_[slot];
  if (s.n != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPU feed: the staged batch has %d images, the step takes %d", s.n, n));
  }
  // The batch was staged a step or more ago and its copy is usually done: then the compute
  // stream need not wait for the copy stream (a cross-stream dependency the device
  // resolves at a cost, every step).
  const cudaError_t done = cudaEventQuery(s.copied);
  if (done == cudaErrorNotReady) {
    (void)cudaGetLastError();  // cudaErrorNotReady is no error
    COLONNADE_CUDA_CHECK(cudaStreamWaitEvent(AsStream(compute_stream_), s.copied, 0));
  } else {
    COLONNADE_CUDA_CHECK(done);
  }
  begun_ = true;
  return slot;
}

absl::Status BatchFeed::Augment(Tensor* images, Tensor* labels, const int32_t* slot_on_device) {
  if (!begun_) return absl::FailedPreconditionError("GPU feed: Augment before BeginProduce");
  const Slot& s = *slots_[produced_ % slots_.size()];
  RETURN_IF_ERROR(CheckOutputs(s.n, images, labels));
  FeedSource src;
  src.direct = s.buffers();
  if (slot_on_device != nullptr) {
    src.slots = device_slots_;
    src.slot_on_device = slot_on_device;
  }
  AugmentBatchGpu(AsStream(compute_stream_), geometry_, src, s.n, images->data(), labels->data());
  return absl::OkStatus();
}

void BatchFeed::EndProduce() {
  if (begun_) Release(/*consume=*/true);
}

void BatchFeed::Release(bool consume) {
  // After the work queued on the compute stream: the slot may then be restaged.
  COLONNADE_CUDA_CHECK(
      cudaEventRecord(slots_[produced_ % slots_.size()]->consumed, AsStream(compute_stream_)));
  begun_ = false;
  if (consume) {
    ++produced_;
    --staged_;
  }
}

absl::Status BatchFeed::ProduceView(int view, bool last, Tensor* images, Tensor* labels) {
  if (view < 0 || view >= kTenCropViews) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPU feed: ten-crop view %d is not in 0..%d", view, kTenCropViews - 1));
  }
  if (cfg_.crop_h > cfg_.height || cfg_.crop_w > cfg_.width) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPU feed: ten crops of %dx%d do not fit images of %dx%d", cfg_.crop_h,
                        cfg_.crop_w, cfg_.height, cfg_.width));
  }
  return ProduceView(TenCropView(view, cfg_.height, cfg_.width, cfg_.crop_h, cfg_.crop_w), last,
                     images, labels);
}

absl::Status BatchFeed::ProduceView(const FeedAugment& view, bool last, Tensor* images,
                                    Tensor* labels) {
  const int box_h = view.box_h > 0 ? view.box_h : cfg_.crop_h;
  const int box_w = view.box_w > 0 ? view.box_w : cfg_.crop_w;
  if (view.y0 < 0 || view.x0 < 0 || view.y0 + box_h > cfg_.height || view.x0 + box_w > cfg_.width) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GPU feed: the view's box %dx%d at (%d, %d) does not fit images of %dx%d",
                        box_h, box_w, view.y0, view.x0, cfg_.height, cfg_.width));
  }
  if ((box_h != cfg_.crop_h || box_w != cfg_.crop_w) && !cfg_.resize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPU feed: a view box of %dx%d resized to %dx%d needs a feed made with resize", box_h,
        box_w, cfg_.crop_h, cfg_.crop_w));
  }
  if (staged_ == 0) return absl::FailedPreconditionError("GPU feed: no batch is staged");
  const Slot& s = *slots_[produced_ % slots_.size()];
  RETURN_IF_ERROR(CheckOutputs(s.n, images, labels));  // a refused view consumes nothing
  RETURN_IF_ERROR(BeginProduce(s.n).status());
  FeedSource src;
  src.direct = s.buffers();
  ViewGpu(AsStream(compute_stream_), geometry_, src, view, s.n, images->data(), labels->data());
  // Released after every view (the slot is free for Stage after the last one's kernel);
  // only the last consumes the batch.
  Release(/*consume=*/last);
  return absl::OkStatus();
}

absl::Status BatchFeed::CheckOutputs(int n, const Tensor* images, const Tensor* labels) const {
  const Shape want = Shape::CHWN(cfg_.channels, cfg_.crop_h, cfg_.crop_w, n);
  if (images == nullptr || labels == nullptr || images->device() != Device::kCUDA ||
      labels->device() != Device::kCUDA || images->shape() != want || labels->size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GPU feed: Produce needs CUDA tensors of %s and %d labels", want.ToString(), n));
  }
  return absl::OkStatus();
}

BatchFeed::Slot* BatchFeed::SlotOf(uint64_t ticket) {
  if (ticket == 0 || ticket > tickets_) return nullptr;
  Slot* s = slots_[(ticket - 1) % slots_.size()].get();
  // A slot restaged since has waited for this ticket's copy (Stage synchronises on it).
  return s->ticket == ticket ? s : nullptr;
}

bool BatchFeed::HostBatchDone(uint64_t ticket) {
  Slot* s = SlotOf(ticket);
  if (s == nullptr) return true;
  const cudaError_t e = cudaEventQuery(s->copied);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) COLONNADE_CUDA_CHECK(e);
  (void)cudaGetLastError();  // cudaErrorNotReady is no error
  return false;
}

void BatchFeed::WaitHostBatch(uint64_t ticket) {
  if (Slot* s = SlotOf(ticket)) COLONNADE_CUDA_CHECK(cudaEventSynchronize(s->copied));
}

}  // namespace colonnade::cuda
