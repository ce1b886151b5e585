// The static memory plan of one training step of a Net: which activation, gradient and
// gradient-scratch buffers exist, when each is live, and where it sits in one arena.
//
// The schedule is the step as Net runs it: Forward of layers 0..L-1, then Backward of
// layers L-1..0, each Backward followed by one "accumulate" step per input whose gradient
// another layer already wrote (grad += scratch), unless that layer adds to the gradient
// itself (MemoryPlanOptions::add_dx_layers). A buffer is live from the first step
// that writes (or reads) it to the last step that reads or writes it; an argument a step
// only passes along (an activation its Backward does not read) does not keep it alive; what
// Backward reads is what the layer declares (Layer::backward_reads). Buffers whose lives do not
// overlap may share memory: they get offsets in one arena (greedy, largest first, each at the
// best-fitting gap among the buffers it overlaps in time). Pinned buffers (net inputs, "loss",
// "probs", the logits, Net::PinBlob) live the whole step and share with nothing, so
// callers may read them between steps. With recomputation (MemoryPlanOptions::recompute),
// chosen cheap outputs (batch norm + ReLU; optionally residual sums) live only through the
// forward pass; a "recompute" step just before their first backward reader writes them
// again into short-lived buffers. docs/MEMORY.md describes the rules.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace colonnade {

struct LayerEntry;

struct PlanBuffer {
  // kRecomputed: an activation written again in the backward pass (its backward life, or
  // for an intermediate of a recomputation only its recompute step).
  enum Kind { kActivation, kGradient, kScratch, kRecomputed };
  Kind kind = kActivation;
  std::string blob;  // the blob it holds (kActivation, kRecomputed) or the gradient of
  // For printing: "conv1", "d conv1", "d conv1 (from pool1)", "bn1 (recomputed)".
  std::string name;
  Shape shape;
  int first = -1;  // live interval in schedule steps, inclusive
  int last = -1;
  bool pinned = false;  // live the whole step; shares with nothing
  // Read before anything writes it (the gradient of an output nobody consumes): Net
  // zero-fills it before every step. Always pinned.
  bool zero = false;
  // A net input: its own allocation outside the arena, filled by the caller.
  bool external = false;
  int64_t offset = 0;  // in the arena, 4-byte words (when the plan shares memory)
  // Storage type: float32, or bf16 for the blobs MemoryPlanOptions::bf16_blobs names (their
  // activation, gradient, scratch and recomputed buffers alike).
  DType dtype = DType::kFloat32;
  int64_t elements() const { return shape.elements(); }
  int64_t bytes() const { return elements() * DTypeBytes(dtype); }
  int64_t words() const { return (bytes() + 3) / 4; }  // the arena's unit
};

struct PlanStep {
  // kRecompute: MemoryPlan::recomputes[recompute], run before the next backward step.
  enum Kind { kForward, kBackward, kAccumulate, kRecompute };
  Kind kind = kForward;
  int layer = 0;                   // kRecompute: the layer whose output it writes again
  int recompute = -1;              // kRecompute: index into MemoryPlan::recomputes
  std::vector<int> reads, writes;  // buffer ids (reads: what the step's code reads)
  std::vector<int> touches;        // bound to an argument but neither read nor written
};

// Which buffer each argument of a layer's Forward and Backward is (buffer ids; -1: null).
struct LayerBinding {
  std::vector<int> x, y;  // activations of inputs and outputs (Forward)
  // Backward's x and y: as x and y, except a recomputed blob's kRecomputed buffer.
  std::vector<int> back_x, back_y;
  std::vector<int> dy;  // gradients of the outputs
  std::vector<int> dx;  // gradients (or scratch) the inputs receive; -1 for net inputs
  std::vector<std::pair<int, int>> accumulate;  // (gradient, scratch): gradient += scratch
  // Input 0's gradient, written already by a later reader (in backward order), is bound as
  // dx and Backward adds its own part to it (MemoryPlanOptions::add_dx_layers): no scratch.
  bool dx_add = false;
  std::vector<int> recompute;  // MemoryPlan::recomputes to run before this layer's Backward
};

// One blob written again before its first backward reader, by the layers that wrote it in
// the forward pass (Layer::Recompute, in forward order): its producer from inputs whose
// forward buffers are still live (a later Backward reads them) or from intermediates
// recomputed first into buffers of their own (a residual sum's batch-norm input), then the
// layers that modify it in place.
struct Recomputation {
  struct Run {
    int layer = 0;
    std::vector<int> x;  // buffer ids of the layer's inputs
    int y = -1;          // the buffer it writes (in place: also its input)
  };
  std::vector<Run> runs;
  int buffer = -1;  // the kRecomputed buffer the backward readers get
};

// Which outputs the plan may recompute (--recompute): batch norm and the ReLUs after it,
// and with kBatchNormReluAdd also residual sums (add) and the ReLUs after them.
enum class RecomputePolicy { kOff, kBatchNormRelu, kBatchNormReluAdd };

struct MemoryPlanOptions {
  // false: every buffer its own allocation (--memory_plan=off); the schedule is the same.
  bool share = true;
  // Blobs (besides the net inputs, "loss", "probs" and the logits) kept for the caller.
  std::set<std::string> pinned;
  // Offsets are multiples of this many 4-byte words (256 bytes: any kernel's vector loads).
  int64_t align_elements = 64;
  // Blobs stored in bf16 (Net decides: docs/PRECISION.md); every other blob is float32.
  std::set<std::string> bf16_blobs;
  // Recompute in the backward pass every blob that is read by some Backward, written by
  // layers the policy names that can recompute (Layer::can_recompute: the producer, then
  // in-place layers), and whose producer's inputs are live anyway when it is needed
  // (a Backward after its first reader reads them) or are such outputs themselves that no
  // Backward reads (recomputed first, for the recompute step only). So nothing lives longer
  // and the blob's forward buffer dies at its last forward reader. A blob whose input is
  // recomputed is kept (each input is recomputed at most once): in ResNet every other
  // block output.
  RecomputePolicy recompute = RecomputePolicy::kOff;
  // Layers (indices) of one input whose Backward can add that input's gradient to what the
  // gradient buffer holds (Net::Fusions::grad_add, ConvLayer::set_add_dx): where another
  // reader wrote it first, such a layer gets the gradient buffer itself (LayerBinding::dx_add)
  // instead of a scratch buffer and an accumulate step.
  std::set<int> add_dx_layers;
  // Layers (indices) of two inputs whose Backward gives both the same gradient (a residual
  // sum, Net::Fusions::add_alias): when one input e is read by that layer alone, written by
  // one producer (not in place), and every other reader of the other input o runs its
  // Backward after e's producer, both inputs get one gradient buffer (LayerBinding::dx holds
  // it twice), written once: e's gradient until e's producer has read it, then o's, to which
  // o's other readers add. Otherwise each input its own.
  std::set<int> shared_dx_layers;
};

struct MemoryPlan {
  bool share = true;
  int64_t batch = 0;
  std::vector<PlanBuffer> buffers;
  std::vector<PlanStep> steps;
  std::vector<LayerBinding> layers;
  std::vector<Recomputation> recomputes;
  std::map<std::string, int> activation, gradient;  // blob -> buffer id (forward's)
  int64_t arena_elements = 0;                       // the arena in 4-byte words (share) or 0

  // Bytes of the buffers in the arena (or of all non-input buffers without sharing).
  int64_t planned_bytes() const;
  // Bytes the buffers take with one allocation each (the plan off: one scratch per blob).
  int64_t unshared_bytes() const;
  int64_t input_bytes() const;  // the net inputs' own allocations
  // "F3 conv2", "B3 conv2", "A3 conv2", "R3 conv2" for a schedule step.
  std::string StepName(int step, const std::vector<LayerEntry>& layers) const;
  // The table --print_memory_plan shows: every buffer with its bytes, offset, live
  // interval and the buffers it shares memory with, in order of first use.
  std::string Format(const std::vector<LayerEntry>& layers) const;
};

// Builds the schedule, the liveness and (with options.share) the placement for `layers`
// with blob shapes `shapes` (Net::InferShapes) and net inputs `inputs`.
absl::StatusOr<MemoryPlan> PlanMemory(const std::vector<LayerEntry>& layers,
                                      const std::vector<std::string>& inputs,
                                      const std::map<std::string, Shape>& shapes,
                                      const MemoryPlanOptions& options);

// The properties a plan must have (the tests check them for every zoo model): buffers
// whose arena ranges overlap are never live at one step; every step reads only buffers
// written at an earlier step (inputs and zero-filled buffers count as written before the
// step); each buffer's interval covers every step that reads or writes it; the arena is no larger
// than the buffers' sum; a recomputed buffer is written by its recompute step and read only
// by later backward steps.
absl::Status CheckMemoryPlan(const MemoryPlan& plan);

}  // namespace colonnade
