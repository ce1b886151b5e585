#include "apps/step_timeline.h"

#include <chrono>

#include "absl/strings/str_format.h"
#include "core/log.h"

namespace colonnade {

const char* StepPhaseName(StepPhase p) {
  switch (p) {
    case StepPhase::kCopyIn:
      return "batch to device";
    case StepPhase::kGraph:
      return "graph: whole step";
    case StepPhase::kForward:
      return "forward";
    case StepPhase::kBackward:
      return "backward";
    case StepPhase::kGradSync:
      return "gradient sync wait";
    case StepPhase::kOptimizer:
      return "optimizer";
    case StepPhase::kResults:
      return "results";
    case StepPhase::kCount:
      break;
  }
  return "?";
}

StepTimeline::StepTimeline(Device device, int64_t first_step, int64_t warmup, int64_t steps)
    : backend_(GetBackend(device)), begin_(first_step + warmup), end_(begin_ + steps) {}

void StepTimeline::BeginStep(int64_t step, double batch_wait_s) {
  in_step_ = active(step);
  if (!in_step_) return;
  wall_start_ = std::chrono::steady_clock::now();
  batch_wait_ms_ += 1e3 * batch_wait_s;
  next_phase_ = 0;
  for (auto& f : fences_) f.reset();
  start_ = backend_->RecordFence(Backend::FenceUse::kTimed);
}

void StepTimeline::Mark(StepPhase p) {
  if (!in_step_) return;
  CHECK_GE(static_cast<int>(p), next_phase_) << "phases marked out of order";
  next_phase_ = static_cast<int>(p);
  fences_[next_phase_++] = backend_->RecordFence(Backend::FenceUse::kTimed);
}

void StepTimeline::EndStep() {
  if (!in_step_) return;
  CHECK_GT(next_phase_, 0) << "no phase was marked";
  // Waiting only here, not at each mark: the device runs the step's phases back to back
  // as in an unprofiled step, so no phase includes the host's time to enqueue the next.
  fences_[next_phase_ - 1]->Wait();
  const Fence* prev = start_.get();
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    if (!fences_[i]) continue;  // a phase this step does not have
    phase_ms_[i] += fences_[i]->MillisecondsSince(*prev);
    marked_[i] = true;
    prev = fences_[i].get();
  }
  wall_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall_start_)
          .count();
  ++profiled_;
  in_step_ = false;
}

std::string StepTimeline::Table() const {
  const double n = std::max<int64_t>(1, profiled_);
  double device_ms = 0;
  for (double ms : phase_ms_) device_ms += ms;
  std::string out = absl::StrFormat(
      "profile of steps %d..%d (%d steps; device time from fences on the compute queue):\n"
      "  %-20s %9s %7s\n",
      begin_ + 1, end_, profiled_, "phase", "ms/step", "share");
  for (int i = 0; i < static_cast<int>(StepPhase::kCount); ++i) {
    if (!marked_[i]) continue;
    out += absl::StrFormat("  %-20s %9.3f %6.1f%%\n", StepPhaseName(static_cast<StepPhase>(i)),
                           phase_ms_[i] / n, 100.0 * phase_ms_[i] / std::max(1e-12, device_ms));
  }
  out += absl::StrFormat("  %-20s %9.3f\n", "device step", device_ms / n);
  out += absl::StrFormat("  %-20s %9.3f   (host: waiting for the data pipeline)\n", "batch wait",
                         batch_wait_ms_ / n);
  out += absl::StrFormat("  %-20s %9.3f   (host: one step, start to end, unoverlapped)\n",
                         "wall step", wall_ms_ / n);
  return out;
}

}  // namespace colonnade
