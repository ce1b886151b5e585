#include "core/zoo_builders.h"

#include "core/layers.h"

namespace colonnade {
namespace zoo {

ConvParams Conv(int kernel, int stride, int pad, int groups) {
  ConvParams p;
  p.kernel_h = p.kernel_w = kernel;
  p.stride = stride;
  p.pad = pad;
  p.groups = groups;
  return p;
}

PoolParams Pool(PoolParams::Kind kind, int size, int stride, int pad) {
  PoolParams p;
  p.kind = kind;
  p.size = size;
  p.stride = stride;
  p.pad = pad;
  return p;
}

std::unique_ptr<Net> NewNet(const std::string& name, const ModelOptions& o) {
  auto net = std::make_unique<Net>(name);
  net->AddInput("data", Shape{o.input_channels, o.input_size, o.input_size});
  net->AddInput("label", Shape{1, 1, 1});
  return net;
}

void AddLoss(Net& net) {
  net.Emplace<SoftmaxLossLayer>({kLogitsBlob, "label"}, {"loss", "probs"}, "loss");
}

}  // namespace zoo
}  // namespace colonnade
