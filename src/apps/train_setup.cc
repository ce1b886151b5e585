#include "apps/train_setup.h"

#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/exit_codes.h"
#include "apps/train_checkpoint.h"
#include "checkpoint/signals.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "cuda/cuda_backend.h"
#include "parallel/watchdog.h"

namespace colonnade {
namespace {

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

}  // namespace

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

// Sums `n` doubles over the data-parallel group (loss sums, correct counts); the mp ranks
// of a group hold identical copies of these.
void SumOverDp(const Layout& l, double* v, int n) {
  WatchdogLabel label("summing the results over the dp group");
  if (l.dp_size > 1) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, l.dp_comm);
}

// An error every rank has detected identically (bad flags, impossible layout): rank 0
// prints it and every rank returns the same code without a collective. The outcome is
// decided: when the launcher then stops the ranks still finishing (mpirun does once the
// first exits), they end with this code and no "stopped by SIGTERM ... exit 75" note.
int AgreedError(const Layout& l, const absl::Status& s, int code) {
  checkpoint::ExitQuietlyOnStopSignal(code);
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
  return BroadcastStatus(lead_status, 0, MPI_COMM_WORLD);
}

// An error any rank may see alone before training (its own rank log): every rank gets
// the status of the lowest failing rank, so the error is then agreed (AgreedError).
// Collective over the world.
absl::Status FromFirstFailing(const Layout& l, const absl::Status& mine) {
  if (l.world_size == 1) return mine;
  int first = mine.ok() ? l.world_size : l.world_rank;
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == l.world_size) return absl::OkStatus();
  const absl::Status s = BroadcastStatus(mine, first, MPI_COMM_WORLD);
  return absl::Status(s.code(), absl::StrFormat("on rank %d: %s", first, s.message()));
}

// The rule for an existing --predictions file: refused, or with --overwrite replaced when
// it is an earlier predictions file or not HDF5 (output_file.h).
ExistingOutput PredictionsRule(const TrainConfig& cfg) {
  return cfg.overwrite ? ExistingOutput::kReplacePredictions : ExistingOutput::kRefuse;
}

// ---- the model of an eval or predict run ---------------------------------------------------

EndCode ModelFromCheckpoint(const Layout& l, TrainConfig& cfg) {
  // Rank 0 chooses the file as Resume will (the newest valid one of a directory, whose
  // warnings it prints then), every rank reads its attributes.
  std::string path;
  if (l.world_rank == 0) {
    if (cfg.resume != "auto" && cfg.resume != "none") {
      path = cfg.resume;
    } else if (cfg.resume == "auto" && !cfg.checkpoint_dir.empty()) {
      absl::StatusOr<std::string> found =
          checkpoint::FindLatestValid(cfg.checkpoint_dir, nullptr, nullptr);
      if (found.ok()) path = *found;
    }
  }
  if (l.world_size > 1) path = BroadcastString(path, 0, MPI_COMM_WORLD);
  if (path.empty()) return std::nullopt;
  absl::StatusOr<checkpoint::TrainState> st = checkpoint::ReadState(path);
  if (!st.ok()) {
    return AgreedError(l, st.status(), absl::IsNotFound(st.status()) ? kExitUsage : kExitError);
  }
  // A flag given with another value than the checkpoint's: the user meant another model.
  auto take = [&](const char* flag, auto* field, auto value, const std::string& what) -> EndCode {
    if (cfg.Given(flag) && *field != value) {
      return AgreedError(
          l,
          absl::InvalidArgumentError(absl::StrFormat(
              "--%s=%s differs from the %s of %s (%s), which --mode=%s uses: leave --%s out, or "
              "give the checkpoint of that model",
              flag, absl::StrCat(*field), what, path, absl::StrCat(value),
              AbslUnparseFlag(cfg.mode), flag)),
          kExitUsage);
    }
    *field = value;
    return std::nullopt;
  };
  if (EndCode end = take("model", &cfg.model, st->model, "model")) return end;
  if (EndCode end = take("num_classes", &cfg.num_classes, st->num_classes, "classes")) return end;
  if (EndCode end = take("columns", &cfg.columns, st->columns, "columns")) return end;
  // The input side is --crop when given (evaluation's centre crop), else --input_size.
  if (cfg.Given("crop")) {
    if (EndCode end = take("crop", &cfg.crop, st->input_size, "input size")) return end;
  } else if (EndCode end = take("input_size", &cfg.input_size, st->input_size, "input size")) {
    return end;
  }
  return std::nullopt;
}

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

// The options of issue 35 on top of the recipe's SGD (docs/MODELS.md, "Optimisation
// options"): Nesterov, LARS, label smoothing, the moving average, the linear lr scaling. A
// combination that cannot mean what it says is a usage error (exit 2).
EndCode SetUpOptimizerOptions(Job& job) {
  const TrainConfig& cfg = job.cfg;
  auto usage = [&job](const std::string& why) {
    return AgreedError(job.l, absl::InvalidArgumentError(why), kExitUsage);
  };
  job.sgd.nesterov = cfg.nesterov;
  if (cfg.nesterov && !(job.sgd.momentum > 0)) {
    return usage(absl::StrFormat(
        "--nesterov needs a momentum above 0 (this run: %g): give --momentum or drop --nesterov",
        job.sgd.momentum));
  }
  job.sgd.lars = cfg.optimizer == OptimizerChoice::kLars;
  job.sgd.lars_eta = static_cast<float>(cfg.lars_eta);
  if (job.sgd.lars && job.sgd.decay_on != DecayOn::kWeights) {
    return usage(
        "--optimizer=lars excludes biases and batch-norm parameters from weight decay: "
        "--weight_decay_on must be 'weights'");
  }
  if (job.sgd.lars && job.l.mp_size > 1) {
    // A shard's norms are not the tensor's: the trust ratio would depend on the layout.
    return usage(absl::StrFormat(
        "--optimizer=lars needs --mp=1 (this run: --mp=%d): LARS's per-tensor norms are not "
        "summed over a column split yet (docs/MODELS.md)",
        job.l.mp_size));
  }
  if (cfg.Given("lars_eta") && !job.sgd.lars) return usage("--lars_eta needs --optimizer=lars");
  job.label_smoothing = static_cast<float>(cfg.label_smoothing);
  job.ema.decay = static_cast<float>(cfg.ema_decay);
  job.ema.every = cfg.ema_every;
  if (cfg.Given("ema_every") && job.ema.decay == 0) return usage("--ema_every needs --ema_decay");
  if (job.training && cfg.eval_weights == EvalWeights::kEma && job.ema.decay == 0) {
    return usage("--eval_weights=ema needs a moving average: give --ema_decay");
  }
  job.lr_rule = absl::StrFormat("%g", job.base_lr);
  if (cfg.lr_scaling == LrScaling::kLinear) {
    const double scaled =
        job.base_lr * static_cast<double>(job.global_batch) / cfg.lr_reference_batch;
    job.lr_rule = absl::StrFormat("%g x %d/%d = %g", job.base_lr, job.global_batch,
                                  cfg.lr_reference_batch, static_cast<float>(scaled));
    job.base_lr = static_cast<float>(scaled);
  } else if (cfg.Given("lr_reference_batch")) {
    return usage("--lr_reference_batch needs --lr_scaling=linear");
  }
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
  if (EndCode end = SetUpOptimizerOptions(job)) return end;
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
  if (job.cfg.Given("bf16_activations") && job.cfg.bf16_activations && !job.bf16_storage) {
    return AgreedError(job.l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "--bf16_activations needs bf16 precision on a CUDA device (this run: "
                           "%s on %s): add --precision=bf16 --device=cuda, or drop the flag",
                           PrecisionName(job.precision), DeviceName(job.device))),
                       kExitUsage);
  }
  return std::nullopt;
}

namespace {

// The recipes' augmentation flags (--random_resized_crop, --rrc_scale, --rrc_ratio,
// --cutout, --eval_crop_fraction) against each other, the model's input side and the
// evaluation images, with messages that name the flags (the pipeline checks them again).
EndCode CheckRecipeAugmentation(Job& job, const data::Dataset* eval_set) {
  const TrainConfig& cfg = job.cfg;
  auto usage = [&](const std::string& m) {
    return AgreedError(job.l, absl::InvalidArgumentError(m), kExitUsage);
  };
  if (!cfg.random_resized_crop && (cfg.Given("rrc_scale") || cfg.Given("rrc_ratio"))) {
    return usage(
        "--rrc_scale and --rrc_ratio shape the boxes of --random_resized_crop: add "
        "--random_resized_crop, or drop them");
  }
  if (cfg.random_resized_crop && cfg.pad > 0) {
    return usage(absl::StrFormat(
        "--pad=%d and --random_resized_crop exclude each other (the resized crop's box lies "
        "inside the image): give one of them",
        cfg.pad));
  }
  if (cfg.cutout > job.mo.input_size) {
    return usage(absl::StrFormat("--cutout=%d is larger than the input side %d", cfg.cutout,
                                 job.mo.input_size));
  }
  const double fraction = EvalCropFraction(cfg);
  if (fraction > 0 && eval_set != nullptr) {
    data::PipelineOptions o;
    o.eval_crop_fraction = fraction;
    const int box = data::EvalBoxOf(o, eval_set->info());
    const std::string what =
        cfg.eval_crop_fraction > 0
            ? absl::StrFormat("--eval_crop_fraction=%g", fraction)
            : absl::StrFormat("the evaluation crop fraction %g of --random_resized_crop", fraction);
    if (box < 1) {
      return usage(absl::StrFormat("%s of the %dx%d images of %s is less than one pixel", what,
                                   eval_set->info().height, eval_set->info().width,
                                   eval_set->info().path));
    }
    if (cfg.eval_views == EvalViews::kTen && box != job.mo.input_size) {
      return usage(absl::StrFormat(
          "--eval_views=10 cuts unresized crops, but %s takes the centre %dx%d of the images "
          "of %s and resizes it to %dx%d: use --eval_views=1 or 2, or --eval_crop_fraction=%g "
          "(%d pixels)",
          what, box, box, eval_set->info().path, job.mo.input_size, job.mo.input_size,
          static_cast<double>(job.mo.input_size) /
              std::min(eval_set->info().height, eval_set->info().width),
          job.mo.input_size));
    }
  }
  return std::nullopt;
}

}  // namespace

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
  // Every label of every dataset the model sees must be one of its classes; a label
  // beyond them would only be caught by the loss's check in the first step (an abort).
  for (const data::Dataset* set : {job.data.get(), job.val_data.get()}) {
    if (set == nullptr || set->info().num_classes <= mo.num_classes) continue;
    const std::string model_classes =
        cfg.num_classes > 0 ? absl::StrFormat("--num_classes=%d is", mo.num_classes)
                            : absl::StrFormat("the model's %d classes (those of %s) are",
                                              mo.num_classes, dinfo.path);
    return AgreedError(l,
                       absl::InvalidArgumentError(absl::StrFormat(
                           "%s fewer than the %d classes of %s (labels 0-%d): give "
                           "--num_classes=%d or more%s",
                           model_classes, set->info().num_classes, set->info().path,
                           set->info().num_classes - 1, set->info().num_classes,
                           cfg.num_classes > 0 ? ", or leave it out to take the dataset's" : "")),
                       kExitUsage);
  }
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
  const data::Dataset* eval_set = job.training ? job.val_data.get() : job.data.get();
  if (EndCode end = CheckRecipeAugmentation(job, eval_set)) return end;
  // --eval_views=10 cuts its crops of the input side from the full evaluation images.
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
  // The moving average starts as the initial weights; a resume loads it (LoadIntoParam).
  if (job.training && job.ema.decay > 0) InitEma(net);
  absl::StatusOr<std::unique_ptr<GradientSync>> sync =
      GradientSync::Create(net, job.dp_comm.get(), cfg.bucket_mb);
  if (!sync.ok()) return AgreedError(l, sync.status(), kExitUsage);
  job.sync = std::move(*sync);
  return std::nullopt;
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
  // The model's input size, and in training the data the cursor must point into: a
  // checkpoint beyond it is corrupt (skipped by --resume=auto, exit 1 with --resume=PATH).
  checkpoint::ExpectedModel expected = checkpoint::ExpectedModelOf(job.net());
  expected.input_size = job.mo.input_size;
  if (job.training) expected.dataset_size = job.data->info().size;
  absl::StatusOr<std::optional<checkpoint::Checkpoint>> ckpt =
      LoadForResume(cfg.resume, cfg.checkpoint_dir, *job.mesh, expected);
  // A --resume path that does not exist is a path typed wrong: a usage error, as a missing
  // --data directory is; a file that exists but cannot be used is a runtime failure.
  if (!ckpt.ok()) {
    return AgreedError(l, ckpt.status(), absl::IsNotFound(ckpt.status()) ? kExitUsage : kExitError);
  }
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
  checkpoint::Checkpoint& c = **ckpt;
  if (!job.training) {
    // --eval_weights: evaluation and prediction read the moving average in place of the
    // weights (auto: when the checkpoint has one).
    if (cfg.eval_weights == EvalWeights::kEma && !c.has_ema) {
      return AgreedError(l,
                         absl::InvalidArgumentError(absl::StrFormat(
                             "--eval_weights=ema: %s holds no moving average (trained without "
                             "--ema_decay); use --eval_weights=raw or auto",
                             c.path)),
                         kExitUsage);
    }
    if (c.has_ema && cfg.eval_weights != EvalWeights::kRaw) {
      for (checkpoint::TensorEntry& e : c.tensors) e.value.swap(e.ema);
      at.eval_ema = true;
      if (job.lead) {
        std::printf(
            "trainer: %s with the checkpoint's moving-average weights "
            "(--eval_weights=raw: the trained ones)\n",
            cfg.mode == RunMode::kEval ? "evaluating" : "predicting");
      }
    }
  }
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
  at.ema_restarted = job.training && job.ema.decay > 0 && !c.has_ema;
  at.changed_flags = ChangedFlags(c.state.flags, cfg.flags_text);
  return std::nullopt;
}

}  // namespace colonnade
