#include "apps/train_loop.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/evaluation.h"
#include "apps/exit_codes.h"
#include "apps/train_checkpoint.h"
#include "checkpoint/signals.h"
#include "core/results.h"
#include "core/status_macros.h"
#include "cuda/cuda_backend.h"
#include "cuda/jpeg_decoder.h"
#include "data/augment.h"
#include "parallel/watchdog.h"

namespace colonnade {

EndCode Trainer::Start() {
  for (auto phase : {&Trainer::CreatePipeline, &Trainer::CountParameters, &Trainer::OpenMetrics,
                     &Trainer::OpenRankLog, &Trainer::SetUpGraphs}) {
    if (EndCode end = (this->*phase)()) return end;
  }
  PrintBanner();
  totals_ = NewResultTotals(job_.device);
  // Profiled steps start after two warm-up steps: the first calls of each shape pick
  // kernels (autotune) and allocate.
  timeline_.emplace(job_.device, at_.start_step, 2, cfg_.profile_steps);
  TrainingStepParts parts;
  parts.net = &net_;
  parts.optimizer = &optimizer_;
  parts.totals = &totals_;
  parts.sync = job_.sync.get();
  parts.feed = feed_.get();
  parts.graph = graph_.get();
  parts.timeline = &*timeline_;
  parts.context = [this](int64_t step) {
    RunContext ctx = job_.mesh->MakeRunContext(Phase::kTrain, cfg_.seed, step, job_.global_batch);
    ctx.label_smoothing = job_.label_smoothing;
    return ctx;
  };
  step_.emplace(std::move(parts));
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
  return std::nullopt;
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
  po_.resized_crop.on = cfg_.random_resized_crop;
  po_.resized_crop.scale_min = cfg_.rrc_scale.min;
  po_.resized_crop.scale_max = cfg_.rrc_scale.max;
  po_.resized_crop.ratio_min = cfg_.rrc_ratio.min;
  po_.resized_crop.ratio_max = cfg_.rrc_ratio.max;
  po_.cutout = cfg_.cutout;
  po_.eval_crop_fraction = EvalCropFraction(cfg_);  // Evaluate's pipelines (train = false)
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
                     cuda::WgmmaConvolutions();  // Hopper, unless COLONNADE_CONV_CONFIG=mma
  std::printf("  layout     %s, device %s (%s%s%s%s), comm %s\n", job_.mesh->ToString().c_str(),
              DeviceName(job_.device), PrecisionName(job_.precision),
              cfg_.precision == "auto" ? ", auto" : "",
              job_.bf16_storage ? ", bf16 activations" : "", wgmma ? ", wgmma convolutions" : "",
              comm ? comm->backend() : "none");
  std::printf("  model      %s, %d column%s, input %dx%dx%d, %d classes, %s parameters\n",
              cfg_.model.c_str(), job_.columns, job_.columns == 1 ? "" : "s", mo.input_channels,
              mo.input_size, mo.input_size, mo.num_classes, WithCommas(full_params_).c_str());
  std::printf("  data       %s: %lld images %dx%dx%d, %d classes (%s)\n", dinfo.path.c_str(),
              static_cast<long long>(dinfo.size), dinfo.height, dinfo.width, dinfo.channels,
              dinfo.num_classes, dinfo.encoding.c_str());
  std::printf("  augment    %s\n", AugmentDescription().c_str());
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
  std::printf("  optimiser  %s lr %s (%s: %s), %smomentum %g, weight decay %g on %s, seed %llu\n",
              job_.sgd.lars ? "LARS" : "SGD", job_.lr_rule.c_str(), job_.schedule->spec().c_str(),
              job_.schedule->Describe().c_str(), job_.sgd.nesterov ? "Nesterov " : "",
              job_.sgd.momentum, job_.sgd.weight_decay, DecayOnDescription(job_.sgd.decay_on),
              static_cast<unsigned long long>(cfg_.seed));
  if (job_.sgd.lars || job_.label_smoothing > 0 || job_.ema.decay > 0) {
    std::printf("  options    %s\n", OptionsDescription().c_str());
  }
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

// The banner's augmentation line: what training draws and how evaluation crops, e.g.
// "train: random-resized crop (area 0.08,1, ratio 3/4,4/3) to 224x224, mirror, cutout 8;
// eval: the centre 196x196 resized to 224x224 (fraction 0.875), 2 views".
std::string Trainer::AugmentDescription() const {
  const data::AugmentConfig& a = pipeline_->augment_config();
  std::vector<std::string> train;
  if (cfg_.random_resized_crop) {
    train.push_back(absl::StrFormat("random-resized crop (area %s, ratio %s) to %dx%d",
                                    AbslUnparseFlag(cfg_.rrc_scale),
                                    AbslUnparseFlag(cfg_.rrc_ratio), a.crop_h, a.crop_w));
  } else if (a.crop_h < a.height || a.crop_w < a.width || a.pad > 0) {
    train.push_back(absl::StrFormat(
        "random %dx%d crop%s", a.crop_h, a.crop_w,
        a.pad > 0 ? absl::StrFormat(" of the image padded by %d", a.pad) : std::string()));
  } else {
    train.push_back("the whole image");
  }
  if (cfg_.mirror) train.push_back("mirror");
  if (cfg_.lighting > 0) train.push_back(absl::StrFormat("PCA lighting %g", cfg_.lighting));
  if (cfg_.cutout > 0) train.push_back(absl::StrFormat("cutout %d", cfg_.cutout));
  std::string eval = "no --val_data";
  if (const data::Dataset* val = job_.val_data.get()) {
    data::PipelineOptions o = po_;
    const int box = data::EvalBoxOf(o, val->info());
    eval = box > 0 ? absl::StrFormat("the centre %dx%d resized to %dx%d (fraction %g)", box, box,
                                     a.crop_h, a.crop_w, o.eval_crop_fraction)
                   : absl::StrFormat("the centre %dx%d crop", a.crop_h, a.crop_w);
    if (cfg_.eval_views != EvalViews::kOne) {
      absl::StrAppend(&eval, ", ", static_cast<int>(cfg_.eval_views), " views");
    }
  }
  return absl::StrCat("train: ", absl::StrJoin(train, ", "), "; eval: ", eval);
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

// --rank_log_dir: one progress file per rank, opened before the banner so that a path
// that cannot be written is a usage error (exit 2) agreed by every rank, as a bad
// --metrics_file is; a failed write later on stops the job (exit 1).
EndCode Trainer::OpenRankLog() {
  if (cfg_.rank_log_dir.empty()) return std::nullopt;
  absl::Status s = CheckIsDirectory(cfg_.rank_log_dir, "--rank_log_dir");
  if (s.ok()) {
    s = rank_log_.Open(absl::StrFormat("%s/rank-%05d.log", cfg_.rank_log_dir, l_.world_rank),
                       "--rank_log_dir", AppendFile::kNoLinks);
  }
  s = FromFirstFailing(l_, s);
  if (!s.ok()) return AgreedError(l_, s, kExitUsage);
  return std::nullopt;
}

// The banner's line for LARS, label smoothing and the moving average (docs/MODELS.md).
std::string Trainer::OptionsDescription() const {
  std::vector<std::string> parts;
  if (job_.sgd.lars) {
    parts.push_back(absl::StrFormat(
        "LARS eta %g on conv/fc weights (biases, BN gamma/beta: plain lr, no decay)",
        job_.sgd.lars_eta));
  }
  if (job_.label_smoothing > 0) {
    parts.push_back(absl::StrFormat("label smoothing %g", job_.label_smoothing));
  }
  if (job_.ema.decay > 0) {
    parts.push_back(absl::StrFormat(
        "weight EMA decay %g every %d step%s (weights and BN statistics; evaluation uses %s)%s",
        job_.ema.decay, job_.ema.every, job_.ema.every == 1 ? "" : "s",
        cfg_.eval_weights == EvalWeights::kRaw ? "the raw weights" : "the EMA",
        at_.ema_restarted ? "; the checkpoint had none: it restarts from its weights" : ""));
  }
  return absl::StrJoin(parts, "; ");
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
    net_.blob("label").CopyFromAsync(batch.labels);
    timeline_->Mark(StepPhase::kCopyIn);
  }
  if (absl::Status s = step_->Enqueue(values, &interval_.comm_wait_s); !s.ok()) RankError(l_, s);
  // The moving average after the optimizer, outside a step graph (it runs every N steps
  // only), queued behind the step on the same stream.
  if (job_.ema.decay > 0 && (step + 1) % job_.ema.every == 0) UpdateEma(net_, job_.ema.decay);
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
        static_cast<long long>(done), static_cast<long long>(total_steps_), DataEpoch(), avg_loss,
        top1, top5, lr, img_s, 100.0 * in.data_wait_s / dt, 100.0 * in.comm_wait_s / dt,
        FormatDuration(eta).c_str());
    std::fflush(stdout);
    WriteMetrics(absl::StrFormat(
        "{\"kind\":\"train\",\"step\":%d,\"epoch\":%.4f,\"loss\":%s,\"top1_error\":%.5f,"
        "\"top5_error\":%.5f,\"lr\":%g,\"images_per_sec\":%.1f,\"data_wait_sec\":%.4f,"
        "\"comm_wait_sec\":%.4f,\"elapsed_sec\":%.3f}",
        done, DataEpoch(), JsonNumber(avg_loss, 6), top1, top5, lr, img_s, in.data_wait_s,
        in.comm_wait_s, elapsed));
  }
  interval_ = IntervalTotals();
  interval_.start = Clock::now();
}

// Evaluation on --val_data during training; its time is kept out of the next img/s.
void Trainer::EvaluateNow(int64_t done) {
  const auto eval_start = Clock::now();
  // --eval_weights: the moving average in place of the weights for the pass (device copies;
  // the trained weights come back after it).
  const bool ema = job_.ema.decay > 0 && cfg_.eval_weights != EvalWeights::kRaw;
  if (ema) SwapInEma(net_, ema_saved_);
  absl::StatusOr<EvalResult> r = Evaluate(net_, *job_.val_data, po_, EvalSpecOf(job_), l_,
                                          job_.local_batch, ProgressOf(job_, "eval"));
  if (ema) RestoreFromEma(net_, ema_saved_);
  if (!r.ok()) RankError(l_, r.status());
  if (job_.lead) {
    // Only runs with a moving average name the weights: other runs' lines stay as they were.
    const std::string weights =
        job_.ema.decay > 0 ? (ema ? "  (ema weights)" : "  (raw weights)") : "";
    const std::string weights_json =
        job_.ema.decay > 0 ? absl::StrFormat(",\"weights\":\"%s\"", ema ? "ema" : "raw") : "";
    std::printf("eval  step %lld  %s: %lld images%s  loss %.4f  top1-err %.4f  top5-err %.4f%s\n",
                static_cast<long long>(done), job_.val_data->info().path.c_str(),
                static_cast<long long>(r->images), ViewsNote(cfg_.eval_views), r->loss,
                r->top1_error, r->top5_error, weights.c_str());
    std::fflush(stdout);
    WriteMetrics(absl::StrFormat(
        "{\"kind\":\"eval\",\"step\":%d,\"epoch\":%.4f,\"loss\":%s,\"top1_error\":%.5f,"
        "\"top5_error\":%.5f,\"images\":%d,\"views\":%d%s}",
        done, DataEpoch(), JsonNumber(r->loss, 6), r->top1_error, r->top5_error, r->images,
        static_cast<int>(cfg_.eval_views), weights_json));
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
    const int64_t trained = total_steps_ - at_.start_step;
    std::printf(
        "done: %lld steps (%s), loss %.4f -> %.4f%s\n", static_cast<long long>(total_steps_),
        at_.start_step > 0
            ? absl::StrFormat("%lld trained in this run from step %lld in %s",
                              static_cast<long long>(trained),
                              static_cast<long long>(at_.start_step),
                              FormatDuration(Seconds(start_, Clock::now())))
                  .c_str()
            : absl::StrFormat("in %s", FormatDuration(Seconds(start_, Clock::now()))).c_str(),
        first_loss_, last_loss_,
        peak > 0 ? absl::StrFormat(", peak device memory %.1f MiB", peak / 1048576.0).c_str() : "");
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace colonnade
