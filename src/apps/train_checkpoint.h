// The trainer's side of checkpoints: gathering a sharded Net into the canonical full
// tensors and writing them from one rank, and choosing and loading a checkpoint on resume.
// The file format itself lives in src/checkpoint.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/net.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"

namespace colonnade {

// Collective over the world. The ranks of data-parallel replica 0 gather their mp group's
// shards into full tensors; world rank 0 writes <dir>/ckpt-<state.step>.h5 atomically and
// keeps the newest `keep` checkpoints. Every rank returns rank 0's status.
absl::Status SaveCheckpoint(Net& net, const Mesh& mesh, Communicator* mp_comm,
                            const checkpoint::TrainState& state, const std::string& dir, int keep,
                            std::string* path);

// Resolves --resume: "none" -> nothing; "auto" -> the newest valid checkpoint in `dir`
// (nothing when there is none; corrupt or partial files are skipped with a warning
// printed by rank 0; an error when every checkpoint there is corrupt); otherwise a path.
// Rank 0 chooses and broadcasts the path, every rank reads and validates the file.
// Collective over the world.
absl::StatusOr<std::optional<checkpoint::Checkpoint>> LoadForResume(const std::string& resume,
                                                                    const std::string& dir,
                                                                    const Mesh& mesh);

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
