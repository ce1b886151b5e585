// Net: a small DAG with a blob read by three layers (gradients summed), a concat, two
// adds and an in-place ReLU, checked end to end with the finite-difference checker
// through Net::Forward / Net::Backward; and the parameter names.
#include <cmath>
#include <random>

#include "core/backend.h"
#include "core/layers.h"
#include "core/net.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

ConvParams Conv(int k, int pad) {
  ConvParams p;
  p.kernel_h = p.kernel_w = k;
  p.pad = pad;
  return p;
}

//   data -> conv_a -> relu_a (in place) = a
//   a -> conv_b = b;  a -> conv_c = c;  [a, b] -> concat = cat
//   [b, c] -> add_bc = s;  cat -> conv_d = d;  [s, d] -> add_sd = sum
//   sum -> fc -> logits;  [logits, label] -> loss -> (loss, probs)
std::unique_ptr<Net> BuildDag() {
  auto net = std::make_unique<Net>("dag");
  net->AddInput("data", Shape{3, 4, 4});
  net->AddInput("label", Shape{1, 1, 1});
  net->Emplace<ConvLayer>({"data"}, {"a"}, "conv_a", 4, Conv(3, 1));
  net->Emplace<ReluLayer>({"a"}, {"a"}, "relu_a");
  net->Emplace<ConvLayer>({"a"}, {"b"}, "conv_b", 2, Conv(1, 0));
  net->Emplace<ConvLayer>({"a"}, {"c"}, "conv_c", 2, Conv(3, 1));
  net->Emplace<ConcatLayer>({"a", "b"}, {"cat"}, "concat");
  net->Emplace<AddLayer>({"b", "c"}, {"s"}, "add_bc");
  net->Emplace<ConvLayer>({"cat"}, {"d"}, "conv_d", 2, Conv(1, 0));
  net->Emplace<AddLayer>({"s", "d"}, {"sum"}, "add_sd");
  net->Emplace<FullyConnectedLayer>({"sum"}, {"logits"}, "fc", 5);
  net->Emplace<SoftmaxLossLayer>({"logits", "label"}, {"loss", "probs"}, "loss");
  return net;
}

TEST(Net, ParameterNamesInLayerOrder) {
  std::unique_ptr<Net> net = BuildDag();
  ASSERT_TRUE(net->Build(2, Device::kCPU).ok());
  std::vector<std::string> names;
  for (const NamedParam& p : net->params()) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"conv_a/weight", "conv_a/bias", "conv_b/weight",
                                      "conv_b/bias", "conv_c/weight", "conv_c/bias",
                                      "conv_d/weight", "conv_d/bias", "fc/weight", "fc/bias"}));
  // 4*3*9+4 + 2*4+2 + 2*4*9+2 + 2*6+2 + 5*(2*16)+5
  EXPECT_EQ(net->num_learnable(), 112 + 10 + 74 + 14 + 165);
  EXPECT_EQ(net->blob("cat").shape(), Shape::CHWN(6, 4, 4, 2));
  EXPECT_EQ(net->blob("logits").shape(), Shape::CHWN(5, 1, 1, 2));
}

TEST(Net, RejectsUnknownBlobAndBadInPlace) {
  Net unknown("bad");
  unknown.AddInput("data", Shape{3, 4, 4});
  unknown.Emplace<ReluLayer>({"nope"}, {"r"}, "relu");
  EXPECT_FALSE(unknown.Build(1, Device::kCPU).ok());
  Net in_place("bad");
  in_place.AddInput("data", Shape{3, 4, 4});
  in_place.Emplace<ConvLayer>({"data"}, {"a"}, "conv", 2, Conv(1, 0));
  in_place.Emplace<ConvLayer>({"a"}, {"a"}, "conv2", 2, Conv(1, 0));  // conv cannot run in place
  EXPECT_FALSE(in_place.Build(1, Device::kCPU).ok());
}

// Gradient of L = loss_scale * sum(loss) with respect to every parameter, through the
// whole DAG. The in-place ReLU's kink is kept out of reach: the data are chosen so that
// every pre-activation of conv_a is further from 0 than a perturbation can move it
// (|data| <= 1, so a step h moves a pre-activation by at most h).
TEST(Net, GradientsThroughTheDag) {
  const int64_t batch = 3;
  // The step keeps the loss's float rounding noise (measured by the checker: about 6e-6
  // here) far below the tolerance: at 2e-3 the noise alone was 1.5x abs_tol and the
  // result depended on the OpenBLAS kernel. A perturbation of a conv_a weight or bias
  // moves a pre-activation by at most step * max(1, |data|) = step, so a margin of
  // 1.5 steps keeps the ReLU's kink out of reach.
  const float step = 2e-2f, margin = 1.5f * step;
  std::unique_ptr<Net> net;
  bool found = false;
  for (uint32_t seed = 1; seed <= 200 && !found; ++seed) {
    net = BuildDag();
    ASSERT_TRUE(net->Build(batch, Device::kCPU).ok());
    std::mt19937 rng(seed);
    for (const NamedParam& p : net->params())
      p.param->value.CopyFromHost(RandomUniform(p.param->value.size(), rng, -0.7f, 0.7f));
    Tensor& data = net->blob("data");
    data.CopyFromHost(RandomUniform(data.size(), rng));
    std::vector<float> labels(batch);
    for (int64_t n = 0; n < batch; ++n) labels[n] = static_cast<float>((seed + 2 * n) % 5);
    net->blob("label").CopyFromHost(labels);
    // Pre-activations of conv_a, computed directly.
    auto* conv_a = static_cast<ConvLayer*>(net->layers()[0].layer.get());
    Tensor pre(Shape::CHWN(4, 4, 4, batch));
    Ops& ops = OpsFor(Device::kCPU);
    ops.ConvForward(data, conv_a->weight().value, pre, conv_a->conv_params());
    ops.AddBias(pre, conv_a->bias().value);
    float closest = INFINITY;
    int negatives = 0;
    for (float v : pre.ToHost()) closest = std::min(closest, std::fabs(v)), negatives += v < 0;
    found = closest > margin && negatives > 0;  // the ReLU must also zero something
  }
  ASSERT_TRUE(found) << "no seed kept conv_a's pre-activations away from 0";
  GradientCheckOptions o;
  o.step = step;
  o.ctx.phase = Phase::kTrain;
  o.ctx.loss_scale = 1.0f;
  EXPECT_TRUE(CheckNetGradients(*net, "loss", o));
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
