#include "parallel/communicator.h"

#include <chrono>
#include <climits>
#include <functional>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/log.h"
#include "parallel/mesh.h"
#include "parallel/nccl_communicator.h"
#include "parallel/staging.h"

namespace colonnade {

// ---- shared parts --------------------------------------------------------------------------
absl::Status Communicator::AllReduceSum(Tensor& t) {
  auto h = StartAllReduceSum(t);
  if (!h.ok()) return h.status();
  return (*h)->Wait();
}

absl::Status Communicator::AllGather(const Tensor& in, Tensor& out) {
  auto h = StartAllGather(in, out);
  if (!h.ok()) return h.status();
  return (*h)->Wait();
}

absl::Status Communicator::ReduceScatterSum(const Tensor& in, Tensor& out) {
  auto h = StartReduceScatterSum(in, out);
  if (!h.ok()) return h.status();
  return (*h)->Wait();
}

absl::Status Communicator::Broadcast(Tensor& t, int root) {
  auto h = StartBroadcast(t, root);
  if (!h.ok()) return h.status();
  return (*h)->Wait();
}

absl::Status Communicator::CheckCount(int64_t n, const char* what) const {
  if (n > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s of %d elements exceeds the %d elements one collective can move", what, n, INT_MAX));
  }
  return absl::OkStatus();
}

absl::Status Communicator::CheckAllGather(const Tensor& in, const Tensor& out) const {
  if (out.size() != in.size() * size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "all-gather over %d ranks of %s into %s: the output must hold %d x %d elements", size(),
        in.shape().ToString(), out.shape().ToString(), size(), in.size()));
  }
  if (in.device() != out.device()) {
    return absl::InvalidArgumentError("all-gather input and output are on different devices");
  }
  return CheckCount(out.size(), "all-gather");
}

absl::Status Communicator::CheckReduceScatter(const Tensor& in, const Tensor& out) const {
  if (in.size() != out.size() * size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reduce-scatter over %d ranks of %s into %s: the input must hold %d x %d elements", size(),
        in.shape().ToString(), out.shape().ToString(), size(), out.size()));
  }
  if (in.device() != out.device()) {
    return absl::InvalidArgumentError("reduce-scatter input and output are on different devices");
  }
  return CheckCount(in.size(), "reduce-scatter");
}

absl::Status Communicator::CheckBroadcast(const Tensor& t, int root) const {
  if (root < 0 || root >= size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("broadcast root %d is not a rank of a group of %d", root, size()));
  }
  return CheckCount(t.size(), "broadcast");
}

namespace {

using Clock = std::chrono::steady_clock;

int64_t RingShare(int64_t bytes, int p) { return p > 1 ? bytes * (p - 1) / p : 0; }

// ---- MPI backend -------------------------------------------------------------------------------
class MpiCommunicator;

class MpiRequest : public CommRequest {
 public:
  MpiRequest(Communicator* owner, MPI_Request req, std::function<void()> finish)
      : owner_(owner), req_(req), finish_(std::move(finish)) {}
  ~MpiRequest() override {
    if (!done_) Wait().IgnoreError();
  }
  bool Test() override {
    if (done_) return true;
    int flag = 0;
    int rc = MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      Complete(MpiError(rc, "MPI_Test"));
    } else if (flag) {
      Complete(absl::OkStatus());
    }
    return done_;
  }
  absl::Status Wait() override {
    if (!done_) {
      auto t0 = Clock::now();
      int rc = MPI_Wait(&req_, MPI_STATUS_IGNORE);
      Complete(MpiError(rc, "MPI_Wait"));
      owner_->AddWaitSeconds(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return status_;
  }

 private:
  void Complete(absl::Status s) {
    done_ = true;
    status_ = std::move(s);
    if (status_.ok() && finish_) finish_();  // unstage into the device tensor
    finish_ = nullptr;                       // drops the staging buffers
  }
  Communicator* owner_;
  MPI_Request req_;
  std::function<void()> finish_;
  bool done_ = false;
  absl::Status status_;
};

// A request that completed when it was started (size-1 shortcuts never occur: MPI handles
// groups of one, so this is only used for empty tensors on a device).
class DoneRequest : public CommRequest {
 public:
  bool Test() override { return true; }
  absl::Status Wait() override { return absl::OkStatus(); }
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, int rank, int size) : Communicator(rank, size), comm_(comm) {}
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }
  const char* backend() const override { return "mpi"; }

  absl::StatusOr<CommHandle> StartAllReduceSum(Tensor& t) override {
    if (auto s = CheckCount(t.size(), "all-reduce"); !s.ok()) return s;
    const int n = static_cast<int>(t.size());
    Count(t.bytes(), 2 * RingShare(t.bytes(), size()));
    float* buf = t.data();
    std::function<void()> finish;
    if (t.device() != Device::kCPU) {
      std::shared_ptr<float> stage = Stage(t);
      buf = stage.get();
      finish = Unstage(t, stage, 0, t.bytes());
    }
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, comm_, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Iallreduce");
    return CommHandle(new MpiRequest(this, req, std::move(finish)));
  }

  absl::StatusOr<CommHandle> StartAllGather(const Tensor& in, Tensor& out) override {
    if (auto s = CheckAllGather(in, out); !s.ok()) return s;
    const int n = static_cast<int>(in.size());
    Count(out.bytes(), RingShare(out.bytes(), size()));
    const float* send = in.data();
    float* recv = out.data();
    std::function<void()> finish;
    if (out.device() != Device::kCPU) {
      // One buffer: the gathered output, with this rank's block filled from `in`.
      std::shared_ptr<float> stage = pool_.Get(out.bytes());
      Sync(out.device());
      GetBackend(in.device())
          ->CopyToHost(stage.get() + static_cast<int64_t>(rank()) * n, in.data(), in.bytes());
      recv = stage.get();
      send = nullptr;  // in place
      finish = Unstage(out, stage, 0, out.bytes());
    } else if (in.data() == out.data() + static_cast<int64_t>(rank()) * n) {
      send = nullptr;  // the caller's input already sits in its block
    }
    MPI_Request req;
    int rc = MPI_Iallgather(send == nullptr ? MPI_IN_PLACE : send, n, MPI_FLOAT, recv, n, MPI_FLOAT,
                            comm_, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Iallgather");
    return CommHandle(new MpiRequest(this, req, std::move(finish)));
  }

  absl::StatusOr<CommHandle> StartReduceScatterSum(const Tensor& in, Tensor& out) override {
    if (auto s = CheckReduceScatter(in, out); !s.ok()) return s;
    const int n = static_cast<int>(out.size());
    Count(in.bytes(), RingShare(in.bytes(), size()));
    const float* send = in.data();
    float* recv = out.data();
    std::function<void()> finish;
    if (in.device() != Device::kCPU) {
      // [input | output] in one buffer.
      std::shared_ptr<float> stage = pool_.Get(in.bytes() + out.bytes());
      Sync(in.device());
      GetBackend(in.device())->CopyToHost(stage.get(), in.data(), in.bytes());
      send = stage.get();
      recv = stage.get() + in.size();
      finish = Unstage(out, stage, in.size(), out.bytes());
    }
    MPI_Request req;
    int rc = MPI_Ireduce_scatter_block(send, recv, n, MPI_FLOAT, MPI_SUM, comm_, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Ireduce_scatter_block");
    return CommHandle(new MpiRequest(this, req, std::move(finish)));
  }

  absl::StatusOr<CommHandle> StartBroadcast(Tensor& t, int root) override {
    if (auto s = CheckBroadcast(t, root); !s.ok()) return s;
    Count(t.bytes(), size() > 1 ? static_cast<int64_t>(t.bytes()) : 0);
    float* buf = t.data();
    std::function<void()> finish;
    if (t.device() != Device::kCPU) {
      std::shared_ptr<float> stage = Stage(t);
      buf = stage.get();
      finish = Unstage(t, stage, 0, t.bytes());
    }
    MPI_Request req;
    int rc = MPI_Ibcast(buf, static_cast<int>(t.size()), MPI_FLOAT, root, comm_, &req);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Ibcast");
    return CommHandle(new MpiRequest(this, req, std::move(finish)));
  }

  absl::Status Barrier() override {
    auto t0 = Clock::now();
    absl::Status s = MpiError(MPI_Barrier(comm_), "MPI_Barrier");
    AddWaitSeconds(std::chrono::duration<double>(Clock::now() - t0).count());
    return s;
  }

 private:
  // Device work queued on other streams must be finished before the host copy.
  static void Sync(Device d) { GetBackend(d)->Synchronize(); }
  std::shared_ptr<float> Stage(const Tensor& t) {
    std::shared_ptr<float> stage = pool_.Get(t.bytes());
    Sync(t.device());
    GetBackend(t.device())->CopyToHost(stage.get(), t.data(), t.bytes());
    return stage;
  }
  // Copies `bytes` from stage + offset (floats) into t when the operation completes.
  static std::function<void()> Unstage(Tensor& t, std::shared_ptr<float> stage, int64_t offset,
                                       size_t bytes) {
    Backend* b = GetBackend(t.device());
    float* dst = t.data();
    return [b, dst, stage, offset, bytes]() { b->CopyFromHost(dst, stage.get() + offset, bytes); };
  }

  MPI_Comm comm_;
  StagingPool pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(MPI_Comm comm) {
  MPI_Comm dup;
  if (auto s = MpiError(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup"); !s.ok()) return s;
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  return std::unique_ptr<Communicator>(new MpiCommunicator(dup, rank, size));
}

bool NcclCompiledIn() {
#ifdef COLONNADE_WITH_NCCL
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const std::string& kind,
                                                                 MPI_Comm comm, Device device) {
  if (kind != "auto" && kind != "mpi" && kind != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrFormat("--comm=%s: expected auto, nccl or mpi", kind));
  }
  if (kind == "mpi") return CreateMpiCommunicator(comm);
  if (device != Device::kCUDA) {
    if (kind == "nccl") {
      return absl::InvalidArgumentError(
          "--comm=nccl needs GPU tensors (--device=cuda); use --comm=mpi on the CPU");
    }
    return CreateMpiCommunicator(comm);
  }
#ifdef COLONNADE_WITH_NCCL
  absl::StatusOr<std::string> shared = DescribeSharedGpus(comm);  // collective
  if (!shared.ok()) return shared.status();
  if (!shared->empty()) {
    if (kind == "nccl") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--comm=nccl: %s, and NCCL refuses several ranks on one GPU; use --comm=mpi for "
          "such layouts",
          *shared));
    }
    return CreateMpiCommunicator(comm);
  }
  return CreateNcclCommunicator(comm);
#else
  if (kind == "nccl") {
    return absl::InvalidArgumentError(
        "--comm=nccl: this build has no NCCL (configure with NCCL_INCLUDE_DIR/NCCL_LIBRARY or "
        "NCCL_HOME); use --comm=mpi");
  }
  return CreateMpiCommunicator(comm);
#endif
}

}  // namespace colonnade
