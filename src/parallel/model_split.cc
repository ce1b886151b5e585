#include "parallel/model_split.h"

#include <set>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/status_macros.h"
#include "parallel/comm_layers.h"

namespace colonnade {
namespace {

// How a blob of the shard is held.
struct BlobInfo {
  bool split = false;      // rank r holds channel block r of mp
  bool net_input = false;  // fed from outside: needs no gradient
  int64_t channels = 0;    // in the full model
};

class Splitter {
 public:
  Splitter(Net& full, int mp, int rank, Communicator* comm)
      : full_(full), mp_(mp), rank_(rank), comm_(comm) {}

  // Derives the full model's shapes (Net's shape inference for one image: nothing is
  // allocated) and records every parameter's full InitSpec.
  absl::Status WalkFullModel(std::map<std::string, InitSpec>* full_init) {
    ASSIGN_OR_RETURN(shapes_, full_.InferShapes(1));
    for (LayerEntry& e : full_.layers()) {
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
    for (LayerEntry& e : full_.layers()) RETURN_IF_ERROR(Place(e));
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
    net_->Add(
        std::make_unique<AllGatherChannelsLayer>(layer, comm_, AllGatherChannelsLayer::kSlice), {b},
        {full});
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
  // readers follow the new name. A split kLogitsBlob is renamed too, and gathered at once
  // into the replicated blob of that name, which the trainer reads on every rank.
  void Emit(std::unique_ptr<Layer> layer, const LayerEntry& e, std::vector<std::string> inputs,
            bool split_out) {
    const std::string lname = layer->name();
    std::vector<std::string> outputs;
    std::vector<std::string> gather_logits;  // the split block of kLogitsBlob, if any
    for (size_t k = 0; k < e.outputs.size(); ++k) {
      const std::string& o = e.outputs[k];
      std::string name = o;
      if (k < e.inputs.size() && e.inputs[k] == o) {  // in place in the full model
        if (inputs[k] == Cur(o)) {
          name = inputs[k];
        } else {
          name = o + "@" + lname;
        }
      } else if (o == kLogitsBlob && split_out) {
        name = o + "@block";
        gather_logits.push_back(name);
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
    for (const std::string& block : gather_logits) {
      net_->Add(std::make_unique<AllGatherChannelsLayer>(std::string(kLogitsBlob) + "/gather",
                                                         comm_, AllGatherChannelsLayer::kSlice),
                {block}, {kLogitsBlob});
      info_[kLogitsBlob] = {false, false, Info(block).channels};
      gathered_[block] = kLogitsBlob;
    }
  }

  absl::Status Place(LayerEntry& e);
  absl::Status PlaceOutputChannels(LayerEntry& e, const std::vector<std::string>& in);
  // Runs the layer unchanged on every rank, on gathered inputs.
  absl::Status Replicate(LayerEntry& e, const std::vector<std::string>& in, const std::string& why);
  // Runs the layer on the rank's block of a split input (or on the whole replicated one).
  absl::Status Follow(LayerEntry& e, const std::vector<std::string>& in);
  void Note(const std::string& layer, const std::string& what) {
    plan_.push_back(layer + ": " + what);
  }

  Net& full_;
  int mp_, rank_;
  Communicator* comm_;
  Net* net_ = nullptr;
  std::map<std::string, Shape> shapes_;   // full model, batch 1
  std::map<std::string, BlobInfo> info_;  // by shard blob name
  std::map<std::string, std::string> rename_;
  std::map<std::string, std::string> gathered_;  // split blob -> its current gathered copy
  std::vector<std::string> plan_;
};

absl::Status Splitter::Replicate(LayerEntry& e, const std::vector<std::string>& in,
                                 const std::string& why) {
  std::vector<std::string> rin;
  for (const std::string& b : in) rin.push_back(Replicated(b));
  Note(e.layer->name(), "replicated (" + why + ")");
  Emit(std::move(e.layer), e, std::move(rin), false);
  return absl::OkStatus();
}

absl::Status Splitter::Follow(LayerEntry& e, const std::vector<std::string>& in) {
  const bool split = !in.empty() && Info(in[0]).split;
  Note(e.layer->name(), split ? "column-local" : "replicated");
  Emit(std::move(e.layer), e, in, split);
  return absl::OkStatus();
}

// A layer that computes output channels (conv, fc): isolated (grouped by column, on the
// rank's input block), cross (all input channels, the rank's outputs) or replicated.
absl::Status Splitter::PlaceOutputChannels(LayerEntry& e, const std::vector<std::string>& in) {
  const std::string lname = e.layer->name();
  const ChannelSplit split = e.layer->channel_split();
  const ColumnInfo ci = e.layer->column_info();
  const int64_t f = split.outputs;
  const int g = split.groups;
  const char* noun = split.output_noun;
  std::string how, input;
  if (ci.role == ColumnInfo::kIsolated && g > 1 && g % mp_ == 0) {
    ASSIGN_OR_RETURN(input, SplitInput(in[0], lname, &how));
    Note(lname, absl::StrFormat("isolated, %s %d/%d in %d/%d groups, %s", noun, f / mp_, f, g / mp_,
                                g, how));
  } else if (ci.role != ColumnInfo::kNone && g == 1 && f % mp_ == 0) {
    input = CrossInput(in[0], lname, &how);
    Note(lname, absl::StrFormat("cross, %s %d/%d, %s", noun, f / mp_, f, how));
  } else if (ci.role == ColumnInfo::kNone) {
    return Replicate(e, in, "no column information");
  } else if (g > 1) {
    return Replicate(
        e, in, absl::StrFormat("%d %s in %d groups do not split over %d ranks", f, noun, g, mp_));
  } else {
    return Replicate(e, in, absl::StrFormat("%d %s do not split over %d ranks", f, noun, mp_));
  }
  std::unique_ptr<Layer> block = e.layer->MakeOutputBlock(rank_, mp_);
  if (!block) {
    return absl::InternalError(
        absl::StrFormat("layer %s (%s) splits along its outputs but makes no output block", lname,
                        e.layer->type()));
  }
  Emit(std::move(block), e, {input}, true);
  return absl::OkStatus();
}

// Asks the layer how it splits (ChannelSplit) and places it: no type names here.
absl::Status Splitter::Place(LayerEntry& e) {
  std::vector<std::string> in;
  for (const std::string& b : e.inputs) in.push_back(Cur(b));
  if (mp_ == 1) return Follow(e, in);
  const ChannelSplit split = e.layer->channel_split();
  const bool split_in = !in.empty() && Info(in[0]).split;
  // The rank's block of the first input's channels, for SetChannelBlock.
  auto set_block = [&] {
    const int64_t channels = Info(in[0]).channels, block = channels / mp_;
    e.layer->SetChannelBlock(rank_ * block, block, channels);
  };
  switch (split.kind) {
    case ChannelSplit::kOutputChannels:
      return PlaceOutputChannels(e, in);
    case ChannelSplit::kPerChannel:
      if (split_in) set_block();
      return Follow(e, in);
    case ChannelSplit::kChannelGroups: {
      if (!split_in) return Follow(e, in);
      const int g = split.groups;
      if (g % mp_ != 0) {
        return Replicate(e, in,
                         absl::StrFormat("its windows cross the column blocks: %d "
                                         "group(s) do not split over %d ranks",
                                         g, mp_));
      }
      set_block();
      Note(e.layer->name(), absl::StrFormat("column-local, %d/%d groups", g / mp_, g));
      Emit(std::move(e.layer), e, in, true);
      return absl::OkStatus();
    }
    case ChannelSplit::kSameBlockInputs: {
      bool all_split = true;
      for (const std::string& b : in) all_split = all_split && Info(b).split;
      if (all_split) return Follow(e, in);
      return Replicate(e, in, "inputs not all split alike");
    }
    case ChannelSplit::kWholeInput:
      break;
  }
  return Replicate(e, in,
                   split.why_whole != nullptr
                       ? std::string(split.why_whole)
                       : "layer type '" + std::string(e.layer->type()) + "' has no column rule");
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
  RETURN_IF_ERROR(splitter.WalkFullModel(&shard.full_init));
  RETURN_IF_ERROR(splitter.Split(shard));
  return shard;
}

absl::StatusOr<ModelShard> BuildModelShard(const std::string& model, const ModelOptions& options,
                                           const Mesh& mesh, Communicator* mp_comm) {
  ASSIGN_OR_RETURN(std::unique_ptr<Net> full, BuildModel(model, options));
  if (full->columns() % mesh.mp() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model %s has %d column(s), not divisible by --mp=%d: each model-parallel rank must own "
        "whole columns",
        model, full->columns(), mesh.mp()));
  }
  return SplitNet(std::move(full), mesh.mp(), mesh.mp_rank(), mp_comm);
}

absl::Status InitShardParams(ModelShard& shard, uint64_t seed) {
  if (!shard.net) return absl::FailedPreconditionError("InitShardParams: no net");
  for (const NamedParam& np : shard.net->params()) {
    Param& p = *np.param;
    if (p.value.empty()) {
      return absl::FailedPreconditionError("InitShardParams: parameter " + np.name +
                                           " is not allocated; call Net::Build first");
    }
    auto it = shard.full_init.find(np.name);
    if (it == shard.full_init.end()) {
      return absl::InternalError("InitShardParams: no full-model init for " + np.name);
    }
    std::vector<float> v(p.value.size());
    InitParamValues(seed, np.name, it->second, p.full_offset(), static_cast<int64_t>(v.size()),
                    v.data());
    p.value.CopyFromHost(v);
    p.grad.Fill(0.0f);
    p.velocity.Fill(0.0f);
  }
  return absl::OkStatus();
}

}  // namespace colonnade
