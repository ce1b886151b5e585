#include "core/layers.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/philox.h"

namespace colonnade {
namespace {

absl::Status ExpectInputs(const Layer& l, const std::vector<Shape>& in, size_t n) {
  if (in.size() != n) {
    return absl::InvalidArgumentError(absl::StrFormat("layer %s (%s) takes %d input(s), got %d",
                                                      l.name(), l.type(), n, in.size()));
  }
  for (const Shape& s : in) {
    if (s.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %s: input %s is not CHWN", l.name(), s.ToString()));
    }
  }
  return absl::OkStatus();
}

void AllocParam(Param& p, Shape shape, Device d) {
  if (!p.value.empty() && p.value.shape() == shape && p.value.device() == d) return;
  p.value = Tensor(shape, d);
  p.grad = Tensor(shape, d);
  p.velocity = Tensor(shape, d);
  p.grad.Fill(0.0f);
  p.velocity.Fill(0.0f);
}

}  // namespace

// ---------------------------------------------------------------------------------------
ConvLayer::ConvLayer(std::string name, int filters, ConvParams p, bool bias, ColumnInfo columns,
                     float bias_init)
    : Layer(std::move(name)),
      filters_(filters),
      p_(p),
      has_bias_(bias),
      columns_(columns),
      bias_init_(bias_init) {
  weight_.name = "weight";
  weight_.init.kind = InitSpec::kHeNormal;
  weight_.is_weight = true;
  bias_.name = "bias";
}

absl::StatusOr<std::vector<Shape>> ConvLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  const Shape& x = in[0];
  if (p_.groups < 1 || x.c() % p_.groups != 0 || filters_ % p_.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("conv %s: %d input channels and %d filters must both divide into %d groups",
                        name(), x.c(), filters_, p_.groups));
  }
  int64_t oh = ConvOutSize(x.h(), p_.kernel_h, p_.stride, p_.pad);
  int64_t ow = ConvOutSize(x.w(), p_.kernel_w, p_.stride, p_.pad);
  if (oh < 1 || ow < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "conv %s: input %dx%d is too small for a %dx%d kernel (stride %d, pad %d); use a "
        "larger --input_size",
        name(), x.h(), x.w(), p_.kernel_h, p_.kernel_w, p_.stride, p_.pad));
  }
  int64_t fan_in = x.c() / p_.groups * p_.kernel_h * p_.kernel_w;
  weight_.init.fan_in = fan_in;
  weight_.init.fan_out = filters_ / p_.groups * p_.kernel_h * p_.kernel_w;
  bias_.init = {InitSpec::kConstant, bias_init_, 0, 0};
  in_channels_ = x.c();
  return std::vector<Shape>{Shape::CHWN(filters_, oh, ow, x.n())};
}

void ConvLayer::AllocateParams(Device d) {
  AllocParam(weight_, Shape{filters_, in_channels_ / p_.groups, p_.kernel_h, p_.kernel_w}, d);
  if (has_bias_) AllocParam(bias_, Shape{filters_}, d);
}

void ConvLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                        const std::vector<Tensor*>& y) {
  ops.ConvLayerForward(*x[0], weight_.value, has_bias_ ? &bias_.value : nullptr, fused_relu_, *y[0],
                       p_, bn_sums_ && ctx.phase == Phase::kTrain);
}

void ConvLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                         const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy,
                         const std::vector<Tensor*>& dx) {
  ops.ConvLayerBackward(*x[0], weight_.value, fused_relu_ && !dy_masked_ ? y[0] : nullptr, *dy[0],
                        weight_.grad, has_bias_ ? &bias_.grad : nullptr, dx[0], p_,
                        relu_dx_ && dx[0] != nullptr, add_dx_ && dx[0] != nullptr);
}

std::vector<Param*> ConvLayer::params() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

ChannelSplit ConvLayer::channel_split() const {
  ChannelSplit s;
  s.kind = ChannelSplit::kOutputChannels;
  s.outputs = filters_;
  s.groups = p_.groups;
  s.output_noun = "filters";
  return s;
}

std::unique_ptr<Layer> ConvLayer::MakeOutputBlock(int part, int parts) const {
  const int filters = filters_ / parts;
  ConvParams p = p_;
  if (p.groups > 1) p.groups /= parts;  // the block's columns, on its input block
  ColumnInfo columns = columns_;
  if (columns.columns % parts == 0) columns.columns /= parts;
  auto block = std::make_unique<ConvLayer>(name(), filters, p, has_bias_, columns, bias_init_);
  block->weight_.CopySettingsFrom(weight_);
  block->weight_.MarkShard(static_cast<int64_t>(part) * filters, filters_);
  if (has_bias_) {
    block->bias_.CopySettingsFrom(bias_);
    block->bias_.MarkShard(static_cast<int64_t>(part) * filters, filters_);
  }
  return block;
}

double ConvLayer::FlopsPerImage(const std::vector<Shape>& x, const std::vector<Shape>& y) const {
  return 2.0 * filters_ * (x[0].c() / p_.groups) * p_.kernel_h * p_.kernel_w * y[0].h() * y[0].w();
}

// ---------------------------------------------------------------------------------------
FullyConnectedLayer::FullyConnectedLayer(std::string name, int outputs, ColumnInfo columns,
                                         float bias_init)
    : Layer(std::move(name)), outputs_(outputs), columns_(columns), bias_init_(bias_init) {
  weight_.name = "weight";
  weight_.init.kind = InitSpec::kHeNormal;
  weight_.is_weight = true;
  bias_.name = "bias";
}

absl::StatusOr<std::vector<Shape>> FullyConnectedLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  inputs_ = in[0].c() * in[0].h() * in[0].w();
  weight_.init.fan_in = inputs_;
  weight_.init.fan_out = outputs_;
  bias_.init = {InitSpec::kConstant, bias_init_, 0, 0};
  return std::vector<Shape>{Shape::CHWN(outputs_, 1, 1, in[0].n())};
}

void FullyConnectedLayer::AllocateParams(Device d) {
  AllocParam(weight_, Shape{outputs_, inputs_}, d);
  AllocParam(bias_, Shape{outputs_}, d);
}

void FullyConnectedLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                                  const std::vector<Tensor*>& y) {
  // y[F][N] = W[F][I] * x[I][N]: a CHWN activation is already the (I x N) matrix.
  const int64_t n = x[0]->n();
  ops.Gemm(false, false, outputs_, n, inputs_, output_scale_, weight_.value.data(), x[0]->data(),
           0.0f, y[0]->data());
  ops.AddBias(*y[0], bias_.value);
}

void FullyConnectedLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                                   const std::vector<const Tensor*>&,
                                   const std::vector<const Tensor*>& dy,
                                   const std::vector<Tensor*>& dx) {
  const int64_t n = x[0]->n();
  // dW[F][I] = s dy[F][N] * x[I][N]^T; dx[I][N] = s W^T[I][F] * dy[F][N] (s: the output scale).
  ops.Gemm(false, true, outputs_, inputs_, n, output_scale_, dy[0]->data(), x[0]->data(), 0.0f,
           weight_.grad.data());
  ops.BiasBackward(*dy[0], bias_.grad);
  if (dx[0]) {
    ops.Gemm(true, false, inputs_, n, outputs_, output_scale_, weight_.value.data(), dy[0]->data(),
             0.0f, dx[0]->data());
  }
}

ChannelSplit FullyConnectedLayer::channel_split() const {
  ChannelSplit s;
  s.kind = ChannelSplit::kOutputChannels;
  s.outputs = outputs_;
  return s;
}

std::unique_ptr<Layer> FullyConnectedLayer::MakeOutputBlock(int part, int parts) const {
  const int outputs = outputs_ / parts;
  ColumnInfo columns = columns_;
  if (columns.columns % parts == 0) columns.columns /= parts;
  auto block = std::make_unique<FullyConnectedLayer>(name(), outputs, columns, bias_init_);
  block->weight_.CopySettingsFrom(weight_);
  block->bias_.CopySettingsFrom(bias_);
  block->output_scale_ = output_scale_;
  block->weight_.MarkShard(static_cast<int64_t>(part) * outputs, outputs_);
  block->bias_.MarkShard(static_cast<int64_t>(part) * outputs, outputs_);
  return block;
}

double FullyConnectedLayer::FlopsPerImage(const std::vector<Shape>& x,
                                          const std::vector<Shape>&) const {
  return 2.0 * outputs_ * x[0].c() * x[0].h() * x[0].w();
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> PoolLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  const Shape& x = in[0];
  if (x.h() + 2 * p_.pad < p_.size || x.w() + 2 * p_.pad < p_.size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "pool %s: input %dx%d is smaller than the %dx%d window; use a larger --input_size", name(),
        x.h(), x.w(), p_.size, p_.size));
  }
  return std::vector<Shape>{
      Shape::CHWN(x.c(), PoolOutSize(x.h(), p_.size, p_.stride, p_.pad, p_.ceil_mode),
                  PoolOutSize(x.w(), p_.size, p_.stride, p_.pad, p_.ceil_mode), x.n())};
}

void PoolLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                        const std::vector<Tensor*>& y) {
  if (!MaxPoolRecordFits(p_)) return ops.PoolForward(*x[0], *y[0], p_);
  // No record where no backward will read it: an evaluation pass has none (nor does it touch
  // the training step's record).
  record_valid_ = ctx.phase == Phase::kTrain;
  if (!record_valid_) return ops.PoolForward(*x[0], *y[0], p_);
  if (arg_.shape() != y[0]->shape() || arg_.device() != ops.device())
    arg_ = Tensor(y[0]->shape(), ops.device(), DType::kBF16);
  ops.PoolForward(*x[0], *y[0], p_, &arg_);
}

void PoolLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                         const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy,
                         const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  // The plan kept neither x nor y (backward_reads): only the record says where the maxima were.
  CHECK(!MaxPoolRecordFits(p_) || record_valid_)
      << "pool " << name() << ": Backward needs the argmax record of a training-phase Forward "
      << "(the last Forward was an evaluation one, or none ran)";
  ops.PoolBackward(*x[0], *y[0], *dy[0], *dx[0], p_, record_valid_ ? &arg_ : nullptr, relu_dx_);
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> GlobalAvgPoolLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  return std::vector<Shape>{Shape::CHWN(in[0].c(), 1, 1, in[0].n())};
}

void GlobalAvgPoolLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                                 const std::vector<Tensor*>& y) {
  ops.GlobalAvgPoolForward(*x[0], *y[0]);
}

void GlobalAvgPoolLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>&,
                                  const std::vector<const Tensor*>&,
                                  const std::vector<const Tensor*>& dy,
                                  const std::vector<Tensor*>& dx) {
  if (dx[0]) ops.GlobalAvgPoolBackward(*dy[0], *dx[0]);
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> LrnCrossLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  if (p_.groups < 1 || in[0].c() % p_.groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("lrn %s: %d channels do not divide into %d groups (columns)", name(),
                        in[0].c(), p_.groups));
  }
  if (p_.size < 1 || p_.size % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "lrn %s: size %d must be odd (a window centred on the channel)", name(), p_.size));
  }
  return std::vector<Shape>{in[0]};
}

void LrnCrossLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                            const std::vector<Tensor*>& y) {
  // Empty: the backend keeps the denominators only where its backward cannot compute them
  // again (ops.h), and gives denom_ the shape they need.
  if (denom_.shape() != x[0]->shape() || denom_.device() != ops.device()) denom_ = Tensor();
  ops.LrnCrossForward(*x[0], *y[0], denom_, p_);
}

void LrnCrossLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                             const std::vector<const Tensor*>& y,
                             const std::vector<const Tensor*>& dy, const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  ops.LrnCrossBackward(*x[0], *y[0], denom_, *dy[0], *dx[0], p_);
}

ChannelSplit LrnCrossLayer::channel_split() const {
  ChannelSplit s;
  s.kind = ChannelSplit::kChannelGroups;
  s.groups = p_.groups;
  return s;
}

void LrnCrossLayer::SetChannelBlock(int64_t, int64_t count, int64_t total) {
  p_.groups = static_cast<int>(p_.groups * count / total);
}

absl::StatusOr<std::vector<Shape>> LrnWithinLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  return std::vector<Shape>{in[0]};
}

void LrnWithinLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                             const std::vector<Tensor*>& y) {
  if (denom_.shape() != x[0]->shape() || denom_.device() != ops.device())
    denom_ = Tensor(x[0]->shape(), ops.device());
  ops.LrnWithinForward(*x[0], *y[0], denom_, p_);
}

void LrnWithinLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                              const std::vector<const Tensor*>& y,
                              const std::vector<const Tensor*>& dy,
                              const std::vector<Tensor*>& dx) {
  if (dx[0]) ops.LrnWithinBackward(*x[0], *y[0], denom_, *dy[0], *dx[0], p_);
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> ReluLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  return std::vector<Shape>{in[0]};
}

void ReluLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                        const std::vector<Tensor*>& y) {
  if (fused_) return;  // in place: the layer before wrote max(., 0) already
  ops.ReluForward(*x[0], *y[0]);
}

void ReluLayer::Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                          const std::vector<Tensor*>& y) {
  if (fused_) return;  // the producer's Recompute rectified it
  ops.ReluForward(*x[0], *y[0]);
}

void ReluLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>&,
                         const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy,
                         const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  if (!fused_) {
    ops.ReluBackward(*y[0], *dy[0], *dx[0]);
  } else if (dx[0]->raw() != dy[0]->raw()) {
    ops.Copy(*dy[0], *dx[0]);  // the plan gave the input gradient its own buffer
  }
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> DropoutLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  if (!(p_ >= 0.0f && p_ < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dropout %s: rate %g is not in [0, 1)", name(), p_));
  }
  return std::vector<Shape>{in[0]};
}

void DropoutLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                           const std::vector<Tensor*>& y) {
  if (ctx.phase != Phase::kTrain || p_ == 0.0f) {
    if (y[0]->raw() != x[0]->raw()) ops.Copy(*x[0], *y[0]);
    return;
  }
  if (mask_.shape() != x[0]->shape() || mask_.device() != ops.device())
    mask_ = Tensor(x[0]->shape(), ops.device());
  DropoutParams p;
  p.p = p_;
  p.seed = MixKey(MixKey(ctx.seed, static_cast<uint64_t>(RandomPurpose::kDropout)),
                  StringHash(name().c_str()));
  p.step = ctx.step;
  if (ctx.device_scalars != nullptr) p.step_on_device = &ctx.device_scalars->step;
  p.channel_offset = channel_offset_;
  p.image_offset = ctx.image_offset;
  p.global_batch = ctx.global_batch > 0 ? ctx.global_batch : x[0]->n();
  ops.DropoutForward(*x[0], *y[0], mask_, p);
}

void DropoutLayer::Backward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>&,
                            const std::vector<const Tensor*>&, const std::vector<const Tensor*>& dy,
                            const std::vector<Tensor*>& dx) {
  if (!dx[0]) return;
  if (ctx.phase != Phase::kTrain || p_ == 0.0f) {
    if (dx[0]->raw() != dy[0]->raw()) ops.Copy(*dy[0], *dx[0]);
    return;
  }
  ops.DropoutBackward(*dy[0], mask_, *dx[0]);
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> ConcatLayer::Setup(const std::vector<Shape>& in) {
  if (in.empty()) return absl::InvalidArgumentError("concat " + name() + " has no inputs");
  if (auto s = ExpectInputs(*this, in, in.size()); !s.ok()) return s;
  int64_t c = 0;
  for (const Shape& s : in) {
    if (s.h() != in[0].h() || s.w() != in[0].w() || s.n() != in[0].n()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("concat %s: input %s does not match %s in H, W, N", name(), s.ToString(),
                          in[0].ToString()));
    }
    c += s.c();
  }
  return std::vector<Shape>{Shape::CHWN(c, in[0].h(), in[0].w(), in[0].n())};
}

void ConcatLayer::Forward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                          const std::vector<Tensor*>& y) {
  int64_t c0 = 0;
  for (const Tensor* t : x) {
    ops.CopyChannelsIn(*t, c0, *y[0]);
    c0 += t->c();
  }
}

void ConcatLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                           const std::vector<const Tensor*>&, const std::vector<const Tensor*>& dy,
                           const std::vector<Tensor*>& dx) {
  int64_t c0 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (dx[i]) ops.CopyChannelsOut(*dy[0], c0, *dx[i]);
    c0 += x[i]->c();
  }
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> AddLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 2); !s.ok()) return s;
  if (in[0] != in[1]) {
    return absl::InvalidArgumentError(absl::StrFormat("add %s: shapes %s and %s differ", name(),
                                                      in[0].ToString(), in[1].ToString()));
  }
  return std::vector<Shape>{in[0]};
}

void AddLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                       const std::vector<Tensor*>& y) {
  if (ctx.phase == Phase::kTrain && has_normalized_input()) {
    Ops::AddOperand in[2];
    for (int k = 0; k < 2; ++k) {
      in[k].t = x[k];
      if (bn_in_[k] != nullptr) in[k] = bn_in_[k]->AsAddOperand(x[k]->dtype());
    }
    ops.AddNormalized(in[0], in[1], *y[0], fused_relu_);
    return;
  }
  Recompute(ops, x, y);
}

void AddLayer::Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                         const std::vector<Tensor*>& y) {
  ops.Add(*x[0], *x[1], *y[0], fused_relu_);
}

void AddLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>&,
                        const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy,
                        const std::vector<Tensor*>& dx) {
  if (fused_relu_ && dx[0] && dx[1] && dx[0]->raw() != dx[1]->raw()) {
    ops.ReluBackwardTwice(*y[0], *dy[0], *dx[0], *dx[1]);  // one pass for both inputs
    return;
  }
  // One buffer for both (add_alias), the inputs' batch norms reading it next: their sums too.
  if (bn_sums_ && fused_relu_ && has_normalized_input() && dx[0] && dx[1]) {
    const BatchNormLayer* first = bn_in_[0] != nullptr ? bn_in_[0] : bn_in_[1];
    const BatchNormLayer* second = bn_in_[0] != nullptr ? bn_in_[1] : nullptr;
    const Ops::BnSumsOperand b = second ? second->AsBnSumsOperand() : Ops::BnSumsOperand{};
    ops.ReluBackwardBnSums(*y[0], *dy[0], *dx[0], first->AsBnSumsOperand(), second ? &b : nullptr);
    return;
  }
  for (size_t k = 0; k < dx.size(); ++k) {
    Tensor* d = dx[k];
    // Both inputs' gradient in one buffer (Net::Fusions::add_alias): written once.
    if (!d || (k == 1 && dx[0] && dx[0]->raw() == d->raw())) continue;
    // Masking in place is fine: a second input masking the masked dy gets the same values.
    if (fused_relu_) {
      ops.ReluBackward(*y[0], *dy[0], *d);
    } else if (d->raw() != dy[0]->raw()) {
      ops.Copy(*dy[0], *d);  // converting when the input's storage type differs
    }
  }
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> BatchNormLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 1); !s.ok()) return s;
  channels_ = in[0].c();
  gamma_.name = "gamma";
  beta_.name = "beta";
  running_mean_.name = "running_mean";
  running_var_.name = "running_var";
  gamma_.init = {InitSpec::kConstant, 1.0f, 0, 0};
  beta_.init = {InitSpec::kConstant, 0.0f, 0, 0};
  running_mean_.init = {InitSpec::kConstant, 0.0f, 0, 0};
  running_var_.init = {InitSpec::kConstant, 1.0f, 0, 0};
  running_mean_.learnable = running_var_.learnable = false;
  return std::vector<Shape>{in[0]};
}

void BatchNormLayer::AllocateParams(Device d) {
  for (Param* p : params()) AllocParam(*p, Shape{channels_}, d);
  save_mean_ = Tensor(Shape{channels_}, d);
  save_invstd_ = Tensor(Shape{channels_}, d);
  save_scale_ = Tensor(Shape{channels_}, d);
}

void BatchNormLayer::SetChannelBlock(int64_t first, int64_t, int64_t total) {
  for (Param* p : params()) p->MarkShard(first, total);
}

Ops::AddOperand BatchNormLayer::AsAddOperand(DType stored) const {
  CHECK(last_x_ != nullptr) << "batchnorm " << name() << ": no training Forward before its sum";
  Ops::AddOperand o;
  o.t = last_x_;
  o.mean = &save_mean_;
  o.scale = &save_scale_;
  o.shift = &beta_.value;
  o.stored = stored;
  return o;
}

Ops::BnSumsOperand BatchNormLayer::AsBnSumsOperand() const {
  CHECK(last_x_ != nullptr) << "batchnorm " << name() << ": no training Forward before its sum";
  return Ops::BnSumsOperand{last_x_, &save_mean_, &save_invstd_};
}

void BatchNormLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                             const std::vector<Tensor*>& y) {
  if (ctx.phase == Phase::kTrain) {
    last_x_ = x[0];
    ops.BatchNormForwardTrain(*x[0], gamma_.value, beta_.value, *y[0], running_mean_.value,
                              running_var_.value, save_mean_, save_invstd_, save_scale_, p_,
                              fused_relu_, /*write_y=*/!output_into_add_);
  } else {
    ops.BatchNormForwardInfer(*x[0], gamma_.value, beta_.value, running_mean_.value,
                              running_var_.value, *y[0], p_);
    if (fused_relu_) ops.ReluForward(*y[0], *y[0]);  // evaluation: the primitives
  }
}

void BatchNormLayer::Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                               const std::vector<Tensor*>& y) {
  ops.BatchNormApply(*x[0], save_mean_, save_scale_, beta_.value, *y[0], fused_relu_);
}

void BatchNormLayer::Backward(Ops& ops, const RunContext&, const std::vector<const Tensor*>& x,
                              const std::vector<const Tensor*>& y,
                              const std::vector<const Tensor*>& dy,
                              const std::vector<Tensor*>& dx) {
  CHECK(dx[0] != nullptr) << "batchnorm " << name() << " needs an input gradient buffer";
  ops.BatchNormBackward(*x[0], gamma_.value, save_mean_, save_invstd_, fused_relu_ ? y[0] : nullptr,
                        *dy[0], *dx[0], gamma_.grad, beta_.grad, &save_scale_, &beta_.value);
}

// ---------------------------------------------------------------------------------------
absl::StatusOr<std::vector<Shape>> SoftmaxLossLayer::Setup(const std::vector<Shape>& in) {
  if (auto s = ExpectInputs(*this, in, 2); !s.ok()) return s;
  const Shape& logits = in[0];
  if (logits.h() != 1 || logits.w() != 1 || in[1].c() != 1 || in[1].n() != logits.n()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("softmax_loss %s: logits %s and labels %s must be Kx1x1xN and 1x1x1xN",
                        name(), logits.ToString(), in[1].ToString()));
  }
  return std::vector<Shape>{Shape::CHWN(1, 1, 1, logits.n()), logits};
}

ChannelSplit SoftmaxLossLayer::channel_split() const {
  ChannelSplit s;
  s.why_whole = "the loss on gathered logits";
  return s;
}

void SoftmaxLossLayer::Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                               const std::vector<Tensor*>& y) {
  ops.SoftmaxCrossEntropyForward(*x[0], *x[1], *y[1], *y[0], ctx.label_smoothing);
}

void SoftmaxLossLayer::Backward(Ops& ops, const RunContext& ctx,
                                const std::vector<const Tensor*>& x,
                                const std::vector<const Tensor*>& y,
                                const std::vector<const Tensor*>&, const std::vector<Tensor*>& dx) {
  if (dx[0]) {
    ops.SoftmaxCrossEntropyBackward(*y[1], *x[1], ctx.loss_scale, *dx[0], ctx.label_smoothing);
  }
}

}  // namespace colonnade
