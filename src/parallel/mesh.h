// Mesh: the world of MPI ranks arranged as dp x mp (DESIGN.md, "Rank layout").
//
//   world rank r  ->  dp_rank = r / mp,  mp_rank = r % mp
//
// The mp ranks of one model-parallel group are consecutive world ranks and must share a
// node (checked with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)), because the column split
// exchanges activations in every forward and backward pass and wants NVLink, not the
// network. The dp ranks with the same mp_rank form a data-parallel group: they hold the
// same parameter shard and average its gradient. The rank's index on its node (local
// rank) selects the GPU. Nothing here depends on the launcher, so it works alike under
// `mpirun` and Slurm's `srun`.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"

namespace colonnade {

// Checks a (world size, --mp, --columns, global --batch_size) combination. Pure: every
// rank computes the same answer from the same flags, so each can print (rank 0) and exit
// non-zero without a collective. `columns` is the model's resolved column count (1 for
// models without a column split).
absl::Status ValidateLayout(int world_size, int mp, int columns, int64_t global_batch);

class Mesh {
 public:
  // Splits `world` into the dp x mp groups. Collective over `world`; every rank returns
  // the same status (a failure found on one node, such as an mp group that spans two
  // nodes, is agreed on with an all-reduce before returning). `world` is not freed.
  static absl::StatusOr<Mesh> Create(MPI_Comm world, int mp);

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  int dp() const { return dp_; }
  int mp() const { return mp_; }
  int dp_rank() const { return dp_rank_; }
  int mp_rank() const { return mp_rank_; }
  // Index and count of the ranks on this rank's node.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int num_nodes() const { return num_nodes_; }

  MPI_Comm world_comm() const { return comms_->world; }
  // The mp ranks of this rank's model-parallel group, ordered by mp_rank.
  MPI_Comm mp_comm() const { return comms_->mp; }
  // The dp ranks holding the same shard, ordered by dp_rank.
  MPI_Comm dp_comm() const { return comms_->dp; }

  // GPU for this rank among `visible_gpus`: local_rank % visible_gpus. More ranks than
  // GPUs on a node share GPUs (then only --comm=mpi works; NCCL refuses duplicates).
  int GpuIndex(int visible_gpus) const;
  // The RunContext fields that depend on the layout: image_offset = dp_rank * local batch,
  // global_batch, loss_scale = 1 / global_batch.
  RunContext MakeRunContext(Phase phase, uint64_t seed, int64_t step, int64_t global_batch) const;
  // "world 8 = dp 4 x mp 2 on 1 node(s)"
  std::string ToString() const;

 private:
  struct Comms {
    MPI_Comm world = MPI_COMM_NULL, mp = MPI_COMM_NULL, dp = MPI_COMM_NULL;
    ~Comms();
  };
  std::shared_ptr<Comms> comms_;
  int world_rank_ = 0, world_size_ = 1, dp_ = 1, mp_ = 1, dp_rank_ = 0, mp_rank_ = 0;
  int local_rank_ = 0, local_size_ = 1, num_nodes_ = 1;
};

// Initialises MPI with MPI_THREAD_FUNNELED (only the main thread calls MPI; reader
// threads never do) and makes errors on MPI_COMM_WORLD return codes instead of aborting.
// Safe to call when MPI is already initialised.
absl::Status InitMpi(int* argc, char*** argv);
// Finalises MPI if it is initialised and not yet finalised.
void FinalizeMpi();

// The node-local rank announced by the launcher before MPI_Init (Open MPI, Slurm, MPICH,
// MVAPICH), or -1. Lets a program pick its GPU before initialising MPI or CUDA.
int LocalRankFromEnvironment();

// Sums `count` doubles over `comm` in place (loss sums, correct counts: use the dp group,
// since the mp ranks of a group hold identical copies). Blocking.
absl::Status AllReduceSumHost(MPI_Comm comm, double* values, int count);

// Rank `root`'s status (code and message) or string on every rank of `comm`: how an error
// one rank sees becomes the error every rank agrees on. Collective over `comm`.
absl::Status BroadcastStatus(const absl::Status& s, int root, MPI_Comm comm);
std::string BroadcastString(const std::string& s, int root, MPI_Comm comm);

// Turns an MPI error code into a Status naming the call.
absl::Status MpiError(int code, const char* what);

}  // namespace colonnade
