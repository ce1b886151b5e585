// CollectFromNet for a Net whose parameters are all whole (a single-process Net, or one not
// yet column-split): what the checkpoint tests and write_test_checkpoint save. The library
// has only the gathering form (checkpoint.h), which the trainer calls with the parallel
// module's GatherFullParam; this one needs no communicator. Header-only and free of
// GoogleTest, so the write_test_checkpoint helper program can use it too.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"

namespace colonnade::checkpoint {

// FailedPrecondition naming the parameter if one is a shard: gather the shards into full
// tensors first. Velocities are included for learnable parameters.
inline absl::StatusOr<std::vector<TensorEntry>> CollectFromNet(const Net& net) {
  for (const NamedParam& np : net.params()) {
    const Param& p = *np.param;
    if (!p.value.empty() && p.full_rows > 0 && p.full_rows != p.value.shape()[0]) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s is a shard (rows %d..%d of %d): gather the shards into the full tensor first",
          np.name, p.shard_offset, p.shard_offset + p.value.shape()[0], p.full_rows));
    }
  }
  std::vector<TensorEntry> out;
  absl::Status s = CollectFromNet(
      net,
      [](const Param&, const Tensor& t) -> absl::StatusOr<std::vector<float>> {
        return t.ToHost();
      },
      &out);
  if (!s.ok()) return s;
  return out;
}

}  // namespace colonnade::checkpoint
