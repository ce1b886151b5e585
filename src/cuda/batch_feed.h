// The device side of the GPU feed: uint8 batches (or, for the synthetic dataset, only
// indices) are copied to the GPU on a copy stream of their own, and turned into the
// network's CHWN float input by feed_kernels.cu on the compute stream.
//
//   Stage(b)    enqueues on the copy stream the copy of batch b's host buffers into the
//               next device slot, after the compute stream has finished reading what
//               that slot held before (event `consumed`), [then the generation of the
//               synthetic images, or their gather from the device-resident pool, on the
//               same stream so it overlaps the step;] [or, for
//               JPEG batches, their decoding by nvJPEG (jpeg_decoder.h) into the slot;]
//               records event `copied`.
//   Produce()   enqueues on the compute stream (cuda_backend.h ComputeStream()), after
//               `copied` of the oldest staged slot: augment into `images` and copy the
//               labels (one kernel); records `consumed`. In a graphed training step the
//               kernel is part of the graph and finds the step's slot through the graph's
//               device block (BeginProduce / Augment / EndProduce below).
//   ProduceView(v, last)  the same with ten-crop view v (0..9), or any one augmentation
//               (an --eval_views=2 view), in place of the batch's augments; the batch stays
//               staged for its next view until `last`.
//   HostBatchDone(ticket)  whether the copy of the batch staged with that ticket has
//               finished, i.e. its host buffers may be refilled (BatchPipeline::Recycle).
//
// With two or more slots the copy of batch k+1 (Stage after Produce(k)) overlaps step k's
// compute. Stage blocks only on the copy of the batch that last used the slot (its small
// pinned staging buffers are refilled), never on compute. The pixels and labels of a
// staged batch must stay untouched until HostBatchDone says so; the augments and indices
// are copied into the feed's own pinned buffers during Stage.
//
// The parameter types are this module's (feed_kernels.h): src/apps/device_feed.h builds
// them from the data module's batch and recipe. In a build without CUDA the class
// compiles and Create returns Unavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

#include "cuda/feed_types.h"
#include "cuda/jpeg_decoder.h"

namespace colonnade::cuda {

struct FeedConfig {
  // Augmentation (FeedGeometry without the device pointers; the feed uploads the means).
  int height = 0, width = 0, channels = 0, crop_h = 0, crop_w = 0;
  FeedMean mean = FeedMean::kNone;
  float scale = 1.0f;
  std::vector<float> mean_image;    // height*width*channels for kImage
  std::vector<float> channel_mean;  // channels for kChannel
  // The augments' boxes are resized to the crop (random-resized crops, a resized eval crop:
  // FeedGeometry::resize); else every box is the crop's size.
  bool resize = false;
  int max_batch = 0;  // largest n a batch may have
  int slots = 2;      // device slots (>= 2 for the copy/compute overlap)
  // Set to generate the images on the device from indices (SyntheticGeometry without the
  // grid pointer; the feed uploads `synthetic_grid`).
  bool synthetic = false;
  SyntheticGeometry synthetic_geometry;
  std::vector<float> synthetic_grid;  // num_classes x 4 x 4 x 3
  // > 0: the synthetic dataset's images 0..synthetic_pool-1 are generated once into a
  // device-resident pool, and Stage gathers a batch's images from it (a copy) instead of
  // generating them every step; every index staged must then be below it.
  int64_t synthetic_pool = 0;
  // Set when batches arrive as JPEG streams (HostBatch::jpeg) that the feed decodes with
  // nvJPEG; Create fails (Unavailable) in a build without it.
  bool jpeg = false;
};

// One batch as Stage reads it: host memory.
struct HostBatch {
  int n = 0;
  const uint8_t* pixels = nullptr;        // n x H x W x C (not for synthetic or JPEG);
                                          // pinned for an asynchronous copy
  const uint8_t* const* jpeg = nullptr;   // FeedConfig::jpeg: n JPEG streams of H x W
  const size_t* jpeg_sizes = nullptr;     // their sizes in bytes
  const int64_t* indices = nullptr;       // n dataset indices (synthetic)
  const FeedAugment* augments = nullptr;  // n
  const float* labels = nullptr;          // n; pinned for an asynchronous copy
};

#if defined(COLONNADE_WITH_CUDA) && COLONNADE_WITH_CUDA

class BatchFeed {
 public:
  // Needs the registered CUDA backend (RegisterBackend); allocates the slots.
  static absl::StatusOr<std::unique_ptr<BatchFeed>> Create(const FeedConfig& cfg);
  ~BatchFeed();  // waits for the feed's work in flight
  BatchFeed(const BatchFeed&) = delete;
  BatchFeed& operator=(const BatchFeed&) = delete;

  // Enqueues the copy of `b` into the next slot; returns its ticket (1, 2, ...).
  // FailedPrecondition when every slot holds a staged batch not yet produced.
  absl::StatusOr<uint64_t> Stage(const HostBatch& b);
  // Enqueues the making of the oldest staged batch into `images` (CUDA tensor,
  // C x crop_h x crop_w x n) and `labels` (CUDA, n elements). FailedPrecondition when
  // nothing is staged, InvalidArgument for a tensor of the wrong shape or device.
  absl::Status Produce(Tensor* images, Tensor* labels);
  // Produce in three parts, for a training step captured as a CUDA graph
  // (cuda/step_graph.h), which records only the middle one:
  //   BeginProduce(n)  outside the graph: the compute stream waits for the oldest staged
  //                    batch's copy; returns the slot it sits in, for the step's
  //                    StepScalars::feed_slot. InvalidArgument unless it has n images (a
  //                    replayed graph augments the batch size it was captured with).
  //   Augment(images, labels, slot_on_device)  Produce's kernel (augmentation and labels);
  //                    with `slot_on_device` (&StepScalars::feed_slot in the graph's device
  //                    block) it reads whichever slot that names when it runs, else the
  //                    oldest staged batch's buffers directly (a plain step).
  //   EndProduce()     outside, after the step: the slot may be restaged once the step ran.
  // Produce() is the three in a row.
  absl::StatusOr<int> BeginProduce(int n);
  absl::Status Augment(Tensor* images, Tensor* labels, const int32_t* slot_on_device);
  void EndProduce();
  // Evaluation on ten crops (docs/DATA.md, "Ten crops"): enqueues view `view` (0..9,
  // TenCropView) of the oldest staged batch into `images` (C x crop_h x crop_w x n: the
  // crop is the view's side) and `labels`, ignoring the batch's augments. The batch stays
  // staged, so its next view can be produced, until a call with `last` consumes it.
  // InvalidArgument for a view outside 0..9 or crops larger than the images.
  absl::Status ProduceView(int view, bool last, Tensor* images, Tensor* labels);
  // The same with any one augmentation for every image (--eval_views=2: the centre crop,
  // resized or not, then its mirror). InvalidArgument for a box outside the images, or a
  // resized box on a feed made without FeedConfig::resize.
  absl::Status ProduceView(const FeedAugment& view, bool last, Tensor* images, Tensor* labels);
  // Whether the host buffers of the batch staged with `ticket` may be reused (never
  // blocks); WaitHostBatch blocks until they may.
  bool HostBatchDone(uint64_t ticket);
  void WaitHostBatch(uint64_t ticket);
  int staged() const { return staged_; }  // staged, not yet produced
  // The nvJPEG backend decoding this feed's batches ("hardware", "gpu_hybrid"); nullptr
  // when the batches arrive decoded.
  const char* jpeg_backend() const { return jpeg_ ? jpeg_->backend() : nullptr; }
  // Images in the synthetic pool (FeedConfig::synthetic_pool; 0: generated per batch).
  int64_t synthetic_pool() const { return device_pool_ ? cfg_.synthetic_pool : 0; }

 private:
  struct Slot;
  explicit BatchFeed(const FeedConfig& cfg);
  Slot* SlotOf(uint64_t ticket);
  // Records the oldest staged slot's `consumed` behind the queued work and ends a
  // BeginProduce; `consume` also retires the batch (the last view, or a produced batch).
  void Release(bool consume);
  // Whether `images` and `labels` can take a batch of n images.
  absl::Status CheckOutputs(int n, const Tensor* images, const Tensor* labels) const;

  FeedConfig cfg_;
  FeedGeometry geometry_{};
  SyntheticGeometry synthetic_{};
  void* copy_stream_ = nullptr;     // cudaStream_t
  void* compute_stream_ = nullptr;  // cudaStream_t (the backend's)
  float* device_mean_ = nullptr;    // mean image, then channel mean
  float* device_grid_ = nullptr;
  uint8_t* device_pool_ = nullptr;            // FeedConfig::synthetic_pool images
  FeedBatchBuffers* device_slots_ = nullptr;  // the slots' buffers, for FeedSource
  std::unique_ptr<JpegDecoder> jpeg_;         // FeedConfig::jpeg
  std::vector<std::unique_ptr<Slot>> slots_;
  uint64_t tickets_ = 0;  // tickets handed out; batch t lives in slot (t - 1) % slots
  uint64_t produced_ = 0;
  int staged_ = 0;
  bool begun_ = false;  // between BeginProduce and EndProduce
};

#else  // no CUDA: the same names, unavailable

class BatchFeed {
 public:
  static absl::StatusOr<std::unique_ptr<BatchFeed>> Create(const FeedConfig&) {
    return absl::UnavailableError("this build has no CUDA backend: no GPU feed");
  }
  absl::StatusOr<uint64_t> Stage(const HostBatch&) { return absl::UnavailableError("no CUDA"); }
  absl::Status Produce(Tensor*, Tensor*) { return absl::UnavailableError("no CUDA"); }
  absl::StatusOr<int> BeginProduce(int) { return absl::UnavailableError("no CUDA"); }
  absl::Status Augment(Tensor*, Tensor*, const int32_t*) {
    return absl::UnavailableError("no CUDA");
  }
  void EndProduce() {}
  absl::Status ProduceView(int, bool, Tensor*, Tensor*) {
    return absl::UnavailableError("no CUDA");
  }
  absl::Status ProduceView(const FeedAugment&, bool, Tensor*, Tensor*) {
    return absl::UnavailableError("no CUDA");
  }
  bool HostBatchDone(uint64_t) { return true; }
  void WaitHostBatch(uint64_t) {}
  int staged() const { return 0; }
  const char* jpeg_backend() const { return nullptr; }
  int64_t synthetic_pool() const { return 0; }
};

#endif

}  // namespace colonnade::cuda
