// Net: a DAG of layers joined by named blobs (Caffe's model). Layers run in the order
// they were added, which must be a topological order; backward runs in reverse.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/layer.h"
#include "core/memory_plan.h"

namespace colonnade {

struct LayerEntry {
  std::unique_ptr<Layer> layer;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

// A named learnable (or saved) parameter: "<layer>/<param>".
struct NamedParam {
  std::string name;
  std::string layer;
  Param* param;
};

// Writes elements [first, first + count) of the parameter called `name` ("layer/param"),
// initialised by `spec` from `seed`; indices are in the full parameter's canonical layout.
// Net::InitParams uses it, and so does the parallel column split, which initialises a
// shard as the rows of the full parameter it holds (Param::full_offset).
void InitParamValues(uint64_t seed, const std::string& name, const InitSpec& spec, int64_t first,
                     int64_t count, float* out);

// Which layer pairs Net::Build fuses.
struct Fusions {
  // A convolution (batch norm) whose output the next layer rectifies in place, with nothing
  // reading it in between, runs that ReLU itself (ConvLayer / BatchNormLayer::
  // set_fused_relu); the ReLU layer does nothing (ReluLayer::set_fused).
  bool conv_relu = true;
  bool bn_relu = true;
  // A residual sum (AddLayer) whose output the next layer rectifies in place (the ResNets'
  // block ends) writes max(a + b, 0) itself (AddLayer::set_fused_relu).
  bool add_relu = true;
  // A convolution whose only output a batch norm reads next, as its only input, leaves that
  // batch norm the per-channel sums of its output (ConvLayer::set_bn_sums; the CUDA backend's
  // wgmma epilogue), so the training forward skips two passes over it. Not bitwise: the
  // variance then comes from the sum of squares (docs/PRECISION.md).
  bool conv_bn = true;
  // A batch norm (without a fused ReLU) whose only reader is a residual sum: in training the
  // sum recomputes the normalised values from the batch norm's input in its own pass
  // (AddLayer::set_normalized_input, Ops::AddNormalized) and the batch norm keeps only the
  // statistics, so its output is never written nor read again. Bitwise the same. Not applied
  // with RecomputePolicy::kBatchNormReluAdd (its recomputed block outputs are such sums).
  bool bn_add = true;
  // A convolution's fused ReLU whose output only one more layer reads, a convolution or a
  // pooling layer right after it: that layer's backward writes its dx already passed through
  // the ReLU (x > 0: ConvLayer / PoolLayer::set_relu_dx), and the convolution's backward takes
  // that gradient as it is (ConvLayer::set_dy_masked). Bitwise the same; the CUDA backend masks
  // in the backward-data epilogue (and sums the bias gradient there) or in the max pool's
  // gather, instead of a pass over dy and y (VGG-16: 13 such passes).
  bool relu_grad = true;
  // A convolution whose input another layer reads too (a ResNet block's input: its first
  // convolution and the shortcut), and whose input gradient that layer wrote first (in backward
  // order), adds its part to that gradient (ConvLayer::set_add_dx, Ops::ConvLayerBackward's
  // add_dx; the memory plan's LayerBinding::dx_add) instead of writing a scratch buffer that a
  // pass then adds. Bitwise the same; the CUDA backend adds in the backward-data epilogue.
  bool grad_add = true;
  // A residual sum's two inputs get one gradient buffer where the memory plan can prove it
  // safe (MemoryPlanOptions::shared_dx_layers: the batch norm's branch is read back before the
  // shortcut's other readers add to it), so the sum's Backward writes its gradient once, not
  // twice (ResNet-50: one block output's worth of writes less per block). Bitwise the same.
  bool add_alias = true;
  // A residual sum with its fused ReLU whose inputs share one gradient buffer (add_alias) and
  // include batch-norm outputs it computed itself (bn_add) leaves those batch norms the sums
  // their backward needs (sum dy and sum dy * xhat: AddLayer::set_bn_sums, Ops::
  // ReluBackwardBnSums), taken in the pass that writes the gradient, so their backward reads
  // dy and x once instead of twice (ResNet-50: 20 batch norms). Bitwise the same; the CPU
  // backend keeps its own pass. ResNet-50 on an H100 (713c350, experiments/resnet_kernels):
  // 4,832 -> 4,910 img/s at batch 128, 5,186 -> 5,283 at 256. (Its first kernel, which kept
  // its sums in local memory, had made the step 3% slower: 274d719, H200.)
  bool add_bn_sums = true;
  // (A cross-channel LRN fused into the max pool after it measured slower and left the main
  // path: dev/lrn_pool.)
};
// "conv_relu,bn_relu,add_relu,conv_bn,bn_add,relu_grad,grad_add,add_alias,add_bn_sums" (any subset,
// comma-separated), "default" (Fusions{}), "all" or "none". "lrn_pool" is refused with a note that
// it is gone.
absl::StatusOr<Fusions> ParseFusions(absl::string_view text);
std::string FusionsName(const Fusions& f);

class Net {
 public:
  explicit Net(std::string model_name) : model_name_(std::move(model_name)) {}
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  const std::string& model_name() const { return model_name_; }

  // Declares an input blob fed from outside, with its per-image shape {C, H, W}.
  void AddInput(const std::string& blob, Shape chw);
  // Appends a layer reading `inputs` and writing `outputs` (an output may repeat its
  // input's name for in-place layers). Returns the layer.
  Layer* Add(std::unique_ptr<Layer> layer, std::vector<std::string> inputs,
             std::vector<std::string> outputs);
  template <typename L, typename... Args>
  L* Emplace(std::vector<std::string> inputs, std::vector<std::string> outputs, Args&&... args) {
    return static_cast<L*>(Add(std::make_unique<L>(std::forward<Args>(args)...), std::move(inputs),
                               std::move(outputs)));
  }

  // Derives every shape for `batch` images, plans and allocates blobs, gradients and
  // parameters on `device`. Parameters keep their values when called again with another
  // batch; blobs other than the inputs do not.
  absl::Status Build(int64_t batch, Device device);

  // Memory plan (core/memory_plan.h, docs/MEMORY.md). On (the default), Build places
  // every activation, gradient and gradient scratch buffer in one arena, buffers whose
  // lives in the step do not overlap sharing memory; a blob's contents are then valid
  // only while the step needs them. Off: one allocation per buffer. Set before Build.
  void set_memory_plan(bool on) { plan_memory_ = on; }
  bool memory_plan_enabled() const { return plan_memory_; }
  // Recomputation (MemoryPlanOptions::recompute, docs/MEMORY.md): batch-norm outputs (with
  // their in-place ReLU; with kBatchNormReluAdd also residual sums) are written again just
  // before their first backward reader instead of being kept from Forward; results are
  // bitwise the same. With the plan off every buffer has its own allocation anyway and the
  // recompute rewrites the blobs in place. Set before Build. Default: off.
  void set_recompute(RecomputePolicy p) { recompute_ = p; }
  RecomputePolicy recompute() const { return recompute_; }
  // Layer fusions (Fusions): pairs of layers Build runs as one pass each way, saving the
  // second layer's passes over memory; FP32 results are bitwise the unfused ones. All on by
  // default; decided again by every Build / PlanMemory. Set before Build.
  void set_fusions(const Fusions& f) { fusions_ = f; }
  const Fusions& fusions() const { return fusions_; }
  // bf16 activation storage (docs/PRECISION.md): every blob that only layers taking bf16
  // touch (Layer::bf16_io: all but fully connected, dropout, unfused LRNs and the loss) is
  // stored in bf16, with its gradient (a sum of several readers' gradients is added in
  // bf16 too); net inputs, pinned blobs, "loss", "probs" and the logits stay float32. For
  // the CUDA backend in bf16 precision (the convolutions refuse bf16 tensors otherwise).
  // Decided again by every Build / PlanMemory. Set before Build. Default: off.
  void set_bf16_storage(bool on) { bf16_storage_ = on; }
  bool bf16_storage() const { return bf16_storage_; }
  // Keeps a blob live for the whole step, for a caller that reads it after Forward or
  // Backward (the inputs, "loss", "probs" and kLogitsBlob always are). Before Build; a
  // name the net does not have is ignored.
  void PinBlob(const std::string& name) { pinned_.insert(name); }
  // The plan Build would make for `batch` images, without allocating anything.
  absl::StatusOr<MemoryPlan> PlanMemory(int64_t batch);
  // The plan of the last Build.
  const MemoryPlan& memory_plan() const { return plan_; }
  // Bytes of every parameter's value, gradient and velocity (after Build).
  int64_t param_bytes() const;
  // Test hook: Forward first fills the arena (plan off: every non-input buffer) with NaN,
  // so a layer reading memory its declaration (Layer::backward_reads) did not keep alive
  // produces NaN or another buffer's values.
  void set_poison_for_testing(bool on) { poison_ = on; }
  // The shape inference Build uses, without allocating: calls each layer's Setup in order
  // and returns every blob's shape for `batch` images. Checks that layer names are unique,
  // that every input was written before, and the outputs (count, in-place use, no blob
  // written twice). The column split runs it on the full model (batch 1).
  absl::StatusOr<std::map<std::string, Shape>> InferShapes(int64_t batch);
  int64_t batch() const { return batch_; }
  // Counts the calls of Build: every Build may move every activation and gradient buffer,
  // so work recorded with their addresses (a CUDA graph of the step) is valid only for the
  // count it was recorded at.
  int64_t builds() const { return builds_; }
  Device device() const { return device_; }
  Ops& ops() const;

  // Writes every parameter's initial value from (seed, layer name, parameter name,
  // element index): identical for any device, split or rank. A shard (Param::is_shard)
  // takes the elements of its rows of the full parameter (Param::full_offset). (A sharded
  // parameter whose init depends on fan_out should be initialised by parallel's
  // InitShardParams, which knows the full layer's fan-out.)
  void InitParams(uint64_t seed);

  // Runs all layers. The caller fills the input blobs first.
  void Forward(const RunContext& ctx);
  // Runs all layers backward from the loss. `after_layer(i)` is called once layer i's
  // parameter gradients are final, in reverse order (gradient buckets hook in here).
  void Backward(const RunContext& ctx, const std::function<void(int)>& after_layer = nullptr);

  Tensor& blob(const std::string& name);
  bool has_blob(const std::string& name) const { return blobs_.count(name) > 0; }
  const std::vector<std::string>& input_names() const { return input_names_; }
  Shape input_shape(const std::string& name) const;  // per-image {C, H, W}

  std::vector<LayerEntry>& layers() { return layers_; }
  const std::vector<LayerEntry>& layers() const { return layers_; }
  // All parameters in layer order ("conv1/weight", ...), learnable or not.
  std::vector<NamedParam> params() const;
  // Number of learnable scalars (the figure papers quote).
  int64_t num_learnable() const;
  // Columns declared by the model (AlexNet: 2); 1 when the model has none.
  int columns() const { return columns_; }
  void set_columns(int k) { columns_ = k; }

 private:
  std::string model_name_;
  std::vector<LayerEntry> layers_;
  std::vector<std::string> input_names_;
  std::map<std::string, Shape> input_shapes_;
  MemoryPlanOptions PlanOptions() const;
  // The blobs set_bf16_storage stores in bf16, for blob shapes `shapes` (after MarkFusions).
  std::set<std::string> Bf16Blobs(const std::map<std::string, Shape>& shapes) const;
  // Marks the pairs to fuse (set_fusions), clearing earlier marks. Runs before shape
  // inference.
  void MarkFusions();
  void MarkBatchNormAdds();                    // Fusions::bn_add (MarkFusions)
  void MarkReluGrads();                        // Fusions::relu_grad (MarkFusions)
  int Readers(const std::string& blob) const;  // how many layer inputs name the blob
  // Runs a recomputation of the plan (Layer::Recompute of each of its runs).
  void Recompute(const Recomputation& r);

  // Activations by blob name; the tensors of every planned buffer (bound_[id] points at
  // the blob's entry for activations, at buffers_[id] otherwise); the arena.
  std::map<std::string, Tensor> blobs_;
  std::vector<Tensor> buffers_;
  std::vector<Tensor*> bound_;
  Tensor arena_;
  MemoryPlan plan_;
  std::set<std::string> pinned_;
  bool plan_memory_ = true;
  RecomputePolicy recompute_ = RecomputePolicy::kOff;
  bool poison_ = false;
  bool bf16_storage_ = false;
  Fusions fusions_;
  int64_t batch_ = 0;
  int64_t builds_ = 0;
  Device device_ = Device::kCPU;
  int columns_ = 1;
  bool params_allocated_ = false;
};

}  // namespace colonnade
