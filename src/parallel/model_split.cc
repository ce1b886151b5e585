#include "parallel/model_split.h"

#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/layers.h"
#include "core/log.h"
#include "parallel/comm_layers.h"

namespace colonnade {
namespace {

// How a blob of the shard is held.
struct BlobInfo {
  bool split = false;      // rank r holds channel block r of mp
  bool net_input = false;  // fed from outside: needs no gradient
  int64_t channels = 0;    // in the full model
};

// Learning settings a re-created layer inherits (shapes and fans are re-derived).
void CopySettings(const Param& from, Param& to) {
  to.init.kind = from.init.kind;
  to.init.value = from.init.value;
  to.lr_mult = from.lr_mult;
  to.wd_mult = from.wd_mult;
  to.is_weight = from.is_weight;
  to.learnable = from.learnable;
}

void MarkShard(Param& p, int64_t offset, int64_t full_rows) {
  p.shard_offset = offset;
  p.full_rows = full_rows;
}

class Splitter {
 public:
  Splitter(Net& full, int mp, int rank, Communicator* comm)
      : full_(full), mp_(mp), rank_(rank), comm_(comm) {}

  // Derives the full model's shapes (Setup only: nothing is allocated) and records every
  // parameter's full InitSpec.
  absl::Status WalkFullModel(std::map<std::string, InitSpec>* full_init) {
    for (const std::string& name : full_.input_names()) {
      Shape s = full_.input_shape(name);
      shapes_[name] = Shape::CHWN(s[0], s[1], s[2], 1);
    }
    for (LayerEntry& e : full_.layers()) {
      std::vector<Shape> in;
      for (const std::string& b : e.inputs) {
        auto it = shapes_.find(b);
        if (it == shapes_.end()) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "layer %s reads blob '%s' that no earlier layer writes", e.layer->name(), b));
        }
        in.push_back(it->second);
      }
      absl::StatusOr<std::vector<Shape>> out = e.layer->Setup(in);
      if (!out.ok()) return out.status();
      if (out->size() != e.outputs.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "layer %s produces %d outputs but %d blob names were given", e.layer->name(),
            out->size(), e.outputs.size()));
      }
      for (size_t i = 0; i < out->size(); ++i) shapes_[e.outputs[i]] = (*out)[i];
      for (Param* p : e.layer->params()) (*full_init)[e.layer->name() + "/" + p->name] = p->init;
    }
    return absl::OkStatus();
  }

  absl::Status Split(ModelShard& shard) {
    shard.net = std::make_unique<Net>(full_.model_name());
    net_ = shard.net.get();
    net_->set_columns(full_.columns());
    for (const std::string& name : full_.input_names()) {
      net_->AddInput(name, full_.input_shape(name));
      info_[name] = {false, true, full_.input_shape(name)[0]};
    }
    for (LayerEntry& e : full_.layers()) {
      if (auto s = Place(e); !s.ok()) return s;
    }
    shard.plan = std::move(plan_);
    return absl::OkStatus();
  }

 private:
  const std::string& Cur(const std::string& b) const {
    auto it = rename_.find(b);
    return it == rename_.end() ? b : it->second;
  }
  BlobInfo& Info(const std::string& shard_blob) {
    auto it = info_.find(shard_blob);
    CHECK(it != info_.end()) << "no placement for blob " << shard_blob;
    return it->second;
  }

  // The replicated version of `b` for layers that run on every rank alike. The gathered
  // blob may feed several replicated layers: their gradients are all full, so the
  // gather's backward takes the rank's block.
  std::string Replicated(const std::string& b) {
    if (!Info(b).split) return b;
    auto it = gathered_.find(b);
    if (it != gathered_.end()) return it->second;
    // "<b>@full", or "<b>@full2", ... when b was gathered before an in-place write.
    std::string full = b + "@full", layer = b + "/gather";
    for (int n = 2; info_.count(full); ++n) {
      full = absl::StrFormat("%s@full%d", b, n);
      layer = absl::StrFormat("%s/gather%d", b, n);
    }
    net_->Add(std::make_unique<AllGatherChannelsLayer>(layer, comm_, AllGatherChannelsLayer::kSlice),
              {b}, {full});
    info_[full] = {false, false, Info(b).channels};
    gathered_[b] = full;
    return full;
  }

  // The full input of a sharded cross layer `layer`, whose input gradient is partial.
  std::string CrossInput(const std::string& b, const std::string& layer, std::string* how) {
    const BlobInfo in = Info(b);
    if (in.net_input) {
      *how = "input replicated";
      return b;
    }
    const std::string name = layer + "@in";
    if (in.split) {
      net_->Add(std::make_unique<AllGatherChannelsLayer>(layer + "/gather_in", comm_,
                                                         AllGatherChannelsLayer::kReduceScatter),
                {b}, {name});
      *how = "input all-gathered, gradient reduce-scattered";
    } else {
      net_->Add(std::make_unique<GradSumLayer>(layer + "/grad_sum", comm_), {b}, {name});
      *how = "input replicated, gradient all-reduced";
    }
    info_[name] = {false, false, in.channels};
    return name;
  }

  // The rank's channel block of `b` for a column-local layer.
  absl::StatusOr<std::string> SplitInput(const std::string& b, const std::string& layer,
                                         std::string* how) {
    const BlobInfo in = Info(b);
    if (in.split) {
      *how = "column-local";
      return b;
    }
    if (in.channels % mp_ != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "layer %s: its %d input channels do not split over %d model-parallel ranks", layer,
          in.channels, mp_));
    }
    const std::string name = layer + "@in";
    net_->Add(std::make_unique<SliceChannelsLayer>(layer + "/slice_in", comm_), {b}, {name});
    info_[name] = {true, false, in.channels};
    *how = "input sliced from a replicated blob";
    return name;
  }

  // Adds `layer` reading `inputs` (shard names). Outputs keep the full model's names,
  // except an in-place output whose input was substituted: it is renamed and later
  // readers follow the new name.
  void Emit(std::unique_ptr<Layer> layer, const LayerEntry& e, std::vector<std::string> inputs,
            bool split_out) {
    const std::string lname = layer->name();
    std::vector<std::string> outputs;
    for (size_t k = 0; k < e.outputs.size(); ++k) {
      const std::string& o = e.outputs[k];
      std::string name = o;
      if (k < e.inputs.size() && e.inputs[k] == o) {  // in place in the full model
        if (inputs[k] == Cur(o)) {
          name = inputs[k];
        } else {
          name = o + "@" + lname;
        }
      }
      if (name != o) {
        rename_[o] = name;
      } else {
        rename_.erase(o);
      }
      outputs.push_back(name);
      info_[name] = {split_out, false, shapes_.at(o)[0]};
      gathered_.erase(name);  // written (in place): an earlier gathered copy is stale
    }
    net_->Add(std::move(layer), std::move(inputs), std::move(outputs));
  }

  absl::Status Place(LayerEntry& e);

  Net& full_;
  int mp_, rank_;
  Communicator* comm_;
  Net* net_ = nullptr;
  std::map<std::string, Shape> shapes_;  // full model, batch 1
  std::map<std::string, BlobInfo> info_;  // by shard blob name
  std::map<std::string, std::string> rename_;
  std::map<std::string, std::string> gathered_;  // split blob -> its current gathered copy
  std::vector<std::string> plan_;
};

absl::Status Splitter::Place(LayerEntry& e) {
  Layer* layer = e.layer.get();
  const std::string lname = layer->name();
  const std::string type = layer->type();
  std::vector<std::string> in;
  for (const std::string& b : e.inputs) in.push_back(Cur(b));
  auto note = [&](const std::string& what) { plan_.push_back(lname + ": " + what); };
  // Runs the layer unchanged on every rank, on gathered inputs.
  auto replicate = [&](const std::string& why) {
    std::vector<std::string> rin;
    for (const std::string& b : in) rin.push_back(Replicated(b));
    note("replicated (" + why + ")");
    Emit(std::move(e.layer), e, std::move(rin), false);
    return absl::OkStatus();
  };
  // Runs the layer on the rank's block of a split input (or on the whole replicated one).
  auto follow = [&]() {
    bool split = !in.empty() && Info(in[0]).split;
    note(split ? "column-local" : "replicated");
    Emit(std::move(e.layer), e, in, split);
    return absl::OkStatus();
  };

  if (mp_ == 1) return follow();

  if (type == "conv") {
    auto* c = dynamic_cast<ConvLayer*>(layer);
    CHECK(c != nullptr) << lname << " has type conv but is not a ConvLayer";
    const ConvParams p = c->conv_params();
    const int F = c->filters();
    const ColumnInfo ci = c->column_info();
    const bool bias = c->params().size() == 2;
    const float bias_init = bias ? c->bias().init.value : 0.0f;
    std::string how, input;
    ConvParams lp = p;
    ColumnInfo lci = ci;
    if (ci.role == ColumnInfo::kIsolated && p.groups > 1 && p.groups % mp_ == 0) {
      absl::StatusOr<std::string> s = SplitInput(in[0], lname, &how);
      if (!s.ok()) return s.status();
      input = *s;
      lp.groups = p.groups / mp_;
      note(absl::StrFormat("isolated, filters %d/%d in %d/%d groups, %s", F / mp_, F, lp.groups,
                           p.groups, how));
    } else if (ci.role != ColumnInfo::kNone && p.groups == 1 && F % mp_ == 0) {
      input = CrossInput(in[0], lname, &how);
      note(absl::StrFormat("cross, filters %d/%d, %s", F / mp_, F, how));
    } else {
      return replicate(ci.role == ColumnInfo::kNone
                           ? std::string("no column information")
                           : absl::StrFormat("%d filters in %d groups do not split over %d ranks",
                                             F, p.groups, mp_));
    }
    if (ci.columns % mp_ == 0) lci.columns = ci.columns / mp_;
    auto shard = std::make_unique<ConvLayer>(lname, F / mp_, lp, bias, lci, bias_init);
    CopySettings(c->weight(), shard->weight());
    MarkShard(shard->weight(), static_cast<int64_t>(rank_) * (F / mp_), F);
    if (bias) {
      CopySettings(c->bias(), shard->bias());
      MarkShard(shard->bias(), static_cast<int64_t>(rank_) * (F / mp_), F);
    }
    Emit(std::move(shard), e, {input}, true);
    return absl::OkStatus();
  }

  if (type == "fc") {
    auto* f = dynamic_cast<FullyConnectedLayer*>(layer);
    CHECK(f != nullptr) << lname << " has type fc but is not a FullyConnectedLayer";
    const int F = f->outputs();
    const ColumnInfo ci = f->column_info();
    if (ci.role == ColumnInfo::kNone) return replicate("no column information");
    if (F % mp_ != 0) {
      return replicate(absl::StrFormat("%d outputs do not split over %d ranks", F, mp_));
    }
    std::string how;
    std::string input = CrossInput(in[0], lname, &how);
    note(absl::StrFormat("cross, outputs %d/%d, %s", F / mp_, F, how));
    ColumnInfo lci = ci;
    if (ci.columns % mp_ == 0) lci.columns = ci.columns / mp_;
    auto shard = std::make_unique<FullyConnectedLayer>(lname, F / mp_, lci, f->bias().init.value);
    CopySettings(f->weight(), shard->weight());
    CopySettings(f->bias(), shard->bias());
    MarkShard(shard->weight(), static_cast<int64_t>(rank_) * (F / mp_), F);
    MarkShard(shard->bias(), static_cast<int64_t>(rank_) * (F / mp_), F);
    Emit(std::move(shard), e, {input}, true);
    return absl::OkStatus();
  }

  if (type == "relu" || type == "maxpool" || type == "avgpool" || type == "rnorm" ||
      type == "global_avgpool") {
    return follow();
  }

  if (type == "dropout") {
    auto* d = dynamic_cast<DropoutLayer*>(layer);
    CHECK(d != nullptr) << lname << " has type dropout but is not a DropoutLayer";
    const BlobInfo& b = Info(in[0]);
    if (b.split) d->set_channel_slice(static_cast<int64_t>(rank_) * (b.channels / mp_));
    return follow();
  }

  if (type == "lrn") {
    auto* l = dynamic_cast<LrnCrossLayer*>(layer);
    CHECK(l != nullptr) << lname << " has type lrn but is not an LrnCrossLayer";
    if (!Info(in[0]).split) return follow();
    const int g = l->lrn_params().groups;
    if (g % mp_ != 0) {
      return replicate(absl::StrFormat(
          "its windows cross the column blocks: %d group(s) do not split over %d ranks", g, mp_));
    }
    l->set_groups(g / mp_);
    plan_.push_back(absl::StrFormat("%s: column-local, %d/%d groups", lname, g / mp_, g));
    Emit(std::move(e.layer), e, in, true);
    return absl::OkStatus();
  }

  if (type == "batchnorm") {
    const BlobInfo& b = Info(in[0]);
    if (b.split) {
      const int64_t block = b.channels / mp_;
      for (Param* p : layer->params()) MarkShard(*p, rank_ * block, b.channels);
    }
    return follow();
  }

  if (type == "add") {
    bool all_split = true;
    for (const std::string& b : in) all_split = all_split && Info(b).split;
    if (all_split) return follow();
    return replicate("inputs not all split alike");
  }

  if (type == "softmax_loss") return replicate("the loss on gathered logits");
  return replicate("layer type '" + type + "' has no column rule");
}

}  // namespace

absl::StatusOr<ModelShard> SplitNet(std::unique_ptr<Net> full, int mp, int mp_rank,
                                    Communicator* mp_comm) {
  if (!full) return absl::InvalidArgumentError("SplitNet: no net");
  if (mp < 1 || mp_rank < 0 || mp_rank >= mp) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SplitNet: rank %d of %d is not a model-parallel position", mp_rank, mp));
  }
  if (mp > 1 && (mp_comm == nullptr || mp_comm->size() != mp || mp_comm->rank() != mp_rank)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SplitNet: the model-parallel communicator must have %d ranks with this one at %d", mp,
        mp_rank));
  }
  ModelShard shard;
  shard.mp = mp;
  shard.mp_rank = mp_rank;
  Splitter splitter(*full, mp, mp_rank, mp_comm);
  if (auto s = splitter.WalkFullModel(&shard.full_init); !s.ok()) return s;
  if (auto s = splitter.Split(shard); !s.ok()) return s;
  return shard;
}

absl::StatusOr<ModelShard> BuildModelShard(const std::string& model, const ModelOptions& options,
                                           const Mesh& mesh, Communicator* mp_comm) {
  absl::StatusOr<std::unique_ptr<Net>> full = BuildModel(model, options);
  if (!full.ok()) return full.status();
  if ((*full)->columns() % mesh.mp() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model %s has %d column(s), not divisible by --mp=%d: each model-parallel rank must own "
        "whole columns",
        model, (*full)->columns(), mesh.mp()));
  }
  return SplitNet(std::move(*full), mesh.mp(), mesh.mp_rank(), mp_comm);
}

absl::Status InitShardParams(ModelShard& shard, uint64_t seed) {
  if (!shard.net) return absl::FailedPreconditionError("InitShardParams: no net");
  for (const NamedParam& np : shard.net->params()) {
    Param& p = *np.param;
    if (p.value.empty()) {
      return absl::FailedPreconditionError(
          "InitShardParams: parameter " + np.name + " is not allocated; call Net::Build first");
    }
    auto it = shard.full_init.find(np.name);
    if (it == shard.full_init.end()) {
      return absl::InternalError("InitShardParams: no full-model init for " + np.name);
    }
    const int64_t rows = p.value.shape().rank() > 0 ? p.value.shape()[0] : 1;
    const int64_t row_elems = rows > 0 ? p.value.size() / rows : 0;
    const int64_t first = p.full_rows > 0 ? p.shard_offset * row_elems : 0;
    std::vector<float> v(p.value.size());
    InitParamValues(seed, np.name, it->second, first, static_cast<int64_t>(v.size()), v.data());
    p.value.CopyFromHost(v);
    p.grad.Fill(0.0f);
    p.velocity.Fill(0.0f);
  }
  return absl::OkStatus();
}

}  // namespace colonnade
