// The NCCL backend of Communicator (compiled only with COLONNADE_WITH_NCCL).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "parallel/communicator.h"

namespace colonnade {

#ifdef COLONNADE_WITH_NCCL
// Collective over `comm`: "" when every rank uses its own GPU (compared by PCI bus id),
// else a description such as "ranks 0 and 1 both use GPU 0000:19:00.0". Every rank
// returns the same answer.
absl::StatusOr<std::string> DescribeSharedGpus(MPI_Comm comm);

// Creates an NCCL communicator over the ranks of `comm` on the current CUDA device
// (cudaSetDevice first). Rank 0 makes the unique id and broadcasts it over `comm`.
// Operations need CUDA tensors; they run on the communicator's own non-blocking stream
// after all work queued on the device so far.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(MPI_Comm comm);
#endif

}  // namespace colonnade
