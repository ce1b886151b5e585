// Layer: the small interface every layer implements (after Caffe's Layer): compute output
// shapes from input shapes, forward, backward, and expose parameters.
//
// A layer never knows which device it runs on (it calls Ops) nor how many ranks exist
// (the column split is applied to the Net by src/parallel using each layer's ColumnInfo).
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
  // Set by the parallel column split: this tensor holds rows [shard_offset, shard_offset +
  // dim 0) of the full parameter, which has full_rows rows along dim 0 (conv filters, fc
  // outputs, channels). full_rows == 0 means the tensor is the whole parameter. Checkpoints
  // gather shards into the full, canonical tensor with this.
  int64_t shard_offset = 0;
  int64_t full_rows = 0;
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
  // Writes (overwrites) input gradients dx and accumulates nothing: parameter gradients
  // are overwritten too. Entries of dx may be null when the input needs no gradient.
  virtual void Backward(Ops& ops, const RunContext& ctx, const std::vector<const Tensor*>& x,
                        const std::vector<const Tensor*>& y,
                        const std::vector<const Tensor*>& dy,
                        const std::vector<Tensor*>& dx) = 0;

  virtual std::vector<Param*> params() { return {}; }
  virtual ColumnInfo column_info() const { return {}; }
  // True when Forward may write y over x (in-place ReLU saves a buffer).
  virtual bool in_place_ok() const { return false; }

 private:
  std::string name_;
};

}  // namespace colonnade
