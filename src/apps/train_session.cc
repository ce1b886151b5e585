// `trainer`'s job in phases: set-up (train_setup.h), resume, then the step loop
// (train_loop.h), or evaluation (evaluation.h) or prediction (prediction.h) instead.
#include "apps/train_session.h"

#include <mpi.h>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

#include "apps/evaluation.h"
#include "apps/exit_codes.h"
#include "apps/prediction.h"
#include "apps/train_loop.h"
#include "apps/train_setup.h"
#include "checkpoint/signals.h"
#include "core/log.h"
#include "parallel/watchdog.h"

namespace colonnade {

int RunTrainer(const TrainConfig& given) {
  // Eval and predict complete the configuration from their checkpoint (its model, input
  // size, classes and columns) before anything is built from it.
  TrainConfig cfg = given;
  Layout first;
  MPI_Comm_rank(MPI_COMM_WORLD, &first.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &first.world_size);
  // A rank that stops answering ends the job (exit 5, naming it) instead of a hang. Alone a
  // rank waits in no collective (the watchdog does not start), so the lock wait may be longer.
  if (first.world_size > 1 && cfg.collective_timeout > 0 && !cfg.checkpoint_dir.empty() &&
      cfg.collective_timeout <= cfg.checkpoint_lock_wait_s) {
    return AgreedError(
        first,
        absl::InvalidArgumentError(absl::StrFormat(
            "--collective_timeout=%g must exceed --checkpoint_lock_wait_s=%g (rank 0 may wait that "
            "long for the directory's lock while the others wait for it), or be 0 (off)",
            cfg.collective_timeout, cfg.checkpoint_lock_wait_s)),
        kExitUsage);
  }
  WatchdogOptions watch{cfg.collective_timeout, kExitRankStoppedAnswering, "trainer"};
  if (absl::Status s = StartCollectiveWatchdog(MPI_COMM_WORLD, watch); !s.ok()) {
    RankError(first, s);
  }
  if (cfg.mode != RunMode::kTrain) {
    if (EndCode end = ModelFromCheckpoint(first, cfg)) return *end;
  }
  Job job(cfg);
  Layout& l = job.l;
  l = first;
  if (l.world_size > 1) SetLogRank(l.world_rank);
  job.lead = l.world_rank == 0;
  job.training = cfg.mode == RunMode::kTrain;
  if (absl::Status s = checkpoint::InstallStopSignalHandlers(); !s.ok()) RankError(l, s);
  // Until the step loop polls for it, a stop signal ends the process at once: start-up may
  // block (a slow or FIFO file, a collective waiting for a rank), and there is nothing to
  // save yet. 75 as after a graceful stop: a requeued job starts over or resumes.
  checkpoint::ExitOnStopSignal("trainer",
                               job.training ? "before training started (nothing to save)"
                                            : "during --mode=" + AbslUnparseFlag(cfg.mode),
                               kExitPreempted);

  for (auto phase : {SetUpLayout, SetUpOptimizer, SetUpDevice, OpenData, BuildShard}) {
    if (EndCode end = phase(job)) return *end;
  }
  if (cfg.print_memory_plan) return PrintMemoryPlan(job);
  ResumePoint at;
  if (EndCode end = Resume(job, at)) return *end;
  if (cfg.mode == RunMode::kEval) return RunEval(job, at.from);
  if (cfg.mode == RunMode::kPredict) return RunPredict(job, at.from);
  Trainer trainer(job, at);
  if (EndCode end = trainer.Start()) return *end;
  return trainer.Run();
}

}  // namespace colonnade
