#include "apps/evaluation.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "apps/device_feed.h"
#include "apps/exit_codes.h"
#include "core/results.h"
#include "core/status_macros.h"
#include "cuda/feed_types.h"
#include "data/augment.h"

namespace colonnade {
namespace {

// Runs the views of `batch` (n > 0 images, already the net's batch size) through `net` into
// `avg`: ten crops, or the centre crop and its mirror (`centre`: the eval pipeline's view).
// With a feed they are cut on the GPU from the batch's uint8 images (staged once); else the
// host cuts them from the batch's float images (full images for ten crops, data::TenCrops;
// the centre crop and data::MirrorCHWN of it for two).
absl::Status ForwardViews(Net& net, const data::Batch& batch, int side, EvalViews views,
                          const data::ImageAugment& centre, DeviceFeed* feed, const RunContext& ctx,
                          ViewAverage* avg) {
  const int count = static_cast<int>(views);
  std::vector<Tensor> crops;
  if (feed != nullptr) {
    RETURN_IF_ERROR(feed->Stage(batch));
  } else {
    if (views == EvalViews::kTen) {
      ASSIGN_OR_RETURN(crops, data::TenCrops(batch.images, side));
    } else {
      ASSIGN_OR_RETURN(Tensor mirrored, data::MirrorCHWN(batch.images));
      crops.push_back(batch.images);  // a handle: the batch's storage, not a copy
      crops.push_back(std::move(mirrored));
    }
    net.blob("label").CopyFrom(batch.labels);
  }
  data::ImageAugment mirrored = centre;
  mirrored.mirror = true;
  avg->Start(net.blob("probs").c(), net.batch());
  for (int v = 0; v < count; ++v) {
    if (feed != nullptr) {
      const bool last = v == count - 1;
      if (views == EvalViews::kTen) {
        RETURN_IF_ERROR(feed->ProduceView(v, last, &net.blob("data"), &net.blob("label")));
      } else {
        RETURN_IF_ERROR(
            feed->ProduceView(v ? mirrored : centre, last, &net.blob("data"), &net.blob("label")));
      }
    } else {
      net.blob("data").CopyFrom(crops[v]);
    }
    net.Forward(ctx);
    avg->Add(net.blob("probs").ToHost(), net.blob("loss").ToHost());
  }
  return absl::OkStatus();
}

}  // namespace

EvalSpec EvalSpecOf(const Job& job) {
  EvalSpec e;
  e.views = job.cfg.eval_views;
  e.views_on_gpu = job.device == Device::kCUDA && job.cfg.gpu_augment != GpuAugment::kOff;
  return e;
}

// The batch loop shared by evaluation and prediction: the whole of `val` in dataset order
// through `net` in evaluation mode (no padding, no dropout), each dp rank its slice, on
// `spec`'s views: the centre crop, or the ten crops (the pipeline then hands full images
// for TenCrops, or uint8 images with crop = the input side for the GPU feed). `visit` sees
// every batch after the forward pass(es); with n == 0 (this rank's slice of a short last
// batch is empty) no forward pass ran, but the batch is still visited so that collectives
// in `visit` run on every rank. The net is rebuilt for a batch of another size and back to
// `local_batch` at the end.
absl::Status ForEachEvalBatch(Net& net, data::Dataset& val, data::PipelineOptions o,
                              int64_t local_batch, const EvalSpec& spec,
                              const PassProgress& progress, const EvalVisitor& visit) {
  o.train = false;
  o.shuffle = false;
  o.drop_last = false;
  // A pipeline lives for one pass only: pinning its few buffers would cost more than the
  // faster copies save.
  o.pinned = false;
  o.pinned_allocator = nullptr;
  o.output = data::BatchOutput::kFloatCHWN;  // the centre crop takes the host path
  const bool several = spec.views != EvalViews::kOne;
  const int side = static_cast<int>(net.input_shape("data")[1]);
  if (spec.views == EvalViews::kTen) {
    o.crop = spec.views_on_gpu ? side : 0;  // the host cuts ten crops from the full images
    o.eval_crop_fraction = 0;               // never resized (checked at start-up)
  } else if (several && spec.views_on_gpu) {
    o.crop = side;
  }
  if (several && spec.views_on_gpu) {
    o.output =
        val.synthetic_recipe() ? data::BatchOutput::kIndicesOnly : data::BatchOutput::kSourceUint8;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<data::BatchPipeline> pipe, data::BatchPipeline::Create(&val, o));
  std::unique_ptr<DeviceFeed> feed;  // declared after pipe: destroyed first, it recycles into it
  if (several && spec.views_on_gpu) {
    ASSIGN_OR_RETURN(feed, DeviceFeed::Create(val, pipe.get()));
  }
  // The eval pipeline's centre view (resized when the crop fraction asks), for two views.
  const data::ImageAugment centre =
      data::DrawAugment(pipe->augment_config(), o.seed, 0, 0, /*train=*/false, false, 0.f);
  RunContext ctx;
  ctx.phase = Phase::kEval;
  ViewAverage avg;
  const int64_t batches = pipe->batches_per_epoch();
  const int64_t total = val.info().size;
  const auto start = Clock::now();
  auto last_line = start;
  for (int64_t b = 0; b < batches; ++b) {
    ASSIGN_OR_RETURN(data::Batch batch, pipe->Next());
    const int64_t n = batch.labels.n();
    if (n > 0) {
      if (n != net.batch()) RETURN_IF_ERROR(net.Build(n, net.device()));
      if (several) {
        RETURN_IF_ERROR(ForwardViews(net, batch, side, spec.views, centre, feed.get(), ctx, &avg));
      } else {
        net.blob("data").CopyFrom(batch.images);
        net.blob("label").CopyFrom(batch.labels);
        net.Forward(ctx);
      }
    }
    RETURN_IF_ERROR(visit(batch, n, several ? &avg : nullptr));
    if (const auto now = Clock::now();
        progress.print && b + 1 < batches && Seconds(last_line, now) >= progress.every_secs) {
      last_line = now;
      const int64_t done = std::min(total, (b + 1) * o.global_batch);
      const double secs = std::max(1e-9, Seconds(start, now));
      std::printf("  %s %s/%s images (%.0f%%)  %.1f img/s  ETA %s\n", progress.what.c_str(),
                  WithCommas(done).c_str(), WithCommas(total).c_str(), 100.0 * done / total,
                  done / secs, FormatDuration(secs / done * (total - done)).c_str());
      std::fflush(stdout);
    }
    if (feed != nullptr && n > 0) {
      feed->Recycle(std::move(batch));  // back to the pipeline once the device copied it
    } else {
      pipe->Recycle(std::move(batch));
    }
  }
  if (net.batch() != local_batch) RETURN_IF_ERROR(net.Build(local_batch, net.device()));
  return absl::OkStatus();
}

// Loss and top-1/top-5 error of `net` on the whole validation set, summed over the dp
// group. With ten views: of the views' average probabilities (ViewAverage).
absl::StatusOr<EvalResult> Evaluate(Net& net, data::Dataset& val, const data::PipelineOptions& o,
                                    const EvalSpec& spec, const Layout& l, int64_t local_batch,
                                    const PassProgress& progress) {
  struct {
    double loss = 0, top1 = 0, top5 = 0, images = 0;  // summed, in this order, over dp
  } sums;
  // One view: the net's own results, added on its device and read once at the end.
  Tensor totals = NewResultTotals(net.ops().device());
  RETURN_IF_ERROR(ForEachEvalBatch(
      net, val, o, local_batch, spec, progress,
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
  o.eval_crop_fraction = EvalCropFraction(job.cfg);
  return o;
}

PassProgress ProgressOf(const Job& job, const char* what) {
  PassProgress p;
  p.print = job.lead;
  p.every_secs = job.cfg.progress_secs;
  p.what = what;
  return p;
}

// The eval line's note of the views: nothing for the centre crop.
const char* ViewsNote(EvalViews views) {
  switch (views) {
    case EvalViews::kTwo:
      return " (2 views averaged)";
    case EvalViews::kTen:
      return " (10 views averaged)";
    case EvalViews::kOne:
      break;
  }
  return "";
}

// --mode=eval: top-1/top-5 error of a checkpoint on --val_data.
int RunEval(Job& job, const std::string& checkpoint_path) {
  absl::StatusOr<EvalResult> r =
      Evaluate(job.net(), *job.data, EvalPipelineOptions(job), EvalSpecOf(job), job.l,
               job.local_batch, ProgressOf(job, "eval"));
  if (!r.ok()) RankError(job.l, r.status());
  if (job.lead) {
    std::printf("eval %s on %s: %lld images%s  loss %.4f  top1-err %.4f  top5-err %.4f\n",
                checkpoint_path.c_str(), job.data->info().path.c_str(),
                static_cast<long long>(r->images), ViewsNote(job.cfg.eval_views), r->loss,
                r->top1_error, r->top5_error);
  }
  return kExitOk;
}

}  // namespace colonnade
