// The per-rank batch pipeline: sampler -> N reader/augment threads -> a bounded queue of
// CHWN float batches in host memory (pinned when the caller supplies a pinned allocator).
// The device copy is the trainer's job.
//
// Two other outputs serve a GPU feed that augments on the device (docs/DATA.md, "The GPU
// feed"): BatchOutput::kSourceUint8 hands the decoded source images as uint8 plus each
// image's ImageAugment (a quarter of the bytes of the float batch, and no float work on
// the host); BatchOutput::kIndicesOnly hands only indices, labels and augments, for a
// dataset the device generates itself (the synthetic one, Dataset::synthetic_recipe).
// The augments are exactly the ones the float output applies, so a device that applies
// them as WriteImageCHWN does produces the float batch bit for bit.
//
// What a rank receives is a pure function of (dataset, seed, global_batch, dp_rank,
// dp_size, cursor): thread count, queue depth and timing never change a bit of it, and
// the concatenation of the dp slices of a global batch is exactly the dp=1 batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/host_bytes.h"
#include "data/sampler.h"

namespace colonnade::data {

// Returns a host tensor of the given shape; used for batch images and labels when
// PipelineOptions::pinned is set. The trainer supplies one that allocates page-locked
// memory (e.g. through the CUDA backend); this module never links CUDA.
using HostTensorAllocator = std::function<Tensor(const Shape&)>;

// What a Batch carries for its images.
enum class BatchOutput {
  kFloatCHWN,    // Batch::images: the augmented, normalised CHWN float batch (default)
  kSourceUint8,  // Batch::pixels (the source images, uint8) + Batch::augments
  kIndicesOnly,  // Batch::augments only: nothing is read, the consumer generates the
                 // images from Batch::indices (labels come from Dataset::Label)
  kEncoded,      // Batch::encoded (each image's stored JPEG stream, not decoded) +
                 // Batch::augments, for a consumer that decodes on the GPU (nvJPEG);
                 // JPEG shard datasets only (Dataset::ReadEncoded)
};

struct PipelineOptions {
  int64_t global_batch = 0;
  // This rank gets images [dp_rank*B/dp, (dp_rank+1)*B/dp) of each global batch; the mp
  // ranks of one group pass the same dp_rank and so get identical images.
  int dp_rank = 0, dp_size = 1;
  uint64_t seed = 0;
  // train=false is evaluation: the dataset in order (shuffle off), the last partial batch
  // kept (drop_last off), centre crops, no padding, no mirror, no lighting; `shuffle`,
  // `drop_last`, `pad`, `mirror` and `lighting` then have no effect.
  bool train = true;
  bool shuffle = true;
  bool drop_last = true;
  int crop = 0;  // output height = width (0 = the full image); train: random crop,
                 // eval: centre crop
  int pad = 0;   // train: pad every side by `pad` pixels whose output is 0 (mean-
                 // valued; no lighting) before the random crop, so crop offsets
                 // range over [-pad, H-crop+pad]. CIFAR: pad 4 with 32x32 crops of
                 // 32x32 images. Must be in [0, crop side). Eval: ignored.
  // train: Inception's random-resized crop instead of the crop at a random offset (a box of
  // random area fraction and aspect ratio resized to the crop, AugmentConfig::ResizedCrop;
  // docs/DATA.md §5); needs pad 0. Eval: ignored.
  AugmentConfig::ResizedCrop resized_crop;
  int cutout = 0;                 // train: one square of this side of zeros (mean-valued
                                  // pixels) per image at a random centre; 0 = off. Eval: ignored.
  double eval_crop_fraction = 0;  // eval: the centre square of round(f * shorter side) source
                                  // pixels resized to the crop (the resize-then-centre-crop
                                  // convention, 0.875 for ImageNet recipes); 0 = the plain centre
                                  // crop. Train: ignored.
  bool mirror = false;            // train: horizontal flip with probability 1/2
  std::string mean = "image";     // "image": subtract the mean image; "channel": its per-channel
                                  // average; "none"
  std::vector<float> mean_image;  // if non-empty (H*W*C), used instead of the dataset's,
                                  // e.g. the training set's mean for an eval pipeline
  float lighting = 0.0f;          // AlexNet PCA lighting noise sigma (the paper: 0.1); 0 = off
  float scale = 1.0f / 255.0f;    // applied last: out = (pixel - mean + lighting) * scale
  int threads = 2;                // reader/augment threads
  int queue_depth = 4;            // batches prepared ahead of the consumer (ready or in progress)
  int64_t epochs = 0;             // stop after this many epochs from the start cursor (Next()
                                  // returns OutOfRange); 0 = endless
  bool pinned = false;            // allocate batches with `pinned_allocator` (required then) and,
                        // for kSourceUint8, pixels with `pinned_bytes_allocator` (required)
  HostTensorAllocator pinned_allocator;
  HostBytesAllocator pinned_bytes_allocator;
  BatchOutput output = BatchOutput::kFloatCHWN;
};

struct Batch {
  Tensor images;  // kFloatCHWN: CHWN float, C x crop x crop x n, host (n = this rank's
                  // share); empty in the other outputs
  Tensor labels;  // 1 x 1 x 1 x n, float class ids
  // kSourceUint8: the n source images, n x H x W x C uint8 (image j at j*H*W*C,
  // interleaved as Dataset::Read gives them); empty in the other outputs.
  HostBytes pixels;
  // kEncoded: the n stored JPEG streams (Dataset::ReadEncoded), each declaring the
  // dataset's height x width; empty in the other outputs.
  std::vector<std::string> encoded;
  // kSourceUint8, kEncoded and kIndicesOnly: image j's augmentation (DrawAugment, as the float
  // output applies it; n entries); empty for kFloatCHWN.
  std::vector<ImageAugment> augments;
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;  // the global batch's position / global_batch
  Cursor cursor;               // cursor of this batch (its first global position)
  Cursor next;                 // cursor after this batch: save it to resume
  double wait_seconds = 0;     // time the consumer waited in Next()
  // Dataset index of each image (n entries), for checks and debugging.
  std::vector<int64_t> indices;
  int64_t global_count = 0;  // images in the whole global batch (all dp ranks)
};

// The side of evaluation's centre square for `o.eval_crop_fraction` on `info`'s images:
// round(f * min(height, width)) (half away from zero); 0 when the fraction is 0.
int EvalBoxOf(const PipelineOptions& o, const DatasetInfo& info);

class BatchPipeline {
 public:
  // Validates the options against the dataset (InvalidArgument with a one-line reason)
  // and starts the threads. `ds` must outlive the pipeline. `start` is normalised (a
  // cursor at the end of an epoch moves to the next epoch's start).
  static absl::StatusOr<std::unique_ptr<BatchPipeline>> Create(Dataset* ds,
                                                               const PipelineOptions& o,
                                                               Cursor start = {});
  ~BatchPipeline();  // stops and joins the threads promptly (work in flight is dropped)
  BatchPipeline(const BatchPipeline&) = delete;
  BatchPipeline& operator=(const BatchPipeline&) = delete;

  // The next batch in order. Blocks until it is ready. A read/decode error of any image
  // of the batch is returned here, and every later call returns it again.
  absl::StatusOr<Batch> Next();
  // Hands a consumed batch's buffers back for reuse (optional; saves the allocation and
  // page faults, and matters with a pinned allocator). Only call it when nothing else
  // still uses the batch's tensors.
  void Recycle(Batch&& batch);

  int64_t batches_per_epoch() const;
  // Images per batch of this rank for a full global batch.
  int64_t local_batch() const { return o_.global_batch / o_.dp_size; }
  // The geometry and normalisation the pipeline applies (kFloatCHWN) or that a consumer
  // of the other outputs must apply with each batch's augments.
  const AugmentConfig& augment_config() const { return cfg_; }
  BatchOutput output() const { return o_.output; }

 private:
  struct Job;
  BatchPipeline(Dataset* ds, const PipelineOptions& o, Cursor start);
  void WorkerLoop();
  // Under mu_: creates the next job if the queue has room. Returns false otherwise.
  bool MaybeCreateJobLocked();
  void ProcessChunk(Job* job, int64_t begin, int64_t end, std::vector<std::vector<uint8_t>>* px);
  Tensor AllocateLocked(const Shape& shape, bool images);
  HostBytes AllocateBytesLocked(size_t bytes);
  size_t ImageBytes() const {  // one source image, H x W x C uint8
    return static_cast<size_t>(cfg_.height) * cfg_.width * cfg_.channels;
  }

  Dataset* ds_;
  PipelineOptions o_;
  AugmentConfig cfg_;
  Sampler sampler_;
  Cursor start_;

  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::deque<std::unique_ptr<Job>> jobs_;  // in order: front is the next to deliver
  Cursor next_job_cursor_;
  bool end_of_data_ = false;
  bool stop_ = false;
  absl::Status failed_;
  std::vector<Tensor> free_images_, free_labels_;
  std::vector<HostBytes> free_pixels_;
  std::vector<std::vector<std::string>> free_encoded_;  // keep their strings' capacity
  std::vector<std::thread> threads_;
};

}  // namespace colonnade::data
