#include "apps/train_checkpoint.h"

#include <dirent.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/exit_codes.h"
#include "parallel/param_shards.h"
#include "parallel/watchdog.h"

namespace colonnade {
namespace {

// Rank 0's status or string on every rank of `comm`.
absl::Status ShareStatus(const absl::Status& s, MPI_Comm comm) {
  return BroadcastStatus(s, 0, comm);
}
std::string ShareString(const std::string& s, MPI_Comm comm) { return BroadcastString(s, 0, comm); }

void PrintWarnings(const std::vector<std::string>& warnings) {
  for (const std::string& w : warnings) std::fprintf(stderr, "trainer: warning: %s\n", w.c_str());
}

// The names of the ckpt-<step>.h5 files in `dir`, by step.
std::vector<std::string> CheckpointFiles(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      const int64_t step = checkpoint::ParseCheckpointStep(e->d_name);
      if (step >= 0) found.push_back({step, e->d_name});
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> names;
  for (const auto& f : found) names.push_back(f.second);
  return names;
}

// Rank 0's part of LockCheckpointDir.
absl::StatusOr<std::unique_ptr<checkpoint::DirectoryLock>> LockOnRankZero(const std::string& dir,
                                                                          const std::string& resume,
                                                                          double wait_secs) {
  std::vector<std::string> warnings;
  // One try first, so that a wait is announced while it lasts, not after.
  absl::StatusOr<std::unique_ptr<checkpoint::DirectoryLock>> lock =
      checkpoint::DirectoryLock::Acquire(dir, 0, &warnings);
  if (absl::IsUnavailable(lock.status()) && wait_secs > 0) {
    std::printf(
        "trainer: waiting up to %g s (--checkpoint_lock_wait_s) for another job to "
        "release checkpoint directory %s\n",
        wait_secs, dir.c_str());
    std::fflush(stdout);
    lock = checkpoint::DirectoryLock::Acquire(dir, wait_secs, &warnings);
  }
  PrintWarnings(warnings);
  if (!lock.ok()) return lock.status();
  if (resume == "none") {
    const std::vector<std::string> old = CheckpointFiles(dir);
    if (!old.empty()) {
      const std::string which = old.size() == 1
                                    ? absl::StrCat("a checkpoint of an earlier run (", old[0], ")")
                                    : absl::StrFormat("%d checkpoints of an earlier run (%s .. %s)",
                                                      old.size(), old.front(), old.back());
      return absl::InvalidArgumentError(absl::StrFormat(
          "--resume=none but checkpoint directory %s already holds %s: a fresh run would "
          "replace those of its step numbers and --resume=auto would later mix the two runs. "
          "Continue that run (--resume=auto), or move its checkpoints away or use another "
          "--checkpoint_dir to start over",
          dir, which));
    }
  }
  return lock;
}

}  // namespace

absl::StatusOr<std::unique_ptr<checkpoint::DirectoryLock>> LockCheckpointDir(
    const std::string& dir, const std::string& resume, double wait_secs, const Mesh& mesh) {
  absl::StatusOr<std::unique_ptr<checkpoint::DirectoryLock>> lock;
  if (mesh.world_rank() == 0) lock = LockOnRankZero(dir, resume, wait_secs);
  absl::Status status = ShareStatus(lock.status(), mesh.world_comm());
  if (!status.ok()) return status;
  if (mesh.world_rank() != 0) return std::unique_ptr<checkpoint::DirectoryLock>();
  return lock;
}

int CheckpointDirExitCode(const absl::Status& s) {
  if (absl::IsUnavailable(s)) return kExitCheckpointDirBusy;
  if (absl::IsCancelled(s)) return kExitPreempted;
  // --resume=none over checkpoints; a --checkpoint_dir that is not a directory, or whose
  // ckpt.lock is not a lock file: a path the user controls (docs/OPERATIONS.md, exit 2).
  if (absl::IsInvalidArgument(s) || absl::IsFailedPrecondition(s)) return kExitUsage;
  return kExitError;
}

std::optional<NothingToTrain> CheckStepsLeft(const std::string& checkpoint_path,
                                             int64_t checkpoint_step, int64_t total_steps,
                                             const std::string& steps_text) {
  if (checkpoint_step < total_steps) return std::nullopt;
  if (checkpoint_step == total_steps) {
    return NothingToTrain{kExitOk,
                          absl::StrFormat("checkpoint %s is at step %d = %s: the run is complete, "
                                          "nothing to train (raise --steps to train further)",
                                          checkpoint_path, checkpoint_step, steps_text)};
  }
  return NothingToTrain{
      kExitUsage, absl::StrFormat("checkpoint %s is at step %d > %s: nothing to train; raise "
                                  "--steps (or resume an earlier checkpoint with --resume=PATH)",
                                  checkpoint_path, checkpoint_step, steps_text)};
}

absl::Status SaveCheckpoint(Net& net, const Mesh& mesh, Communicator* mp_comm,
                            const checkpoint::TrainState& state, const std::string& dir, int keep,
                            std::string* path, const checkpoint::DirectoryLock* lock) {
  WatchdogLabel label("checkpoint: gather and write");
  absl::Status status;
  if (mesh.dp_rank() == 0) {
    // Every rank of replica 0 takes part in the gathers of its mp group; rank 0 keeps them.
    std::vector<checkpoint::TensorEntry> entries;
    status = checkpoint::CollectFromNet(
        net,
        [mp_comm](const Param& p, const Tensor& shard) {
          return GatherFullParam(p, shard, mp_comm);
        },
        mesh.world_rank() == 0 ? &entries : nullptr);
    if (status.ok() && mesh.world_rank() == 0) {
      std::vector<std::string> warnings;
      std::string written;
      status = checkpoint::Write(dir, state, entries, keep, &written, &warnings, lock);
      PrintWarnings(warnings);
      if (path) *path = written;
    }
  }
  return ShareStatus(status, mesh.world_comm());
}

absl::StatusOr<std::optional<checkpoint::Checkpoint>> LoadForResume(
    const std::string& resume, const std::string& dir, const Mesh& mesh,
    const checkpoint::ExpectedModel& expected) {
  WatchdogLabel label("resume: find and read the checkpoint");
  if (resume == "none") return std::optional<checkpoint::Checkpoint>();
  std::string path;
  absl::Status status;
  if (mesh.world_rank() == 0) {
    if (resume == "auto") {
      if (!dir.empty()) {
        std::vector<std::string> warnings;
        absl::StatusOr<std::string> found = checkpoint::FindLatestValid(dir, &warnings, &expected);
        PrintWarnings(warnings);
        if (found.ok()) {
          path = *found;
        } else if (!absl::IsNotFound(found.status())) {
          status = found.status();
        }
      }
    } else {
      path = resume;
    }
  }
  status = ShareStatus(status, mesh.world_comm());
  if (!status.ok()) return status;
  path = ShareString(path, mesh.world_comm());
  if (path.empty()) return std::optional<checkpoint::Checkpoint>();
  absl::StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::Read(path, &expected);
  // Every rank read the same file; agree on the outcome so no rank runs on alone.
  int ok = ckpt.ok() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mesh.world_comm());
  if (!ckpt.ok()) return ckpt.status();
  if (!all_ok) {
    return absl::DataLossError(absl::StrFormat("%s could not be read on every rank", path));
  }
  return std::optional<checkpoint::Checkpoint>(std::move(*ckpt));
}

namespace {

// name -> value of a flags text (one argv token per line), as the trainer read them.
absl::StatusOr<std::map<std::string, std::string>> FlagValues(const std::string& text) {
  const std::vector<std::string> tokens = absl::StrSplit(text, '\n', absl::SkipEmpty());
  absl::StatusOr<std::vector<FlagArg>> args = ResolveFlags(tokens);
  if (!args.ok()) return args.status();
  std::map<std::string, std::string> values;
  for (const FlagArg& a : *args) values[a.name] = a.value;
  return values;
}

}  // namespace

std::vector<std::string> ChangedFlags(const std::string& saved, const std::string& now) {
  static const auto* kIgnored = new absl::flat_hash_set<std::string>{"resume",
                                                                     "checkpoint_dir",
                                                                     "checkpoint_every",
                                                                     "checkpoint_secs",
                                                                     "keep_checkpoints",
                                                                     "checkpoint_lock_wait_s",
                                                                     "log_every",
                                                                     "profile_steps",
                                                                     "metrics_file",
                                                                     "rank_log_dir",
                                                                     "eval_every",
                                                                     "val_data",
                                                                     "mode",
                                                                     "predictions",
                                                                     "data_threads",
                                                                     "cpu_threads",
                                                                     "device",
                                                                     "comm",
                                                                     "bucket_mb",
                                                                     "collective_timeout",
                                                                     "mp"};
  absl::StatusOr<std::map<std::string, std::string>> before = FlagValues(saved);
  absl::StatusOr<std::map<std::string, std::string>> after = FlagValues(now);
  // A checkpoint from a build with other flags: say so rather than guess.
  if (!before.ok()) {
    return {absl::StrCat("(the checkpoint's flags: ", before.status().message(), ")")};
  }
  if (!after.ok()) return {};  // cannot happen: this run's flags were checked at start-up
  std::map<std::string, std::pair<std::string, std::string>> changed;  // sorted by name
  for (const auto& [name, value] : *before) changed[name].first = value;
  for (const auto& [name, value] : *after) changed[name].second = value;
  std::vector<std::string> out;
  for (const auto& [name, values] : changed) {
    if (values.first == values.second || kIgnored->contains(name)) continue;
    out.push_back(absl::StrFormat("--%s: %s -> %s", name,
                                  values.first.empty() ? "(default)" : values.first,
                                  values.second.empty() ? "(default)" : values.second));
  }
  return out;
}

}  // namespace colonnade
