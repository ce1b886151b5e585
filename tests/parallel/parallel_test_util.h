// Helpers shared by the parallel tests: a small model with every kind of column
// placement, deterministic batches keyed by global image index, a training loop over a
// (dp, mp) layout, and a host-memory stand-in for a GPU backend.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef COLONNADE_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/layers.h"
#include "core/models.h"
#include "core/net.h"
#include "core/optimizer.h"
#include "core/philox.h"
#include "cuda/cuda_backend.h"
#include "absl/strings/str_format.h"
#include "parallel/communicator.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/model_split.h"
#include "parallel/param_shards.h"

namespace colonnade::testing_parallel {

// The inverse of GatherFullParam: copies this rank's rows of `full` (the whole parameter,
// canonical layout) into `shard`. Checkpoints restore shards the same way
// (Param::full_offset).
inline absl::Status ScatterFullParam(const Param& p, const std::vector<float>& full,
                                     Tensor& shard) {
  const Shape fs = p.full_shape();
  if (static_cast<int64_t>(full.size()) != fs.elements() || shard.size() != p.value.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ScatterFullParam %s: %d values for a full parameter of shape %s (shard %s)", p.name,
        full.size(), fs.ToString(), p.value.shape().ToString()));
  }
  shard.CopyFromHost(full.data() + p.full_offset(), shard.size());
  return absl::OkStatus();
}

// ---- a device that is host memory ------------------------------------------------------------
// Registered as Device::kCUDA so that tensors on it take the communicators' staging paths
// (pinned host buffers, device copies) on a machine without a GPU. Counts the copies.
class HostAsDeviceOps : public CpuOps {
 public:
  Device device() const override { return Device::kCUDA; }
};

class HostAsDeviceBackend : public Backend {
 public:
  Device device() const override { return Device::kCUDA; }
  void* Allocate(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void Free(void* p) override { std::free(p); }
  void CopyToHost(void* dst, const void* src, size_t n) override {
    ++to_host;
    std::memcpy(dst, src, n);
  }
  void CopyFromHost(void* dst, const void* src, size_t n) override {
    ++from_host;
    std::memcpy(dst, src, n);
  }
  void CopyDeviceToDevice(void* dst, const void* src, size_t n) override {
    std::memcpy(dst, src, n);
  }
  void Synchronize() override { ++syncs; }
  Ops& ops() override { return ops_; }
  int64_t to_host = 0, from_host = 0, syncs = 0;

 private:
  HostAsDeviceOps ops_;
};

// With COLONNADE_TEST_CUDA=1 the suites run their device cases on the real GPU backend
// (one GPU per rank by local rank; ranks beyond the GPU count share them) and with
// CreateCommunicator("auto"), i.e. NCCL where every rank has its own GPU. Called by
// mpi_test_main before the tests.
inline bool RealCudaRequested() {
  const char* e = std::getenv("COLONNADE_TEST_CUDA");
  return e != nullptr && std::string(e) == "1";
}
inline absl::Status RegisterRealCuda() {
  int gpus = 0;
#ifdef COLONNADE_WITH_CUDA
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
#endif
  if (gpus < 1) return absl::FailedPreconditionError("COLONNADE_TEST_CUDA=1 but no GPU is usable");
  const int local = std::max(0, LocalRankFromEnvironment());
  return cuda::RegisterBackend(local % gpus);
}

// Registers the stand-in once (when no real CUDA backend is registered) and returns it,
// or null when a real one is present.
inline HostAsDeviceBackend* HostAsDevice() {
  static HostAsDeviceBackend* b = [] {
    if (GetBackend(Device::kCUDA) != nullptr) return static_cast<HostAsDeviceBackend*>(nullptr);
    auto owned = std::make_unique<HostAsDeviceBackend>();
    HostAsDeviceBackend* raw = owned.get();
    RegisterBackend(std::move(owned));
    return raw;
  }();
  return b;
}

// The device for the suites' device cases and the communicator kind to use on it: the
// real GPU with "auto" (NCCL when possible), or the stand-in with "mpi".
struct DeviceCase {
  Device device;
  std::string comm;
};
inline DeviceCase DeviceUnderTest() {
  if (HostAsDevice() != nullptr) return {Device::kCUDA, "mpi"};
  return {Device::kCUDA, "auto"};
}

// ---- the test model
// ------------------------------------------------------------------------------ 3x15x15 images, K
// = 4 columns. Exercises: a cross conv on the images, LRN across channels in column groups,
// isolated convs, a cross conv on a split blob (all-gather, reduce-scatter), a conv without column
// info (replicated on gathered input), an isolated conv reading a replicated blob (slice), a split
// blob with two readers (conv4 and the residual add), average pooling, dropout on split blobs,
// cross fc layers, an fc whose 5 outputs do not split (replicated), a cross fc reading a replicated
// computed blob (gradient all-reduce), a replicated blob with two readers, an add of a split and a
// replicated blob, and the loss on gathered logits.
inline std::unique_ptr<Net> BuildColumnTestNet(int classes = 8) {
  const int k = 4;
  ColumnInfo cross{ColumnInfo::kCross, k}, isolated{ColumnInfo::kIsolated, k};
  auto conv = [](int kernel, int pad, int groups) {
    ConvParams p;
    p.kernel_h = p.kernel_w = kernel;
    p.pad = pad;
    p.groups = groups;
    return p;
  };
  auto net = std::make_unique<Net>("column-test");
  net->set_columns(k);
  net->AddInput("data", Shape{3, 15, 15});
  net->AddInput("label", Shape{1, 1, 1});
  LrnCrossParams lrn;
  lrn.size = 3;
  lrn.groups = k;
  lrn.k = 1.0f;
  lrn.alpha = 1e-2f;
  PoolParams maxpool, avgpool;
  avgpool.kind = PoolParams::kAvg;
  net->Emplace<ConvLayer>({"data"}, {"conv1"}, "conv1", 8, conv(3, 1, 1), true, cross, 0.1f);
  net->Emplace<ReluLayer>({"conv1"}, {"conv1"}, "conv1_relu");
  net->Emplace<LrnCrossLayer>({"conv1"}, {"norm1"}, "norm1", lrn);
  net->Emplace<PoolLayer>({"norm1"}, {"pool1"}, "pool1", maxpool);  // 7x7
  net->Emplace<ConvLayer>({"pool1"}, {"conv2"}, "conv2", 8, conv(3, 1, k), true, isolated, 0.5f);
  net->Emplace<ReluLayer>({"conv2"}, {"conv2"}, "conv2_relu");
  net->Emplace<ConvLayer>({"conv2"}, {"conv3"}, "conv3", 12, conv(3, 1, 1), true, cross, 0.0f);
  net->Emplace<ReluLayer>({"conv3"}, {"conv3"}, "conv3_relu");
  net->Emplace<ConvLayer>({"conv3"}, {"conv3b"}, "conv3b", 8, conv(1, 0, 1), true, ColumnInfo{},
                          0.0f);
  net->Emplace<ConvLayer>({"conv3b"}, {"conv3c"}, "conv3c", 8, conv(3, 1, k), true, isolated, 0.1f);
  net->Emplace<ReluLayer>({"conv3c"}, {"conv3c"}, "conv3c_relu");
  net->Emplace<ConvLayer>({"conv3c"}, {"conv4"}, "conv4", 8, conv(3, 1, k), true, isolated, 0.0f);
  net->Emplace<AddLayer>({"conv3c", "conv4"}, {"res4"}, "res4");
  net->Emplace<PoolLayer>({"res4"}, {"pool4"}, "pool4", avgpool);  // 3x3
  net->Emplace<DropoutLayer>({"pool4"}, {"drop4"}, "drop4", 0.25f);
  net->Emplace<FullyConnectedLayer>({"drop4"}, {"fc5"}, "fc5", 16, cross, 0.1f);
  net->Emplace<ReluLayer>({"fc5"}, {"fc5"}, "fc5_relu");
  net->Emplace<DropoutLayer>({"fc5"}, {"drop5"}, "drop5", 0.5f);
  net->Emplace<FullyConnectedLayer>({"drop5"}, {"fc6"}, "fc6", 5, cross, 0.0f);  // replicated
  net->Emplace<ReluLayer>({"fc6"}, {"fc6"}, "fc6_relu");
  net->Emplace<FullyConnectedLayer>({"fc6"}, {"fc7"}, "fc7", classes, cross, 0.0f);  // sharded
  net->Emplace<FullyConnectedLayer>({"fc6"}, {"fc7b"}, "fc7b", classes, ColumnInfo{}, 0.0f);
  net->Emplace<AddLayer>({"fc7", "fc7b"}, {"logits"}, "logits");
  net->Emplace<SoftmaxLossLayer>({"logits", "label"}, {"loss", "probs"}, "loss");
  // Larger initial weights than He's so that 5 steps move every layer measurably.
  for (const NamedParam& np : net->params()) {
    if (np.param->name == "weight") {
      np.param->init.kind = InitSpec::kGaussian;
      np.param->init.value = 0.2f;
    }
  }
  return net;
}

// ---- data
// ---------------------------------------------------------------------------------------- Image g
// of the run (g = step * global_batch + index in the global batch) and its label are functions of
// (seed, g) only, so every layout feeds the same global batch.
inline void FillBatch(Net& net, uint64_t seed, int64_t step, int64_t global_batch,
                      int64_t first_in_batch, int classes) {
  Tensor& data = net.blob("data");
  const int64_t n = data.n(), per_image = data.size() / n;
  std::vector<float> x(data.size()), y(n);
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(RandomPurpose::kSynthetic));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t g = static_cast<uint64_t>(step * global_batch + first_in_batch + i);
    for (int64_t e = 0; e < per_image; ++e) x[e * n + i] = PhiloxNormal(key, g, e);
    y[i] =
        static_cast<float>(static_cast<int>(PhiloxUniform(key, g, per_image) * classes) % classes);
  }
  data.CopyFromHost(x);
  net.blob("label").CopyFromHost(y);
}

// ---- training over a layout
// ------------------------------------------------------------------------
struct TrainSpec {
  int64_t global_batch = 8;
  int steps = 5;
  float lr = 0.1f;
  SgdOptions sgd{0.9f, 5e-4f};
  uint64_t seed = 7;
  double bucket_mb = 0.0005;  // 131 floats: 7 buckets of the column-test net
  Device device = Device::kCPU;
};

struct TrainResult {
  std::vector<double> losses;  // mean loss of the global batch, per step
  // Full (gathered) parameters after the last step and gradients of step 0, by name;
  // filled on every rank.
  std::vector<std::pair<std::string, std::vector<float>>> params, grads0;
  int buckets = 0;
  int launched_in_backward = 0;
};

// Trains `full` (a fresh, unbuilt model) for spec.steps steps on the (mesh.dp(), mesh.mp())
// layout. Collective over mesh.world_comm(). Every parameter is gathered over the mp group
// at the end (and its gradient at step 0).
inline absl::StatusOr<TrainResult> TrainOnLayout(std::unique_ptr<Net> full, const Mesh& mesh,
                                                 Communicator* mp_comm, Communicator* dp_comm,
                                                 const TrainSpec& spec) {
  absl::StatusOr<ModelShard> shard = SplitNet(std::move(full), mesh.mp(), mesh.mp_rank(), mp_comm);
  if (!shard.ok()) return shard.status();
  Net& net = *shard->net;
  if (auto s = net.Build(spec.global_batch / mesh.dp(), spec.device); !s.ok()) return s;
  if (auto s = InitShardParams(*shard, spec.seed); !s.ok()) return s;
  auto sync = GradientSync::Create(net, dp_comm, spec.bucket_mb);
  if (!sync.ok()) return sync.status();
  const int classes = static_cast<int>(net.blob("probs").c());
  SgdOptimizer opt(spec.sgd);
  TrainResult r;
  auto gather_all =
      [&](bool grads,
          std::vector<std::pair<std::string, std::vector<float>>>* out) -> absl::Status {
    for (const NamedParam& np : net.params()) {
      auto full_tensor =
          GatherFullParam(*np.param, grads ? np.param->grad : np.param->value, mp_comm);
      if (!full_tensor.ok()) return full_tensor.status();
      out->emplace_back(np.name, std::move(*full_tensor));
    }
    return absl::OkStatus();
  };
  for (int step = 0; step < spec.steps; ++step) {
    const RunContext ctx = mesh.MakeRunContext(Phase::kTrain, spec.seed, step, spec.global_batch);
    FillBatch(net, spec.seed, step, spec.global_batch, ctx.image_offset, classes);
    net.Forward(ctx);
    net.Backward(ctx, (*sync)->AfterLayerHook());
    if (auto s = (*sync)->Finish(); !s.ok()) return s;
    r.launched_in_backward =
        std::max(r.launched_in_backward, (*sync)->stats().launched_in_backward);
    if (step == 0) {
      if (auto s = gather_all(true, &r.grads0); !s.ok()) return s;
    }
    opt.Step(net, spec.lr);
    std::vector<float> loss = net.blob("loss").ToHost();
    double sum = 0;
    for (float v : loss) sum += v;
    if (auto s = AllReduceSumHost(mesh.dp_comm(), &sum, 1); !s.ok()) return s;
    r.losses.push_back(sum / spec.global_batch);
  }
  if (auto s = gather_all(false, &r.params); !s.ok()) return s;
  r.buckets = static_cast<int>((*sync)->buckets().size());
  return r;
}

// A barrier whose early ranks sleep between tests of a non-blocking barrier instead of
// polling in MPI_Barrier: where one rank computes alone (the reference run on rank 0), the
// others would otherwise share the cores with it, and the CI machine runs 8 ranks on 2 cores
// (AlexNetSmall with 8 ranks: 58 s with polling ranks, experiments/ci_time).
inline void IdleBarrier(MPI_Comm comm) {
  MPI_Request request;
  MPI_Ibarrier(comm, &request);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// ‖a − b‖ / ‖b‖ (0 when both are zero).
inline double RelativeL2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

}  // namespace colonnade::testing_parallel
