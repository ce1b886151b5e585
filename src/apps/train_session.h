// The training job behind `trainer`, in named phases (train_session.cc lists them): set-up
// (mesh, device, data, model shard), resume, the step loop with its progress lines,
// checkpoints and evaluations, or eval / predict instead of training; and the exit code.
// `trainer.cc` only parses flags.
#pragma once

#include "apps/train_config.h"

namespace colonnade {

// Runs the job on every rank of MPI_COMM_WORLD (MPI must be initialised) and returns the
// process exit code (exit_codes.h). Errors are printed once, by rank 0 where every rank
// sees the same error, else by the failing rank.
int RunTrainer(const TrainConfig& config);

}  // namespace colonnade
