#include "core/net.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/layers.h"
#include "core/log.h"
#include "core/models.h"
#include "core/philox.h"
#include "core/status_macros.h"

namespace colonnade {

void Net::AddInput(const std::string& blob, Shape chw) {
  input_names_.push_back(blob);
  input_shapes_[blob] = std::move(chw);
}

Layer* Net::Add(std::unique_ptr<Layer> layer, std::vector<std::string> inputs,
                std::vector<std::string> outputs) {
  layers_.push_back({std::move(layer), std::move(inputs), std::move(outputs)});
  return layers_.back().layer.get();
}

Shape Net::input_shape(const std::string& name) const {
  auto it = input_shapes_.find(name);
  CHECK(it != input_shapes_.end()) << "no input blob " << name;
  return it->second;
}

Ops& Net::ops() const { return OpsFor(device_); }

absl::StatusOr<std::map<std::string, Shape>> Net::InferShapes(int64_t batch) {
  std::map<std::string, Shape> shapes;
  for (const std::string& name : input_names_) {
    const Shape& s = input_shapes_[name];
    shapes[name] = Shape::CHWN(s[0], s[1], s[2], batch);
  }
  std::set<std::string> seen_layers;
  for (LayerEntry& e : layers_) {
    if (!seen_layers.insert(e.layer->name()).second) {
      return absl::InvalidArgumentError("duplicate layer name " + e.layer->name());
    }
    std::vector<Shape> in;
    for (const std::string& b : e.inputs) {
      auto it = shapes.find(b);
      if (it == shapes.end()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "layer %s reads blob '%s' that no earlier layer writes", e.layer->name(), b));
      }
      in.push_back(it->second);
    }
    ASSIGN_OR_RETURN(const std::vector<Shape> out, e.layer->Setup(in));
    if (out.size() != e.outputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("layer %s produces %d outputs but %d blob names were given",
                          e.layer->name(), out.size(), e.outputs.size()));
    }
    for (size_t i = 0; i < out.size(); ++i) {
      const std::string& b = e.outputs[i];
      bool in_place = i < e.inputs.size() && e.inputs[i] == b;
      if (in_place && !e.layer->in_place_ok()) {
        return absl::InvalidArgumentError("layer " + e.layer->name() + " cannot run in place");
      }
      if (!in_place && shapes.count(b)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("blob '%s' is written twice (layer %s)", b, e.layer->name()));
      }
      shapes[b] = out[i];
    }
  }
  return shapes;
}

MemoryPlanOptions Net::PlanOptions() const {
  MemoryPlanOptions o;
  o.share = plan_memory_;
  o.pinned = pinned_;
  o.recompute = recompute_;
  if (fusions_.grad_add)
    for (size_t i = 0; i < layers_.size(); ++i)
      if (dynamic_cast<ConvLayer*>(layers_[i].layer.get()) && layers_[i].inputs.size() == 1)
        o.add_dx_layers.insert(static_cast<int>(i));
  if (fusions_.add_alias)
    for (size_t i = 0; i < layers_.size(); ++i)
      if (dynamic_cast<AddLayer*>(layers_[i].layer.get()))
        o.shared_dx_layers.insert(static_cast<int>(i));
  return o;
}

void Net::MarkFusions() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer* l = layers_[i].layer.get();
    if (auto* relu = dynamic_cast<ReluLayer*>(l)) relu->set_fused(false);
    if (auto* conv = dynamic_cast<ConvLayer*>(l)) {
      conv->set_fused_relu(false);
      conv->set_bn_sums(false);
      conv->set_relu_dx(false);
      conv->set_dy_masked(false);
    }
    if (auto* pool = dynamic_cast<PoolLayer*>(l)) pool->set_relu_dx(false);
    if (auto* bn = dynamic_cast<BatchNormLayer*>(l)) {
      bn->set_fused_relu(false);
      bn->set_output_into_add(false);
    }
    if (auto* add = dynamic_cast<AddLayer*>(l)) {
      add->set_fused_relu(false);
      add->set_normalized_input(0, nullptr);
      add->set_normalized_input(1, nullptr);
      add->set_bn_sums(false);
    }
  }
  for (size_t i = 0; i + 1 < layers_.size(); ++i) {
    Layer* l = layers_[i].layer.get();
    auto* conv = dynamic_cast<ConvLayer*>(l);
    auto* bn = dynamic_cast<BatchNormLayer*>(l);
    auto* add = dynamic_cast<AddLayer*>(l);
    // conv_bn: the batch norm reads the convolution's only output as its only input, right
    // after it (nothing between them changes the blob the sums describe).
    if (conv && fusions_.conv_bn && dynamic_cast<BatchNormLayer*>(layers_[i + 1].layer.get()) &&
        layers_[i].outputs.size() == 1 && layers_[i + 1].inputs == layers_[i].outputs)
      conv->set_bn_sums(true);
    auto* relu = dynamic_cast<ReluLayer*>(layers_[i + 1].layer.get());
    const bool wanted = conv  ? fusions_.conv_relu
                        : bn  ? fusions_.bn_relu
                        : add ? fusions_.add_relu
                              : false;
    if (!relu || !wanted) continue;
    // The ReLU must rectify the layer's only output in place, right after it: then every
    // reader of the blob reads it rectified, as before.
    const std::vector<std::string>& out = layers_[i].outputs;
    if (out.size() != 1 || layers_[i + 1].inputs != out || layers_[i + 1].outputs != out) continue;
    if (conv) conv->set_fused_relu(true);
    if (bn) bn->set_fused_relu(true);
    if (add) add->set_fused_relu(true);
    relu->set_fused(true);
  }
  // Not under bn_relu_add: the block outputs it recomputes are sums, which then need their
  // inputs written (a sum with a batch norm inside cannot be recomputed from its own inputs).
  if (fusions_.bn_add && recompute_ != RecomputePolicy::kBatchNormReluAdd) MarkBatchNormAdds();
  if (fusions_.relu_grad) MarkReluGrads();
}

int Net::Readers(const std::string& blob) const {
  int n = 0;
  for (const LayerEntry& e : layers_)
    for (const std::string& in : e.inputs) n += in == blob;
  return n;
}

// relu_grad: convolution i with a fused ReLU (layer i + 1, in place) whose output only layer
// i + 2 reads besides that ReLU: a convolution or a pooling layer with it as its only input and
// not its output. Only then is that layer's dx the whole gradient reaching the ReLU.
void Net::MarkReluGrads() {
  for (size_t i = 0; i + 2 < layers_.size(); ++i) {
    auto* conv = dynamic_cast<ConvLayer*>(layers_[i].layer.get());
    if (conv == nullptr || !conv->fused_relu()) continue;
    const std::string& blob = layers_[i].outputs[0];
    const LayerEntry& next = layers_[i + 2];
    if (next.inputs != std::vector<std::string>{blob} || Readers(blob) != 2 ||
        std::find(next.outputs.begin(), next.outputs.end(), blob) != next.outputs.end())
      continue;
    if (auto* c = dynamic_cast<ConvLayer*>(next.layer.get())) {
      c->set_relu_dx(true);
    } else if (auto* pool = dynamic_cast<PoolLayer*>(next.layer.get())) {
      pool->set_relu_dx(true);
    } else {
      continue;
    }
    conv->set_dy_masked(true);
  }
}

// bn_add: input k of a residual sum is the only output of a batch norm (no fused ReLU, not in
// place) that nothing else reads, and whose input no layer between the two rewrites.
void Net::MarkBatchNormAdds() {
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto* add = dynamic_cast<AddLayer*>(layers_[i].layer.get());
    if (!add || layers_[i].inputs.size() != 2 || layers_[i].inputs[0] == layers_[i].inputs[1])
      continue;
    for (int k = 0; k < 2; ++k) {
      const std::string& blob = layers_[i].inputs[k];
      size_t j = i;
      while (j > 0) {
        --j;
        const std::vector<std::string>& out = layers_[j].outputs;
        if (std::find(out.begin(), out.end(), blob) != out.end()) break;
      }
      auto* bn = dynamic_cast<BatchNormLayer*>(layers_[j].layer.get());
      if (!bn || bn->fused_relu() || layers_[j].outputs.size() != 1 ||
          layers_[j].outputs[0] != blob || layers_[j].inputs.size() != 1 ||
          layers_[j].inputs[0] == blob || Readers(blob) != 1 || pinned_.count(blob))
        continue;
      bool rewritten = false;
      for (size_t m = j + 1; m < i; ++m)
        for (const std::string& o : layers_[m].outputs) rewritten |= o == layers_[j].inputs[0];
      if (rewritten) continue;
      bn->set_output_into_add(true);
      add->set_normalized_input(k, bn);
      add->set_bn_sums(fusions_.add_bn_sums);
    }
  }
}

namespace {
// Every fusion by its name, in FusionsName's order.
struct FusionName {
  const char* name;
  bool Fusions::*on;
};
constexpr FusionName kFusionNames[] = {
    {"conv_relu", &Fusions::conv_relu},     {"bn_relu", &Fusions::bn_relu},
    {"add_relu", &Fusions::add_relu},       {"conv_bn", &Fusions::conv_bn},
    {"bn_add", &Fusions::bn_add},           {"relu_grad", &Fusions::relu_grad},
    {"grad_add", &Fusions::grad_add},       {"add_alias", &Fusions::add_alias},
    {"add_bn_sums", &Fusions::add_bn_sums},
};
std::string FusionChoices() {
  std::vector<std::string> names;
  for (const FusionName& f : kFusionNames) names.push_back(f.name);
  return absl::StrCat("use a comma list of ", absl::StrJoin(names, ", "),
                      ", or default, all, or none");
}
}  // namespace

absl::StatusOr<Fusions> ParseFusions(absl::string_view text) {
  if (text == "default") return Fusions{};
  Fusions f;
  for (const FusionName& n : kFusionNames) f.*n.on = text == "all";
  if (text == "all" || text == "none") return f;
  for (absl::string_view name : absl::StrSplit(text, ',')) {
    if (name == "lrn_pool") {
      return absl::InvalidArgumentError(absl::StrCat(
          "fusion 'lrn_pool' is gone: the LRN + max-pool fusion measured slower and left the main "
          "path (dev/lrn_pool); ",
          FusionChoices()));
    }
    bool known = false;
    for (const FusionName& n : kFusionNames) {
      if (name != n.name) continue;
      f.*n.on = true;
      known = true;
    }
    if (!known)
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown fusion '%s': %s", name, FusionChoices()));
  }
  return f;
}

std::string FusionsName(const Fusions& f) {
  std::vector<std::string> on;
  for (const FusionName& n : kFusionNames)
    if (f.*n.on) on.push_back(n.name);
  return on.empty() ? "none" : absl::StrJoin(on, ",");
}

std::set<std::string> Net::Bf16Blobs(const std::map<std::string, Shape>& shapes) const {
  std::set<std::string> out;
  if (!bf16_storage_) return out;
  std::set<std::string> never(pinned_);
  never.insert({"loss", "probs", kLogitsBlob});
  never.insert(input_names_.begin(), input_names_.end());
  for (const auto& [blob, shape] : shapes)
    if (!never.count(blob)) out.insert(blob);
  for (const LayerEntry& e : layers_) {
    if (e.layer->bf16_io()) continue;
    for (const std::string& b : e.inputs) out.erase(b);
    for (const std::string& b : e.outputs) out.erase(b);
  }
  // A layer whose output may be bf16 only when its inputs are (a max pool finds the
  // maximum's pixel again by comparing with y: a rounded y would match no pixel).
  for (bool changed = true; changed;) {
    changed = false;
    for (const LayerEntry& e : layers_) {
      if (!e.layer->bf16_output_needs_bf16_input()) continue;
      const bool inputs_bf16 = std::all_of(e.inputs.begin(), e.inputs.end(),
                                           [&](const std::string& b) { return out.count(b) > 0; });
      if (inputs_bf16) continue;
      for (const std::string& b : e.outputs) changed |= out.erase(b) > 0;
    }
  }
  return out;
}

absl::StatusOr<MemoryPlan> Net::PlanMemory(int64_t batch) {
  if (batch < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  // Before shape inference and planning: a fused convolution's Backward reads its y.
  MarkFusions();
  ASSIGN_OR_RETURN(const auto shapes, InferShapes(batch));
  MemoryPlanOptions options = PlanOptions();
  options.bf16_blobs = Bf16Blobs(shapes);
  return ::colonnade::PlanMemory(layers_, input_names_, shapes, options);
}

absl::Status Net::Build(int64_t batch, Device device) {
  if (batch < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  if (GetBackend(device) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("device %s is not available in this build", DeviceName(device)));
  }
  if (bf16_storage_ && device != Device::kCUDA) {
    return absl::FailedPreconditionError(
        "bf16 activation storage needs the CUDA backend in bf16 precision (the CPU backend is "
        "float32 only): drop --bf16_activations or run on a GPU");
  }
  if (params_allocated_ && device != device_) {
    return absl::FailedPreconditionError("a built Net cannot change device");
  }
  ASSIGN_OR_RETURN(MemoryPlan plan, PlanMemory(batch));
  // Free the old buffers before allocating the new ones (only the inputs are kept, when
  // their shape is unchanged: callers may hold them).
  bound_.clear();
  buffers_.clear();
  arena_ = Tensor();
  for (auto it = blobs_.begin(); it != blobs_.end();) {
    const std::string& name = it->first;
    Tensor& t = it->second;
    const bool keep = std::count(input_names_.begin(), input_names_.end(), name) > 0 &&
                      plan.activation.count(name) &&
                      t.shape() == plan.buffers[plan.activation.at(name)].shape;
    if (!keep) t = Tensor();
    // A blob this plan does not have is gone.
    it = plan.activation.count(name) ? std::next(it) : blobs_.erase(it);
  }
  // A step larger than the device is refused here, with the numbers and the way out, not
  // by the allocator (which ends the process).
  if (Backend* backend = GetBackend(device)) {
    const size_t available = backend->AvailableBytes();
    const double need = static_cast<double>(plan.planned_bytes());
    if (available > 0 && need > static_cast<double>(available)) {
      constexpr double kGiB = 1073741824.0;
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the step's activations and gradients need %.1f GiB at batch %d (memory plan %s) but "
          "the %s device has %.1f GiB available: lower the batch per replica (--batch_size / "
          "data-parallel ranks), keep --memory_plan=on and --recompute=bn_relu_add, or use "
          "more GPUs",
          need / kGiB, batch, plan_memory_ ? "on" : "off", DeviceName(device), available / kGiB));
    }
  }
  if (plan.share) arena_ = Tensor(Shape{std::max<int64_t>(plan.arena_elements, 1)}, device);
  buffers_.resize(plan.buffers.size());
  bound_.resize(plan.buffers.size());
  std::map<std::string, Tensor> unshared_scratch;  // plan off: one scratch per blob, as ever
  for (size_t id = 0; id < plan.buffers.size(); ++id) {
    const PlanBuffer& b = plan.buffers[id];
    Tensor& t = b.kind == PlanBuffer::kActivation ? blobs_[b.blob] : buffers_[id];
    if (b.external) {
      if (t.empty()) t = Tensor(b.shape, device);
    } else if (b.kind == PlanBuffer::kRecomputed && !plan.share) {
      t = blobs_.at(b.blob);  // one allocation per blob: written again in place
    } else if (plan.share) {
      t = arena_.View(b.shape, b.offset, b.dtype);
    } else if (b.kind == PlanBuffer::kScratch) {
      Tensor& s = unshared_scratch[b.blob];
      if (s.empty()) s = Tensor(b.shape, device, b.dtype);
      t = s;
    } else {
      t = Tensor(b.shape, device, b.dtype);
    }
    bound_[id] = &t;
  }
  plan_ = std::move(plan);
  for (size_t i = 0; i < layers_.size(); ++i)
    if (auto* conv = dynamic_cast<ConvLayer*>(layers_[i].layer.get()))
      conv->set_add_dx(plan_.layers[i].dx_add);
  device_ = device;
  batch_ = batch;
  ++builds_;
  for (LayerEntry& e : layers_) e.layer->AllocateParams(device);
  params_allocated_ = true;
  return absl::OkStatus();
}

int64_t Net::param_bytes() const {
  int64_t n = 0;
  for (const NamedParam& p : params())
    n += p.param->value.size() + p.param->grad.size() + p.param->velocity.size();
  return n * static_cast<int64_t>(sizeof(float));
}

Tensor& Net::blob(const std::string& name) {
  auto it = blobs_.find(name);
  CHECK(it != blobs_.end()) << "no blob " << name;
  return it->second;
}

void InitParamValues(uint64_t seed, const std::string& name, const InitSpec& spec, int64_t first,
                     int64_t count, float* out) {
  const uint64_t key =
      MixKey(MixKey(seed, static_cast<uint64_t>(RandomPurpose::kInit)), StringHash(name.c_str()));
  switch (spec.kind) {
    case InitSpec::kConstant:
      std::fill(out, out + count, spec.value);
      break;
    case InitSpec::kGaussian:
    case InitSpec::kHeNormal: {
      float std = spec.kind == InitSpec::kGaussian
                      ? spec.value
                      : std::sqrt(2.0f / static_cast<float>(std::max<int64_t>(1, spec.fan_in)));
      // Each element is a function of its index alone: split over threads, same values.
      ParallelRanges(count, 64, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = std * PhiloxNormal(key, 0, first + i);
      });
      break;
    }
    case InitSpec::kUniform:
    case InitSpec::kXavierUniform: {
      float a = spec.kind == InitSpec::kUniform
                    ? spec.value
                    : std::sqrt(6.0f / static_cast<float>(
                                           std::max<int64_t>(1, spec.fan_in + spec.fan_out)));
      ParallelRanges(count, 32, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          out[i] = a * (2.0f * PhiloxUniform(key, 0, first + i) - 1.0f);
      });
      break;
    }
  }
}

void Net::InitParams(uint64_t seed) {
  for (const NamedParam& np : params()) {
    Param& p = *np.param;
    std::vector<float> v(p.value.size());
    InitParamValues(seed, np.name, p.init, p.full_offset(), static_cast<int64_t>(v.size()),
                    v.data());
    p.value.CopyFromHost(v);
    p.velocity.Fill(0.0f);
    p.grad.Fill(0.0f);
  }
}

void Net::Forward(const RunContext& ctx) {
  CHECK_EQ(plan_.layers.size(), layers_.size()) << "Net::Forward before Net::Build";
  if (poison_) {
    if (plan_.share) {
      ops().Fill(arena_, std::numeric_limits<float>::quiet_NaN());
    } else {
      for (size_t id = 0; id < plan_.buffers.size(); ++id)
        if (!plan_.buffers[id].external)
          bound_[id]->Fill(std::numeric_limits<float>::quiet_NaN());  // either storage type
    }
  }
  // Gradients read before anything writes them (an output no layer consumes) are zero.
  for (size_t id = 0; id < plan_.buffers.size(); ++id)
    if (plan_.buffers[id].zero) bound_[id]->Fill(0.0f);
  std::vector<const Tensor*> x;
  std::vector<Tensor*> y;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerBinding& bind = plan_.layers[i];
    x.clear();
    y.clear();
    for (int id : bind.x) x.push_back(bound_[id]);
    for (int id : bind.y) y.push_back(bound_[id]);
    layers_[i].layer->Forward(ops(), ctx, x, y);
  }
}

void Net::Backward(const RunContext& ctx, const std::function<void(int)>& after_layer) {
  CHECK_EQ(plan_.layers.size(), layers_.size()) << "Net::Backward before Net::Build";
  Ops& o = ops();
  // A blob read by several layers gets the sum of their input gradients: the first
  // writer (in backward order) writes the gradient buffer, later ones write a scratch
  // buffer that is then added, or add to the gradient buffer themselves (LayerBinding::dx_add,
  // Fusions::grad_add; the plan's bindings say which; core/memory_plan.h).
  std::vector<const Tensor*> x, y, dy;
  std::vector<Tensor*> dx;
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    const LayerBinding& bind = plan_.layers[i];
    for (int r : bind.recompute) Recompute(plan_.recomputes[r]);
    x.clear();
    y.clear();
    dy.clear();
    dx.clear();
    for (int id : bind.back_x) x.push_back(bound_[id]);
    for (int id : bind.back_y) y.push_back(bound_[id]);
    for (int id : bind.dy) dy.push_back(bound_[id]);
    for (int id : bind.dx) dx.push_back(id >= 0 ? bound_[id] : nullptr);
    layers_[i].layer->Backward(o, ctx, x, y, dy, dx);
    for (const auto& [grad, scratch] : bind.accumulate)
      o.Add(*bound_[grad], *bound_[scratch], *bound_[grad]);
    if (after_layer) after_layer(i);
  }
}

void Net::Recompute(const Recomputation& r) {
  std::vector<const Tensor*> x;
  for (const Recomputation::Run& run : r.runs) {
    x.clear();
    for (int id : run.x) x.push_back(bound_[id]);
    layers_[run.layer].layer->Recompute(ops(), x, {bound_[run.y]});
  }
}

std::vector<NamedParam> Net::params() const {
  std::vector<NamedParam> out;
  for (const LayerEntry& e : layers_) {
    for (Param* p : e.layer->params()) {
      out.push_back({e.layer->name() + "/" + p->name, e.layer->name(), p});
    }
  }
  return out;
}

int64_t Net::num_learnable() const {
  int64_t n = 0;
  for (const NamedParam& p : params())
    if (p.param->learnable) n += p.param->value.size();
  return n;
}

}  // namespace colonnade
