// Moving parameters between the sharded layout of a model-parallel group and the full,
// canonical layout of checkpoints (DESIGN.md, "Checkpoint layout"). A sharded Param holds
// rows [shard_offset, shard_offset + rows) of a full parameter of full_rows rows along
// dim 0; the mp ranks hold equal, consecutive blocks in mp_rank order. A parameter with
// full_rows == 0 is whole on every rank (replicated).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"
#include "parallel/communicator.h"

namespace colonnade {

// The full parameter's shape (the shard's shape with dim 0 = full_rows).
Shape FullParamShape(const Param& p);

// The full tensor of which `shard` (p.value, p.velocity or anything laid out like p) holds
// this rank's rows. Collective over the mp group when p is sharded (every rank of the
// group must call it, in the same order); every rank receives the full host copy. A
// replicated parameter needs no communication (mp_comm may then be null).
absl::StatusOr<std::vector<float>> GatherFullParam(const Param& p, const Tensor& shard,
                                                   Communicator* mp_comm);

// Copies this rank's rows of `full` (the whole parameter, canonical layout, e.g. read from
// a checkpoint written under any layout) into `shard`. Local: no communication.
absl::Status ScatterFullParam(const Param& p, const std::vector<float>& full, Tensor& shard);

}  // namespace colonnade
