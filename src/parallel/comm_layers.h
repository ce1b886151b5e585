// Layers that move activations between the ranks of a model-parallel group. The column
// split (model_split.h) inserts them into a rank's Net, so Net itself never knows about
// ranks. Each rank holds an equal block of channels of a "split" blob: rank r holds
// channels [r*C/mp, (r+1)*C/mp). In CHWN a block of channels is one contiguous range, so
// gathering and scattering channels are plain all-gather and reduce-scatter calls.
//
// Gradient conventions (what makes the split exact): the gradient a rank holds for a
// split blob is the exact gradient of its channel block; for a replicated blob (every
// rank holds all channels) it is the exact, full gradient, identical on every rank.
// A layer that computes only its rank's share of the outputs from a replicated input
// (a sharded "cross" layer) produces a *partial* input gradient that must be summed over
// the group; the layers below do that sum where it is needed.
#pragma once

#include <string>

#include "core/layer.h"
#include "parallel/communicator.h"

namespace colonnade {

// The collectives a communication layer runs, for the cost model. Each moves the full
// (gathered) blob: the larger of the layer's input and output.
struct Collectives {
  enum Kind { kNone, kAllGather, kReduceScatter, kAllReduce };
  Kind forward = kNone;
  Kind backward = kNone;
};

// The layers below: each states its collectives, so the cost model needs no type names.
class CommLayer : public Layer {
 public:
  using Layer::Layer;
  virtual Collectives collectives() const = 0;
};

// Forward: all-gather the channel blocks of a split blob into the full blob.
// Backward, by what reads the gathered blob:
//   kSlice          replicated computation (e.g. the loss on gathered logits): the
//                   gradient is already full and identical on every rank; take own block.
//   kReduceScatter  one sharded cross layer: each rank's gradient is a partial sum;
//                   reduce-scatter sums them and leaves each rank its block.
class AllGatherChannelsLayer : public CommLayer {
 public:
  enum BackwardMode { kSlice, kReduceScatter };
  AllGatherChannelsLayer(std::string name, Communicator* comm, BackwardMode mode);
  COLONNADE_LAYER_OVERRIDES("allgather_channels");
  // Moves gradients only (x for its channel count).
  BackwardReads backward_reads() const override { return {false, false, true}; }
  Collectives collectives() const override {
    return {Collectives::kAllGather,
            mode_ == kReduceScatter ? Collectives::kReduceScatter : Collectives::kNone};
  }
  BackwardMode mode() const { return mode_; }

 private:
  Communicator* comm_;
  BackwardMode mode_;
};

// Forward: take this rank's channel block of a replicated blob (an isolated layer reading
// a blob every rank computed in full). Backward: all-gather the blocks' gradients into
// the full, replicated gradient.
class SliceChannelsLayer : public CommLayer {
 public:
  SliceChannelsLayer(std::string name, Communicator* comm);
  COLONNADE_LAYER_OVERRIDES("slice_channels");
  // Moves gradients only (x for its channel count).
  BackwardReads backward_reads() const override { return {false, false, true}; }
  Collectives collectives() const override { return {Collectives::kNone, Collectives::kAllGather}; }

 private:
  Communicator* comm_;
};

// Forward: identity (a copy). Backward: all-reduce (sum) the gradient over the group. Put
// in front of a sharded cross layer that reads a replicated blob computed by earlier
// layers, whose partial input gradients must be summed before they join the blob's other
// gradients (Megatron-LM's "f" operator).
class GradSumLayer : public CommLayer {
 public:
  GradSumLayer(std::string name, Communicator* comm);
  COLONNADE_LAYER_OVERRIDES("grad_allreduce");
  // Moves gradients only (x for its channel count).
  BackwardReads backward_reads() const override { return {false, false, true}; }
  Collectives collectives() const override { return {Collectives::kNone, Collectives::kAllReduce}; }

 private:
  Communicator* comm_;
};

}  // namespace colonnade
