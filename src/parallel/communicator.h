// Communicator: collectives over one group of ranks (an mp group or a dp group), on
// Tensors of float32, asynchronous with completion handles.
//
// Two backends:
//   "mpi"   host memory; tensors on a GPU are staged through pinned host buffers. Works
//           for any placement, including several ranks on one GPU.
//   "nccl"  GPU tensors only, on the communicator's own CUDA stream; bootstrapped by
//           broadcasting the NCCL unique id over the group's MPI communicator. NCCL
//           refuses two ranks on one GPU, so such layouts need --comm=mpi.
//
// Every rank of the group must start the same collectives in the same order (as with
// MPI). A started operation owns nothing: the caller keeps its tensors alive and
// untouched until the handle completes. Handles are waited for (or destroyed, which
// waits) on the thread that started them.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace colonnade {

// Counters for what a communicator moved, per rank.
struct CommStats {
  int64_t calls = 0;
  // Bytes of the tensors handed to collectives (an all-reduce of n floats counts 4n).
  int64_t payload_bytes = 0;
  // Bytes this rank sends under the bandwidth-optimal (ring) algorithms: all-reduce
  // 2(p-1)/p * n, all-gather and reduce-scatter (p-1)/p * (full size), broadcast n
  // (root). What the link must carry; the cost model of docs/PARALLELISM.md uses it.
  int64_t wire_bytes = 0;
  // Seconds the calling thread spent blocked waiting for completions.
  double wait_seconds = 0;
};

class CommRequest {
 public:
  virtual ~CommRequest() = default;
  // Lets the operation progress (MPI needs the calls: Open MPI has no progress thread by
  // default); true once it is complete and its results are in place.
  virtual bool Test() = 0;
  // Blocks until complete.
  virtual absl::Status Wait() = 0;
};
using CommHandle = std::unique_ptr<CommRequest>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual const char* backend() const = 0;  // "mpi" or "nccl"
  int rank() const { return rank_; }
  int size() const { return size_; }

  // t = sum over ranks of t, in place.
  virtual absl::StatusOr<CommHandle> StartAllReduceSum(Tensor& t) = 0;
  // out (size() * in.size() elements) = the inputs of ranks 0, 1, ... one after another.
  // For CHWN tensors split along channels that is the channel concatenation.
  virtual absl::StatusOr<CommHandle> StartAllGather(const Tensor& in, Tensor& out) = 0;
  // out (in.size() / size() elements) = block rank() of the sum over ranks of in.
  virtual absl::StatusOr<CommHandle> StartReduceScatterSum(const Tensor& in, Tensor& out) = 0;
  // t = root's t.
  virtual absl::StatusOr<CommHandle> StartBroadcast(Tensor& t, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // Blocking forms: start and wait.
  absl::Status AllReduceSum(Tensor& t);
  absl::Status AllGather(const Tensor& in, Tensor& out);
  absl::Status ReduceScatterSum(const Tensor& in, Tensor& out);
  absl::Status Broadcast(Tensor& t, int root);

  const CommStats& stats() const { return stats_; }
  void ResetStats() { stats_ = CommStats(); }
  // Added by the handles' Wait (and by blocking calls).
  void AddWaitSeconds(double s) { stats_.wait_seconds += s; }

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}
  // Shape checks shared by the backends (also reject counts MPI's int cannot hold).
  absl::Status CheckAllGather(const Tensor& in, const Tensor& out) const;
  absl::Status CheckReduceScatter(const Tensor& in, const Tensor& out) const;
  absl::Status CheckBroadcast(const Tensor& t, int root) const;
  absl::Status CheckCount(int64_t n, const char* what) const;
  void Count(int64_t payload_bytes, int64_t wire_bytes) {
    stats_.calls++;
    stats_.payload_bytes += payload_bytes;
    stats_.wire_bytes += wire_bytes;
  }

  CommStats stats_;

 private:
  int rank_, size_;
};

// Creates a communicator over the ranks of `comm` (duplicated, so its traffic never
// mixes with other users of `comm`; collective over `comm`). `kind` is "mpi", "nccl" or
// "auto": NCCL when `device` is CUDA, NCCL is compiled in and every rank of the group has
// its own GPU, else MPI. "nccl" with two ranks on one GPU is an error that says to use
// --comm=mpi. Every rank of `comm` returns the same status.
absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const std::string& kind,
                                                                 MPI_Comm comm, Device device);

// The backends, for tests and for CreateCommunicator.
absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm);
// Whether this build has the NCCL backend.
bool NcclCompiledIn();

}  // namespace colonnade
