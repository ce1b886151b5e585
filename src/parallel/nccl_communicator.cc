// NCCL backend: GPU collectives on the communicator's own stream.
//
// Ordering with the compute stream: an operation records an event on the CUDA backend's
// compute stream (cuda::ComputeStream) and makes its own non-blocking stream wait for it,
// so the collective starts after the kernels that produced its input without stalling the
// host; compute queued afterwards (the rest of backward) overlaps with it. (Without a
// compute stream to wait on, it synchronises the device first.) The handle's Wait blocks
// the host until the collective's completion event, after which any later work, on any
// stream, sees the result.
#include "parallel/nccl_communicator.h"

#ifdef COLONNADE_WITH_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "cuda/cuda_backend.h"
#include "parallel/mesh.h"
#include "parallel/watchdog.h"

namespace colonnade {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s failed: %s", what, cudaGetErrorString(e)));
}

absl::Status NcclError(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrFormat("%s failed: %s", what, ncclGetErrorString(r)));
}

int64_t RingShare(int64_t bytes, int p) { return p > 1 ? bytes * (p - 1) / p : 0; }

class NcclRequest : public CommRequest {
 public:
  NcclRequest(Communicator* owner, ncclComm_t comm, cudaEvent_t event)
      : owner_(owner), comm_(comm), event_(event) {}
  ~NcclRequest() override {
    if (!done_) Wait().IgnoreError();
    cudaEventDestroy(event_);
  }
  bool Test() override {
    if (done_) return true;
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) {
      Finish(absl::OkStatus());
    } else if (e != cudaErrorNotReady) {
      Finish(CudaError(e, "cudaEventQuery (NCCL collective)"));
    }
    return done_;
  }
  absl::Status Wait() override {
    if (done_) return status_;
    WatchdogWait watched("an NCCL collective");
    auto t0 = Clock::now();
    // Poll rather than block so that an NCCL failure on a peer (reported asynchronously)
    // ends the wait with an error instead of a hang.
    while (true) {
      cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) {
        Finish(absl::OkStatus());
        break;
      }
      if (e != cudaErrorNotReady) {
        Finish(CudaError(e, "cudaEventQuery (NCCL collective)"));
        break;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        Finish(NcclError(async, "NCCL collective"));
        break;
      }
      std::this_thread::yield();
    }
    owner_->AddWaitSeconds(std::chrono::duration<double>(Clock::now() - t0).count());
    return status_;
  }

 private:
  void Finish(absl::Status s) {
    done_ = true;
    status_ = std::move(s);
  }
  Communicator* owner_;
  ncclComm_t comm_;
  cudaEvent_t event_;
  bool done_ = false;
  absl::Status status_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, int rank, int size)
      : Communicator(rank, size), comm_(comm), stream_(stream) {
    cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming);
  }
  ~NcclCommunicator() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }
  const char* backend() const override { return "nccl"; }

  absl::StatusOr<CommHandle> StartAllReduceSum(Tensor& t) override {
    if (auto s = CheckDevice(t, "all-reduce"); !s.ok()) return s;
    Count(t.bytes(), 2 * RingShare(t.bytes(), size()));
    Before();
    auto r = ncclAllReduce(t.data(), t.data(), t.size(), ncclFloat, ncclSum, comm_, stream_);
    return After(r, "ncclAllReduce");
  }
  absl::StatusOr<CommHandle> StartAllGather(const Tensor& in, Tensor& out) override {
    if (auto s = CheckAllGather(in, out); !s.ok()) return s;
    if (auto s = CheckDevice(out, "all-gather"); !s.ok()) return s;
    Count(out.bytes(), RingShare(out.bytes(), size()));
    Before();
    auto r = ncclAllGather(in.data(), out.data(), in.size(), ncclFloat, comm_, stream_);
    return After(r, "ncclAllGather");
  }
  absl::StatusOr<CommHandle> StartReduceScatterSum(const Tensor& in, Tensor& out) override {
    if (auto s = CheckReduceScatter(in, out); !s.ok()) return s;
    if (auto s = CheckDevice(in, "reduce-scatter"); !s.ok()) return s;
    Count(in.bytes(), RingShare(in.bytes(), size()));
    Before();
    auto r =
        ncclReduceScatter(in.data(), out.data(), out.size(), ncclFloat, ncclSum, comm_, stream_);
    return After(r, "ncclReduceScatter");
  }
  absl::StatusOr<CommHandle> StartBroadcast(Tensor& t, int root) override {
    if (auto s = CheckBroadcast(t, root); !s.ok()) return s;
    if (auto s = CheckDevice(t, "broadcast"); !s.ok()) return s;
    Count(t.bytes(), size() > 1 ? static_cast<int64_t>(t.bytes()) : 0);
    Before();
    auto r = ncclBroadcast(t.data(), t.data(), t.size(), ncclFloat, root, comm_, stream_);
    return After(r, "ncclBroadcast");
  }
  absl::Status Barrier() override {
    // A one-element all-reduce on the stream, waited for: orders device work too.
    Tensor one(Shape{1}, Device::kCUDA);
    one.Fill(0.0f);
    return AllReduceSum(one);
  }

 private:
  absl::Status CheckDevice(const Tensor& t, const char* what) const {
    if (t.device() != Device::kCUDA) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "NCCL %s of a %s tensor: the NCCL communicator needs GPU tensors (use --comm=mpi "
          "for host tensors)",
          what, DeviceName(t.device())));
    }
    return CheckCount(t.size(), what);
  }
  // The collective's input is ready once the compute stream's queued work is done.
  void Before() {
    auto compute = static_cast<cudaStream_t>(cuda::ComputeStream());
    if (compute != nullptr && cudaEventRecord(ready_, compute) == cudaSuccess &&
        cudaStreamWaitEvent(stream_, ready_, 0) == cudaSuccess) {
      return;
    }
    cudaGetLastError();
    GetBackend(Device::kCUDA)->Synchronize();
  }
  absl::StatusOr<CommHandle> After(ncclResult_t r, const char* what) {
    if (r != ncclSuccess) return NcclError(r, what);
    cudaEvent_t ev;
    if (auto s =
            CudaError(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate");
        !s.ok()) {
      return s;
    }
    if (auto s = CudaError(cudaEventRecord(ev, stream_), "cudaEventRecord"); !s.ok()) {
      cudaEventDestroy(ev);
      return s;
    }
    return CommHandle(new NcclRequest(this, comm_, ev));
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

absl::StatusOr<std::string> DescribeSharedGpus(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char host[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(host, &len);
  // "<host>/<pci bus id>" identifies a GPU across nodes.
  constexpr int kIdLen = MPI_MAX_PROCESSOR_NAME + 32;
  std::vector<char> mine(kIdLen, 0), all(static_cast<size_t>(kIdLen) * size, 0);
  int device = -1;
  char bus[32] = {0};
  int ok = cudaGetDevice(&device) == cudaSuccess &&
           cudaDeviceGetPCIBusId(bus, sizeof(bus), device) == cudaSuccess;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  if (!all_ok) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        "NCCL needs a CUDA device on every rank, and some rank has none");
  }
  std::snprintf(mine.data(), kIdLen, "%s/%s", host, bus);
  if (auto s =
          MpiError(MPI_Allgather(mine.data(), kIdLen, MPI_CHAR, all.data(), kIdLen, MPI_CHAR, comm),
                   "MPI_Allgather (GPU ids)");
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < size; ++i) {
    for (int j = i + 1; j < size; ++j) {
      if (std::strncmp(&all[i * kIdLen], &all[j * kIdLen], kIdLen) == 0) {
        return absl::StrFormat("ranks %d and %d of the group both use GPU %s", i, j,
                               std::string(&all[i * kIdLen]));
      }
    }
  }
  return std::string();
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  int ok = 1;
  if (rank == 0) ok = ncclGetUniqueId(&id) == ncclSuccess;
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) return absl::InternalError("ncclGetUniqueId failed on rank 0 of the group");
  if (auto s = MpiError(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm), "MPI_Bcast (NCCL id)");
      !s.ok()) {
    return s;
  }
  cudaStream_t stream;
  if (auto s =
          CudaError(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      !s.ok()) {
    return s;
  }
  ncclComm_t nc;
  ncclResult_t r = ncclCommInitRank(&nc, size, id, rank);
  // Agree on success so that no rank goes on with a communicator its peers lack.
  int good = r == ncclSuccess, all_good = 0;
  MPI_Allreduce(&good, &all_good, 1, MPI_INT, MPI_MIN, comm);
  if (!all_good) {
    if (good) ncclCommDestroy(nc);
    cudaStreamDestroy(stream);
    return r != ncclSuccess ? NcclError(r, "ncclCommInitRank")
                            : absl::InternalError("ncclCommInitRank failed on another rank");
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(nc, stream, rank, size));
}

}  // namespace colonnade

#endif  // COLONNADE_WITH_NCCL
