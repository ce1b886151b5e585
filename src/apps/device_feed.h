// The GPU feed as the trainer uses it: a data::BatchPipeline in uint8 (or indices-only)
// output, and cuda::BatchFeed turning its batches into the network's input on the GPU.
// This file is the only place that knows both modules' types (data may not link CUDA,
// cuda may depend on core only): it translates the pipeline's AugmentConfig, augments
// and the synthetic recipe into the feed's plain parameters, and holds each staged batch
// until the device has copied it, then hands it back to the pipeline for reuse.
//
//   DeviceFeed::Create(ds, pipeline)   (pipeline->output() != kFloatCHWN)
//   feed->Stage(batch)                 copy enqueued (copy stream)
//   feed->Produce(&data, &label)       augment enqueued (compute stream); in a graphed
//                                      step BeginProduce / Augment / EndProduce
//   feed->Recycle(std::move(batch))    back to the pipeline once its copy has finished
//
// docs/DATA.md, "The GPU feed", has the bytes moved and the bitwise guarantee.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "cuda/batch_feed.h"
#include "data/dataset.h"
#include "data/host_bytes.h"
#include "data/pipeline.h"

namespace colonnade {

// An image's augmentation as the GPU feed's kernels take it (data -> cuda types).
cuda::FeedAugment FeedAugmentOf(const data::ImageAugment& a);

// The device generator's description of the synthetic dataset `r` (data -> cuda types);
// `grid` stays null: the caller uploads r.grid and points it there (BatchFeed does).
cuda::SyntheticGeometry SyntheticGeometryOf(const data::SyntheticRecipe& r);

class DeviceFeed {
 public:
  // `pipe` (outliving the feed) must hand uint8 or encoded (JPEG: decoded by nvJPEG)
  // batches, or indices only for a dataset with a synthetic recipe. Needs the registered
  // CUDA backend.
  static absl::StatusOr<std::unique_ptr<DeviceFeed>> Create(const data::Dataset& ds,
                                                            data::BatchPipeline* pipe);
  ~DeviceFeed();  // waits for the copies in flight and recycles every held batch

  // Enqueues the copy of `b` (a batch of the pipeline) to the device. `b` must stay
  // alive and unchanged until it is passed to Recycle.
  absl::Status Stage(const data::Batch& b);
  // Enqueues the making of the oldest staged batch into the CUDA tensors `images` (the
  // net's "data" blob) and `labels`.
  absl::Status Produce(Tensor* images, Tensor* labels);
  // Produce in three parts, for a step captured as a CUDA graph: BeginProduce(n) before
  // the step (returns the slot for StepScalars::feed_slot), Augment inside it (reading the
  // slot from `slot_on_device` when non-null), EndProduce after it
  // (cuda::BatchFeed::BeginProduce).
  absl::StatusOr<int> BeginProduce(int n) { return feed_->BeginProduce(n); }
  absl::Status Augment(Tensor* images, Tensor* labels, const int32_t* slot_on_device) {
    return feed_->Augment(images, labels, slot_on_device);
  }
  void EndProduce();
  // Evaluation on ten crops: view `view` (0..9) of the oldest staged batch (a uint8
  // pipeline whose crop is the views' side; its augments are ignored) into `images` and
  // `labels`; `last` consumes the batch (cuda::BatchFeed::ProduceView).
  absl::Status ProduceView(int view, bool last, Tensor* images, Tensor* labels);
  // The same with one augmentation for every image (--eval_views=2: the eval pipeline's
  // centre view, then that view mirrored).
  absl::Status ProduceView(const data::ImageAugment& view, bool last, Tensor* images,
                           Tensor* labels);
  // Takes a consumed batch (one that was staged) and returns it to the pipeline as soon
  // as the device has copied it: now, or in a later call.
  void Recycle(data::Batch&& b);
  // The nvJPEG backend decoding the batches (an encoded-output pipeline), else nullptr.
  const char* jpeg_backend() const;
  // Images of the synthetic dataset kept on the device (0: generated per batch).
  int64_t synthetic_pool() const { return feed_->synthetic_pool(); }

 private:
  DeviceFeed(data::BatchPipeline* pipe, std::unique_ptr<cuda::BatchFeed> feed)
      : pipe_(pipe), feed_(std::move(feed)) {}
  void RecycleCopied(bool wait);

  data::BatchPipeline* pipe_;
  std::unique_ptr<cuda::BatchFeed> feed_;
  // Tickets of staged batches, keyed by their labels buffer (unique while in flight).
  std::deque<std::pair<const float*, uint64_t>> tickets_;
  std::deque<std::pair<uint64_t, data::Batch>> held_;  // waiting for their copy
  std::vector<const uint8_t*> jpeg_data_;  // the staged batch's JPEG streams, for nvJPEG
  std::vector<size_t> jpeg_sizes_;
};

// An allocator of page-locked host bytes of `for_device`'s backend (ordinary memory when
// it has none to give), for PipelineOptions::pinned_bytes_allocator.
data::HostBytesAllocator PinnedBytesAllocator(Device for_device);

}  // namespace colonnade
