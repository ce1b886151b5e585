// The training phase of a set-up job (train_setup.h), as in Caffe's Solver: Start prepares
// the run (pipeline, length, output files, banner), Run steps to the end, each step
// followed by its progress line, checkpoint and evaluation when they are due.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "apps/device_feed.h"
#include "apps/output_file.h"
#include "apps/step_timeline.h"
#include "apps/train_setup.h"
#include "apps/train_step.h"
#include "checkpoint/policy.h"
#include "core/backend.h"
#include "cuda/step_graph.h"
#include "data/pipeline.h"

namespace colonnade {

// Running totals since the last progress line.
struct IntervalTotals {
  double loss_sum = 0;      // summed over the dp group's images
  double top1_correct = 0;  // dp group
  double top5_correct = 0;  // dp group
  double images = 0;        // dp group: global batches
  double data_wait_s = 0;   // this rank: waiting for the pipeline
  double comm_wait_s = 0;   // this rank: blocked on the gradient all-reduce after backward
  Clock::time_point start;  // of the interval, less the time spent evaluating
};

// The training phases over a set-up job, as in Caffe's Solver: Start prepares the run
// (pipeline, length, output files, banner), Run steps to the end, each step followed by
// its progress line, checkpoint and evaluation when they are due.
class Trainer {
 public:
  Trainer(Job& job, ResumePoint& at)
      : job_(job), cfg_(job.cfg), l_(job.l), net_(job.net()), at_(at), optimizer_(job.sgd) {}

  // Everything before the first step; the banner is printed here.
  EndCode Start();
  // The step loop; returns the job's exit code.
  int Run();

 private:
  EndCode CreatePipeline();
  EndCode CountParameters();
  EndCode OpenMetrics();
  void PrintBanner();
  std::string AugmentDescription() const;
  std::string OptionsDescription() const;
  EndCode OpenRankLog();
  // --cuda_graphs: the step graph where it is legal and asked for (graph_).
  EndCode SetUpGraphs();
  std::string GraphsDescription() const;
  // Enqueues one training step on the device: the batch's copy (or the GPU feed's slot),
  // then TrainingStep (train_step.h): augmentation, forward, backward, the gradient
  // all-reduce, the optimizer and the addition of its loss and correct counts to the
  // device totals (totals_). Nothing here waits for the device.
  void Step(int64_t step, data::Batch&& batch, float lr);
  // Recycles the batch of every step up to `step` not collected yet, once the device has
  // run it (waits for it).
  void CollectThrough(int64_t step);
  // Reads the device totals of the steps run since the last read (waits for them), sums
  // them over the dp group into the interval and zeroes them. Collective over dp: every
  // rank reads after the same steps. Ends the job if a step's loss was not finite.
  EndCode ReadResults();
  // The next training batch from the pipeline, staged on the GPU feed when there is one
  // (its copy then overlaps the steps still queued on the device). Recycle returns a
  // consumed batch's buffers.
  absl::StatusOr<data::Batch> NextBatch();
  void Recycle(data::Batch&& batch);
  // Ranks agree after each step on a stop signal and on rank 0's time-based checkpoint
  // decision with one small all-reduce, so every rank checkpoints and stops after the same
  // step.
  void Agree(int64_t done, bool* stop, bool* checkpoint_due);
  absl::Status Checkpoint(int64_t done, const data::Cursor& next);
  void Log(int64_t done, float lr);
  void EvaluateNow(int64_t done);
  int NonFiniteLoss(double loss, int64_t step, float lr);
  int Stopped(int64_t done);
  int Finish();
  void WriteMetrics(const std::string& json_line);
  // Epochs of data trained on so far, from the data cursor: after a resume with another
  // --batch_size the step count no longer measures it.
  double DataEpoch() const {
    return static_cast<double>(next_cursor_.epoch) +
           static_cast<double>(next_cursor_.position) /
               std::max<int64_t>(1, job_.data->info().size);
  }
  // The schedule's learning rate of step `step`.
  float LrAt(int64_t step) const {
    return job_.schedule->At(job_.base_lr, static_cast<double>(step) / per_epoch_, total_epochs_);
  }

  Job& job_;
  const TrainConfig& cfg_;
  const Layout& l_;
  Net& net_;
  ResumePoint& at_;
  data::PipelineOptions po_;
  std::unique_ptr<data::BatchPipeline> pipeline_;
  std::unique_ptr<DeviceFeed> feed_;  // --gpu_augment: destroyed first (it waits for its
                                      // copies and recycles into pipeline_)
  int64_t per_epoch_ = 0, total_steps_ = 0;
  int64_t full_params_ = 0;
  double total_epochs_ = 0;
  AppendFile metrics_;   // rank 0 only
  AppendFile rank_log_;  // every rank's own, with --rank_log_dir
  SgdOptimizer optimizer_;
  std::vector<Tensor> ema_saved_;  // the trained weights while evaluation uses the EMA
  // --cuda_graphs: forward, backward, sync and optimizer as one CUDA graph (null: plain
  // steps; always on a CPU run).
  std::unique_ptr<cuda::StepGraph> graph_;
  std::string graphs_off_;  // why graph_ is null, for the banner
  Clock::time_point start_;
  std::optional<checkpoint::CheckpointPolicy> policy_;
  IntervalTotals interval_;
  double first_loss_ = NAN, last_loss_ = NAN;
  // The loss sum and top-1/top-5 counts of the steps since the last ReadResults, added by
  // each step on the device (Ops::AccumulateResults, inside the step graph) and read back
  // only when something reports them: a progress line, a checkpoint, an evaluation, the
  // end (core/results.h).
  Tensor totals_;
  // The steps queued on the device whose batches are still held: the host runs up to
  // kPendingSteps - 1 steps ahead of the device (a batch is recycled kPendingSteps - 1
  // steps later, or when the results are read), so a short step (cifar10-18pct bf16:
  // 0.45 ms on the H200) is not held up by the host's work between steps.
  struct PendingStep {
    int64_t step = -1;  // -1: empty (collected)
    data::Batch batch;  // kept until the step ran: the device copies from its buffers
    std::unique_ptr<Fence> ran;
  };
  static constexpr int kPendingSteps = 4;
  PendingStep pending_[kPendingSteps];
  int64_t collected_ = -1;  // the last step collected
  std::optional<StepTimeline> timeline_;
  std::optional<TrainingStep> step_;  // the step's device work, shared with bench_train
  bool timeline_printed_ = false;
  data::Cursor next_cursor_;  // after the last step's batch: where a checkpoint resumes
};

}  // namespace colonnade
