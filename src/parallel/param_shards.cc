#include "parallel/param_shards.h"

#include "absl/strings/str_format.h"
#include "core/status_macros.h"

namespace colonnade {

absl::StatusOr<std::vector<float>> GatherFullParam(const Param& p, const Tensor& shard,
                                                   Communicator* mp_comm) {
  if (shard.size() != p.value.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GatherFullParam %s: tensor %s is not laid out like the parameter %s",
                        p.name, shard.shape().ToString(), p.value.shape().ToString()));
  }
  if (!p.is_shard()) return shard.ToHost();
  const int64_t rows = p.value.shape()[0];
  if (mp_comm == nullptr || p.full_rows != rows * mp_comm->size() ||
      p.shard_offset != rows * mp_comm->rank()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GatherFullParam %s: rows [%d, %d) of %d do not match rank %d of an mp group of %d", p.name,
        p.shard_offset, p.shard_offset + rows, p.full_rows, mp_comm ? mp_comm->rank() : -1,
        mp_comm ? mp_comm->size() : 0));
  }
  Tensor full(p.full_shape(), shard.device());
  RETURN_IF_ERROR(mp_comm->AllGather(shard, full));
  return full.ToHost();
}

}  // namespace colonnade
