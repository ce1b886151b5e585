#include "apps/train_session.h"

#include <hdf5.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/exit_codes.h"
#include "apps/output_file.h"
#include "apps/train_checkpoint.h"
#include "checkpoint/policy.h"
#include "checkpoint/signals.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "hdf5/hdf5.h"
#include "parallel/communicator.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/model_split.h"
#ifdef COLONNADE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"
#endif

namespace colonnade {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return absl::StrFormat("%dh%02dm", t / 3600, (t / 60) % 60);
  if (t >= 60) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  return absl::StrFormat("%ds", t);
}

// Counts of correct top-1 and top-5 predictions from probabilities K x N (host copy).
void CountCorrect(const std::vector<float>& probs, const std::vector<float>& labels, int64_t k,
                  int64_t n, double* top1, double* top5) {
  for (int64_t j = 0; j < n; ++j) {
    const int label = static_cast<int>(labels[j]);
    const float p = probs[label * n + j];
    int64_t better = 0;  // classes ranked above the true one
    for (int64_t c = 0; c < k; ++c) {
      float q = probs[c * n + j];
      if (q > p || (q == p && c < label)) ++better;
    }
    if (better == 0) *top1 += 1;
    if (better < 5) *top5 += 1;
  }
}

// 60965224 -> "60,965,224".
std::string WithCommas(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// Where this rank sits: the mesh plus shortcuts used everywhere below.
struct Layout {
  int world_rank = 0, world_size = 1;
  int dp_rank = 0, dp_size = 1;
  int mp_rank = 0, mp_size = 1;
  int local_rank = 0, local_size = 1;
  MPI_Comm dp_comm = MPI_COMM_NULL;
};

// Sums `n` doubles over the data-parallel group (loss sums, correct counts); the mp ranks
// of a group hold identical copies of these.
void SumOverDp(const Layout& l, double* v, int n) {
  if (l.dp_size > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, l.dp_comm);
}

// An error every rank has detected identically (bad flags, impossible layout): rank 0
// prints it and every rank returns the same code without a collective.
int AgreedError(const Layout& l, const absl::Status& s, int code) {
  if (l.world_rank == 0) std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
  return code;
}

// An error one rank may meet alone (unreadable shard, device failure): print it with the
// rank and abort the whole job so no rank waits forever in a collective.
[[noreturn]] void RankError(const Layout& l, const absl::Status& s) {
  std::fprintf(stderr, "trainer: error on rank %d: %s\n", l.world_rank,
               std::string(s.message()).c_str());
  std::fflush(stderr);
  // Alone there is nobody to wake up: exit without MPI_Abort's multi-line banner.
  if (l.world_size == 1) std::_Exit(kExitError);
  MPI_Abort(MPI_COMM_WORLD, kExitError);
  std::exit(kExitError);
}

absl::StatusOr<Device> ResolveDevice(const std::string& name, const Mesh& mesh) {
  if (name == "cpu") return Device::kCPU;
  if (name != "cuda" && name != "auto") {
    return absl::InvalidArgumentError("--device must be cpu, cuda or auto, got '" + name + "'");
  }
#ifdef COLONNADE_WITH_CUDA
  int gpus = 0;
  if (cuda::Available() && cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
    // Local rank selects the GPU; more ranks than GPUs share them (--comm=mpi then).
    absl::Status s = cuda::RegisterBackend(mesh.GpuIndex(gpus));
    if (!s.ok()) return s;
    return Device::kCUDA;
  }
  if (name == "cuda") return absl::FailedPreconditionError("--device=cuda but no CUDA GPU is visible");
#else
  if (name == "cuda") {
    return absl::FailedPreconditionError(
        "--device=cuda but this trainer was built without CUDA (configure with "
        "-DCOLONNADE_CUDA=ON)");
  }
#endif
  return Device::kCPU;
}

// An error only world rank 0 can see (its own output files): every rank gets rank 0's
// status, so that the error is then agreed (AgreedError) and no rank waits in a
// collective. Collective over the world.
absl::Status FromLead(const Layout& l, const absl::Status& lead_status) {
  if (l.world_size == 1) return lead_status;
  int code = static_cast<int>(lead_status.code());
  MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string message(lead_status.message());
  int len = static_cast<int>(message.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  message.resize(len);
  MPI_Bcast(message.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

struct EvalResult {
  double loss = 0, top1_error = 0, top5_error = 0;
  int64_t images = 0;
};

// Runs the whole validation set through `net` in evaluation mode (centre crops, no
// dropout). Each dp rank evaluates its slice; the sums are combined over the group.
absl::StatusOr<EvalResult> Evaluate(Net& net, data::Dataset& val, const data::PipelineOptions& base,
                                    const Layout& l, int64_t local_batch) {
  data::PipelineOptions o = base;
  o.train = false;
  o.shuffle = false;
  o.drop_last = false;
  // A pipeline lives for one evaluation only: pinning its few buffers would cost more than
  // the faster copies save.
  o.pinned = false;
  o.pinned_allocator = nullptr;
  absl::StatusOr<std::unique_ptr<data::BatchPipeline>> pipe = data::BatchPipeline::Create(&val, o);
  if (!pipe.ok()) return pipe.status();
  double sums[4] = {0, 0, 0, 0};  // loss, top1, top5, images
  RunContext ctx;
  ctx.phase = Phase::kEval;
  const int64_t batches = (*pipe)->batches_per_epoch();
  for (int64_t b = 0; b < batches; ++b) {
    absl::StatusOr<data::Batch> batch = (*pipe)->Next();
    if (!batch.ok()) return batch.status();
    const int64_t n = batch->images.n();
    if (n == 0) continue;
    if (n != net.batch()) {
      if (auto s = net.Build(n, net.device()); !s.ok()) return s;
    }
    net.blob("data").CopyFrom(batch->images);
    net.blob("label").CopyFrom(batch->labels);
    net.Forward(ctx);
    sums[0] += net.ops().Sum(net.blob("loss"));
    std::vector<float> probs = net.blob("probs").ToHost();
    std::vector<float> labels = batch->labels.ToHost();
    CountCorrect(probs, labels, net.blob("probs").c(), n, &sums[1], &sums[2]);
    sums[3] += n;
    (*pipe)->Recycle(std::move(*batch));
  }
  if (net.batch() != local_batch) {
    if (auto s = net.Build(local_batch, net.device()); !s.ok()) return s;
  }
  SumOverDp(l, sums, 4);
  EvalResult r;
  r.images = static_cast<int64_t>(sums[3]);
  if (r.images > 0) {
    r.loss = sums[0] / sums[3];
    r.top1_error = 1.0 - sums[1] / sums[3];
    r.top5_error = 1.0 - sums[2] / sums[3];
  }
  return r;
}

// The rule for an existing --predictions file: refused, or with --overwrite replaced when
// it is an earlier predictions file or not HDF5 (output_file.h).
ExistingOutput PredictionsRule(const TrainConfig& cfg) {
  return cfg.overwrite ? ExistingOutput::kReplacePredictions : ExistingOutput::kRefuse;
}

// Writes predictions.h5: /logits float32 [N][classes] and /labels int32 [N], in dataset
// order, through a unique temporary file renamed into place (WriteOutputFile). Runs in
// the project's HDF5 scope: the data pipeline's reader threads may still be reading
// shards.
absl::Status WritePredictions(const TrainConfig& cfg, const std::vector<float>& logits,
                              const std::vector<int32_t>& labels, int64_t classes) {
  hdf5::Scope scope;
  return WriteOutputFile(
      cfg.predictions, "--predictions", PredictionsRule(cfg),
      [&](const std::string& tmp) -> absl::Status {
        hdf5::Handle file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                          H5Fclose);
        if (!file.valid()) {
          return absl::InternalError("cannot create " + tmp + ": " + hdf5::LastError());
        }
        const hsize_t dims[2] = {labels.size(), static_cast<hsize_t>(classes)};
        auto write = [&](const char* name, int rank, hid_t file_type, hid_t mem_type,
                         const void* data) {
          hdf5::Handle space(H5Screate_simple(rank, dims, nullptr), H5Sclose);
          hdf5::Handle ds(H5Dcreate2(file.get(), name, file_type, space.get(), H5P_DEFAULT,
                                     H5P_DEFAULT, H5P_DEFAULT),
                          H5Dclose);
          return space.valid() && ds.valid() &&
                 H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0 &&
                 ds.Close();
        };
        const bool ok =
            write("logits", 2, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, logits.data()) &&
            write("labels", 1, H5T_STD_I32LE, H5T_NATIVE_INT32, labels.data());
        const std::string why = ok ? "" : hdf5::LastError();
        if (!file.Close() || !ok) {
          return absl::InternalError("writing --predictions file " + cfg.predictions +
                                     " failed" + (why.empty() ? "" : ": " + why));
        }
        return absl::OkStatus();
      });
}

// --mode=eval: top-1/top-5 error of a checkpoint on --val_data. --mode=predict: also the
// logits of every image, gathered in dataset order on rank 0 and written to
// --predictions.
int RunEvalOrPredict(const TrainConfig& cfg, const Layout& l, Net& net, data::Dataset& val,
                     MPI_Comm world, int64_t local_batch, float input_scale,
                     const std::string& checkpoint_path) {
  const bool lead = l.world_rank == 0;
  data::PipelineOptions o;
  o.global_batch = local_batch * l.dp_size;
  o.dp_rank = l.dp_rank;
  o.dp_size = l.dp_size;
  o.seed = cfg.seed;
  o.crop = net.input_shape("data")[1] == val.info().height ? 0 : net.input_shape("data")[1];
  o.mean = cfg.mean;
  o.scale = input_scale;
  if (cfg.mode == "eval") {
    absl::StatusOr<EvalResult> r = Evaluate(net, val, o, l, local_batch);
    if (!r.ok()) RankError(l, r.status());
    if (lead) {
      std::printf("eval %s on %s: %lld images  loss %.4f  top1-err %.4f  top5-err %.4f\n",
                  checkpoint_path.c_str(), val.info().path.c_str(),
                  static_cast<long long>(r->images), r->loss, r->top1_error, r->top5_error);
    }
    return kExitOk;
  }
  // The classifier's logits: the first input of the loss layer (replicated on every mp
  // rank after the column split's gather).
  std::string logits_blob;
  for (const LayerEntry& e : net.layers())
    if (std::string(e.layer->type()) == "softmax_loss") logits_blob = e.inputs[0];
  o.train = false;
  o.shuffle = false;
  o.drop_last = false;
  auto pipe = data::BatchPipeline::Create(&val, o);
  if (!pipe.ok()) RankError(l, pipe.status());
  std::vector<float> all_logits;
  std::vector<int32_t> all_labels;
  RunContext ctx;
  ctx.phase = Phase::kEval;
  MPI_Comm dp = l.dp_size > 1 ? l.dp_comm : MPI_COMM_SELF;
  const bool writer = l.mp_rank == 0 && l.dp_rank == 0;
  for (int64_t b = 0; b < (*pipe)->batches_per_epoch(); ++b) {
    absl::StatusOr<data::Batch> batch = (*pipe)->Next();
    if (!batch.ok()) RankError(l, batch.status());
    const int64_t n = batch->images.n();
    std::vector<float> logits_t;  // this rank's [n][K]
    int64_t k = 0;
    if (n > 0) {
      if (n != net.batch()) {
        if (auto s = net.Build(n, net.device()); !s.ok()) RankError(l, s);
      }
      net.blob("data").CopyFrom(batch->images);
      net.blob("label").CopyFrom(batch->labels);
      net.Forward(ctx);
      std::vector<float> kn = net.blob(logits_blob).ToHost();  // K x n
      k = net.blob(logits_blob).c();
      logits_t.resize(kn.size());
      for (int64_t c = 0; c < k; ++c)
        for (int64_t j = 0; j < n; ++j) logits_t[j * k + c] = kn[c * n + j];
    }
    std::vector<float> labels_f = n > 0 ? batch->labels.ToHost() : std::vector<float>();
    // Gather the replicas' slices in dp-rank order, which is dataset order.
    int count = static_cast<int>(n);
    std::vector<int> counts(l.dp_size), displs(l.dp_size);
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, dp);
    int total = 0;
    for (int r = 0; r < l.dp_size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    int64_t classes = net.blob(logits_blob).c();
    std::vector<float> lab(total);
    MPI_Gatherv(labels_f.data(), count, MPI_FLOAT, lab.data(), counts.data(), displs.data(),
                MPI_FLOAT, 0, dp);
    for (int r = 0; r < l.dp_size; ++r) {
      counts[r] *= classes;
      displs[r] *= classes;
    }
    std::vector<float> lg(static_cast<size_t>(total) * classes);
    MPI_Gatherv(logits_t.data(), count * static_cast<int>(classes), MPI_FLOAT, lg.data(),
                counts.data(), displs.data(), MPI_FLOAT, 0, dp);
    if (writer) {
      all_logits.insert(all_logits.end(), lg.begin(), lg.end());
      for (float v : lab) all_labels.push_back(static_cast<int32_t>(v));
    }
  }
  absl::Status s;
  if (writer) {
    s = WritePredictions(cfg, all_logits, all_labels, net.blob(logits_blob).c());
  }
  int ok = s.ok() ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, world);
  if (!ok) return AgreedError(l, s, kExitError);
  if (lead) {
    std::printf("predict %s on %s: wrote logits of %zu images to %s\n", checkpoint_path.c_str(),
                val.info().path.c_str(), all_labels.size(), cfg.predictions.c_str());
  }
  return kExitOk;
}

}  // namespace

int RunTrainer(const TrainConfig& cfg) {
  Layout l;
  MPI_Comm_rank(MPI_COMM_WORLD, &l.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &l.world_size);
  if (l.world_size > 1) SetLogRank(l.world_rank);
  const bool lead = l.world_rank == 0;
  if (absl::Status s = checkpoint::InstallStopSignalHandlers(); !s.ok()) RankError(l, s);
  // Until the step loop polls for it, a stop signal ends the process at once: start-up may
  // block (a slow or FIFO file, a collective waiting for a rank), and there is nothing to
  // save yet. 75 as after a graceful stop: a requeued job starts over or resumes.
  checkpoint::ExitOnStopSignal(
      "trainer", cfg.mode == "train" ? "before training started (nothing to save)"
                                     : "during --mode=" + cfg.mode,
      kExitPreempted);

  // ---- configuration that every rank checks identically --------------------------------
  absl::StatusOr<const ModelInfo*> info = FindModel(cfg.model);
  if (!info.ok()) return AgreedError(l, info.status(), kExitUsage);
  const Recipe& recipe = (*info)->recipe;
  const int64_t global_batch = cfg.batch_size > 0 ? cfg.batch_size : recipe.batch_size;
  const int columns = cfg.columns > 0 ? cfg.columns : (*info)->default_columns;
  if (absl::Status s = ValidateLayout(l.world_size, cfg.mp, columns, global_batch); !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  absl::StatusOr<Mesh> mesh = Mesh::Create(MPI_COMM_WORLD, cfg.mp);
  if (!mesh.ok()) return AgreedError(l, mesh.status(), kExitUsage);
  if (cfg.mode == "predict") {
    if (cfg.predictions.empty()) {
      return AgreedError(
          l, absl::InvalidArgumentError("--mode=predict needs --predictions=FILE.h5"), kExitUsage);
    }
    // Refuse a path that may not be written now, not after loading and the forward passes.
    if (absl::Status s = FromLead(l, lead ? CheckOutputPath(cfg.predictions, "--predictions",
                                                            PredictionsRule(cfg))
                                          : absl::OkStatus());
        !s.ok()) {
      return AgreedError(l, s, kExitUsage);
    }
  }
  l.dp_rank = mesh->dp_rank();
  l.dp_size = mesh->dp();
  l.mp_rank = mesh->mp_rank();
  l.mp_size = mesh->mp();
  l.local_rank = mesh->local_rank();
  l.local_size = mesh->local_size();
  l.dp_comm = mesh->dp_comm();
  const int64_t local_batch = global_batch / l.dp_size;
  absl::StatusOr<LrSchedule> schedule =
      LrSchedule::Parse(cfg.lr_schedule.empty() ? recipe.schedule : cfg.lr_schedule);
  if (!schedule.ok()) return AgreedError(l, schedule.status(), kExitUsage);
  const float base_lr = cfg.lr >= 0 ? cfg.lr : recipe.lr;
  SgdOptions sgd;
  sgd.momentum = cfg.momentum >= 0 ? cfg.momentum : recipe.momentum;
  sgd.weight_decay = cfg.weight_decay >= 0 ? cfg.weight_decay : recipe.weight_decay;
  sgd.decay_on = recipe.weight_decay_on;
  if (!cfg.weight_decay_on.empty()) {
    absl::StatusOr<DecayOn> on = ParseDecayOn(cfg.weight_decay_on);
    if (!on.ok()) return AgreedError(l, on.status(), kExitUsage);
    sgd.decay_on = *on;
  }
  Precision precision;
  if (!ParsePrecision(cfg.precision, &precision)) {
    return AgreedError(l, absl::InvalidArgumentError(absl::StrFormat(
        "--precision must be fp32, tf32 or bf16, not '%s'", cfg.precision)), kExitUsage);
  }

  // Cores this process may use (a Slurm allocation or taskset may give fewer than the
  // machine has), shared by the ranks of the node. COLONNADE_CPU_THREADS, when set, is
  // left to CpuOps unless --cpu_threads overrides it.
  cpu_set_t allowed;
  const int hw = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                     ? std::max(1, CPU_COUNT(&allowed))
                     : std::max(1u, std::thread::hardware_concurrency());
  if (cfg.cpu_threads > 0) {
    SetCpuThreads(cfg.cpu_threads);
  } else if (std::getenv("COLONNADE_CPU_THREADS") == nullptr) {
    SetCpuThreads(std::max(1, hw / l.local_size));
  }
  absl::StatusOr<Device> device = ResolveDevice(cfg.device, *mesh);
  if (!device.ok()) return AgreedError(l, device.status(), kExitUsage);

  // ---- data -------------------------------------------------------------------------------
  data::SyntheticOptions synth;
  synth.size = cfg.synthetic_size;
  // Synthetic images are generated at the size the model reads unless told otherwise.
  const int synth_side = cfg.input_size > 0 ? cfg.input_size
                         : cfg.crop > 0     ? cfg.crop
                                            : (*info)->default_input_size;
  synth.height = synth.width = synth_side;
  synth.mean_images = 1024;  // enough for a mean image; keeps start-up short at 224x224
  // ... and with the model's classes (AlexNet: 1000) unless --num_classes says otherwise.
  synth.num_classes = cfg.num_classes > 0 ? cfg.num_classes : (*info)->default_classes;
  synth.seed = cfg.seed;
  // In eval and predict modes the validation set is the only data; it also gives the
  // model's input size and classes.
  const bool training = cfg.mode == "train";
  if (!training && cfg.val_data.empty()) {
    return AgreedError(l, absl::InvalidArgumentError("--mode=" + cfg.mode + " needs --val_data"),
                       kExitUsage);
  }
  if (!training) synth.held_out = true;
  // docs/OPERATIONS.md: a dataset whose files are unreadable or invalid (DataLoss) is a
  // runtime failure, exit 1; a wrong path or spec is a usage error, exit 2.
  auto data_exit_code = [](const absl::Status& s) {
    return absl::IsDataLoss(s) ? kExitError : kExitUsage;
  };
  absl::StatusOr<std::unique_ptr<data::Dataset>> train_data =
      data::OpenDataset(training ? cfg.data : cfg.val_data, synth);
  if (!train_data.ok()) {
    return AgreedError(l, train_data.status(), data_exit_code(train_data.status()));
  }
  const data::DatasetInfo& dinfo = (*train_data)->info();
  std::unique_ptr<data::Dataset> val_data;
  if (!cfg.val_data.empty()) {
    data::SyntheticOptions vsynth = synth;
    vsynth.held_out = true;
    auto v = data::OpenDataset(cfg.val_data, vsynth);
    if (!v.ok()) return AgreedError(l, v.status(), data_exit_code(v.status()));
    val_data = std::move(*v);
  }

  ModelOptions mo;
  mo.input_size = cfg.crop > 0 ? cfg.crop : (cfg.input_size > 0 ? cfg.input_size : dinfo.height);
  mo.num_classes = cfg.num_classes > 0 ? cfg.num_classes : dinfo.num_classes;
  mo.columns = cfg.columns;
  mo.paper_init = cfg.paper_init;
  mo.input_channels = dinfo.channels;
  if (dinfo.height != dinfo.width) {
    return AgreedError(l, absl::InvalidArgumentError("images must be square: " + dinfo.path), kExitUsage);
  }
  if (mo.input_size > dinfo.height) {
    return AgreedError(l, absl::InvalidArgumentError(absl::StrFormat(
        "--crop/--input_size %d is larger than the %dx%d images of %s", mo.input_size,
        dinfo.height, dinfo.width, dinfo.path)), kExitUsage);
  }

  // Communicators: the mp group exchanges activations inside the column split, the dp
  // group sums gradients. Creation is collective and agreed on every rank.
  std::unique_ptr<Communicator> mp_comm, dp_comm;
  if (l.mp_size > 1) {
    auto c = CreateCommunicator(cfg.comm, mesh->mp_comm(), *device);
    if (!c.ok()) return AgreedError(l, c.status(), kExitUsage);
    mp_comm = std::move(*c);
  }
  if (l.dp_size > 1) {
    auto c = CreateCommunicator(cfg.comm, mesh->dp_comm(), *device);
    if (!c.ok()) return AgreedError(l, c.status(), kExitUsage);
    dp_comm = std::move(*c);
  }
  absl::StatusOr<ModelShard> shard = BuildModelShard(cfg.model, mo, *mesh, mp_comm.get());
  if (!shard.ok()) return AgreedError(l, shard.status(), kExitUsage);
  Net& net = *shard->net;
  if (absl::Status s = net.Build(local_batch, *device); !s.ok()) return AgreedError(l, s, kExitUsage);
  // Evaluation and prediction run on the same Ops, so in the same precision.
  if (absl::Status s = net.ops().SetPrecision(precision); !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  if (absl::Status s = InitShardParams(*shard, cfg.seed); !s.ok()) RankError(l, s);
  absl::StatusOr<std::unique_ptr<GradientSync>> sync =
      GradientSync::Create(net, dp_comm.get(), cfg.bucket_mb);
  if (!sync.ok()) return AgreedError(l, sync.status(), kExitUsage);

  // ---- resume ------------------------------------------------------------------------------
  // One job at a time per checkpoint directory; rank 0 holds its lock until the job ends.
  std::unique_ptr<checkpoint::DirectoryLock> dir_lock;
  if (training && !cfg.checkpoint_dir.empty()) {
    auto lock =
        LockCheckpointDir(cfg.checkpoint_dir, cfg.resume, cfg.checkpoint_lock_wait_s, *mesh);
    if (!lock.ok()) return AgreedError(l, lock.status(), CheckpointDirExitCode(lock.status()));
    dir_lock = std::move(*lock);
  }
  int64_t start_step = 0;
  data::Cursor start_cursor;
  std::string resumed_from;
  bool resumed_weights_only = false;
  std::vector<std::string> changed_flags;  // since the checkpoint, printed with the banner
  {
    absl::StatusOr<std::optional<checkpoint::Checkpoint>> ckpt =
        LoadForResume(cfg.resume, cfg.checkpoint_dir, *mesh, checkpoint::ExpectedModelOf(net));
    if (!ckpt.ok()) return AgreedError(l, ckpt.status(), kExitError);
    if (ckpt->has_value()) {
      const checkpoint::Checkpoint& c = **ckpt;
      if (absl::Status s = checkpoint::LoadIntoNet(c, net); !s.ok()) {
        return AgreedError(l, s, kExitError);
      }
      if (c.state.seed != cfg.seed) {
        return AgreedError(l, absl::InvalidArgumentError(absl::StrFormat(
            "%s was written with --seed=%d; resume with the same seed (or --resume=none to "
            "start over)", c.path, c.state.seed)), kExitUsage);
      }
      start_step = c.state.step;
      start_cursor.epoch = c.state.cursor_epoch;
      start_cursor.position = c.state.cursor_position;
      resumed_from = c.path;
      resumed_weights_only = !c.has_optimizer_state;
      changed_flags = ChangedFlags(c.state.flags, cfg.flags_text);
    } else if (cfg.mode != "train") {
      return AgreedError(l, absl::InvalidArgumentError(
          "--mode=" + cfg.mode + " needs a checkpoint: --resume=PATH, or --checkpoint_dir with "
          "one in it"), kExitUsage);
    }
  }
  const uint64_t seed = cfg.seed;
  if (!training) {
    return RunEvalOrPredict(cfg, l, net, *train_data->get(), mesh->world_comm(), local_batch,
                            recipe.input_scale, resumed_from);
  }

  data::PipelineOptions po;
  po.global_batch = global_batch;
  po.dp_rank = l.dp_rank;
  po.dp_size = l.dp_size;
  po.seed = seed;
  po.crop = mo.input_size == dinfo.height ? 0 : mo.input_size;
  po.pad = cfg.pad;  // training pipeline only; Evaluate's pipelines are never padded
  po.mirror = cfg.mirror;
  po.mean = cfg.mean;
  po.lighting = cfg.lighting;
  po.scale = recipe.input_scale;
  po.threads = cfg.data_threads > 0 ? cfg.data_threads : std::max(1, std::min(4, hw / l.local_size));
  if (*device != Device::kCPU) {
    // Training batches in page-locked memory, recycled every step: the copy to the GPU
    // runs at link speed instead of through the driver's pageable staging (AlexNet at
    // batch 128 moves 77 MB per step), and is only enqueued ahead of the step's work.
    po.pinned = true;
    const Device dev = *device;
    po.pinned_allocator = [dev](const Shape& s) { return Tensor::PinnedHost(s, dev); };
  }
  absl::StatusOr<std::unique_ptr<data::BatchPipeline>> pipeline =
      data::BatchPipeline::Create(train_data->get(), po, start_cursor);
  if (!pipeline.ok()) return AgreedError(l, pipeline.status(), kExitUsage);
  const int64_t per_epoch = (*pipeline)->batches_per_epoch();
  if (per_epoch < 1) {
    return AgreedError(l, absl::InvalidArgumentError(absl::StrFormat(
        "%s has %d images, fewer than one global batch of %d", dinfo.path, dinfo.size, global_batch)),
        kExitUsage);
  }
  // In double before any conversion: --epochs=1e6 of a large dataset must be refused, not
  // overflow int64 (an out-of-range conversion is undefined; it used to give 1 step).
  const double steps_wanted =
      cfg.steps > 0 ? static_cast<double>(cfg.steps)
                    : std::max(1.0, std::ceil((cfg.epochs > 0 ? cfg.epochs : 1.0) * per_epoch));
  if (!(steps_wanted <= static_cast<double>(kMaxTrainingSteps))) {
    return AgreedError(l, absl::InvalidArgumentError(absl::StrFormat(
        "--epochs=%g is %.3g steps of %d per epoch; at most %d steps are allowed (lower "
        "--epochs or give --steps)", cfg.epochs, steps_wanted, per_epoch, kMaxTrainingSteps)),
        kExitUsage);
  }
  const int64_t total_steps = static_cast<int64_t>(steps_wanted);
  const double total_epochs = static_cast<double>(total_steps) / per_epoch;

  // Parameter count of the whole model (a shard holds only its part).
  int64_t full_params = 0;
  {
    auto full = BuildModel(cfg.model, mo);
    if (!full.ok()) return AgreedError(l, full.status(), kExitUsage);
    if (auto s = (*full)->Build(1, Device::kCPU); !s.ok()) return AgreedError(l, s, kExitUsage);
    full_params = (*full)->num_learnable();
  }

  // Only rank 0 writes metrics; a path that may not be written is a usage error on every
  // rank, a failed write later on stops the job (exit 1).
  AppendFile metrics;
  if (absl::Status s = FromLead(l, lead && !cfg.metrics_file.empty()
                                       ? metrics.Open(cfg.metrics_file, "--metrics_file")
                                       : absl::OkStatus());
      !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  auto write_metrics = [&](const std::string& json_line) {
    if (absl::Status s = metrics.WriteLine(json_line); !s.ok()) RankError(l, s);
  };

  if (lead) {
    std::printf("Colonnade trainer\n");
    std::printf("  layout     %s, device %s (%s), comm %s\n", mesh->ToString().c_str(),
                DeviceName(*device), PrecisionName(precision),
                dp_comm ? dp_comm->backend() : (mp_comm ? mp_comm->backend() : "none"));
    std::printf("  model      %s, %d columns, input %dx%dx%d, %d classes, %s parameters\n",
                cfg.model.c_str(), columns, mo.input_channels, mo.input_size, mo.input_size,
                mo.num_classes, WithCommas(full_params).c_str());
    std::printf("  data       %s: %lld images %dx%dx%d, %d classes (%s)\n", dinfo.path.c_str(),
                static_cast<long long>(dinfo.size), dinfo.height, dinfo.width, dinfo.channels,
                dinfo.num_classes, dinfo.encoding.c_str());
    std::printf("  batch      global %lld, per replica %lld, %lld steps/epoch\n",
                static_cast<long long>(global_batch), static_cast<long long>(local_batch),
                static_cast<long long>(per_epoch));
    std::printf("  optimiser  SGD lr %g (%s), momentum %g, weight decay %g on %s, seed %llu\n",
                base_lr, schedule->spec().c_str(), sgd.momentum, sgd.weight_decay,
                DecayOnDescription(sgd.decay_on), static_cast<unsigned long long>(cfg.seed));
    std::printf("  run        %lld steps (%.2f epochs)\n", static_cast<long long>(total_steps),
                total_epochs);
    std::fflush(stdout);
  }

  if (lead && !resumed_from.empty()) {
    std::printf("  resumed    from %s at step %lld (epoch %lld, position %lld)\n",
                resumed_from.c_str(), static_cast<long long>(start_step),
                static_cast<long long>(start_cursor.epoch),
                static_cast<long long>(start_cursor.position));
    if (!changed_flags.empty()) {
      std::printf("  changed    since the checkpoint: %s\n",
                  absl::StrJoin(changed_flags, ", ").c_str());
    }
    if (resumed_weights_only) {  // docs/CHECKPOINTS.md, section 6
      std::printf("  note       weights only (no optimizer state): velocities start at zero; "
                  "fine for fine-tuning, not an exact resume\n");
    }
    std::fflush(stdout);
  }
  if (lead && !cfg.checkpoint_dir.empty()) {
    std::printf("  checkpoint %s every %s%s, keeping %d\n", cfg.checkpoint_dir.c_str(),
                cfg.checkpoint_every > 0 ? absl::StrFormat("%d steps", cfg.checkpoint_every).c_str() : "-",
                cfg.checkpoint_secs > 0 ? absl::StrFormat(" / %gs", cfg.checkpoint_secs).c_str() : "",
                cfg.keep_checkpoints);
    std::fflush(stdout);
  }

  // After the banner, which shows what was resumed: a checkpoint at or past the last step.
  const std::string steps_text =
      cfg.steps > 0 ? absl::StrFormat("--steps=%d", total_steps)
                    : absl::StrFormat("--epochs=%g (%d steps)", cfg.epochs > 0 ? cfg.epochs : 1.0,
                                      total_steps);
  if (auto none = CheckStepsLeft(resumed_from, start_step, total_steps, steps_text)) {
    if (none->exit_code != kExitOk) {
      return AgreedError(l, absl::InvalidArgumentError(none->message), none->exit_code);
    }
    if (lead) std::printf("trainer: %s\n", none->message.c_str());
    return kExitOk;
  }

  // --rank_log_dir: one progress file per rank. Each rank opens its own, so a failure is
  // one rank's: RankError ends the job.
  AppendFile rank_log;
  if (!cfg.rank_log_dir.empty()) {
    const std::string path = absl::StrFormat("%s/rank-%05d.log", cfg.rank_log_dir, l.world_rank);
    if (absl::Status s = rank_log.Open(path, "--rank_log_dir"); !s.ok()) {
      RankError(l, absl::InvalidArgumentError(std::string(s.message()) +
                                              " (does --rank_log_dir exist and is it writable?)"));
    }
  }

  SgdOptimizer optimizer(sgd);
  const auto start = Clock::now();
  checkpoint::CheckpointPolicy policy(cfg.checkpoint_every, cfg.checkpoint_secs, start_step, 0.0);
  auto save = [&](int64_t done, const data::Cursor& next) -> absl::Status {
    checkpoint::TrainState st;
    st.step = done;
    st.epoch = next.epoch;
    st.cursor_epoch = next.epoch;
    st.cursor_position = next.position;
    st.seed = seed;
    st.model = cfg.model;
    st.columns = columns;
    st.input_size = mo.input_size;
    st.num_classes = mo.num_classes;
    st.input_channels = mo.input_channels;
    st.flags = cfg.flags_text;
    std::string path;
    const auto t0 = Clock::now();
    absl::Status s = SaveCheckpoint(net, *mesh, mp_comm.get(), st, cfg.checkpoint_dir,
                                    cfg.keep_checkpoints, &path, dir_lock.get());
    if (s.ok() && lead) {
      std::printf("checkpoint step %lld -> %s (%.1fs)\n", static_cast<long long>(done),
                  path.c_str(), Seconds(t0, Clock::now()));
      std::fflush(stdout);
    }
    return s;
  };
  auto interval_start = start;
  double interval[5] = {0, 0, 0, 0, 0};  // loss sum, top1, top5, images, data wait
  double first_loss = NAN, last_loss = NAN;
  double interval_comm = 0;  // seconds blocked on gradient all-reduce after backward
  // From here a stop signal is recorded and acted on after the current step (checkpoint,
  // exit 75).
  checkpoint::RecordStopSignal();
  for (int64_t step = start_step; step < total_steps; ++step) {
    absl::StatusOr<data::Batch> batch = (*pipeline)->Next();
    if (!batch.ok()) RankError(l, batch.status());
    // Enqueued only: the batch must stay alive until the step's results are read back
    // below (those reads wait for the device); it is recycled at the end of the step.
    net.blob("data").CopyFromAsync(batch->images);
    net.blob("label").CopyFromAsync(batch->labels);
    RunContext ctx = mesh->MakeRunContext(Phase::kTrain, seed, step, global_batch);
    net.Forward(ctx);
    net.Backward(ctx, (*sync)->AfterLayerHook());
    if (absl::Status s = (*sync)->Finish(); !s.ok()) RankError(l, s);
    interval_comm += (*sync)->stats().last_wait_seconds;
    const double epoch_progress = static_cast<double>(step) / per_epoch;
    const float lr = schedule->At(base_lr, epoch_progress, total_epochs);
    double sums[3] = {net.ops().Sum(net.blob("loss")), 0, 0};
    {
      std::vector<float> probs = net.blob("probs").ToHost();
      std::vector<float> labels = batch->labels.ToHost();
      CountCorrect(probs, labels, net.blob("probs").c(), local_batch, &sums[1], &sums[2]);
    }
    SumOverDp(l, sums, 3);
    const double loss = sums[0] / global_batch;
    if (!std::isfinite(loss)) {
      if (lead) {
        std::fprintf(stderr,
                     "trainer: error: the loss became %f at step %lld (lr %g); stopping without "
                     "writing a checkpoint. Lower --lr or check the input data.\n",
                     loss, static_cast<long long>(step), lr);
      }
      return kExitNonFinite;
    }
    optimizer.Step(net, lr);
    const int64_t done = step + 1;
    // Ranks agree on a stop signal and on rank 0's time-based checkpoint decision with
    // one small all-reduce per step, so every rank checkpoints and stops after the same
    // step.
    int agree[2] = {checkpoint::StopRequested() ? 1 : 0,
                    lead && policy.Due(done, Seconds(start, Clock::now())) ? 1 : 0};
    if (l.world_size > 1) MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const bool stop = agree[0] != 0;
    if (!cfg.checkpoint_dir.empty() && (stop || agree[1] || done == total_steps)) {
      if (absl::Status s = save(done, batch->next); !s.ok()) return AgreedError(l, s, kExitError);
      policy.MarkWritten(done, Seconds(start, Clock::now()));
    }
    if (stop) {
      if (lead) {
        const int sig = checkpoint::SignalReceived();
        std::printf("stopped by %s after step %lld%s; exit %d so the job can be requeued\n",
                    sig ? checkpoint::SignalName(sig).c_str() : "a signal on another rank",
                    static_cast<long long>(done),
                    cfg.checkpoint_dir.empty() ? " (no --checkpoint_dir: nothing was saved)" : "",
                    kExitPreempted);
        std::fflush(stdout);
      }
      return kExitPreempted;
    }
    if (step == start_step) first_loss = loss;
    last_loss = loss;
    interval[0] += sums[0];
    interval[1] += sums[1];
    interval[2] += sums[2];
    interval[3] += global_batch;
    interval[4] += batch->wait_seconds;

    const bool log_now = (step + 1) % std::max(1, cfg.log_every) == 0 || step + 1 == total_steps;
    if (log_now) {
      auto now = Clock::now();
      const double dt = Seconds(interval_start, now);
      if (rank_log.is_open()) {
        // This rank's own view, to find a slow rank: its data and communication waits.
        absl::Status s = rank_log.WriteLine(absl::StrFormat(
            "step %lld  rank %d (dp %d, mp %d)  %.1f img/s local  data-wait %.1f%%  "
            "comm-wait %.1f%%",
            static_cast<long long>(step + 1), l.world_rank, l.dp_rank, l.mp_rank,
            interval[3] / l.dp_size / std::max(1e-9, dt), 100.0 * interval[4] / std::max(1e-9, dt),
            100.0 * interval_comm / std::max(1e-9, dt)));
        if (!s.ok()) RankError(l, s);
      }
      const double img_s = interval[3] / std::max(1e-9, dt);
      const double elapsed = Seconds(start, now);
      const double eta = elapsed / (step + 1 - start_step) * (total_steps - step - 1);
      const double avg_loss = interval[0] / interval[3];
      const double top1 = 1.0 - interval[1] / interval[3];
      const double top5 = 1.0 - interval[2] / interval[3];
      if (lead) {
        std::printf(
            "step %6lld/%lld  epoch %6.2f  loss %.4f  top1-err %.3f  top5-err %.3f  lr %.3g  "
            "%8.1f img/s  data-wait %.0f%%  comm-wait %.0f%%  ETA %s\n",
            static_cast<long long>(step + 1), static_cast<long long>(total_steps),
            (step + 1.0) / per_epoch, avg_loss, top1, top5, lr, img_s,
            100.0 * interval[4] / std::max(1e-9, dt), 100.0 * interval_comm / std::max(1e-9, dt),
            FormatDuration(eta).c_str());
        std::fflush(stdout);
        write_metrics(absl::StrFormat(
            "{\"kind\":\"train\",\"step\":%d,\"epoch\":%.4f,\"loss\":%.6f,\"top1_error\":%.5f,"
            "\"top5_error\":%.5f,\"lr\":%g,\"images_per_sec\":%.1f,\"data_wait_sec\":%.4f,"
            "\"comm_wait_sec\":%.4f,\"elapsed_sec\":%.3f}",
            step + 1, (step + 1.0) / per_epoch, avg_loss, top1, top5, lr, img_s, interval[4],
            interval_comm, elapsed));
      }
      std::fill(interval, interval + 5, 0.0);
      interval_comm = 0;
      interval_start = Clock::now();
    }
    const bool eval_now = val_data && ((cfg.eval_every > 0 && (step + 1) % cfg.eval_every == 0) ||
                                       step + 1 == total_steps);
    if (eval_now) {
      const auto eval_start = Clock::now();
      absl::StatusOr<EvalResult> r = Evaluate(net, *val_data, po, l, local_batch);
      if (!r.ok()) RankError(l, r.status());
      if (lead) {
        std::printf("eval  step %lld  %s: %lld images  loss %.4f  top1-err %.4f  top5-err %.4f\n",
                    static_cast<long long>(step + 1), val_data->info().path.c_str(),
                    static_cast<long long>(r->images), r->loss, r->top1_error, r->top5_error);
        std::fflush(stdout);
        write_metrics(absl::StrFormat(
            "{\"kind\":\"eval\",\"step\":%d,\"epoch\":%.4f,\"loss\":%.6f,\"top1_error\":%.5f,"
            "\"top5_error\":%.5f,\"images\":%d}",
            step + 1, (step + 1.0) / per_epoch, r->loss, r->top1_error, r->top5_error, r->images));
      }
      interval_start += Clock::now() - eval_start;  // keep evaluation time out of img/s
    }
    (*pipeline)->Recycle(std::move(*batch));
  }
  for (AppendFile* f : {&metrics, &rank_log}) {
    if (absl::Status s = f->Close(); !s.ok()) RankError(l, s);
  }
  if (lead) {
    std::printf("done: %lld steps in %s, loss %.4f -> %.4f\n", static_cast<long long>(total_steps),
                FormatDuration(Seconds(start, Clock::now())).c_str(), first_loss, last_loss);
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace colonnade
