#include "apps/train_checkpoint.h"

#include <mpi.h>

#include <cstdio>
#include <vector>

#include "absl/strings/str_format.h"
#include "parallel/param_shards.h"

namespace colonnade {
namespace {

// Broadcasts rank 0's status (code and message) to every rank of `comm`.
absl::Status ShareStatus(const absl::Status& s, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int code = static_cast<int>(s.code());
  MPI_Bcast(&code, 1, MPI_INT, 0, comm);
  std::string message(s.message());
  int len = static_cast<int>(message.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, comm);
  message.resize(len);
  MPI_Bcast(message.data(), len, MPI_CHAR, 0, comm);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

std::string ShareString(const std::string& s, MPI_Comm comm) {
  int len = static_cast<int>(s.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, comm);
  std::string out = s;
  out.resize(len);
  MPI_Bcast(out.data(), len, MPI_CHAR, 0, comm);
  return out;
}

}  // namespace

absl::Status SaveCheckpoint(Net& net, const Mesh& mesh, Communicator* mp_comm,
                            const checkpoint::TrainState& state, const std::string& dir, int keep,
                            std::string* path) {
  absl::Status status;
  if (mesh.dp_rank() == 0) {
    std::vector<checkpoint::TensorEntry> entries;
    for (const NamedParam& np : net.params()) {
      const Param& p = *np.param;
      checkpoint::TensorEntry e;
      e.name = np.name;
      e.shape = checkpoint::FullShape(p);
      e.learnable = p.learnable;
      absl::StatusOr<std::vector<float>> value = GatherFullParam(p, p.value, mp_comm);
      if (!value.ok()) {
        status = value.status();
        break;
      }
      e.value = std::move(*value);
      if (p.learnable) {
        absl::StatusOr<std::vector<float>> velocity = GatherFullParam(p, p.velocity, mp_comm);
        if (!velocity.ok()) {
          status = velocity.status();
          break;
        }
        e.velocity = std::move(*velocity);
      }
      if (mesh.world_rank() == 0) entries.push_back(std::move(e));
    }
    if (status.ok() && mesh.world_rank() == 0) {
      std::vector<std::string> warnings;
      std::string written;
      status = checkpoint::Write(dir, state, entries, keep, &written, &warnings);
      for (const std::string& w : warnings) std::fprintf(stderr, "trainer: warning: %s\n", w.c_str());
      if (path) *path = written;
    }
  }
  return ShareStatus(status, mesh.world_comm());
}

absl::StatusOr<std::optional<checkpoint::Checkpoint>> LoadForResume(const std::string& resume,
                                                                    const std::string& dir,
                                                                    const Mesh& mesh) {
  if (resume == "none") return std::optional<checkpoint::Checkpoint>();
  std::string path;
  absl::Status status;
  if (mesh.world_rank() == 0) {
    if (resume == "auto") {
      if (!dir.empty()) {
        std::vector<std::string> warnings;
        absl::StatusOr<std::string> found = checkpoint::FindLatestValid(dir, &warnings);
        for (const std::string& w : warnings) {
          std::fprintf(stderr, "trainer: warning: %s\n", w.c_str());
        }
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
  absl::StatusOr<checkpoint::Checkpoint> ckpt = checkpoint::Read(path);
  // Every rank read the same file; agree on the outcome so no rank runs on alone.
  int ok = ckpt.ok() ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, mesh.world_comm());
  if (!ckpt.ok()) return ckpt.status();
  if (!all_ok) {
    return absl::DataLossError(absl::StrFormat("%s could not be read on every rank", path));
  }
  return std::optional<checkpoint::Checkpoint>(std::move(*ckpt));
}

}  // namespace colonnade
