// The column split: turns a full model (a Net from BuildModel) into the part one rank of
// a model-parallel group computes, generalising AlexNet's two GPUs to K columns on mp
// ranks (each rank owns K/mp columns).
//
// Every blob is either replicated (each rank holds all its channels: "data", "label",
// the loss) or split (rank r holds the equal channel block r of mp). Each layer states how
// it splits (Layer::channel_split: along its output channels, per channel, by channel
// groups, on inputs split alike, or needing its whole input); by that:
//
//   isolated conv (groups = K)  on its split input: F/mp filters and K/mp groups on the
//                               rank's channel block; no communication.
//   cross conv / fc             keeps all input channels and computes outputs
//                               [r*F/mp, (r+1)*F/mp); a split input is all-gathered in
//                               front (reduce-scatter of its gradient in backward), a
//                               replicated input that earlier layers computed gets its
//                               partial gradients all-reduced, the images need nothing.
//   lrn (across channels)       groups K -> K/mp on the rank's block.
//   relu, pool, rnorm, dropout  follow their input; dropout gets the block's channel
//   batchnorm, global pool      offset so its mask is the full model's; batch-norm
//                               parameters are split by channel.
//   softmax loss, and any layer that cannot run on a channel block: inputs are
//                               all-gathered and the layer runs replicated on every
//                               rank (its parameters replicated, its gradients equal).
//
// A cross layer whose outputs (or an isolated conv whose groups) do not divide by mp runs
// replicated too. The result computes exactly the full model: mp changes placement only.
// With mp = 1 the Net is returned unchanged.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/models.h"
#include "core/net.h"
#include "parallel/communicator.h"
#include "parallel/mesh.h"

namespace colonnade {

struct ModelShard {
  // This rank's part: the full model's layer, blob and parameter names (sharded
  // parameters carry Param::shard_offset / full_rows: Param::full_shape, full_offset),
  // plus communication layers named "<layer>/gather_in", "<layer>/grad_sum",
  // "<layer>/slice_in", "<blob>/gather". Replicated blobs keep their names ("data",
  // "label", "loss", "probs", and kLogitsBlob: a split one is gathered right after the
  // layer that computes it, its block renamed "logits@block"); the trainer reads only
  // those.
  std::unique_ptr<Net> net;
  // Each parameter's InitSpec in the full model (fan-in and fan-out of the full layer),
  // so that InitShardParams reproduces Net::InitParams of the full model exactly.
  std::map<std::string, InitSpec> full_init;
  // One line per layer: how it was placed ("conv3: cross, filters 192/384 from 192,
  // input all-gathered").
  std::vector<std::string> plan;
  int mp = 1;
  int mp_rank = 0;
};

// Splits `full` (not yet built) for rank `mp_rank` of `mp`. `mp_comm` (size mp) is used by
// the inserted communication layers and must outlive the Net; it may be null when
// mp == 1. Errors name the layer that cannot be placed.
absl::StatusOr<ModelShard> SplitNet(std::unique_ptr<Net> full, int mp, int mp_rank,
                                    Communicator* mp_comm);

// BuildModel(model, options) split for the mesh's mp group. Then call
//   shard.net->Build(global_batch / mesh.dp(), device);
//   InitShardParams(shard, seed);
absl::StatusOr<ModelShard> BuildModelShard(const std::string& model, const ModelOptions& options,
                                           const Mesh& mesh, Communicator* mp_comm);

// Writes every parameter of the built shard with the values the full model's
// Net::InitParams(seed) gives its rows; zeroes gradients and momentum.
absl::Status InitShardParams(ModelShard& shard, uint64_t seed);

}  // namespace colonnade
