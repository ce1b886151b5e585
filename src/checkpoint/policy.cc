#include "checkpoint/policy.h"

namespace colonnade::checkpoint {

CheckpointPolicy::CheckpointPolicy(int64_t every_steps, double every_secs, int64_t start_step,
                                   double start_secs)
    : every_steps_(every_steps),
      every_secs_(every_secs),
      last_step_(start_step),
      last_secs_(start_secs) {}

bool CheckpointPolicy::Due(int64_t step, double now_secs) {
  if (step <= last_step_) return false;  // this state (or a later one) is already saved
  const bool by_steps = every_steps_ > 0 && step % every_steps_ == 0;
  const bool by_time = every_secs_ > 0 && now_secs - last_secs_ >= every_secs_;
  if (!by_steps && !by_time) return false;
  MarkWritten(step, now_secs);
  return true;
}

void CheckpointPolicy::MarkWritten(int64_t step, double now_secs) {
  if (step > last_step_) last_step_ = step;
  last_secs_ = now_secs;
}

}  // namespace colonnade::checkpoint
