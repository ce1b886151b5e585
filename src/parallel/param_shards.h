// Gathering a parameter from the sharded layout of a model-parallel group into the full,
// canonical layout of checkpoints (DESIGN.md, "Checkpoint layout"); the way back is a
// local copy from Param::full_offset(). A sharded Param (Param::is_shard) holds rows
// [shard_offset, shard_offset + rows) of a full parameter of shape Param::full_shape();
// the mp ranks hold equal, consecutive blocks in mp_rank order. Any other parameter is
// whole on every rank (replicated).
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"
#include "parallel/communicator.h"

namespace colonnade {

// The full tensor of which `shard` (p.value, p.velocity or anything laid out like p) holds
// this rank's rows. Collective over the mp group when p is sharded (every rank of the
// group must call it, in the same order); every rank receives the full host copy. A
// replicated parameter needs no communication (mp_comm may then be null).
absl::StatusOr<std::vector<float>> GatherFullParam(const Param& p, const Tensor& shard,
                                                   Communicator* mp_comm);

}  // namespace colonnade
