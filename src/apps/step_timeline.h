// --profile_steps: where one training step's time goes. The trainer marks the boundaries
// of the step's phases; each mark is a fence on the device's queue (a CUDA event on the
// compute stream, the host clock on the CPU), so a phase's time is the device time between
// its marks, not the host's time to enqueue it. Batch wait is the host's (the pipeline).
//
// A profiled step waits for its last fence before the next step starts (to read the
// events), so the profiled steps do not overlap the host and the device as the others do;
// the phase times are unaffected, the wall time per step may be a little longer.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/tensor.h"

namespace colonnade {

enum class StepPhase {
  kCopyIn,  // the batch to the device (H2D copy, GPU augmentation)
  kForward,
  kBackward,  // includes the gradient all-reduce launched from backward's hooks
  kGradSync,  // waiting for the last gradient buckets
  kOptimizer,
  kResults,  // loss and correct counts added to the device totals (core/results.h)
  kGraph,    // a replayed CUDA graph of the step (--cuda_graphs): the GPU feed's
             // augmentation, forward, backward, sync, optimizer and results in one; a
             // graphed step marks this instead of the phases it holds
  kCount
};
const char* StepPhaseName(StepPhase p);

class StepTimeline {
 public:
  // Profiles `steps` steps after the first `warmup` (the first steps pick kernels and
  // allocate, and are not typical). steps = 0: never profiles; every call is then free.
  StepTimeline(Device device, int64_t first_step, int64_t warmup, int64_t steps);

  bool active(int64_t step) const { return step >= begin_ && step < end_; }
  // Call at the start of step `step` with the host's wait for its batch, then Mark at the
  // end of each phase in order (phases a step does not have are skipped: they count no
  // time in it; the table lists the phases any profiled step marked), then EndStep.
  void BeginStep(int64_t step, double batch_wait_s);
  void Mark(StepPhase p);
  void EndStep();
  // All profiled steps have run (print the table once, then).
  bool finished() const { return profiled_ == end_ - begin_ && end_ > begin_; }
  // The table: per phase the mean ms per step and its share of the device step, the
  // batch wait, the device step and the wall time per step.
  std::string Table() const;

 private:
  Backend* backend_;
  int64_t begin_ = 0, end_ = 0;
  bool in_step_ = false;
  int next_phase_ = 0;
  std::unique_ptr<Fence> start_;  // of the step; then one fence at the end of each phase
  std::array<std::unique_ptr<Fence>, static_cast<int>(StepPhase::kCount)> fences_;
  std::array<double, static_cast<int>(StepPhase::kCount)> phase_ms_{};
  std::array<bool, static_cast<int>(StepPhase::kCount)> marked_{};
  double batch_wait_ms_ = 0, wall_ms_ = 0;
  int64_t profiled_ = 0;
  std::chrono::steady_clock::time_point wall_start_;
};

}  // namespace colonnade
