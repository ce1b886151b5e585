// The layer types. Each is a thin wrapper that derives shapes and calls Ops; the numerics
// live in the Ops implementations (core/ops/<family>.cc, src/cuda/ops/<family>.cu).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/layer.h"

namespace colonnade {

// Convolution with stride, padding and groups; weight [F][C/groups][KH][KW], bias [F].
class ConvLayer : public Layer {
 public:
  ConvLayer(std::string name, int filters, ConvParams p, bool bias = true, ColumnInfo columns = {},
            float bias_init = 0.0f);
  COLONNADE_LAYER_OVERRIDES("conv");
  // dW needs x; dx needs only dy and the weights; a fused ReLU's gradient needs y (unless the
  // layer after has passed dy through it: set_dy_masked).
  BackwardReads backward_reads() const override { return {true, fused_relu_ && !dy_masked_, true}; }
  // The tensor-core kernels read and write either storage type (CudaOps::ConvLayerForward).
  bool bf16_io() const override { return true; }
  void AllocateParams(Device d) override;
  std::vector<Param*> params() override;
  ColumnInfo column_info() const override { return columns_; }
  ChannelSplit channel_split() const override;
  std::unique_ptr<Layer> MakeOutputBlock(int part, int parts) const override;
  double FlopsPerImage(const std::vector<Shape>& x, const std::vector<Shape>& y) const override;
  const ConvParams& conv_params() const { return p_; }
  int filters() const { return filters_; }
  Param& weight() { return weight_; }
  Param& bias() { return bias_; }
  // The in-place ReLU after this layer runs inside it (Net::Build decides, see
  // Net::Fusions::conv_relu): Forward writes max(conv + b, 0), Backward first passes dy
  // through the ReLU (Ops::ConvLayerForward / ConvLayerBackward).
  void set_fused_relu(bool on) { fused_relu_ = on; }
  bool fused_relu() const { return fused_relu_; }
  // A batch norm reads this layer's output next (Net::Fusions::conv_bn): the training Forward
  // asks the backend for y's per-channel sums (Ops::ConvLayerForward's bn_sums).
  void set_bn_sums(bool on) { bn_sums_ = on; }
  bool bn_sums() const { return bn_sums_; }
  // Net::Fusions::relu_grad, the two ends of one pair. relu_dx: this layer's input is the output
  // of the fused ReLU of the convolution before, which nothing else reads, and Backward writes
  // dx already passed through that ReLU (Ops::ConvLayerBackward's relu_dx). dy_masked: this
  // layer's fused ReLU is that one: its Backward takes dy as the gradient after the ReLU.
  void set_relu_dx(bool on) { relu_dx_ = on; }
  bool relu_dx() const { return relu_dx_; }
  void set_dy_masked(bool on) { dy_masked_ = on; }
  bool dy_masked() const { return dy_masked_; }
  // Net::Fusions::grad_add, as the memory plan bound it (LayerBinding::dx_add): dx holds the
  // gradient other readers of x wrote, and Backward adds its part (Ops::ConvLayerBackward's
  // add_dx) instead of overwriting it.
  void set_add_dx(bool on) { add_dx_ = on; }
  bool add_dx() const { return add_dx_; }
  // Gaussian N(0, std^2) initial weights (AlexNet: 0.01) instead of the default He normal.
  void set_weight_std(float std) {
    weight_.init.kind = InitSpec::kGaussian;
    weight_.init.value = std;
  }

 private:
  int filters_;
  ConvParams p_;
  bool has_bias_;
  ColumnInfo columns_;
  float bias_init_;
  int64_t in_channels_ = 0;
  bool fused_relu_ = false;
  bool bn_sums_ = false;
  bool relu_dx_ = false;
  bool dy_masked_ = false;
  bool add_dx_ = false;
  Param weight_, bias_;
};

// Fully connected: x (C*H*W) x N -> y F x 1 x 1 x N; weight [F][C*H*W], bias [F].
// y = s * (W x) + b with the output scale s (1 unless set_output_scale; ResNet-9's 0.125).
class FullyConnectedLayer : public Layer {
 public:
  FullyConnectedLayer(std::string name, int outputs, ColumnInfo columns = {},
                      float bias_init = 0.0f);
  COLONNADE_LAYER_OVERRIDES("fc");
  // dW = dy x^T; dx = W^T dy.
  BackwardReads backward_reads() const override { return {true, false, true}; }
  void AllocateParams(Device d) override;
  std::vector<Param*> params() override { return {&weight_, &bias_}; }
  ColumnInfo column_info() const override { return columns_; }
  ChannelSplit channel_split() const override;
  std::unique_ptr<Layer> MakeOutputBlock(int part, int parts) const override;
  double FlopsPerImage(const std::vector<Shape>& x, const std::vector<Shape>& y) const override;
  int outputs() const { return outputs_; }
  Param& weight() { return weight_; }
  Param& bias() { return bias_; }
  void set_weight_std(float std) {
    weight_.init.kind = InitSpec::kGaussian;
    weight_.init.value = std;
  }
  // y = scale * (W x) + b: the products' alpha (Ops::Gemm) forward, and for dW and dx
  // backward; db is the sum of dy as without it. David Page's ResNet-9 multiplies its
  // classifier's output by 0.125 (a power of two: exactly the unscaled product scaled).
  void set_output_scale(float scale) { output_scale_ = scale; }
  float output_scale() const { return output_scale_; }

 private:
  int outputs_;
  ColumnInfo columns_;
  float bias_init_;
  float output_scale_ = 1.0f;
  int64_t inputs_ = 0;
  Param weight_, bias_;
};

class PoolLayer : public Layer {
 public:
  PoolLayer(std::string name, PoolParams p) : Layer(std::move(name)), p_(p) {}
  COLONNADE_LAYER_OVERRIDES(p_.kind == PoolParams::kMax ? "maxpool" : "avgpool");
  // Max pooling routes dy by the argmax record its training Forward kept (arg_, every backend),
  // reading neither x nor y (y under relu_dx: the windows' maxima are the ReLU's mask); windows
  // too large for a record find the maxima again from x and y. Average pooling spreads dy by
  // window size only (and masks it by x under relu_dx).
  BackwardReads backward_reads() const override {
    if (MaxPoolRecordFits(p_)) return {false, relu_dx_, true};
    const bool max = p_.kind == PoolParams::kMax;
    return {max || relu_dx_, max, true};
  }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }
  bool bf16_io() const override { return true; }  // max and average
  // Max pooling's backward finds the maximum's pixel by comparing x with y.
  bool bf16_output_needs_bf16_input() const override { return p_.kind == PoolParams::kMax; }
  const PoolParams& pool_params() const { return p_; }
  // Net::Fusions::relu_grad: as ConvLayer::set_relu_dx (Ops::PoolBackward's relu_dx).
  void set_relu_dx(bool on) { relu_dx_ = on; }
  bool relu_dx() const { return relu_dx_; }

 private:
  PoolParams p_;
  bool relu_dx_ = false;
  // Max pooling: the record of the forward (each window's argmax as a bf16 offset in its
  // window, y's shape: Ops::PoolForward); the backward reads it instead of x and y.
  Tensor arg_;
  bool record_valid_ = false;  // the last Forward was a training one and wrote arg_
};

class GlobalAvgPoolLayer : public Layer {
 public:
  using Layer::Layer;
  COLONNADE_LAYER_OVERRIDES("global_avgpool");
  BackwardReads backward_reads() const override { return {false, false, true}; }
  bool bf16_io() const override { return true; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }
};

// Response normalisation across channels (AlexNet's LRN); keeps a denominator buffer.
class LrnCrossLayer : public Layer {
 public:
  LrnCrossLayer(std::string name, LrnCrossParams p) : Layer(std::move(name)), p_(p) {}
  COLONNADE_LAYER_OVERRIDES("lrn");
  // dx from x, y, its denominator and dy.
  BackwardReads backward_reads() const override { return {true, true, true}; }
  ChannelSplit channel_split() const override;
  // Keeps the groups of its block (the split checks that whole groups fall in it).
  void SetChannelBlock(int64_t first, int64_t count, int64_t total) override;
  const LrnCrossParams& lrn_params() const { return p_; }
  bool bf16_io() const override { return true; }  // the denominator stays float32

 private:
  LrnCrossParams p_;
  Tensor denom_;  // empty where the backend recomputes it (Ops::LrnCrossForward)
};

// Response normalisation within a map (cuda-convnet's rnorm).
class LrnWithinLayer : public Layer {
 public:
  LrnWithinLayer(std::string name, LrnWithinParams p) : Layer(std::move(name)), p_(p) {}
  COLONNADE_LAYER_OVERRIDES("rnorm");
  BackwardReads backward_reads() const override { return {true, true, true}; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }

 private:
  LrnWithinParams p_;
  Tensor denom_;
};

class ReluLayer : public Layer {
 public:
  using Layer::Layer;
  COLONNADE_LAYER_OVERRIDES("relu");
  // dx = dy where y > 0: y, not x (so it may run in place). Fused into the layer before
  // it, that layer reads y instead.
  BackwardReads backward_reads() const override { return {false, !fused_, true}; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }
  bool in_place_ok() const override { return true; }
  bool bf16_io() const override { return true; }
  // Stateless: Forward again writes the same y (fused: the producer's Recompute did).
  bool can_recompute() const override { return true; }
  void Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                 const std::vector<Tensor*>& y) override;
  // Run by the convolution or batch norm before it (ConvLayer / BatchNormLayer::
  // set_fused_relu): Forward does nothing, and Backward passes dy on unchanged (the
  // producer applies the mask).
  void set_fused(bool on) { fused_ = on; }
  bool fused() const { return fused_; }

 private:
  bool fused_ = false;
};

// Inverted dropout; identity in evaluation. Masks are keyed by the global element index
// (see DropoutParams), so the parallel split sets the channel offset of its slice.
class DropoutLayer : public Layer {
 public:
  DropoutLayer(std::string name, float p) : Layer(std::move(name)), p_(p) {}
  COLONNADE_LAYER_OVERRIDES("dropout");
  // dx = dy * its own mask.
  BackwardReads backward_reads() const override { return {false, false, true}; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }
  bool bf16_io() const override { return true; }  // the mask stays float32
  void SetChannelBlock(int64_t first, int64_t, int64_t) override { set_channel_slice(first); }
  float rate() const { return p_; }
  void set_channel_slice(int64_t offset) { channel_offset_ = offset; }

 private:
  float p_;
  int64_t channel_offset_ = 0;
  Tensor mask_;
};

// Concatenates its inputs along channels (contiguous blocks in CHWN).
class ConcatLayer : public Layer {
 public:
  using Layer::Layer;
  COLONNADE_LAYER_OVERRIDES("concat");
  // Copies channel blocks of dy; x only for its channel counts.
  BackwardReads backward_reads() const override { return {false, false, true}; }
  bool bf16_io() const override { return true; }  // converting copies where types differ
};

// Element-wise sum of two inputs of one shape (residual connections).
class BatchNormLayer;

class AddLayer : public Layer {
 public:
  using Layer::Layer;
  COLONNADE_LAYER_OVERRIDES("add");
  // dy to both inputs; with a fused ReLU through its mask, which needs y.
  BackwardReads backward_reads() const override { return {false, fused_relu_, true}; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kSameBlockInputs}; }
  bool bf16_io() const override { return true; }
  // Stateless: Forward again writes the same sum (rectified when fused); not with an input
  // from a batch norm that never wrote it (bn_add).
  bool can_recompute() const override { return !has_normalized_input(); }
  void Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                 const std::vector<Tensor*>& y) override;
  // The in-place ReLU after this sum runs inside it (Net::Fusions::add_relu: a residual
  // block's end): Forward and Recompute write max(a + b, 0) (Ops::Add with relu), Backward gives
  // each input dy through the ReLU's mask (Ops::ReluBackward).
  void set_fused_relu(bool on) { fused_relu_ = on; }
  bool fused_relu() const { return fused_relu_; }
  // Input k is the unwritten output of `bn` (Net::Fusions::bn_add; null: a plain input): the
  // training Forward recomputes it from bn's input in the sum's pass (Ops::AddNormalized).
  // Such a sum is not recomputable from its inputs.
  void set_normalized_input(int k, const BatchNormLayer* bn) { bn_in_[k] = bn; }
  bool has_normalized_input() const { return bn_in_[0] != nullptr || bn_in_[1] != nullptr; }
  // Net::Fusions::add_bn_sums: where both inputs' gradient is one buffer (add_alias) and the
  // ReLU is fused, Backward leaves the normalized inputs' batch norms their backward sums
  // (Ops::ReluBackwardBnSums).
  void set_bn_sums(bool on) { bn_sums_ = on; }
  bool bn_sums() const { return bn_sums_; }

 private:
  bool fused_relu_ = false;
  bool bn_sums_ = false;
  const BatchNormLayer* bn_in_[2] = {nullptr, nullptr};
};

// Batch normalisation per channel; learnable gamma/beta, running statistics as
// non-learnable parameters (saved in checkpoints).
class BatchNormLayer : public Layer {
 public:
  BatchNormLayer(std::string name, BatchNormParams p = {}) : Layer(std::move(name)), p_(p) {}
  COLONNADE_LAYER_OVERRIDES("batchnorm");
  // dx, dgamma from x, the saved statistics and dy; a fused ReLU's mask is computed again from
  // x (Ops::BatchNormBackward's mask_scale and mask_shift), so y is not read.
  BackwardReads backward_reads() const override { return {true, false, true}; }
  ChannelSplit channel_split() const override { return {ChannelSplit::kPerChannel}; }
  bool bf16_io() const override { return true; }  // statistics from the widened values
  // Statistics are per channel: the block's parameters are rows [first, first + count).
  void SetChannelBlock(int64_t first, int64_t count, int64_t total) override;
  void AllocateParams(Device d) override;
  std::vector<Param*> params() override { return {&gamma_, &beta_, &running_mean_, &running_var_}; }
  // y from x, the saved mean and scale and beta (unchanged until the optimiser's step,
  // which follows Backward): Ops::BatchNormApply, the training forward's arithmetic.
  bool can_recompute() const override { return true; }
  void Recompute(Ops& ops, const std::vector<const Tensor*>& x,
                 const std::vector<Tensor*>& y) override;
  // The in-place ReLU after this layer runs inside it (Net::Fusions::bn_relu): Forward and
  // Recompute write max(bn, 0), Backward first passes dy through the ReLU (the relu
  // arguments of Ops::BatchNormForwardTrain, BatchNormApply, BatchNormBackward).
  void set_fused_relu(bool on) { fused_relu_ = on; }
  bool fused_relu() const { return fused_relu_; }
  // The residual sum after this layer computes its output itself (Net::Fusions::bn_add,
  // AddLayer::set_normalized_input): the training Forward then keeps the statistics only and
  // leaves y unwritten. The sum reads the input of the last Forward and the affine below.
  void set_output_into_add(bool on) { output_into_add_ = on; }
  bool output_into_add() const { return output_into_add_; }
  Ops::AddOperand AsAddOperand(DType stored) const;
  // Its last training Forward's x and saved statistics, as its Backward passes them
  // (Ops::ReluBackwardBnSums).
  Ops::BnSumsOperand AsBnSumsOperand() const;

 private:
  bool fused_relu_ = false;
  bool output_into_add_ = false;
  const Tensor* last_x_ = nullptr;  // the input of the last training Forward
  BatchNormParams p_;
  int64_t channels_ = 0;
  Param gamma_, beta_, running_mean_, running_var_;
  Tensor save_mean_, save_invstd_, save_scale_;  // of the last training Forward
};

// Softmax + cross-entropy. Inputs: logits (K x 1 x 1 x N), labels (1 x 1 x 1 x N).
// Outputs: per-image loss (1 x 1 x 1 x N) and probabilities (K x 1 x 1 x N). Backward
// ignores dy and writes dlogits = loss_scale * (probs - onehot).
class SoftmaxLossLayer : public Layer {
 public:
  using Layer::Layer;
  COLONNADE_LAYER_OVERRIDES("softmax_loss");
  // dlogits from probs (y) and labels (x); ignores dy.
  BackwardReads backward_reads() const override { return {true, true, false}; }
  ChannelSplit channel_split() const override;
};

}  // namespace colonnade
