// Net <-> checkpoint entries: host copies of full tensors, and the cut of a shard out of
// a full tensor on resume. Kept apart from read.cc and write.cc so that the file-format code
// links without the Net and its ops.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"
#include "core/status_macros.h"

namespace colonnade::checkpoint {

ExpectedTensors ExpectedFromNet(const Net& net) {
  ExpectedTensors out;
  for (const NamedParam& np : net.params()) out.push_back({np.name, np.param->full_shape().dims()});
  return out;
}

ExpectedModel ExpectedModelOf(const Net& net) { return {net.model_name(), ExpectedFromNet(net)}; }

absl::Status CollectFromNet(const Net& net, const GatherFn& gather, std::vector<TensorEntry>* out) {
  for (const NamedParam& np : net.params()) {
    const Param& p = *np.param;
    if (p.value.empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s has no storage: build the net (Net::Build) before collecting a checkpoint", np.name));
    }
    TensorEntry e;
    e.name = np.name;
    e.shape = p.full_shape().dims();
    e.learnable = p.learnable;
    ASSIGN_OR_RETURN(e.value, gather(p, p.value));
    if (p.learnable) {
      if (p.velocity.size() != p.value.size()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s has %d values but a velocity of %d", np.name, p.value.size(), p.velocity.size()));
      }
      ASSIGN_OR_RETURN(e.velocity, gather(p, p.velocity));
    }
    if (!p.ema.empty()) {  // the moving average, made whole as the value is
      if (p.ema.size() != p.value.size()) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s has %d values but a moving average of %d", np.name, p.value.size(), p.ema.size()));
      }
      ASSIGN_OR_RETURN(e.ema, gather(p, p.ema));
    }
    // Dropped at once when `out` is null: a rank that only takes part in the gathers never
    // holds more than one full tensor.
    if (out) out->push_back(std::move(e));
  }
  return absl::OkStatus();
}

absl::Status LoadIntoParam(const TensorEntry& entry, Param& p) {
  const std::vector<int64_t> full = p.full_shape().dims();
  if (entry.shape != full) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: checkpoint shape (%s) differs from the parameter's full shape (%s)",
                        entry.name, absl::StrJoin(entry.shape, ", "), absl::StrJoin(full, ", ")));
  }
  const int64_t rows = p.value.shape()[0];
  const int64_t row = rows > 0 ? p.value.size() / rows : 0;
  const int64_t offset = p.full_rows > 0 ? p.shard_offset : 0;
  if (offset < 0 || offset + rows > full[0]) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: shard rows %d..%d lie outside the %d rows of the full tensor",
                        entry.name, offset, offset + rows, full[0]));
  }
  const int64_t begin = offset * row, count = rows * row;
  if (static_cast<int64_t>(entry.value.size()) < begin + count) {
    return absl::FailedPreconditionError(entry.name + ": checkpoint entry has too few values");
  }
  p.value.CopyFromHost(entry.value.data() + begin, count);
  if (p.learnable && !entry.velocity.empty()) {
    if (p.velocity.size() != p.value.size()) {
      return absl::FailedPreconditionError(entry.name + ": the parameter has no velocity buffer");
    }
    if (static_cast<int64_t>(entry.velocity.size()) < begin + count) {
      return absl::FailedPreconditionError(entry.name + ": checkpoint velocity has too few values");
    }
    p.velocity.CopyFromHost(entry.velocity.data() + begin, count);
  } else if (!p.velocity.empty()) {
    p.velocity.Fill(0.0f);
  }
  // The moving average, where the run keeps one: the file's, else (a checkpoint without one)
  // the loaded weights, which is where a fresh average starts.
  if (!p.ema.empty()) {
    if (p.ema.size() != p.value.size()) {
      return absl::FailedPreconditionError(entry.name + ": the moving average has another size");
    }
    const std::vector<float>& src = entry.ema.empty() ? entry.value : entry.ema;
    if (static_cast<int64_t>(src.size()) < begin + count) {
      return absl::FailedPreconditionError(entry.name + ": checkpoint moving average too short");
    }
    p.ema.CopyFromHost(src.data() + begin, count);
  }
  return absl::OkStatus();
}

absl::Status LoadIntoNet(const Checkpoint& ckpt, Net& net) {
  if (auto s = CheckCompatible(ckpt, ExpectedFromNet(net), net.model_name()); !s.ok()) return s;
  for (const NamedParam& np : net.params()) {
    const TensorEntry* e = ckpt.Find(np.name);
    if (e == nullptr) return absl::InternalError(np.name + " vanished after the check");
    if (auto s = LoadIntoParam(*e, *np.param); !s.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(ckpt.path, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace colonnade::checkpoint
