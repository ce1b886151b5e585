#include "parallel/param_shards.h"

#include "absl/strings/str_format.h"

namespace colonnade {

Shape FullParamShape(const Param& p) {
  Shape s = p.value.shape();
  if (p.full_rows > 0 && s.rank() > 0) s[0] = p.full_rows;
  return s;
}

absl::StatusOr<std::vector<float>> GatherFullParam(const Param& p, const Tensor& shard,
                                                   Communicator* mp_comm) {
  if (shard.size() != p.value.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GatherFullParam %s: tensor %s is not laid out like the parameter %s", p.name,
        shard.shape().ToString(), p.value.shape().ToString()));
  }
  if (p.full_rows == 0) return shard.ToHost();
  const int64_t rows = p.value.shape()[0];
  if (mp_comm == nullptr || p.full_rows != rows * mp_comm->size() ||
      p.shard_offset != rows * mp_comm->rank()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GatherFullParam %s: rows [%d, %d) of %d do not match rank %d of an mp group of %d",
        p.name, p.shard_offset, p.shard_offset + rows, p.full_rows,
        mp_comm ? mp_comm->rank() : -1, mp_comm ? mp_comm->size() : 0));
  }
  Tensor full(FullParamShape(p), shard.device());
  if (auto s = mp_comm->AllGather(shard, full); !s.ok()) return s;
  return full.ToHost();
}

absl::Status ScatterFullParam(const Param& p, const std::vector<float>& full, Tensor& shard) {
  const Shape fs = FullParamShape(p);
  if (static_cast<int64_t>(full.size()) != fs.elements() || shard.size() != p.value.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ScatterFullParam %s: %d values for a full parameter of shape %s (shard %s)", p.name,
        full.size(), fs.ToString(), p.value.shape().ToString()));
  }
  if (p.full_rows == 0) {
    shard.CopyFromHost(full);
    return absl::OkStatus();
  }
  const int64_t row = p.value.size() / p.value.shape()[0];
  shard.CopyFromHost(full.data() + p.shard_offset * row, shard.size());
  return absl::OkStatus();
}

}  // namespace colonnade
