// Exit codes of the Colonnade tools, documented in docs/OPERATIONS.md. Batch scripts rely
// on them (scripts/slurm/train.sbatch requeues on kExitPreempted).
#pragma once

namespace colonnade {

enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,              // a runtime failure: unreadable data, a dead rank, a device error
  kExitUsage = 2,              // bad flags or an impossible configuration; nothing was run
  kExitNonFinite = 3,          // the loss became NaN or Inf; the last checkpoint is kept as it was
  kExitCheckpointDirBusy = 4,  // another job still held --checkpoint_dir's lock after
                               // --checkpoint_lock_wait_s; nothing was run
  // The collective watchdog (--collective_timeout, parallel/watchdog.h) ended the job: a
  // rank stopped answering (crashed, stopped, cut off, stuck outside MPI).
  kExitRankStoppedAnswering = 5,
  kExitPreempted = 75,  // stopped by a signal after writing a checkpoint: requeue and resume
                        // (75 is EX_TEMPFAIL of sysexits.h: "try again later")
};

}  // namespace colonnade
