// One training step's device work, the same code for the trainer (train_loop.h) and
// bench_train, so that the benchmark times what training runs: the GPU feed's
// augmentation of a staged batch (when there is a feed), forward, backward with the
// gradient all-reduce hooked in after each layer (when there is a sync), the optimizer,
// and the addition of the step's loss and top-1/top-5 counts to device totals
// (Ops::AccumulateResults). With a step graph the whole of it is captured once as a CUDA
// graph and replayed (cuda/step_graph.h); the per-step values then come from the graph's
// device block. Nothing here waits for the device.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "apps/device_feed.h"
#include "apps/step_timeline.h"
#include "core/net.h"
#include "core/ops.h"
#include "core/optimizer.h"
#include "cuda/step_graph.h"
#include "parallel/gradient_sync.h"

namespace colonnade {

struct TrainingStepParts {
  Net* net = nullptr;
  SgdOptimizer* optimizer = nullptr;
  Tensor* totals = nullptr;          // NewResultTotals of the net's device
  GradientSync* sync = nullptr;      // null: one replica (nothing to all-reduce)
  DeviceFeed* feed = nullptr;        // null: the batch was copied into "data" and "label"
  cuda::StepGraph* graph = nullptr;  // null: plain steps
  StepTimeline* timeline = nullptr;  // null: no phase marks
  // The run context of step `step` (the mesh's, which places this replica's images).
  std::function<RunContext(int64_t step)> context;
};

class TrainingStep {
 public:
  explicit TrainingStep(TrainingStepParts parts) : p_(std::move(parts)) {}

  // Enqueues step `values.step` at rate `values.lr` (and, with a feed, from its slot
  // `values.feed_slot`, which the caller took with DeviceFeed::BeginProduce). Errors: the
  // feed's augmentation or the gradient sync failed. `comm_wait_s` (if not null) gets the
  // time the host waited for the gradient all-reduce.
  absl::Status Enqueue(const StepScalars& values, double* comm_wait_s = nullptr);

 private:
  TrainingStepParts p_;
};

}  // namespace colonnade
