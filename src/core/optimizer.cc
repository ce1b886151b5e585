#include "core/optimizer.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/log.h"
#include "core/ops.h"

namespace colonnade {

absl::StatusOr<DecayOn> ParseDecayOn(const std::string& name) {
  if (name == "weights") return DecayOn::kWeights;
  if (name == "all") return DecayOn::kAll;
  return absl::InvalidArgumentError(absl::StrFormat(
      "--weight_decay_on=%s: expected 'weights' (conv and fc weights only) or 'all' (every "
      "learnable parameter)",
      name));
}

const char* DecayOnDescription(DecayOn on) {
  return on == DecayOn::kAll ? "all parameters (weights, biases, BN gamma/beta)"
                             : "conv/fc weights only (not biases, BN gamma/beta)";
}

void SgdOptimizer::Step(Net& net, float lr) { Step(net, lr, nullptr); }

void SgdOptimizer::Step(Net& net, float lr, const float* lr_on_device) {
  Ops& ops = net.ops();
  size_t lars_index = 0;
  // Every tensor's LARS norms are taken before any update (each from its own w and grad,
  // which no other tensor's update touches), then all updates in one SgdUpdateMany.
  std::vector<Ops::SgdTensor> updates;
  updates.reserve(net.params().size());
  for (const NamedParam& np : net.params()) {
    Param& p = *np.param;
    if (!p.learnable) continue;
    Tensor* norms = nullptr;
    if (o_.lars && p.is_weight) {
      if (lars_index == lars_norms_.size()) lars_norms_.emplace_back(Shape{2}, p.value.device());
      norms = &lars_norms_[lars_index++];
    }
    updates.push_back(Ops::SgdTensor{&p.value, &p.grad, &p.velocity,
                                     UpdateParams(ops, p, lr, lr_on_device, norms)});
  }
  ops.SgdUpdateMany(updates);
}

SgdParams SgdOptimizer::UpdateParams(Ops& ops, Param& p, float lr, const float* lr_on_device,
                                     Tensor* lars_norms) const {
  SgdParams s;
  s.lr = lr * p.lr_mult;
  s.lr_on_device = lr_on_device;
  s.lr_mult = p.lr_mult;
  s.momentum = o_.momentum;
  s.nesterov = o_.nesterov;
  const bool decayed = p.is_weight || o_.decay_on == DecayOn::kAll;
  s.weight_decay = decayed ? o_.weight_decay * p.wd_mult : 0.0f;
  // LARS adapts the weights only; biases and batch-norm parameters keep the plain rate.
  if (o_.lars && p.is_weight) {
    CHECK(lars_norms != nullptr) << "LARS needs the norms' buffer";
    ops.SquaredNorms(p.value, p.grad, *lars_norms);
    s.lars_norms = lars_norms->data();
    s.lars_eta = o_.lars_eta;
  }
  return s;
}

void SgdOptimizer::StepParam(Ops& ops, Param& p, float lr, const float* lr_on_device,
                             Tensor* lars_norms) const {
  ops.SgdUpdate(p.value, p.grad, p.velocity, UpdateParams(ops, p, lr, lr_on_device, lars_norms));
}

void InitEma(Net& net) {
  Ops& ops = net.ops();
  for (const NamedParam& np : net.params()) {
    Param& p = *np.param;
    p.ema = Tensor(p.value.shape(), p.value.device());
    ops.Copy(p.value, p.ema);
  }
}

bool HasEma(const Net& net) {
  for (const NamedParam& np : net.params()) {
    if (np.param->ema.size() != np.param->value.size()) return false;
  }
  return !net.params().empty();
}

void UpdateEma(Net& net, float decay) {
  Ops& ops = net.ops();
  for (const NamedParam& np : net.params()) UpdateEmaOf(ops, *np.param, decay);
}

void UpdateEmaOf(Ops& ops, Param& p, float decay) {
  ops.Axpby(1.0f - decay, p.value, decay, p.ema);
}

void SwapInEma(Net& net, std::vector<Tensor>& saved) {
  Ops& ops = net.ops();
  const auto& params = net.params();
  if (saved.size() != params.size()) saved.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    Param& p = *params[i].param;
    if (saved[i].shape() != p.value.shape()) saved[i] = Tensor(p.value.shape(), p.value.device());
    ops.Copy(p.value, saved[i]);
    ops.Copy(p.ema, p.value);
  }
}

void RestoreFromEma(Net& net, std::vector<Tensor>& saved) {
  Ops& ops = net.ops();
  const auto& params = net.params();
  for (size_t i = 0; i < params.size() && i < saved.size(); ++i) {
    ops.Copy(saved[i], params[i].param->value);
  }
}

namespace {

// An epoch count of a schedule spec: a finite number (SimpleAtod alone also accepts "nan"
// and "inf", which would make every comparison with the epoch false).
bool ParseEpochs(absl::string_view text, double* out) {
  return absl::SimpleAtod(text, out) && std::isfinite(*out);
}

}  // namespace

absl::StatusOr<LrSchedule> LrSchedule::Parse(const std::string& spec) {
  LrSchedule s;
  s.spec_ = spec;
  std::vector<std::string> parts = absl::StrSplit(spec, '+');
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--lr_schedule=%s: %s (expected constant, step:E, multistep:E1,E2,..., cosine, "
        "optionally +warmup:W)",
        spec, why));
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::string> kv = absl::StrSplit(parts[i], absl::MaxSplits(':', 1));
    const std::string& name = kv[0];
    std::string arg = kv.size() > 1 ? kv[1] : "";
    if (i > 0 && name != "warmup") return bad("only +warmup:W may follow the schedule");
    if (name == "constant") {
      s.kind_ = kConstant;
    } else if (name == "cosine") {
      s.kind_ = kCosine;
    } else if (name == "step") {
      s.kind_ = kStep;
      if (!ParseEpochs(arg, &s.step_epochs_) || s.step_epochs_ <= 0)
        return bad("step needs a positive number of epochs");
    } else if (name == "multistep") {
      s.kind_ = kMultiStep;
      for (absl::string_view e : absl::StrSplit(arg, ',')) {
        double v;
        if (!ParseEpochs(e, &v) || v < 0) return bad("bad milestone '" + std::string(e) + "'");
        if (!s.milestones_.empty() && v <= s.milestones_.back())
          return bad("milestones must increase");
        s.milestones_.push_back(v);
      }
    } else if (name == "warmup" && i > 0) {
      if (!ParseEpochs(arg, &s.warmup_epochs_) || s.warmup_epochs_ < 0)
        return bad("warmup needs a non-negative number of epochs");
    } else {
      return bad("unknown schedule '" + name + "'");
    }
  }
  return s;
}

float LrSchedule::At(float base_lr, double epoch, double total_epochs) const {
  double lr = base_lr;
  switch (kind_) {
    case kConstant:
      break;
    case kStep:
      lr *= std::pow(0.1, std::floor(epoch / step_epochs_));
      break;
    case kMultiStep:
      for (double m : milestones_)
        if (epoch >= m) lr *= 0.1;
      break;
    case kCosine:
      if (total_epochs > 0)
        lr *= 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, epoch / total_epochs)));
      break;
  }
  if (warmup_epochs_ > 0 && epoch < warmup_epochs_) lr *= epoch / warmup_epochs_;
  return static_cast<float>(lr);
}

std::string LrSchedule::Describe() const {
  std::string text;
  switch (kind_) {
    case kConstant:
      text = "constant";
      break;
    case kStep:
      text = absl::StrFormat("x0.1 every %g epochs", step_epochs_);
      break;
    case kMultiStep: {
      std::vector<std::string> at;
      for (double m : milestones_) at.push_back(absl::StrFormat("%g", m));
      text = absl::StrCat("x0.1 at epoch", milestones_.size() > 1 ? "s " : " ",
                          absl::StrJoin(at, ", "));
      break;
    }
    case kCosine:
      text = "cosine over the run";
      break;
  }
  if (warmup_epochs_ > 0) {
    absl::StrAppend(&text, absl::StrFormat(" after %g warm-up epoch%s", warmup_epochs_,
                                           warmup_epochs_ == 1 ? "" : "s"));
  }
  return text;
}

}  // namespace colonnade
