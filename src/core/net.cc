#include "core/net.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/log.h"
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
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %s produces %d outputs but %d blob names were given", e.layer->name(),
          out.size(), e.outputs.size()));
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

absl::Status Net::Build(int64_t batch, Device device) {
  if (batch < 1) return absl::InvalidArgumentError("batch size must be at least 1");
  if (GetBackend(device) == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("device %s is not available in this build", DeviceName(device)));
  }
  if (params_allocated_ && device != device_) {
    return absl::FailedPreconditionError("a built Net cannot change device");
  }
  ASSIGN_OR_RETURN(const auto shapes, InferShapes(batch));
  // Allocate blobs (keeping those whose shape is unchanged).
  for (auto& [name, shape] : shapes) {
    Tensor& t = blobs_[name];
    if (t.empty() || t.shape() != shape) {
      t = Tensor(shape, device);
      grads_[name] = Tensor(shape, device);
      scratch_.erase(name);
    }
  }
  device_ = device;
  batch_ = batch;
  for (LayerEntry& e : layers_) e.layer->AllocateParams(device);
  params_allocated_ = true;
  return absl::OkStatus();
}

Tensor& Net::blob(const std::string& name) {
  auto it = blobs_.find(name);
  CHECK(it != blobs_.end()) << "no blob " << name;
  return it->second;
}

void InitParamValues(uint64_t seed, const std::string& name, const InitSpec& spec,
                     int64_t first, int64_t count, float* out) {
  const uint64_t key = MixKey(MixKey(seed, static_cast<uint64_t>(RandomPurpose::kInit)),
                              StringHash(name.c_str()));
  switch (spec.kind) {
    case InitSpec::kConstant:
      std::fill(out, out + count, spec.value);
      break;
    case InitSpec::kGaussian:
    case InitSpec::kHeNormal: {
      float std = spec.kind == InitSpec::kGaussian
                      ? spec.value
                      : std::sqrt(2.0f / static_cast<float>(std::max<int64_t>(1, spec.fan_in)));
      for (int64_t i = 0; i < count; ++i) out[i] = std * PhiloxNormal(key, 0, first + i);
      break;
    }
    case InitSpec::kUniform:
    case InitSpec::kXavierUniform: {
      float a = spec.kind == InitSpec::kUniform
                    ? spec.value
                    : std::sqrt(6.0f / static_cast<float>(
                                           std::max<int64_t>(1, spec.fan_in + spec.fan_out)));
      for (int64_t i = 0; i < count; ++i) out[i] = a * (2.0f * PhiloxUniform(key, 0, first + i) - 1.0f);
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
  std::vector<const Tensor*> x;
  std::vector<Tensor*> y;
  for (LayerEntry& e : layers_) {
    x.clear();
    y.clear();
    for (const std::string& b : e.inputs) x.push_back(&blobs_.at(b));
    for (const std::string& b : e.outputs) y.push_back(&blobs_.at(b));
    e.layer->Forward(ops(), ctx, x, y);
  }
}

void Net::Backward(const RunContext& ctx, const std::function<void(int)>& after_layer) {
  Ops& o = ops();
  std::set<std::string> inputs(input_names_.begin(), input_names_.end());
  // A blob read by several layers gets the sum of their input gradients: the first
  // writer (in backward order) writes the gradient buffer, later ones write a scratch
  // buffer that is then added.
  std::map<std::string, bool> written;
  std::vector<const Tensor*> x, y, dy;
  std::vector<Tensor*> dx;
  for (int i = static_cast<int>(layers_.size()) - 1; i >= 0; --i) {
    LayerEntry& e = layers_[i];
    x.clear();
    y.clear();
    dy.clear();
    dx.clear();
    for (const std::string& b : e.inputs) x.push_back(&blobs_.at(b));
    for (const std::string& b : e.outputs) {
      y.push_back(&blobs_.at(b));
      dy.push_back(&grads_.at(b));
    }
    std::vector<std::string> accumulate;
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const std::string& b = e.inputs[k];
      bool in_place = k < e.outputs.size() && e.outputs[k] == b;
      if (inputs.count(b)) {
        dx.push_back(nullptr);
      } else if (in_place || !written[b]) {
        dx.push_back(&grads_.at(b));
        written[b] = true;
      } else {
        Tensor& s = scratch_[b];
        if (s.empty() || s.shape() != blobs_.at(b).shape()) s = Tensor(blobs_.at(b).shape(), device_);
        dx.push_back(&s);
        accumulate.push_back(b);
      }
    }
    e.layer->Backward(o, ctx, x, y, dy, dx);
    for (const std::string& b : accumulate) o.Add(grads_.at(b), scratch_.at(b), grads_.at(b));
    if (after_layer) after_layer(i);
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
