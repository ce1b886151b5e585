// Evaluation of a model on a held-out dataset (--val_data while training, --mode=eval):
// the batch loop shared with prediction (prediction.h) over the centre crop, the centre crop
// and its mirror, or AlexNet's ten views (docs/DATA.md, "Ten crops"), the views' average, the
// progress lines of a long pass, and the loss and top-1/top-5 error summed over the data-parallel
// group.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "apps/train_setup.h"
#include "data/dataset.h"
#include "data/pipeline.h"

namespace colonnade {

// How evaluation cuts and scores its views (--eval_views, docs/DATA.md "Ten crops").
struct EvalSpec {
  EvalViews views = EvalViews::kOne;
  bool views_on_gpu = false;  // several views cut on the GPU by the feed (CUDA,
                              // --gpu_augment not off); else on the host (data::TenCrops,
                              // data::MirrorCHWN)
};

// The views' average of one evaluation batch (--eval_views=2 or 10), the AlexNet paper's
// recipe: pbar = the mean of the views' softmax probabilities. Accumulated on the host in
// double, view by view (TenCrops' order; for two views the centre crop, then its mirror),
// from the net's own "probs" and "loss" blobs, so a CPU run and a GPU run with the same
// probabilities get the same average.
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

// What the batch loop hands on for each batch after its forward pass(es): the batch, its
// n images on this rank, and with several views their average (null for one view: the net's
// blobs hold the outputs).
using EvalVisitor =
    std::function<absl::Status(const data::Batch& batch, int64_t n, const ViewAverage* avg)>;

// Progress of an evaluation or prediction pass, printed by the lead rank every
// `every_secs` seconds (--progress_secs; 0: after every batch): a pass over 10,000 images
// on a CPU takes minutes, and silence then reads as a hang.
struct PassProgress {
  bool print = false;
  double every_secs = 10;
  std::string what;  // "eval", "predict"
};

struct EvalResult {
  double loss = 0, top1_error = 0, top5_error = 0;
  int64_t images = 0;
};

// The spec of `job`'s flags and device.
EvalSpec EvalSpecOf(const Job& job);
// The batch loop shared by evaluation and prediction (see evaluation.cc): `visit` sees
// every batch after its forward pass(es), also an empty one (n == 0) so that collectives in
// `visit` run on every rank; the net is rebuilt for a batch of another size and back to
// `local_batch` at the end.
absl::Status ForEachEvalBatch(Net& net, data::Dataset& val, data::PipelineOptions o,
                              int64_t local_batch, const EvalSpec& spec,
                              const PassProgress& progress, const EvalVisitor& visit);
// Loss and top-1/top-5 error of `net` on the whole of `val`, summed over the dp group.
absl::StatusOr<EvalResult> Evaluate(Net& net, data::Dataset& val, const data::PipelineOptions& o,
                                    const EvalSpec& spec, const Layout& l, int64_t local_batch,
                                    const PassProgress& progress);
// The pipeline options of evaluation and prediction for the loaded model.
data::PipelineOptions EvalPipelineOptions(Job& job);
// Progress lines on the lead rank, every --progress_secs.
PassProgress ProgressOf(const Job& job, const char* what);
// The eval line's note of the views: nothing for the centre crop.
const char* ViewsNote(EvalViews views);
// --mode=eval: top-1/top-5 error of the checkpoint at `checkpoint_path` on --val_data;
// returns the exit code.
int RunEval(Job& job, const std::string& checkpoint_path);

}  // namespace colonnade
