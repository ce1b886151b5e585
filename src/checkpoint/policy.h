// When to write a checkpoint: every N steps (--checkpoint_every=N) and/or every T seconds
// of wall-clock time (--checkpoint_secs=T), whichever comes first.
//
// Multi-rank use: the step rule is the same on every rank, but clocks are not, so the
// trainer calls Due() on rank 0 only and broadcasts its answer (one int, or folded into
// the per-step stop-flag all-reduce); every rank then joins the gather and rank 0 writes.
// Calling Due() independently on every rank would let ranks disagree on the step.
#pragma once

#include <cstdint>

namespace colonnade::checkpoint {

class CheckpointPolicy {
 public:
  // every_steps <= 0 disables the step rule, every_secs <= 0 the time rule (both off:
  // never due; the trainer still writes on a stop signal and at the end). `start_step`
  // and `start_secs` are the step and clock at the start (or resume) of the run: no
  // checkpoint is due at start_step, and the first timed one comes every_secs after
  // start_secs.
  CheckpointPolicy(int64_t every_steps, double every_secs, int64_t start_step = 0,
                   double start_secs = 0.0);

  // Called once after each optimizer step with the number of completed steps and the
  // clock (seconds, any monotonic origin). True when a checkpoint of `step` should be
  // written now; a true answer counts as a write (MarkWritten), restarting the timer.
  bool Due(int64_t step, double now_secs);
  // Records a checkpoint written for another reason (stop signal, end of run), so the
  // timer restarts and the same step is not written twice.
  void MarkWritten(int64_t step, double now_secs);

  int64_t last_step() const { return last_step_; }

 private:
  int64_t every_steps_;
  double every_secs_;
  int64_t last_step_;
  double last_secs_;
};

}  // namespace colonnade::checkpoint
