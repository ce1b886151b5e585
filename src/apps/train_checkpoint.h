// The trainer's side of checkpoints: gathering a sharded Net into the canonical full
// tensors and writing them from one rank, and choosing and loading a checkpoint on resume.
// The file format itself lives in src/checkpoint.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/net.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"

namespace colonnade {

// Collective over the world, before a training job looks for a checkpoint to resume.
// World rank 0 takes the lock of the checkpoint directory (checkpoint::DirectoryLock) and
// keeps it for the job's life: when another job holds it, rank 0 says so on stdout and
// waits up to `wait_secs` (--checkpoint_lock_wait_s) for it to end. Then, with
// --resume=none, it refuses a directory that already holds checkpoints (a fresh run
// would replace those of its step numbers and --resume=auto would later mix the two
// runs; docs/CHECKPOINTS.md, section 6). Every rank returns rank 0's status; the lock is
// returned on rank 0 (nullptr elsewhere). CheckpointDirExitCode maps the errors.
absl::StatusOr<std::unique_ptr<checkpoint::DirectoryLock>> LockCheckpointDir(
    const std::string& dir, const std::string& resume, double wait_secs, const Mesh& mesh);
// The trainer's exit code for an error of LockCheckpointDir: kExitCheckpointDirBusy when
// the lock stayed taken, kExitPreempted when a stop signal ended the wait (nothing was
// lost; a rerun resumes), kExitUsage when --resume=none met existing checkpoints or the
// path is unusable as given (--checkpoint_dir is not a directory, or its ckpt.lock is not
// a lock file: a symbolic link, a hard link, another file), kExitError otherwise (the
// directory or lock file cannot be created).
int CheckpointDirExitCode(const absl::Status& s);

// Collective over the world. The ranks of data-parallel replica 0 gather their mp group's
// shards into full tensors; world rank 0 writes <dir>/ckpt-<state.step>.h5 atomically and
// keeps the newest `keep` checkpoints. `lock` is rank 0's lock of `dir` (or null): with
// it, Write may also remove temporaries that other, dead processes left behind. Every
// rank returns rank 0's status.
absl::Status SaveCheckpoint(Net& net, const Mesh& mesh, Communicator* mp_comm,
                            const checkpoint::TrainState& state, const std::string& dir, int keep,
                            std::string* path, const checkpoint::DirectoryLock* lock = nullptr);

// Resolves --resume: "none" -> nothing; "auto" -> the newest valid checkpoint in `dir`
// (nothing when there is none; corrupt or partial files are skipped with a warning
// printed by rank 0; an error when every checkpoint there is corrupt); otherwise a path.
// Rank 0 chooses and broadcasts the path, every rank reads and validates the file.
// Every tensor's shape is checked against `expected` (the model being trained) before
// its data is read, so a crafted or foreign file cannot make a rank allocate more than
// the model's size; so are the input size and, with expected.dataset_size, the data
// cursor (a cursor beyond the training data is a corrupt file: skipped by "auto").
// Collective over the world.
absl::StatusOr<std::optional<checkpoint::Checkpoint>> LoadForResume(
    const std::string& resume, const std::string& dir, const Mesh& mesh,
    const checkpoint::ExpectedModel& expected);

// A resumed checkpoint at or past the end of the run leaves nothing to train. Returns
// nullopt when steps are left; otherwise the exit code and the one-line message: 0 when
// the checkpoint is exactly at the end (the run is complete: running the same command
// again, or requeueing a job whose final checkpoint was written, is not an error), 2
// (usage) when it is beyond the end (raise --steps). `steps_text` names the end as the
// user gave it ("--steps=4", or "--epochs=1 (16 steps)").
struct NothingToTrain {
  int exit_code;
  std::string message;
};
std::optional<NothingToTrain> CheckStepsLeft(const std::string& checkpoint_path,
                                             int64_t checkpoint_step, int64_t total_steps,
                                             const std::string& steps_text);

// The flags whose values differ between the run that wrote a checkpoint (its `flags`
// text, one argv token per line) and this run, as "--name: old -> new" ("(default)" when
// a flag was not given). Flags that cannot change the trained weights are left out: where
// files go, logging, evaluation, threads, the device and the rank layout (resuming on
// another layout or device is supported). Printed on resume so that an accidental change
// in a requeued job's command line shows. Both texts are read as the trainer reads its
// command line (ResolveFlags); a saved text this build cannot read gives one entry saying
// why.
std::vector<std::string> ChangedFlags(const std::string& saved, const std::string& now);

}  // namespace colonnade
