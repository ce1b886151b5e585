// SGD with momentum and weight decay, and learning-rate schedules.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/net.h"

namespace colonnade {

// Which parameters weight decay applies to (trainer --weight_decay_on, part of each recipe).
//   kWeights  conv and fully connected weights only (Param::is_weight), each with its
//             Param::wd_mult; biases and batch-norm gamma/beta are not decayed. The rule of
//             cuda-convnet and Caffe, and every recipe's.
//   kAll      every learnable parameter: weights with their wd_mult, biases and batch-norm
//             gamma/beta with the base rate (wd_mult 1), as PyTorch's
//             SGD(model.parameters(), weight_decay=wd) decays them.
enum class DecayOn { kWeights, kAll };

// "weights" or "all"; an error naming --weight_decay_on otherwise.
absl::StatusOr<DecayOn> ParseDecayOn(const std::string& name);
// For the trainer's banner: "conv/fc weights only (not biases, BN gamma/beta)", ...
const char* DecayOnDescription(DecayOn on);

struct SgdOptions {
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  DecayOn decay_on = DecayOn::kWeights;
  // --nesterov: Nesterov momentum (SgdParams::nesterov; torch.optim.SGD(nesterov=True)).
  bool nesterov = false;
  // --optimizer=lars: every conv/fc weight (Param::is_weight) takes lr x its LARS trust ratio
  // eta ||w|| / (||g|| + wd ||w||) (SgdParams::lars_norms); biases and batch-norm gamma/beta
  // are excluded from the adaptation and from weight decay (You et al. 2017; MLPerf), so
  // decay_on must be kWeights. The norms are of this rank's tensor: a column-split (mp > 1)
  // run is refused by the trainer.
  bool lars = false;
  float lars_eta = 0.001f;
};

// Applies one update to every learnable parameter of `net` with its lr and weight-decay
// multipliers (Param::lr_mult, Param::wd_mult) and the decay rule (SgdOptions::decay_on),
// from the gradients already in Param::grad.
class SgdOptimizer {
 public:
  explicit SgdOptimizer(SgdOptions o) : o_(o) {}
  void Step(Net& net, float lr);
  // The same update for a step captured as a CUDA graph: the kernels read the rate from
  // `lr_on_device` (StepScalars::lr, equal to `lr`) at every replay.
  void Step(Net& net, float lr, const float* lr_on_device);
  const SgdOptions& options() const { return o_; }
  // The update of one learnable parameter, as Step does it (a test's reference harness
  // drives it on bare tensors); `lars_norms` a 2-float buffer on the device with LARS.
  void StepParam(Ops& ops, Param& p, float lr, const float* lr_on_device, Tensor* lars_norms) const;

 private:
  // The update's parameters for p (its rate and decay multipliers, the decay rule), LARS's
  // norms queued first where they apply.
  SgdParams UpdateParams(Ops& ops, Param& p, float lr, const float* lr_on_device,
                         Tensor* lars_norms) const;
  SgdOptions o_;
  // LARS: each learnable weight's squared norms (Ops::SquaredNorms), 2 floats on the net's
  // device, made at the first step (a plain step before any CUDA-graph capture) and reused.
  std::vector<Tensor> lars_norms_;
};

// An exponential moving average of the weights (--ema_decay, --ema_every): every parameter,
// learnable or not, keeps an FP32 shadow Param::ema, updated after every `every`-th optimizer
// step as ema = decay * ema + (1 - decay) * value (Ops::Axpby). Batch-norm running statistics
// are averaged alongside the weights, as torchvision's reference ExponentialMovingAverage
// (AveragedModel with use_buffers=True) does. The shadow starts as a copy of the weights.
struct EmaOptions {
  float decay = 0.0f;  // 0: off
  int64_t every = 1;
};

// Gives every parameter of `net` (built) its shadow: a copy of the current values.
void InitEma(Net& net);
// Whether every parameter of `net` has its shadow.
bool HasEma(const Net& net);
// ema = decay * ema + (1 - decay) * value for every parameter: queued on the net's device.
void UpdateEma(Net& net, float decay);
// The same for one parameter.
void UpdateEmaOf(Ops& ops, Param& p, float decay);
// Evaluation with the averaged weights: SwapInEma keeps the trained values in `saved` and
// copies each shadow into its parameter; RestoreFromEma copies `saved` back. Device copies
// only, so the buffers (and a captured step graph) stay where they are.
void SwapInEma(Net& net, std::vector<Tensor>& saved);
void RestoreFromEma(Net& net, std::vector<Tensor>& saved);

// Learning rate as a function of progress. Specs (all lr values are multiples of --lr):
//   "constant"
//   "step:E"            divide by 10 every E epochs
//   "multistep:E1,E2"   divide by 10 after epoch E1, again after E2, ...
//   "cosine"            cosine decay from lr to 0 over the run
// each optionally followed by "+warmup:W": linear warm-up from 0 over the first W epochs.
// Progress is measured in (fractional) epochs so a schedule means the same for any batch.
// The warm-up factor at step k of n = W x steps-per-epoch warm-up steps is k / n: the
// first step's lr is exactly 0 (that step updates only batch-norm running statistics;
// the weights move from the second step on), as in PyTorch's LambdaLR(lambda k: k / n) and
// Hugging Face's linear warm-up. Epoch counts must be finite numbers.
class LrSchedule {
 public:
  static absl::StatusOr<LrSchedule> Parse(const std::string& spec);
  // Learning rate at fractional epoch `epoch` of a run of `total_epochs`.
  float At(float base_lr, double epoch, double total_epochs) const;
  const std::string& spec() const { return spec_; }
  // The schedule in words with its unit, for the banner: "x0.1 at epochs 120, 130",
  // "x0.1 every 30 epochs", "cosine over the run", "constant"; "+ 5 warm-up epochs".
  std::string Describe() const;

 private:
  enum Kind { kConstant, kStep, kMultiStep, kCosine };
  Kind kind_ = kConstant;
  double step_epochs_ = 0;
  std::vector<double> milestones_;
  double warmup_epochs_ = 0;
  std::string spec_ = "constant";
};

}  // namespace colonnade
