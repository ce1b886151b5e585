#include "apps/train_session.h"

#include <hdf5.h>
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/device_feed.h"
#include "apps/exit_codes.h"
#include "apps/output_file.h"
#include "apps/step_timeline.h"
#include "apps/train_checkpoint.h"
#include "checkpoint/policy.h"
#include "checkpoint/signals.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/results.h"
#include "cuda/jpeg_decoder.h"
#include "core/status_macros.h"
#include "cuda/cuda_backend.h"
#include "cuda/feed_types.h"
#include "data/augment.h"
#include "cuda/step_graph.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "hdf5/hdf5.h"
#include "parallel/communicator.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/model_split.h"
#include "parallel/watchdog.h"

// The job runs in phases, each a function or a class below, in this order:
//   SetUp        configuration every rank checks alike, the mesh, the device
//   OpenData     the training and validation datasets
//   BuildShard   communicators, this rank's model shard, gradient sync
//   Resume       the checkpoint directory's lock and the checkpoint to continue from
//   Trainer      the step loop (Step, Log, Checkpoint, Evaluate), as Caffe's Solver::Step
//   RunEval / RunPredict   --mode=eval and --mode=predict instead of training
// A phase that ends the job returns its exit code (EndCode) after the error was printed.

namespace colonnade {
namespace {

using Clock = std::chrono::steady_clock;

// nullopt while the job goes on; otherwise the exit code it ends with, its error already
// printed.
using EndCode = std::optional<int>;

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
  WatchdogLabel label("summing the results over the dp group");
  if (l.dp_size > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, l.dp_comm);
}

// An error every rank has detected identically (bad flags, impossible layout): rank 0
// prints it and every rank returns the same code without a collective.
int AgreedError(const Layout& l, const absl::Status& s, int code) {
  if (l.world_rank == 0) {
    std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
  }
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

absl::StatusOr<Device> ResolveDevice(DeviceChoice choice, const Mesh& mesh) {
  if (choice == DeviceChoice::kCpu) return Device::kCPU;
  if (!cuda::kBuilt) {
    if (choice == DeviceChoice::kAuto) return Device::kCPU;
    return absl::FailedPreconditionError(
        "--device=cuda but this trainer was built without CUDA (configure with "
        "-DCOLONNADE_CUDA=ON)");
  }
  if (const int gpus = cuda::DeviceCount(); gpus > 0) {
    // Local rank selects the GPU; more ranks than GPUs share them (--comm=mpi then).
    RETURN_IF_ERROR(cuda::RegisterBackend(mesh.GpuIndex(gpus)));
    return Device::kCUDA;
  }
  if (choice == DeviceChoice::kCuda) {
    return absl::FailedPreconditionError("--device=cuda but no CUDA GPU is visible");
  }
  return Device::kCPU;
}

// The rule for an existing --predictions file: refused, or with --overwrite replaced when
// it is an earlier predictions file or not HDF5 (output_file.h).
ExistingOutput PredictionsRule(const TrainConfig& cfg) {
  return cfg.overwrite ? ExistingOutput::kReplacePredictions : ExistingOutput::kRefuse;
}

// ---- the job's state, phase by phase ---------------------------------------------------

// What the set-up phases decide; every later phase reads it. Members are declared in the
// order they are made, so they are destroyed in reverse (the gradient sync and the shard
// before their communicators, those before the mesh).
struct Job {
  explicit Job(const TrainConfig& config) : cfg(config) {}
  Net& net() { return *shard->net; }

  const TrainConfig& cfg;
  Layout l;
  bool lead = false;     // world rank 0: prints, writes metrics and predictions
  bool training = true;  // --mode=train
  // SetUp.
  const ModelInfo* info = nullptr;
  int64_t global_batch = 0, local_batch = 0;
  int columns = 0;
  std::optional<Mesh> mesh;
  std::optional<LrSchedule> schedule;
  float base_lr = 0;
  SgdOptions sgd;
  Precision precision = Precision::kFP32;
  bool bf16_storage = false;  // --bf16_activations resolved against the precision
  int cores = 1;              // this process may use (a Slurm allocation or taskset may give fewer)
  Device device = Device::kCPU;
  // OpenData: the training data, or in eval and predict modes the validation set.
  std::unique_ptr<data::Dataset> data;
  std::unique_ptr<data::Dataset> val_data;  // --val_data while training
  ModelOptions mo;
  // BuildShard.
  std::unique_ptr<Communicator> mp_comm, dp_comm;
  std::optional<ModelShard> shard;
  std::unique_ptr<GradientSync> sync;
};

// What Resume found: where the run continues.
struct ResumePoint {
  std::unique_ptr<checkpoint::DirectoryLock> dir_lock;  // rank 0, while training
  int64_t start_step = 0;
  data::Cursor start_cursor;
  std::string from;  // the checkpoint's path; empty for a fresh start
  bool weights_only = false;
  std::vector<std::string> changed_flags;  // since the checkpoint, printed with the banner
};

// ---- set-up ----------------------------------------------------------------------------

// The layout and the mesh, and the configuration every rank checks identically.
EndCode SetUpLayout(Job& job) {
  const TrainConfig& cfg = job.cfg;
  Layout& l = job.l;
  absl::StatusOr<const ModelInfo*> info = FindModel(cfg.model);
  if (!info.ok()) return AgreedError(l, info.status(), kExitUsage);
  job.info = *info;
  const Recipe& recipe = job.info->recipe;
  job.global_batch = cfg.batch_size > 0 ? cfg.batch_size : recipe.batch_size;
  job.columns = cfg.columns > 0 ? cfg.columns : job.info->default_columns;
  if (absl::Status s = ValidateLayout(l.world_size, cfg.mp, job.columns, job.global_batch);
      !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  absl::StatusOr<Mesh> mesh = Mesh::Create(MPI_COMM_WORLD, cfg.mp);
  if (!mesh.ok()) return AgreedError(l, mesh.status(), kExitUsage);
  job.mesh = *mesh;
  if (cfg.mode == RunMode::kPredict) {
    if (cfg.predictions.empty()) {
      return AgreedError(
          l, absl::InvalidArgumentError("--mode=predict needs --predictions=FILE.h5"), kExitUsage);
    }
    // Refuse a path that may not be written now, not after loading and the forward passes.
    if (absl::Status s = FromLead(
            l, job.lead ? CheckOutputPath(cfg.predictions, "--predictions", PredictionsRule(cfg))
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
  job.local_batch = job.global_batch / l.dp_size;
  return std::nullopt;
}

// The optimiser's settings: the model's recipe unless the flags say otherwise.
EndCode SetUpOptimizer(Job& job) {
  const TrainConfig& cfg = job.cfg;
  const Recipe& recipe = job.info->recipe;
  absl::StatusOr<LrSchedule> schedule =
      LrSchedule::Parse(cfg.lr_schedule.empty() ? recipe.schedule : cfg.lr_schedule);
  if (!schedule.ok()) return AgreedError(job.l, schedule.status(), kExitUsage);
  job.schedule = *schedule;
  job.base_lr = cfg.lr >= 0 ? cfg.lr : recipe.lr;
  job.sgd.momentum = cfg.momentum >= 0 ? cfg.momentum : recipe.momentum;
  job.sgd.weight_decay = cfg.weight_decay >= 0 ? cfg.weight_decay : recipe.weight_decay;
  job.sgd.decay_on = recipe.weight_decay_on;
  if (!cfg.weight_decay_on.empty()) {
    absl::StatusOr<DecayOn> on = ParseDecayOn(cfg.weight_decay_on);
    if (!on.ok()) return AgreedError(job.l, on.status(), kExitUsage);
    job.sgd.decay_on = *on;
  }
  if (cfg.precision != "auto" && !ParsePrecision(cfg.precision, &job.precision)) {
    return AgreedError(
        job.l,
        absl::InvalidArgumentError(absl::StrFormat(
            "--precision must be auto, fp32, tf32 or bf16, not '%s'", cfg.precision)),
        kExitUsage);
  }
  return std::nullopt;
}

// CPU threads and the device. The cores this process may use (a Slurm allocation or
// taskset may give fewer than the machine has) are shared by the ranks of the node.
// COLONNADE_CPU_THREADS, when set, is left to CpuOps unless --cpu_threads overrides it.
EndCode SetUpDevice(Job& job) {
  cpu_set_t allowed;
  job.cores = sched_getaffinity(0, sizeof(allowed), &allowed) == 0
                  ? std::max(1, CPU_COUNT(&allowed))
                  : std::max(1u, std::thread::hardware_concurrency());
  if (job.cfg.cpu_threads > 0) {
    SetCpuThreads(job.cfg.cpu_threads);
  } else if (std::getenv("COLONNADE_CPU_THREADS") == nullptr) {
    SetCpuThreads(std::max(1, job.cores / job.l.local_size));
  }
  absl::StatusOr<Device> device = ResolveDevice(job.cfg.device, *job.mesh);
  if (!device.ok()) return AgreedError(job.l, device.status(), kExitUsage);
  job.device = *device;
  // --precision=auto: bf16 on the GPU, where it met every training-quality bar of
  // experiments/mixed_precision/quality at 2.3-5.9x FP32's speed (H200, bf16 storage); the CPU has
  // FP32 only.
  if (job.cfg.precision == "auto") {
    job.precision = job.device == Device::kCUDA ? Precision::kBF16 : Precision::kFP32;
  }
  // bf16 activation storage is part of the bf16 mode (on unless --nobf16_activations);
  // asking for it in another precision is a mistake worth stopping for.
  job.bf16_storage =
      job.cfg.bf16_activations && job.precision == Precision::kBF16 && job.device == Device::kCUDA;
  if (job.cfg.bf16_activations_given && job.cfg.bf16_activations && !job.bf16_storage) {
    return AgreedError(job.l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--bf16_activations needs bf16 precision on a CUDA device (this run: "
                           "%s on %s): add --precision=bf16 --device=cuda, or drop the flag",
                           PrecisionName(job.precision), DeviceName(job.device))),
                       kExitUsage);
  }
  return std::nullopt;
}

// The datasets, and the model's input size and classes from them. In eval and predict
// modes the validation set is the only data.
EndCode OpenData(Job& job) {
  const TrainConfig& cfg = job.cfg;
  const Layout& l = job.l;
  data::SyntheticOptions synth;
  synth.size = cfg.synthetic_size;
  // Synthetic images are generated at the size the model reads unless told otherwise.
  const int synth_side = cfg.input_size > 0 ? cfg.input_size
                         : cfg.crop > 0     ? cfg.crop
                                            : job.info->default_input_size;
  synth.height = synth.width = synth_side;
  synth.mean_images = 1024;  // enough for a mean image; keeps start-up short at 224x224
  // ... and with the model's classes (AlexNet: 1000) unless --num_classes says otherwise.
  synth.num_classes = cfg.num_classes > 0 ? cfg.num_classes : job.info->default_classes;
  synth.seed = cfg.seed;
  if (!job.training && cfg.val_data.empty()) {
    return AgreedError(
        l, absl::InvalidArgumentError("--mode=" + AbslUnparseFlag(cfg.mode) + " needs --val_data"),
        kExitUsage);
  }
  if (!job.training) synth.held_out = true;
  // docs/OPERATIONS.md: a dataset whose files are unreadable or invalid (DataLoss) is a
  // runtime failure, exit 1; a wrong path or spec is a usage error, exit 2.
  auto data_exit_code = [](const absl::Status& s) {
    return absl::IsDataLoss(s) ? kExitError : kExitUsage;
  };
  absl::StatusOr<std::unique_ptr<data::Dataset>> main_data =
      data::OpenDataset(job.training ? cfg.data : cfg.val_data, synth);
  if (!main_data.ok()) {
    return AgreedError(l, main_data.status(), data_exit_code(main_data.status()));
  }
  job.data = std::move(*main_data);
  if (!cfg.val_data.empty()) {
    data::SyntheticOptions vsynth = synth;
    vsynth.held_out = true;
    auto v = data::OpenDataset(cfg.val_data, vsynth);
    if (!v.ok()) return AgreedError(l, v.status(), data_exit_code(v.status()));
    job.val_data = std::move(*v);
  }

  const data::DatasetInfo& dinfo = job.data->info();
  ModelOptions& mo = job.mo;
  mo.input_size = cfg.crop > 0 ? cfg.crop : (cfg.input_size > 0 ? cfg.input_size : dinfo.height);
  mo.num_classes = cfg.num_classes > 0 ? cfg.num_classes : dinfo.num_classes;
  mo.columns = cfg.columns;
  mo.paper_init = cfg.paper_init;
  mo.input_channels = dinfo.channels;
  if (dinfo.height != dinfo.width) {
    return AgreedError(l, absl::InvalidArgumentError("images must be square: " + dinfo.path),
                       kExitUsage);
  }
  if (mo.input_size > dinfo.height) {
    return AgreedError(l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--crop/--input_size %d is larger than the %dx%d images of %s",
                           mo.input_size, dinfo.height, dinfo.width, dinfo.path)),
                       kExitUsage);
  }
  // --eval_views=10 cuts its crops of the input side from the full evaluation images.
  const data::Dataset* eval_set = job.training ? job.val_data.get() : job.data.get();
  if (cfg.eval_views == EvalViews::kTen && eval_set != nullptr &&
      (mo.input_size > eval_set->info().height || mo.input_size > eval_set->info().width)) {
    return AgreedError(l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--eval_views=10 cuts crops of %dx%d (the model's input) from the full "
                           "images, but the images of %s are %dx%d",
                           mo.input_size, mo.input_size, eval_set->info().path,
                           eval_set->info().height, eval_set->info().width)),
                       kExitUsage);
  }
  return std::nullopt;
}

// Communicators (the mp group exchanges activations inside the column split, the dp group
// sums gradients; creation is collective and agreed on every rank), this rank's shard of
// the model with its initial weights, and the gradient sync.
EndCode BuildShard(Job& job) {
  const TrainConfig& cfg = job.cfg;
  const Layout& l = job.l;
  if (l.mp_size > 1) {
    auto c = CreateCommunicator(AbslUnparseFlag(cfg.comm), job.mesh->mp_comm(), job.device);
    if (!c.ok()) return AgreedError(l, c.status(), kExitUsage);
    job.mp_comm = std::move(*c);
  }
  if (l.dp_size > 1) {
    auto c = CreateCommunicator(AbslUnparseFlag(cfg.comm), job.mesh->dp_comm(), job.device);
    if (!c.ok()) return AgreedError(l, c.status(), kExitUsage);
    job.dp_comm = std::move(*c);
  }
  absl::StatusOr<ModelShard> shard =
      BuildModelShard(cfg.model, job.mo, *job.mesh, job.mp_comm.get());
  if (!shard.ok()) return AgreedError(l, shard.status(), kExitUsage);
  job.shard = std::move(*shard);
  Net& net = job.net();
  net.set_memory_plan(cfg.memory_plan == MemoryPlanMode::kOn);
  net.set_recompute(cfg.recompute);
  net.set_bf16_storage(job.bf16_storage);
  if (absl::Status s = net.Build(job.local_batch, job.device); !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  // Evaluation and prediction run on the same Ops, so in the same precision.
  if (absl::Status s = net.ops().SetPrecision(job.precision); !s.ok()) {
    return AgreedError(l, s, kExitUsage);
  }
  if (absl::Status s = InitShardParams(*job.shard, cfg.seed); !s.ok()) RankError(l, s);
  absl::StatusOr<std::unique_ptr<GradientSync>> sync =
      GradientSync::Create(net, job.dp_comm.get(), cfg.bucket_mb);
  if (!sync.ok()) return AgreedError(l, sync.status(), kExitUsage);
  job.sync = std::move(*sync);
  return std::nullopt;
}

// The predicted memory of this rank's step: the plan's arena (or its buffers, plan off),
// the inputs, and every parameter's value, gradient and velocity. Layer-owned state (LRN
// denominators, dropout masks, batch-norm statistics) and kernel workspaces come on top.
struct MemoryPrediction {
  double planned_mib, unshared_mib, inputs_mib, params_mib, peak_mib;
};

MemoryPrediction PredictMemory(const Net& net) {
  const MemoryPlan& plan = net.memory_plan();
  constexpr double kMiB = 1048576.0;
  MemoryPrediction m;
  m.planned_mib = plan.planned_bytes() / kMiB;
  m.unshared_mib = plan.unshared_bytes() / kMiB;
  m.inputs_mib = plan.input_bytes() / kMiB;
  m.params_mib = net.param_bytes() / kMiB;
  m.peak_mib = m.planned_mib + m.inputs_mib + m.params_mib;
  return m;
}

std::string MemoryLine(const Net& net) {
  const MemoryPrediction m = PredictMemory(net);
  return absl::StrFormat(
      "activations+gradients %.1f MiB (memory plan %s, %d recomputed; %.1f MiB with one buffer "
      "each), inputs %.1f MiB, parameters+gradients+velocities %.1f MiB: predicted peak %.1f MiB",
      m.planned_mib, net.memory_plan_enabled() ? "on" : "off", net.memory_plan().recomputes.size(),
      m.unshared_mib, m.inputs_mib, m.params_mib, m.peak_mib);
}

// --print_memory_plan: the plan of rank 0's shard and the prediction; the job then ends.
int PrintMemoryPlan(Job& job) {
  if (job.lead) {
    Net& net = job.net();
    std::printf("%s", net.memory_plan().Format(net.layers()).c_str());
    std::printf("%s\n", MemoryLine(net).c_str());
    std::fflush(stdout);
  }
  return kExitOk;
}

// ---- resume ------------------------------------------------------------------------------

// Takes the checkpoint directory's lock (one job at a time per directory; rank 0 holds it
// until the job ends) and loads the checkpoint to continue from, if any.
EndCode Resume(Job& job, ResumePoint& at) {
  const TrainConfig& cfg = job.cfg;
  const Layout& l = job.l;
  if (job.training && !cfg.checkpoint_dir.empty()) {
    auto lock =
        LockCheckpointDir(cfg.checkpoint_dir, cfg.resume, cfg.checkpoint_lock_wait_s, *job.mesh);
    if (!lock.ok()) return AgreedError(l, lock.status(), CheckpointDirExitCode(lock.status()));
    at.dir_lock = std::move(*lock);
  }
  absl::StatusOr<std::optional<checkpoint::Checkpoint>> ckpt = LoadForResume(
      cfg.resume, cfg.checkpoint_dir, *job.mesh, checkpoint::ExpectedModelOf(job.net()));
  if (!ckpt.ok()) return AgreedError(l, ckpt.status(), kExitError);
  if (!ckpt->has_value()) {
    if (!job.training) {
      return AgreedError(
          l,
          absl::InvalidArgumentError("--mode=" + AbslUnparseFlag(cfg.mode) +
                                     " needs a checkpoint: --resume=PATH, or --checkpoint_dir with "
                                     "one in it"),
          kExitUsage);
    }
    return std::nullopt;
  }
  const checkpoint::Checkpoint& c = **ckpt;
  if (absl::Status s = checkpoint::LoadIntoNet(c, job.net()); !s.ok()) {
    return AgreedError(l, s, kExitError);
  }
  if (c.state.seed != cfg.seed) {
    return AgreedError(l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "%s was written with --seed=%d; resume with the same seed (or "
                           "--resume=none to start over)",
                           c.path, c.state.seed)),
                       kExitUsage);
  }
  at.start_step = c.state.step;
  at.start_cursor.epoch = c.state.cursor_epoch;
  at.start_cursor.position = c.state.cursor_position;
  at.from = c.path;
  at.weights_only = !c.has_optimizer_state;
  at.changed_flags = ChangedFlags(c.state.flags, cfg.flags_text);
  return std::nullopt;
}

// ---- evaluate and predict ------------------------------------------------------------------

// How evaluation cuts and scores its views (--eval_views, docs/DATA.md "Ten crops").
struct EvalSpec {
  EvalViews views = EvalViews::kOne;
  bool views_on_gpu = false;  // ten crops cut on the GPU by the feed (CUDA, --gpu_augment
                              // not off); else by data::TenCrops on the host
};

EvalSpec EvalSpecOf(const Job& job) {
  EvalSpec e;
  e.views = job.cfg.eval_views;
  e.views_on_gpu = job.device == Device::kCUDA && job.cfg.gpu_augment != GpuAugment::kOff;
  return e;
}

// The ten views' average of one evaluation batch (--eval_views=10), the AlexNet paper's
// recipe: pbar = the mean of the ten views' softmax probabilities. Accumulated on the host in
// double, view by view in TenCrops' order, from the net's own "probs" and "loss" blobs, so a
// CPU run and a GPU run with the same probabilities get the same average.
class ViewAverage {
 public:
  void Start(int64_t classes, int64_t n) {
    classes_ = classes;
    n_ = n;
    views_ = 0;
    sum_.assign(static_cast<size_t>(classes * n), 0.0);
    losses_.clear();
  }
  // One view's probabilities (K x n) and per-image losses (n).
  void Add(const std::vector<float>& probs, const std::vector<float>& loss) {
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += probs[i];
    losses_.insert(losses_.end(), loss.begin(), loss.end());
    ++views_;
  }
  int64_t classes() const { return classes_; }
  // pbar, K x n.
  std::vector<double> MeanProbs() const {
    std::vector<double> mean(sum_.size());
    for (size_t i = 0; i < sum_.size(); ++i) mean[i] = sum_[i] / views_;
    return mean;
  }
  // The cross-entropy of the average for image j, -ln pbar(label) = ln V - ln sum_v p_v(label)
  // with p_v(label) = exp(-loss_v): computed from the views' own losses as a log-sum-exp,
  // so it stays finite when every view's probability of the label underflows in float.
  double Loss(int64_t j) const {
    double top = -INFINITY;  // max_v ln p_v(label)
    for (int v = 0; v < views_; ++v) top = std::max(top, -static_cast<double>(losses_[v * n_ + j]));
    double sum = 0;
    for (int v = 0; v < views_; ++v)
      sum += std::exp(-static_cast<double>(losses_[v * n_ + j]) - top);
    return std::log(static_cast<double>(views_)) - (top + std::log(sum));
  }

 private:
  int64_t classes_ = 0, n_ = 0;
  int views_ = 0;
  std::vector<double> sum_;    // K x n: the views' probabilities summed
  std::vector<float> losses_;  // views x n
};

// Runs the ten views of `batch` (n > 0 images, already the net's batch size) through `net`
// into `avg`: cut on the GPU by `feed` from the batch's uint8 images when there is a feed,
// else by data::TenCrops from the host batch of full images.
absl::Status ForwardTenViews(Net& net, const data::Batch& batch, int side, DeviceFeed* feed,
                             const RunContext& ctx, ViewAverage* avg) {
  std::vector<Tensor> crops;
  if (feed != nullptr) {
    RETURN_IF_ERROR(feed->Stage(batch));
  } else {
    ASSIGN_OR_RETURN(crops, data::TenCrops(batch.images, side));
    net.blob("label").CopyFrom(batch.labels);
  }
  avg->Start(net.blob("probs").c(), net.batch());
  for (int v = 0; v < cuda::kTenCropViews; ++v) {
    if (feed != nullptr) {
      RETURN_IF_ERROR(feed->ProduceView(v, v == cuda::kTenCropViews - 1, &net.blob("data"),
                                        &net.blob("label")));
    } else {
      net.blob("data").CopyFrom(crops[v]);
    }
    net.Forward(ctx);
    avg->Add(net.blob("probs").ToHost(), net.blob("loss").ToHost());
  }
  return absl::OkStatus();
}

// What the batch loop hands on for each batch after its forward pass(es): the batch, its
// n images on this rank, and with ten views their average (null for one view: the net's
// blobs hold the outputs).
using EvalVisitor =
    std::function<absl::Status(const data::Batch& batch, int64_t n, const ViewAverage* avg)>;

// The batch loop shared by evaluation and prediction: the whole of `val` in dataset order
// through `net` in evaluation mode (no padding, no dropout), each dp rank its slice, on
// `spec`'s views: the centre crop, or the ten crops (the pipeline then hands full images
// for TenCrops, or uint8 images with crop = the input side for the GPU feed). `visit` sees
// every batch after the forward pass(es); with n == 0 (this rank's slice of a short last
// batch is empty) no forward pass ran, but the batch is still visited so that collectives
// in `visit` run on every rank. The net is rebuilt for a batch of another size and back to
// `local_batch` at the end.
absl::Status ForEachEvalBatch(Net& net, data::Dataset& val, data::PipelineOptions o,
                              int64_t local_batch, const EvalSpec& spec, const EvalVisitor& visit) {
  o.train = false;
  o.shuffle = false;
  o.drop_last = false;
  // A pipeline lives for one pass only: pinning its few buffers would cost more than the
  // faster copies save.
  o.pinned = false;
  o.pinned_allocator = nullptr;
  o.output = data::BatchOutput::kFloatCHWN;  // the centre crop takes the host path
  const bool ten = spec.views == EvalViews::kTen;
  const int side = static_cast<int>(net.input_shape("data")[1]);
  if (ten) {
    o.crop = spec.views_on_gpu ? side : 0;
    if (spec.views_on_gpu) {
      o.output = val.synthetic_recipe() ? data::BatchOutput::kIndicesOnly
                                        : data::BatchOutput::kSourceUint8;
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchPipeline> pipe, data::BatchPipeline::Create(&val, o));
  std::unique_ptr<DeviceFeed> feed;  // declared after pipe: destroyed first, it recycles into it
  if (ten && spec.views_on_gpu) {
    ASSIGN_OR_RETURN(feed, DeviceFeed::Create(val, pipe.get()));
  }
  RunContext ctx;
  ctx.phase = Phase::kEval;
  ViewAverage avg;
  const int64_t batches = pipe->batches_per_epoch();
  for (int64_t b = 0; b < batches; ++b) {
    ASSIGN_OR_RETURN(data::Batch batch, pipe->Next());
    const int64_t n = batch.labels.n();
    if (n > 0) {
      if (n != net.batch()) RETURN_IF_ERROR(net.Build(n, net.device()));
      if (ten) {
        RETURN_IF_ERROR(ForwardTenViews(net, batch, side, feed.get(), ctx, &avg));
      } else {
        net.blob("data").CopyFrom(batch.images);
        net.blob("label").CopyFrom(batch.labels);
        net.Forward(ctx);
      }
    }
    RETURN_IF_ERROR(visit(batch, n, ten ? &avg : nullptr));
    if (feed != nullptr && n > 0) {
      feed->Recycle(std::move(batch));  // back to the pipeline once the device copied it
    } else {
      pipe->Recycle(std::move(batch));
    }
  }
  if (net.batch() != local_batch) RETURN_IF_ERROR(net.Build(local_batch, net.device()));
  return absl::OkStatus();
}

struct EvalResult {
  double loss = 0, top1_error = 0, top5_error = 0;
  int64_t images = 0;
};

// Loss and top-1/top-5 error of `net` on the whole validation set, summed over the dp
// group. With ten views: of the views' average probabilities (ViewAverage).
absl::StatusOr<EvalResult> Evaluate(Net& net, data::Dataset& val, const data::PipelineOptions& o,
                                    const EvalSpec& spec, const Layout& l, int64_t local_batch) {
  struct {
    double loss = 0, top1 = 0, top5 = 0, images = 0;  // summed, in this order, over dp
  } sums;
  // One view: the net's own results, added on its device and read once at the end.
  Tensor totals = NewResultTotals(net.ops().device());
  RETURN_IF_ERROR(ForEachEvalBatch(
      net, val, o, local_batch, spec,
      [&](const data::Batch& batch, int64_t n, const ViewAverage* avg) -> absl::Status {
        if (n == 0) return absl::OkStatus();
        if (avg != nullptr) {
          std::vector<float> labels = batch.labels.ToHost();
          for (int64_t j = 0; j < n; ++j) sums.loss += avg->Loss(j);
          const std::vector<double> mean = avg->MeanProbs();
          CountCorrect(mean.data(), labels.data(), avg->classes(), n, &sums.top1, &sums.top5);
        } else {
          net.ops().AccumulateResults(net.blob("probs"), net.blob("label"), net.blob("loss"),
                                      /*step=*/0, nullptr, totals);
        }
        sums.images += n;
        return absl::OkStatus();
      }));
  const ResultTotals t = ReadResultTotals(totals);
  sums.loss += t.loss_sum;
  sums.top1 += t.top1;
  sums.top5 += t.top5;
  double v[4] = {sums.loss, sums.top1, sums.top5, sums.images};
  SumOverDp(l, v, 4);
  EvalResult r;
  r.images = static_cast<int64_t>(v[3]);
  if (r.images > 0) {
    r.loss = v[0] / v[3];
    r.top1_error = 1.0 - v[1] / v[3];
    r.top5_error = 1.0 - v[2] / v[3];
  }
  return r;
}

// Writes predictions.h5: /logits float32 [N][classes] and /labels int32 [N], in dataset
// order, and the attribute eval_views (1 or 10: /logits is then ln of the ten views' mean
// probabilities), through a unique temporary file renamed into place (WriteOutputFile). Runs in
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
            write("labels", 1, H5T_STD_I32LE, H5T_NATIVE_INT32, labels.data()) &&
            hdf5::WriteIntAttr(file.get(), "eval_views", static_cast<int>(cfg.eval_views)).ok();
        const std::string why = ok ? "" : hdf5::LastError();
        if (!file.Close() || !ok) {
          return absl::InternalError("writing --predictions file " + cfg.predictions + " failed" +
                                     (why.empty() ? "" : ": " + why));
        }
        return absl::OkStatus();
      });
}

// The pipeline options of evaluation and prediction for the loaded model.
data::PipelineOptions EvalPipelineOptions(Job& job) {
  data::PipelineOptions o;
  o.global_batch = job.local_batch * job.l.dp_size;
  o.dp_rank = job.l.dp_rank;
  o.dp_size = job.l.dp_size;
  o.seed = job.cfg.seed;
  const int side = job.net().input_shape("data")[1];
  o.crop = side == job.data->info().height ? 0 : side;
  o.mean = data::AbslUnparseFlag(job.cfg.mean);  // the pipeline takes the word
  o.scale = job.info->recipe.input_scale;
  return o;
}

// The eval line's note of the views: nothing for the centre crop.
const char* ViewsNote(EvalViews views) {
  return views == EvalViews::kTen ? " (10 views averaged)" : "";
}

// --mode=eval: top-1/top-5 error of a checkpoint on --val_data.
int RunEval(Job& job, const std::string& checkpoint_path) {
  absl::StatusOr<EvalResult> r = Evaluate(job.net(), *job.data, EvalPipelineOptions(job),
                                          EvalSpecOf(job), job.l, job.local_batch);
  if (!r.ok()) RankError(job.l, r.status());
  if (job.lead) {
    std::printf("eval %s on %s: %lld images%s  loss %.4f  top1-err %.4f  top5-err %.4f\n",
                checkpoint_path.c_str(), job.data->info().path.c_str(),
                static_cast<long long>(r->images), ViewsNote(job.cfg.eval_views), r->loss,
                r->top1_error, r->top5_error);
  }
  return kExitOk;
}

// The logits and labels of every image, gathered batch by batch in dp-rank order (which
// is dataset order) on the group's writer, world rank 0.
class PredictionGather {
 public:
  PredictionGather(const Layout& l, int64_t classes)
      : l_(l), classes_(classes), dp_(l.dp_size > 1 ? l.dp_comm : MPI_COMM_SELF) {}

  // `kn`: this rank's K x n logits (empty when n == 0). Collective over the dp group.
  void Add(const std::vector<float>& kn, const std::vector<float>& labels_f, int64_t n) {
    std::vector<float> logits_t(kn.size());  // this rank's [n][K]
    for (int64_t c = 0; c < (n > 0 ? classes_ : 0); ++c)
      for (int64_t j = 0; j < n; ++j) logits_t[j * classes_ + c] = kn[c * n + j];
    int count = static_cast<int>(n);
    std::vector<int> counts(l_.dp_size), displs(l_.dp_size);
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, dp_);
    int total = 0;
    for (int r = 0; r < l_.dp_size; ++r) {
      displs[r] = total;
      total += counts[r];
    }
    std::vector<float> lab(total);
    MPI_Gatherv(labels_f.data(), count, MPI_FLOAT, lab.data(), counts.data(), displs.data(),
                MPI_FLOAT, 0, dp_);
    for (int r = 0; r < l_.dp_size; ++r) {
      counts[r] *= classes_;
      displs[r] *= classes_;
    }
    std::vector<float> lg(static_cast<size_t>(total) * classes_);
    MPI_Gatherv(logits_t.data(), count * static_cast<int>(classes_), MPI_FLOAT, lg.data(),
                counts.data(), displs.data(), MPI_FLOAT, 0, dp_);
    if (writer()) {
      logits_.insert(logits_.end(), lg.begin(), lg.end());
      for (float v : lab) labels_.push_back(static_cast<int32_t>(v));
    }
  }

  bool writer() const { return l_.mp_rank == 0 && l_.dp_rank == 0; }
  const std::vector<float>& logits() const { return logits_; }
  const std::vector<int32_t>& labels() const { return labels_; }

 private:
  const Layout& l_;
  const int64_t classes_;
  const MPI_Comm dp_;
  std::vector<float> logits_;
  std::vector<int32_t> labels_;
};

// The ten views' "logits" for --predictions: ln pbar in float (softmax gives pbar back; -inf
// where every view's probability of a class underflowed to 0).
std::vector<float> LogOf(const std::vector<double>& mean_probs) {
  std::vector<float> out(mean_probs.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(std::log(mean_probs[i]));
  return out;
}

// --mode=predict: the logits of every image on --val_data, written to --predictions (with
// ten views: the log of their average probabilities).
int RunPredict(Job& job, const std::string& checkpoint_path) {
  Net& net = job.net();
  // The classifier's logits (replicated on every mp rank by the column split).
  const std::string logits_blob = kLogitsBlob;
  PredictionGather gather(job.l, net.blob(logits_blob).c());
  absl::Status s = ForEachEvalBatch(
      net, *job.data, EvalPipelineOptions(job), job.local_batch, EvalSpecOf(job),
      [&](const data::Batch& batch, int64_t n, const ViewAverage* avg) {
        std::vector<float> kn, labels;
        if (n > 0) {
          kn = avg != nullptr ? LogOf(avg->MeanProbs()) : net.blob(logits_blob).ToHost();
          labels = batch.labels.ToHost();
        }
        gather.Add(kn, labels, n);
        return absl::OkStatus();
      });
  if (!s.ok()) RankError(job.l, s);
  if (gather.writer()) {
    s = WritePredictions(job.cfg, gather.logits(), gather.labels(), net.blob(logits_blob).c());
  }
  int ok = s.ok() ? 1 : 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, job.mesh->world_comm());
  if (!ok) return AgreedError(job.l, s, kExitError);
  if (job.lead) {
    std::printf("predict %s on %s: wrote %s of %zu images to %s\n", checkpoint_path.c_str(),
                job.data->info().path.c_str(),
                job.cfg.eval_views == EvalViews::kTen
                    ? "the log of the 10-view average probabilities as logits"
                    : "logits",
                gather.labels().size(), job.cfg.predictions.c_str());
  }
  return kExitOk;
}

// ---- train -----------------------------------------------------------------------------

// Running totals since the last progress line.
struct IntervalTotals {
  double loss_sum = 0;      // summed over the dp group's images
  double top1_correct = 0;  // dp group
  double top5_correct = 0;  // dp group
  double images = 0;        // dp group: global batches
  double data_wait_s = 0;   // this rank: waiting for the pipeline
  double comm_wait_s = 0;   // this rank: blocked on the gradient all-reduce after backward
  Clock::time_point start;  // of the interval, less the time spent evaluating
};

// The training phases over a set-up job, as in Caffe's Solver: Start prepares the run
// (pipeline, length, output files, banner), Run steps to the end, each step followed by
// its progress line, checkpoint and evaluation when they are due.
class Trainer {
 public:
  Trainer(Job& job, ResumePoint& at)
      : job_(job), cfg_(job.cfg), l_(job.l), net_(job.net()), at_(at), optimizer_(job.sgd) {}

  // Everything before the first step; the banner is printed here.
  EndCode Start();
  // The step loop; returns the job's exit code.
  int Run();

 private:
  EndCode CreatePipeline();
  EndCode CountParameters();
  EndCode OpenMetrics();
  void PrintBanner();
  EndCode OpenRankLog();
  // --cuda_graphs: the step graph where it is legal and asked for (graph_).
  EndCode SetUpGraphs();
  std::string GraphsDescription() const;
  // Enqueues one training step on the device: the batch's copy (or the GPU feed's
  // augmentation), forward, backward, the gradient all-reduce, the optimizer and the
  // addition of its loss and correct counts to the device totals (totals_). Nothing here
  // waits for the device.
  void Step(int64_t step, data::Batch&& batch, float lr);
  // Recycles the batch of every step up to `step` not collected yet, once the device has
  // run it (waits for it).
  void CollectThrough(int64_t step);
  // Reads the device totals of the steps run since the last read (waits for them), sums
  // them over the dp group into the interval and zeroes them. Collective over dp: every
  // rank reads after the same steps. Ends the job if a step's loss was not finite.
  EndCode ReadResults();
  // The next training batch from the pipeline, staged on the GPU feed when there is one
  // (its copy then overlaps the steps still queued on the device). Recycle returns a
  // consumed batch's buffers.
  absl::StatusOr<data::Batch> NextBatch();
  void Recycle(data::Batch&& batch);
  // Ranks agree after each step on a stop signal and on rank 0's time-based checkpoint
  // decision with one small all-reduce, so every rank checkpoints and stops after the same
  // step.
  void Agree(int64_t done, bool* stop, bool* checkpoint_due);
  absl::Status Checkpoint(int64_t done, const data::Cursor& next);
  void Log(int64_t done, float lr);
  void EvaluateNow(int64_t done);
  int NonFiniteLoss(double loss, int64_t step, float lr);
  int Stopped(int64_t done);
  int Finish();
  void WriteMetrics(const std::string& json_line);
  double EpochOf(int64_t done) const { return static_cast<double>(done) / per_epoch_; }
  // The schedule's learning rate of step `step`.
  float LrAt(int64_t step) const {
    return job_.schedule->At(job_.base_lr, static_cast<double>(step) / per_epoch_, total_epochs_);
  }

  Job& job_;
  const TrainConfig& cfg_;
  const Layout& l_;
  Net& net_;
  ResumePoint& at_;
  data::PipelineOptions po_;
  std::unique_ptr<data::BatchPipeline> pipeline_;
  std::unique_ptr<DeviceFeed> feed_;  // --gpu_augment: destroyed first (it waits for its
                                      // copies and recycles into pipeline_)
  int64_t per_epoch_ = 0, total_steps_ = 0;
  int64_t full_params_ = 0;
  double total_epochs_ = 0;
  AppendFile metrics_;   // rank 0 only
  AppendFile rank_log_;  // every rank's own, with --rank_log_dir
  SgdOptimizer optimizer_;
  // --cuda_graphs: forward, backward, sync and optimizer as one CUDA graph (null: plain
  // steps; always on a CPU run).
  std::unique_ptr<cuda::StepGraph> graph_;
  std::string graphs_off_;  // why graph_ is null, for the banner
  Clock::time_point start_;
  std::optional<checkpoint::CheckpointPolicy> policy_;
  IntervalTotals interval_;
  double first_loss_ = NAN, last_loss_ = NAN;
  // The loss sum and top-1/top-5 counts of the steps since the last ReadResults, added by
  // each step on the device (Ops::AccumulateResults, inside the step graph) and read back
  // only when something reports them: a progress line, a checkpoint, an evaluation, the
  // end (core/results.h).
  Tensor totals_;
  // The steps queued on the device whose batches are still held: the host runs up to
  // kPendingSteps - 1 steps ahead of the device (a batch is recycled kPendingSteps - 1
  // steps later, or when the results are read), so a short step (cifar10-18pct bf16:
  // 0.45 ms on the H200) is not held up by the host's work between steps.
  struct PendingStep {
    int64_t step = -1;  // -1: empty (collected)
    data::Batch batch;  // kept until the step ran: the device copies from its buffers
    std::unique_ptr<Fence> ran;
  };
  static constexpr int kPendingSteps = 4;
  PendingStep pending_[kPendingSteps];
  int64_t collected_ = -1;  // the last step collected
  std::optional<StepTimeline> timeline_;
  bool timeline_printed_ = false;
  data::Cursor next_cursor_;  // after the last step's batch: where a checkpoint resumes
};

EndCode Trainer::Start() {
  for (auto phase : {&Trainer::CreatePipeline, &Trainer::CountParameters, &Trainer::OpenMetrics,
                     &Trainer::SetUpGraphs}) {
    if (EndCode end = (this->*phase)()) return end;
  }
  PrintBanner();
  totals_ = NewResultTotals(job_.device);
  // Profiled steps start after two warm-up steps: the first calls of each shape pick
  // kernels (autotune) and allocate.
  timeline_.emplace(job_.device, at_.start_step, 2, cfg_.profile_steps);
  // After the banner, which shows what was resumed: a checkpoint at or past the last step.
  const std::string steps_text =
      cfg_.steps > 0 ? absl::StrFormat("--steps=%d", total_steps_)
                     : absl::StrFormat("--epochs=%g (%d steps)",
                                       cfg_.epochs > 0 ? cfg_.epochs : 1.0, total_steps_);
  if (auto none = CheckStepsLeft(at_.from, at_.start_step, total_steps_, steps_text)) {
    if (none->exit_code != kExitOk) {
      return AgreedError(l_, absl::InvalidArgumentError(none->message), none->exit_code);
    }
    if (job_.lead) std::printf("trainer: %s\n", none->message.c_str());
    return kExitOk;
  }
  return OpenRankLog();
}

// The training pipeline from the resumed cursor, and the run's length.
EndCode Trainer::CreatePipeline() {
  const data::DatasetInfo& dinfo = job_.data->info();
  po_.global_batch = job_.global_batch;
  po_.dp_rank = l_.dp_rank;
  po_.dp_size = l_.dp_size;
  po_.seed = cfg_.seed;
  po_.crop = job_.mo.input_size == dinfo.height ? 0 : job_.mo.input_size;
  po_.pad = cfg_.pad;  // training pipeline only; Evaluate's pipelines are never padded
  po_.mirror = cfg_.mirror;
  po_.mean = data::AbslUnparseFlag(cfg_.mean);
  po_.lighting = cfg_.lighting;
  po_.scale = job_.info->recipe.input_scale;
  // Automatic thread count: on a CPU run the cores compute the step, so the pipeline gets
  // a few; on a GPU run the host has nothing else to do and the feed must keep up with
  // the device (AlexNet on an H200 asks for 20-40k images/s), so it gets this rank's share.
  const int rank_cores = std::max(1, job_.cores / l_.local_size);
  po_.threads = cfg_.data_threads > 0         ? cfg_.data_threads
                : job_.device == Device::kCPU ? std::min(4, rank_cores)
                                              : rank_cores;
  if (job_.device != Device::kCPU) {
    // Training batches in page-locked memory, recycled every step: the copy to the GPU
    // runs at link speed instead of through the driver's pageable staging (AlexNet at
    // batch 128 moves 77 MB per step), and is only enqueued ahead of the step's work.
    po_.pinned = true;
    const Device dev = job_.device;
    po_.pinned_allocator = [dev](const Shape& s) { return Tensor::PinnedHost(s, dev); };
  }
  if (cfg_.gpu_augment == GpuAugment::kOn && job_.device != Device::kCUDA) {
    return AgreedError(l_, absl::InvalidArgumentError("--gpu_augment=on needs a CUDA run"),
                       kExitUsage);
  }
  const bool gpu_feed = cfg_.gpu_augment != GpuAugment::kOff && job_.device == Device::kCUDA;
  if (cfg_.jpeg_decoder == JpegDecoderChoice::kNvjpeg && (!gpu_feed || dinfo.encoding != "jpeg")) {
    return AgreedError(l_,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--jpeg_decoder=nvjpeg needs a CUDA run that augments on the GPU "
                           "(--gpu_augment=auto|on) and JPEG shards; %s holds %s images",
                           dinfo.path, dinfo.encoding)),
                       kExitUsage);
  }
  // --jpeg_decoder=auto: nvJPEG where the host has few decoding threads. Measured on the
  // H200 (AlexNet bf16, batch 256, Imagenette JPEG, experiments/end_to_end): with 4 threads
  // the host decodes 11.6k img/s and nvJPEG feeds 20.3k; with 8 or 16 the host keeps up
  // (21.6k) and nvJPEG's decoding beside the step costs 10% (19.4k).
  const bool nvjpeg = cfg_.jpeg_decoder == JpegDecoderChoice::kNvjpeg ||
                      (cfg_.jpeg_decoder == JpegDecoderChoice::kAuto && gpu_feed &&
                       dinfo.encoding == "jpeg" && cuda::HaveNvjpeg() && po_.threads <= 4);
  if (gpu_feed) {  // uint8 batches, augmented (synthetic data: generated too) on the GPU
    po_.output = job_.data->synthetic_recipe() ? data::BatchOutput::kIndicesOnly
                 : nvjpeg                      ? data::BatchOutput::kEncoded
                                               : data::BatchOutput::kSourceUint8;
    po_.pinned_bytes_allocator = PinnedBytesAllocator(job_.device);
  }
  absl::StatusOr<std::unique_ptr<data::BatchPipeline>> pipeline =
      data::BatchPipeline::Create(job_.data.get(), po_, at_.start_cursor);
  if (!pipeline.ok()) return AgreedError(l_, pipeline.status(), kExitUsage);
  pipeline_ = std::move(*pipeline);
  if (gpu_feed) {
    absl::StatusOr<std::unique_ptr<DeviceFeed>> feed =
        DeviceFeed::Create(*job_.data, pipeline_.get());
    if (!feed.ok()) return AgreedError(l_, feed.status(), kExitUsage);
    feed_ = std::move(*feed);
  }
  per_epoch_ = pipeline_->batches_per_epoch();
  if (per_epoch_ < 1) {
    return AgreedError(l_,
                       absl::InvalidArgumentError(
                           absl::StrFormat("%s has %d images, fewer than one global batch of %d",
                                           dinfo.path, dinfo.size, job_.global_batch)),
                       kExitUsage);
  }
  // In double before any conversion: --epochs=1e6 of a large dataset must be refused, not
  // overflow int64 (an out-of-range conversion is undefined; it used to give 1 step).
  const double steps_wanted =
      cfg_.steps > 0 ? static_cast<double>(cfg_.steps)
                     : std::max(1.0, std::ceil((cfg_.epochs > 0 ? cfg_.epochs : 1.0) * per_epoch_));
  if (!(steps_wanted <= static_cast<double>(kMaxTrainingSteps))) {
    return AgreedError(l_,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--epochs=%g is %.3g steps of %d per epoch; at most %d steps are "
                           "allowed (lower --epochs or give --steps)",
                           cfg_.epochs, steps_wanted, per_epoch_, kMaxTrainingSteps)),
                       kExitUsage);
  }
  total_steps_ = static_cast<int64_t>(steps_wanted);
  total_epochs_ = static_cast<double>(total_steps_) / per_epoch_;
  return std::nullopt;
}

// Only rank 0 writes metrics; a path that may not be written is a usage error on every
// rank, a failed write later on stops the job (exit 1).
EndCode Trainer::OpenMetrics() {
  absl::Status s = FromLead(l_, job_.lead && !cfg_.metrics_file.empty()
                                    ? metrics_.Open(cfg_.metrics_file, "--metrics_file")
                                    : absl::OkStatus());
  if (!s.ok()) return AgreedError(l_, s, kExitUsage);
  return std::nullopt;
}

// The parameter count of the whole model, for the banner (a shard holds only its part).
EndCode Trainer::CountParameters() {
  absl::StatusOr<std::unique_ptr<Net>> full = BuildModel(cfg_.model, job_.mo);
  if (!full.ok()) return AgreedError(l_, full.status(), kExitUsage);
  if (auto s = (*full)->Build(1, Device::kCPU); !s.ok()) return AgreedError(l_, s, kExitUsage);
  full_params_ = (*full)->num_learnable();
  return std::nullopt;
}

void Trainer::PrintBanner() {
  if (!job_.lead) return;
  const data::DatasetInfo& dinfo = job_.data->info();
  const ModelOptions& mo = job_.mo;
  const Communicator* comm = job_.dp_comm ? job_.dp_comm.get() : job_.mp_comm.get();
  std::printf("Colonnade trainer\n");
  const bool wgmma = job_.device == Device::kCUDA && job_.precision == Precision::kBF16 &&
                     cuda::WgmmaConvolutions();  // Hopper, unless COLONNADE_TC_WGMMA=0
  std::printf("  layout     %s, device %s (%s%s%s%s), comm %s\n", job_.mesh->ToString().c_str(),
              DeviceName(job_.device), PrecisionName(job_.precision),
              cfg_.precision == "auto" ? ", auto" : "",
              job_.bf16_storage ? ", bf16 activations" : "", wgmma ? ", wgmma convolutions" : "",
              comm ? comm->backend() : "none");
  std::printf("  model      %s, %d columns, input %dx%dx%d, %d classes, %s parameters\n",
              cfg_.model.c_str(), job_.columns, mo.input_channels, mo.input_size, mo.input_size,
              mo.num_classes, WithCommas(full_params_).c_str());
  std::printf("  data       %s: %lld images %dx%dx%d, %d classes (%s)\n", dinfo.path.c_str(),
              static_cast<long long>(dinfo.size), dinfo.height, dinfo.width, dinfo.channels,
              dinfo.num_classes, dinfo.encoding.c_str());
  if (const int64_t resident = data::ResidentShardBytes(); resident > 0) {
    std::printf("  host cache %.1f MiB of shard images in memory (COLONNADE_SHARD_CACHE_MB)\n",
                resident / 1048576.0);
  }
  if (feed_) {
    const std::string jpeg =
        feed_->jpeg_backend()
            ? absl::StrCat("JPEG streams, decoded by nvJPEG (", feed_->jpeg_backend(), ")")
            : "";
    const int64_t pool = feed_->synthetic_pool();
    const std::string synthetic =
        pool > 0 ? absl::StrFormat(
                       "dataset indices, images from a pool of %d generated once on "
                       "the device (%.0f MiB)",
                       pool, pool * dinfo.height * dinfo.width * dinfo.channels / 1048576.0)
                 : "dataset indices, images generated on the device per batch";
    std::printf("  feed       GPU: %s, augmented on the device (--gpu_augment)\n",
                pipeline_->output() == data::BatchOutput::kIndicesOnly ? synthetic.c_str()
                : !jpeg.empty()                                        ? jpeg.c_str()
                                                                       : "uint8 images");
  }
  std::printf("  graphs     %s\n", GraphsDescription().c_str());
  std::printf("  batch      global %lld, per replica %lld, %lld steps/epoch\n",
              static_cast<long long>(job_.global_batch), static_cast<long long>(job_.local_batch),
              static_cast<long long>(per_epoch_));
  std::printf("  memory     %s\n", MemoryLine(job_.net()).c_str());
  std::printf("  optimiser  SGD lr %g (%s), momentum %g, weight decay %g on %s, seed %llu\n",
              job_.base_lr, job_.schedule->spec().c_str(), job_.sgd.momentum, job_.sgd.weight_decay,
              DecayOnDescription(job_.sgd.decay_on), static_cast<unsigned long long>(cfg_.seed));
  std::printf("  run        %lld steps (%.2f epochs)\n", static_cast<long long>(total_steps_),
              total_epochs_);
  std::fflush(stdout);
  if (!at_.from.empty()) {
    std::printf("  resumed    from %s at step %lld (epoch %lld, position %lld)\n", at_.from.c_str(),
                static_cast<long long>(at_.start_step),
                static_cast<long long>(at_.start_cursor.epoch),
                static_cast<long long>(at_.start_cursor.position));
    if (!at_.changed_flags.empty()) {
      std::printf("  changed    since the checkpoint: %s\n",
                  absl::StrJoin(at_.changed_flags, ", ").c_str());
    }
    if (at_.weights_only) {  // docs/CHECKPOINTS.md, section 6
      std::printf(
          "  note       weights only (no optimizer state): velocities start at zero; "
          "fine for fine-tuning, not an exact resume\n");
    }
    std::fflush(stdout);
  }
  if (!cfg_.checkpoint_dir.empty()) {
    std::printf(
        "  checkpoint %s every %s%s, keeping %d\n", cfg_.checkpoint_dir.c_str(),
        cfg_.checkpoint_every > 0 ? absl::StrFormat("%d steps", cfg_.checkpoint_every).c_str()
                                  : "-",
        cfg_.checkpoint_secs > 0 ? absl::StrFormat(" / %gs", cfg_.checkpoint_secs).c_str() : "",
        cfg_.keep_checkpoints);
    std::fflush(stdout);
  }
}

// Graphs are legal where the step never waits on the host: one rank, so no gradient
// all-reduce and no column exchange (with MPI they are host calls; NCCL's are stream-ordered
// but the gradient sync still waits for its handles on the host, and capturing NCCL
// collectives is not done yet). Elsewhere auto falls back to plain steps and on is refused.
EndCode Trainer::SetUpGraphs() {
  if (job_.device != Device::kCUDA) {
    graphs_off_ = "off (CPU run)";
    return std::nullopt;
  }
  if (cfg_.cuda_graphs == CudaGraphs::kOff) {
    graphs_off_ = "off (--cuda_graphs=off)";
    return std::nullopt;
  }
  std::string illegal;
  if (!cuda::StepGraph::kAvailable) {
    illegal = "this build has no CUDA graphs";
  } else if (l_.world_size > 1 || job_.sync->enabled()) {
    illegal = absl::StrFormat(
        "%d ranks: the gradient all-reduce and column exchanges synchronise with the host inside "
        "the step",
        l_.world_size);
  }
  if (!illegal.empty()) {
    if (cfg_.cuda_graphs == CudaGraphs::kOn) {
      return AgreedError(l_,
                         absl::InvalidArgumentError(absl::StrFormat(
                             "--cuda_graphs=on needs a CUDA run of one rank (%s); use "
                             "--cuda_graphs=auto or off",
                             illegal)),
                         kExitUsage);
    }
    graphs_off_ = "off (" + illegal + ")";
    return std::nullopt;
  }
  graph_ = std::make_unique<cuda::StepGraph>();
  return std::nullopt;
}

std::string Trainer::GraphsDescription() const {
  if (!graph_) return graphs_off_;
  return absl::StrFormat(
      "on: the step (forward, backward, optimizer) is captured as a CUDA graph after one plain "
      "step and replayed (--cuda_graphs=%s)",
      AbslUnparseFlag(cfg_.cuda_graphs));
}

// --rank_log_dir: one progress file per rank. Each rank opens its own, so a failure is
// one rank's: RankError ends the job.
EndCode Trainer::OpenRankLog() {
  if (cfg_.rank_log_dir.empty()) return std::nullopt;
  const std::string path = absl::StrFormat("%s/rank-%05d.log", cfg_.rank_log_dir, l_.world_rank);
  if (absl::Status s = rank_log_.Open(path, "--rank_log_dir"); !s.ok()) {
    RankError(l_, absl::InvalidArgumentError(std::string(s.message()) +
                                             " (does --rank_log_dir exist and is it writable?)"));
  }
  return std::nullopt;
}

int Trainer::Run() {
  start_ = Clock::now();
  policy_.emplace(cfg_.checkpoint_every, cfg_.checkpoint_secs, at_.start_step, 0.0);
  interval_.start = start_;
  // From here a stop signal is recorded and acted on after the current step (checkpoint,
  // exit 75).
  checkpoint::RecordStopSignal();
  for (int64_t step = at_.start_step; step < total_steps_; ++step) {
    absl::StatusOr<data::Batch> batch = NextBatch();
    if (!batch.ok()) RankError(l_, batch.status());
    interval_.data_wait_s += batch->wait_seconds;
    const float lr = LrAt(step);
    Step(step, std::move(*batch), lr);
    // The batch of kPendingSteps - 1 steps ago: the device has run that step long ago or
    // runs it now, with the later ones queued behind it, so waiting for it does not leave
    // the device idle.
    CollectThrough(step - (kPendingSteps - 1));
    const int64_t done = step + 1;
    bool stop = false, checkpoint_due = false;
    Agree(done, &stop, &checkpoint_due);
    const bool checkpoint_now =
        !cfg_.checkpoint_dir.empty() && (stop || checkpoint_due || done == total_steps_);
    const bool log_due = done % std::max(1, cfg_.log_every) == 0 || done == total_steps_;
    const bool eval_due = job_.val_data && ((cfg_.eval_every > 0 && done % cfg_.eval_every == 0) ||
                                            done == total_steps_);
    // The results through this step, when something needs them now: the progress line, a
    // checkpoint or evaluation (a model whose loss is not finite is never saved), and the
    // first step (the run's first loss, and a diverged start caught at once).
    if (stop || checkpoint_now || log_due || eval_due || step == at_.start_step) {
      CollectThrough(step);
      if (EndCode end = ReadResults()) return *end;
    }
    if (checkpoint_now) {
      if (absl::Status s = Checkpoint(done, next_cursor_); !s.ok()) {
        return AgreedError(l_, s, kExitError);
      }
    }
    if (stop) return Stopped(done);
    if (log_due) Log(done, lr);
    if (eval_due) EvaluateNow(done);
    if (timeline_->finished() && job_.lead && !timeline_printed_) {
      std::printf("%s", timeline_->Table().c_str());
      std::fflush(stdout);
      timeline_printed_ = true;
    }
  }
  return Finish();
}

absl::StatusOr<data::Batch> Trainer::NextBatch() {
  absl::StatusOr<data::Batch> b = pipeline_->Next();
  if (b.ok() && feed_) RETURN_IF_ERROR(feed_->Stage(*b));
  return b;
}

void Trainer::Recycle(data::Batch&& batch) {
  if (feed_) {
    feed_->Recycle(std::move(batch));  // once the device has copied it
  } else {
    pipeline_->Recycle(std::move(batch));
  }
}

void Trainer::Step(int64_t step, data::Batch&& batch, float lr) {
  WatchdogSetStep(step);
  timeline_->BeginStep(step, batch.wait_seconds);
  Tensor& images = net_.blob("data");
  Tensor& labels = net_.blob("label");
  StepScalars values;
  values.step = step;
  values.lr = lr;
  // Enqueued only: the batch stays alive in pending_ until the step has run.
  if (feed_) {
    // The GPU feed: the batch was staged ahead; the compute stream waits for its copy
    // here, and the step (graph) augments it from its slot.
    absl::StatusOr<int> slot = feed_->BeginProduce(static_cast<int>(images.n()));
    if (!slot.ok()) RankError(l_, slot.status());
    values.feed_slot = *slot;
  } else {
    images.CopyFromAsync(batch.images);
    labels.CopyFromAsync(batch.labels);
    timeline_->Mark(StepPhase::kCopyIn);
  }
  // The device work of the step; `dev` non-null when it is being captured as a graph (the
  // kernels then read the step, the rate and the feed slot from the device block), whose
  // phases cannot be told apart on the timeline.
  auto enqueue = [&](const StepScalars* dev) {
    const bool phases = dev == nullptr;
    if (feed_) {
      absl::Status s = feed_->Augment(&images, &labels, dev != nullptr ? &dev->feed_slot : nullptr);
      if (!s.ok()) RankError(l_, s);
      if (phases) timeline_->Mark(StepPhase::kCopyIn);
    }
    RunContext ctx = job_.mesh->MakeRunContext(Phase::kTrain, cfg_.seed, step, job_.global_batch);
    ctx.device_scalars = dev;
    net_.Forward(ctx);
    if (phases) timeline_->Mark(StepPhase::kForward);
    net_.Backward(ctx, job_.sync->AfterLayerHook());
    if (phases) timeline_->Mark(StepPhase::kBackward);
    if (absl::Status s = job_.sync->Finish(); !s.ok()) RankError(l_, s);
    interval_.comm_wait_s += job_.sync->stats().last_wait_seconds;
    if (phases) timeline_->Mark(StepPhase::kGradSync);
    optimizer_.Step(net_, lr, dev != nullptr ? &dev->lr : nullptr);
    if (phases) timeline_->Mark(StepPhase::kOptimizer);
    net_.ops().AccumulateResults(net_.blob("probs"), labels, net_.blob("loss"), step,
                                 dev != nullptr ? &dev->step : nullptr, totals_);
    if (phases) timeline_->Mark(StepPhase::kResults);
  };
  if (graph_) {
    // A rebuilt net (evaluation with a short last batch) moves its buffers: Net::builds()
    // keys the graph, so a new one is warmed up and captured.
    if (graph_->Step(net_.builds(), values, enqueue) != cuda::StepRun::kPlain) {
      timeline_->Mark(StepPhase::kGraph);
    }
  } else {
    enqueue(nullptr);
  }
  if (feed_) feed_->EndProduce();
  interval_.images += job_.global_batch;
  PendingStep& p = pending_[step % kPendingSteps];
  p.step = step;
  p.ran = GetBackend(job_.device)->RecordFence();
  next_cursor_ = batch.next;
  p.batch = std::move(batch);
  timeline_->EndStep();
}

void Trainer::CollectThrough(int64_t step) {
  for (int64_t s = std::max(collected_ + 1, at_.start_step); s <= step; ++s) {
    PendingStep& p = pending_[s % kPendingSteps];
    if (p.step != s) continue;  // none
    collected_ = s;
    p.ran->Wait();
    Recycle(std::move(p.batch));
    p.batch = data::Batch();
    p.step = -1;
  }
}

EndCode Trainer::ReadResults() {
  const ResultTotals t = ReadResultTotals(totals_);  // waits for the queued steps
  totals_.Fill(0.0f);
  if (t.steps == 0) return std::nullopt;
  double sums[5] = {t.loss_sum, t.top1, t.top5, t.last_loss_sum,
                    static_cast<double>(t.nonfinite_steps)};
  SumOverDp(l_, sums, 5);
  if (sums[4] > 0) {
    // The first step whose loss was not finite on any rank, and that rank's loss sum
    // there (the others' finite sums are not kept): every rank reaches this together.
    int64_t first = t.nonfinite_steps > 0 ? t.first_nonfinite_step : INT64_MAX;
    if (l_.dp_size > 1) MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT64_T, MPI_MIN, l_.dp_comm);
    double loss =
        t.nonfinite_steps > 0 && t.first_nonfinite_step == first ? t.first_nonfinite_loss : 0.0;
    SumOverDp(l_, &loss, 1);
    return NonFiniteLoss(loss / job_.global_batch, first, LrAt(first));
  }
  const double last_loss = sums[3] / job_.global_batch;
  if (std::isnan(first_loss_)) first_loss_ = last_loss;
  last_loss_ = last_loss;
  interval_.loss_sum += sums[0];
  interval_.top1_correct += sums[1];
  interval_.top5_correct += sums[2];
  return std::nullopt;
}

void Trainer::Agree(int64_t done, bool* stop, bool* checkpoint_due) {
  WatchdogLabel label("the per-step agreement");
  int agree[2] = {checkpoint::StopRequested() ? 1 : 0,
                  job_.lead && policy_->Due(done, Seconds(start_, Clock::now())) ? 1 : 0};
  if (l_.world_size > 1) MPI_Allreduce(MPI_IN_PLACE, agree, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  *stop = agree[0] != 0;
  *checkpoint_due = agree[1] != 0;
}

absl::Status Trainer::Checkpoint(int64_t done, const data::Cursor& next) {
  checkpoint::TrainState st;
  st.step = done;
  st.epoch = next.epoch;
  st.cursor_epoch = next.epoch;
  st.cursor_position = next.position;
  st.seed = cfg_.seed;
  st.model = cfg_.model;
  st.columns = job_.columns;
  st.input_size = job_.mo.input_size;
  st.num_classes = job_.mo.num_classes;
  st.input_channels = job_.mo.input_channels;
  st.flags = cfg_.flags_text;
  std::string path;
  const auto t0 = Clock::now();
  RETURN_IF_ERROR(SaveCheckpoint(net_, *job_.mesh, job_.mp_comm.get(), st, cfg_.checkpoint_dir,
                                 cfg_.keep_checkpoints, &path, at_.dir_lock.get()));
  if (job_.lead) {
    std::printf("checkpoint step %lld -> %s (%.1fs)\n", static_cast<long long>(done), path.c_str(),
                Seconds(t0, Clock::now()));
    std::fflush(stdout);
  }
  policy_->MarkWritten(done, Seconds(start_, Clock::now()));
  return absl::OkStatus();
}

// The progress line (rank 0), the metrics record and this rank's own log line; starts a
// new interval.
void Trainer::Log(int64_t done, float lr) {
  const IntervalTotals& in = interval_;
  const auto now = Clock::now();
  const double dt = std::max(1e-9, Seconds(in.start, now));
  if (rank_log_.is_open()) {
    // This rank's own view, to find a slow rank: its data and communication waits.
    absl::Status s = rank_log_.WriteLine(absl::StrFormat(
        "step %lld  rank %d (dp %d, mp %d)  %.1f img/s local  data-wait %.1f%%  "
        "comm-wait %.1f%%",
        static_cast<long long>(done), l_.world_rank, l_.dp_rank, l_.mp_rank,
        in.images / l_.dp_size / dt, 100.0 * in.data_wait_s / dt, 100.0 * in.comm_wait_s / dt));
    if (!s.ok()) RankError(l_, s);
  }
  const double img_s = in.images / dt;
  const double elapsed = Seconds(start_, now);
  const double eta = elapsed / (done - at_.start_step) * (total_steps_ - done);
  const double avg_loss = in.loss_sum / in.images;
  const double top1 = 1.0 - in.top1_correct / in.images;
  const double top5 = 1.0 - in.top5_correct / in.images;
  if (job_.lead) {
    std::printf(
        "step %6lld/%lld  epoch %6.2f  loss %.4f  top1-err %.3f  top5-err %.3f  lr %.3g  "
        "%8.1f img/s  data-wait %.0f%%  comm-wait %.0f%%  ETA %s\n",
        static_cast<long long>(done), static_cast<long long>(total_steps_), EpochOf(done), avg_loss,
        top1, top5, lr, img_s, 100.0 * in.data_wait_s / dt, 100.0 * in.comm_wait_s / dt,
        FormatDuration(eta).c_str());
    std::fflush(stdout);
    WriteMetrics(absl::StrFormat(
        "{\"kind\":\"train\",\"step\":%d,\"epoch\":%.4f,\"loss\":%s,\"top1_error\":%.5f,"
        "\"top5_error\":%.5f,\"lr\":%g,\"images_per_sec\":%.1f,\"data_wait_sec\":%.4f,"
        "\"comm_wait_sec\":%.4f,\"elapsed_sec\":%.3f}",
        done, EpochOf(done), JsonNumber(avg_loss, 6), top1, top5, lr, img_s, in.data_wait_s,
        in.comm_wait_s, elapsed));
  }
  interval_ = IntervalTotals();
  interval_.start = Clock::now();
}

// Evaluation on --val_data during training; its time is kept out of the next img/s.
void Trainer::EvaluateNow(int64_t done) {
  const auto eval_start = Clock::now();
  absl::StatusOr<EvalResult> r =
      Evaluate(net_, *job_.val_data, po_, EvalSpecOf(job_), l_, job_.local_batch);
  if (!r.ok()) RankError(l_, r.status());
  if (job_.lead) {
    std::printf("eval  step %lld  %s: %lld images%s  loss %.4f  top1-err %.4f  top5-err %.4f\n",
                static_cast<long long>(done), job_.val_data->info().path.c_str(),
                static_cast<long long>(r->images), ViewsNote(cfg_.eval_views), r->loss,
                r->top1_error, r->top5_error);
    std::fflush(stdout);
    WriteMetrics(absl::StrFormat(
        "{\"kind\":\"eval\",\"step\":%d,\"epoch\":%.4f,\"loss\":%s,\"top1_error\":%.5f,"
        "\"top5_error\":%.5f,\"images\":%d,\"views\":%d}",
        done, EpochOf(done), JsonNumber(r->loss, 6), r->top1_error, r->top5_error, r->images,
        static_cast<int>(cfg_.eval_views)));
  }
  interval_.start += Clock::now() - eval_start;
}

void Trainer::WriteMetrics(const std::string& json_line) {
  if (absl::Status s = metrics_.WriteLine(json_line); !s.ok()) RankError(l_, s);
}

int Trainer::NonFiniteLoss(double loss, int64_t step, float lr) {
  if (job_.lead) {
    std::fprintf(stderr,
                 "trainer: error: the loss became %f at step %lld (lr %g); stopping without "
                 "writing a checkpoint. Lower --lr or check the input data.\n",
                 loss, static_cast<long long>(step), lr);
  }
  return kExitNonFinite;
}

int Trainer::Stopped(int64_t done) {
  if (job_.lead) {
    const int sig = checkpoint::SignalReceived();
    std::printf("stopped by %s after step %lld%s; exit %d so the job can be requeued\n",
                sig ? checkpoint::SignalName(sig).c_str() : "a signal on another rank",
                static_cast<long long>(done),
                cfg_.checkpoint_dir.empty() ? " (no --checkpoint_dir: nothing was saved)" : "",
                kExitPreempted);
    std::fflush(stdout);
  }
  return kExitPreempted;
}

int Trainer::Finish() {
  for (AppendFile* f : {&metrics_, &rank_log_}) {
    if (absl::Status s = f->Close(); !s.ok()) RankError(l_, s);
  }
  if (job_.lead) {
    // On a GPU, what the device allocator held at most (the banner has the prediction).
    const size_t peak = GetBackend(job_.device)->PeakBytes();
    std::printf(
        "done: %lld steps in %s, loss %.4f -> %.4f%s\n", static_cast<long long>(total_steps_),
        FormatDuration(Seconds(start_, Clock::now())).c_str(), first_loss_, last_loss_,
        peak > 0 ? absl::StrFormat(", peak device memory %.1f MiB", peak / 1048576.0).c_str() : "");
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace

int RunTrainer(const TrainConfig& cfg) {
  Job job(cfg);
  Layout& l = job.l;
  MPI_Comm_rank(MPI_COMM_WORLD, &l.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &l.world_size);
  if (l.world_size > 1) SetLogRank(l.world_rank);
  job.lead = l.world_rank == 0;
  job.training = cfg.mode == RunMode::kTrain;
  if (absl::Status s = checkpoint::InstallStopSignalHandlers(); !s.ok()) RankError(l, s);
  // Until the step loop polls for it, a stop signal ends the process at once: start-up may
  // block (a slow or FIFO file, a collective waiting for a rank), and there is nothing to
  // save yet. 75 as after a graceful stop: a requeued job starts over or resumes.
  checkpoint::ExitOnStopSignal("trainer",
                               job.training ? "before training started (nothing to save)"
                                            : "during --mode=" + AbslUnparseFlag(cfg.mode),
                               kExitPreempted);

  // A rank that stops answering ends the job (exit 5, naming it) instead of a hang.
  if (cfg.collective_timeout > 0 && !cfg.checkpoint_dir.empty() &&
      cfg.collective_timeout <= cfg.checkpoint_lock_wait_s) {
    return AgreedError(
        l,
        absl::InvalidArgumentError(absl::StrFormat(
            "--collective_timeout=%g must exceed --checkpoint_lock_wait_s=%g (rank 0 may wait that "
            "long for the directory's lock while the others wait for it), or be 0 (off)",
            cfg.collective_timeout, cfg.checkpoint_lock_wait_s)),
        kExitUsage);
  }
  WatchdogOptions watch{cfg.collective_timeout, kExitRankStoppedAnswering, "trainer"};
  if (absl::Status s = StartCollectiveWatchdog(MPI_COMM_WORLD, watch); !s.ok()) RankError(l, s);
  for (auto phase : {SetUpLayout, SetUpOptimizer, SetUpDevice, OpenData, BuildShard}) {
    if (EndCode end = phase(job)) return *end;
  }
  if (cfg.print_memory_plan) return PrintMemoryPlan(job);
  ResumePoint at;
  if (EndCode end = Resume(job, at)) return *end;
  if (cfg.mode == RunMode::kEval) return RunEval(job, at.from);
  if (cfg.mode == RunMode::kPredict) return RunPredict(job, at.from);
  Trainer trainer(job, at);
  if (EndCode end = trainer.Start()) return *end;
  return trainer.Run();
}

}  // namespace colonnade
