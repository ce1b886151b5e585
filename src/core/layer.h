// Layer: the small interface every layer implements (after Caffe's Layer): compute output
// shapes from input shapes, forward, backward, and expose parameters.
//
// A layer never knows which device it runs on (it calls Ops) nor how many ranks exist
// (the column split is applied to the Net by src/parallel using each layer's ColumnInfo and
// ChannelSplit).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace colonnade {

enum class Phase { kTrain, kEval };

// What a step needs to know beyond its tensors.
struct RunContext {
  Phase phase = Phase::kTrain;
  uint64_t seed = 0;
  int64_t step = 0;
  // Global index of this replica's first image and the global batch size, so that
  // per-image random draws (dropout) are independent of the data-parallel split.
  int64_t image_offset = 0;
  int64_t global_batch = 0;
  // Scale applied to the loss gradient: 1 / global batch.
  float loss_scale = 1.0f;
  // Non-null in a step captured as a CUDA graph: the device copy of this step's scalars
  // (`step` above holds the same value), read by the kernels that need them (ops.h).
  const StepScalars* device_scalars = nullptr;
  // Label smoothing of the softmax loss (--label_smoothing, Ops::SoftmaxCrossEntropyForward):
  // set by the trainer for training steps only, so evaluation reports the plain
  // cross-entropy. 0: none.
  float label_smoothing = 0.0f;
};

// How a parameter is initialised. Draws are Philox-keyed by (seed, layer, param, element
// index in the canonical layout), so every layout initialises identically.
struct InitSpec {
  enum Kind { kConstant, kGaussian, kUniform, kHeNormal, kXavierUniform };
  Kind kind = kConstant;
  float value = 0.0f;  // constant value, gaussian std or uniform half-range
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};

struct Param {
  std::string name;  // "weight", "bias", "gamma", "beta"
  Tensor value;
  Tensor grad;
  Tensor velocity;  // optimiser state
  // The exponential moving average of `value` (--ema_decay, optimizer.h: InitEma), laid out
  // as `value` (a shard like it); empty when the run keeps none.
  Tensor ema;
  InitSpec init;
  float lr_mult = 1.0f;
  // Multiplier of the base weight decay when this parameter is decayed (cuda-convnet's
  // per-layer weight decay); whether it is decayed follows the run's DecayOn rule
  // (optimizer.h) and is_weight.
  float wd_mult = 1.0f;
  // A conv or fully connected weight, as opposed to a bias or a batch-norm gamma/beta:
  // DecayOn::kWeights (every recipe's rule) decays only these.
  bool is_weight = false;
  // Parameters that are not learned (batch-norm running statistics) are saved and
  // restored but skipped by the optimiser and by gradient all-reduce.
  bool learnable = true;
  // Set by the parallel column split (MarkShard): this tensor holds rows [shard_offset,
  // shard_offset + dim 0) of the full parameter, which has full_rows rows along dim 0 (conv
  // filters, fc outputs, channels). full_rows == 0 means the tensor is the whole
  // parameter. Checkpoints gather shards into the full, canonical tensor with
  // full_shape() and full_offset().
  int64_t shard_offset = 0;
  int64_t full_rows = 0;

  void MarkShard(int64_t row_offset, int64_t rows_in_full) {
    shard_offset = row_offset;
    full_rows = rows_in_full;
  }
  bool is_shard() const { return full_rows > 0; }
  // The whole (unsharded) parameter's shape: value's shape with dim 0 = full_rows.
  Shape full_shape() const {
    Shape s = value.shape();
    if (is_shard() && s.rank() > 0) s[0] = full_rows;
    return s;
  }
  // Index, in the whole parameter's canonical (row-major) layout, of value's first
  // element; 0 for a whole parameter.
  int64_t full_offset() const {
    if (!is_shard() || value.shape().rank() == 0 || value.shape()[0] == 0) return 0;
    return shard_offset * (value.size() / value.shape()[0]);
  }
  // Learning settings (init kind and value, multipliers, flags) taken from `from`, for a
  // layer re-created with other shapes: shapes and fans are re-derived by Setup.
  void CopySettingsFrom(const Param& from) {
    init.kind = from.init.kind;
    init.value = from.init.value;
    lr_mult = from.lr_mult;
    wd_mult = from.wd_mult;
    is_weight = from.is_weight;
    learnable = from.learnable;
  }
};

// How a layer relates to the model's columns (AlexNet's two GPUs, generalised to K).
//   kNone:     per-channel or per-element; follows its input's split.
//   kIsolated: each column sees only its own column's input channels (conv with groups).
//   kCross:    every output sees all input channels (AlexNet conv3, fc6-fc8).
struct ColumnInfo {
  enum Role { kNone, kIsolated, kCross };
  Role role = kNone;
  int columns = 1;
};

// How a layer can run on a block of its input's channels, as the layer describes itself;
// src/parallel decides from it where to split, gather or replicate (core knows no ranks).
struct ChannelSplit {
  enum Kind {
    // Needs every input channel and computes whole outputs: runs replicated on gathered
    // inputs (the loss; also the default for a layer that states nothing).
    kWholeInput,
    // Channel by channel or element by element (ReLU, pooling, within-map norm, dropout,
    // batch norm): runs unchanged on any block; see Layer::SetChannelBlock.
    kPerChannel,
    // Mixes channels within `groups` groups only (cross-channel LRN): runs on a block of
    // whole groups (SetChannelBlock).
    kChannelGroups,
    // Combines several inputs channel by channel (residual add): runs on a block when
    // every input is split alike.
    kSameBlockInputs,
    // Computes `outputs` output channels (conv filters, fc outputs) from its input's
    // channels, in `groups` groups: splits along the outputs (Layer::MakeOutputBlock).
    kOutputChannels,
  };
  Kind kind = kWholeInput;
  int64_t outputs = 0;  // kOutputChannels: filters or outputs of the whole layer
  int groups = 1;       // kOutputChannels: conv groups; kChannelGroups: LRN groups
  // kOutputChannels: what the outputs are called in the split plan ("filters").
  const char* output_noun = "outputs";
  // kWholeInput: why, for the split plan; null: the layer type has no rule.
  const char* why_whole = nullptr;
};

// What a layer's Backward reads besides its parameters and its own saved buffers (LRN's
// denominator, dropout's mask, batch norm's statistics): the data of its inputs x, of its
// outputs y, and of its output gradients dy. Net's memory plan (core/memory_plan.h) keeps
// an activation or gradient alive until the last Backward that reads it, and lets its
// memory be reused afterwards; so a layer that reads a buffer it does not declare reads
// someone else's data. Shapes (x[i]->c()) may always be read. The default states every
// buffer, which is always safe; tests/core/memory_plan_test.cc poisons freed memory to
// catch a declaration that claims too little.
struct BackwardReads {
  bool x = true;
  bool y = true;
  bool dy = true;
};

// The overrides every layer type declares: its type name (an expression of the class's
// members is fine), Setup, Forward and Backward. A macro so that each class in layers.h
// shows only what sets it apart.
#define COLONNADE_LAYER_OVERRIDES(type_name)                                               \
  const char* type() const override { return type_name; }                                  \
  absl::StatusOr<std::vector<Shape>> Setup(const std::vector<Shape>& in) override;         \
  void Forward(Ops&, const RunContext&, const std::vector<const Tensor*>& x,               \
               const std::vector<Tensor*>& y) override;                                    \
  void Backward(Ops&, const RunContext&, const std::vector<const Tensor*>& x,              \
                const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy, \
                const std::vector<Tensor*>& dx) override

class Layer {
 public:
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  virtual const char* type() const = 0;
  const std::string& name() const { return name_; }

  // Checks the input shapes (CHWN) and returns the output shapes. Called again whenever
  // the batch size changes; parameter shapes must not depend on N.
  virtual absl::StatusOr<std::vector<Shape>> Setup(const std::vector<Shape>& inputs) = 0;
  // Allocates parameters on `device` (after Setup). Initial values are written by
  // InitParams.
  virtual void AllocateParams(Device /*device*/) {}

  virtual void Forward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                       const std::vector<Tensor*>& y) = 0;
  // Writes (overwrites) input gradients dx and accumulates nothing (but a ConvLayer the memory
  // plan binds to add, ConvLayer::set_add_dx): parameter gradients are overwritten too. Entries of
  // dx may be null when the input needs no gradient.
  virtual void Backward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                        const std::vector<const Tensor*>& y, const std::vector<const Tensor*>& dy,
                        const std::vector<Tensor*>& dx) = 0;

  virtual std::vector<Param*> params() { return {}; }
  virtual ColumnInfo column_info() const { return {}; }
  virtual ChannelSplit channel_split() const { return {}; }
  // The layer will run on channels [first, first + count) of its `total` input channels
  // (kPerChannel, kChannelGroups): dropout keys its mask by the global channel, LRN keeps
  // count/total of its groups, batch norm marks its parameters as shards. Default: nothing.
  virtual void SetChannelBlock(int64_t /*first*/, int64_t /*count*/, int64_t /*total*/) {}
  // kOutputChannels: a new layer computing output block `part` of `parts` equal blocks,
  // with the same settings and its parameters marked as shards (Param::MarkShard). A
  // grouped layer keeps groups/parts groups and then reads only its input block.
  virtual std::unique_ptr<Layer> MakeOutputBlock(int /*part*/, int /*parts*/) const {
    return nullptr;
  }
  // Forward multiply-adds x 2 per image, from the shapes Setup saw (x: inputs, y: outputs;
  // N ignored). Only conv and fc count: the memory-bound layers are folded into them.
  virtual double FlopsPerImage(const std::vector<Shape>& /*x*/,
                               const std::vector<Shape>& /*y*/) const {
    return 0;
  }
  // True when Forward may write y over x (in-place ReLU saves a buffer).
  virtual bool in_place_ok() const { return false; }
  // True when Forward and Backward take each of their activations and activation gradients
  // stored as float32 or bf16 (Tensor::dtype; x with dx and y with dy share a type), with
  // FP32 arithmetic, on the CUDA backend in bf16 precision: Net then stores the blobs that
  // only such layers touch in bf16 (Net::set_bf16_storage, docs/PRECISION.md). Asked after
  // the fusions are marked (a fused ReLU does nothing and takes anything).
  virtual bool bf16_io() const { return false; }
  // With bf16_io: an output may be bf16 only when every input is (max pooling).
  virtual bool bf16_output_needs_bf16_input() const { return false; }
  // What Backward reads (see BackwardReads); override after reading the Ops each backend
  // runs for Backward (CpuOps and cuda::CudaOps).
  virtual BackwardReads backward_reads() const { return {}; }
  // True when Recompute can write the outputs of the last training Forward again, bitwise,
  // from the same inputs and the layer's own saved state (batch norm: its saved mean and
  // scale; ReLU: nothing). The memory plan's recomputation (MemoryPlanOptions::recompute,
  // docs/MEMORY.md) then need not keep the outputs alive from Forward to Backward.
  virtual bool can_recompute() const { return false; }
  // Between a training Forward and the Backward of the same step: y as Forward wrote it.
  // x and y may be the same tensor when the layer runs in place.
  virtual void Recompute(Ops& /*ops*/, const std::vector<const Tensor*>& /*x*/,
                         const std::vector<Tensor*>& /*y*/) {}

 private:
  std::string name_;
};

}  // namespace colonnade
