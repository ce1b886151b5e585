// The optimizer's rules that a re-implementation must match (docs/MODELS.md, "Weight
// decay"; optimizer.h): which parameters weight decay applies to, and the warm-up ramp.
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/layers.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

// conv (with bias) -> batch norm -> fc -> loss: one parameter of every kind.
std::unique_ptr<Net> TinyNet() {
  auto net = std::make_unique<Net>("tiny");
  net->AddInput("data", Shape{3, 6, 6});
  net->AddInput("label", Shape{1, 1, 1});
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad = 1;
  net->Emplace<ConvLayer>({"data"}, {"conv"}, "conv", 4, p, true, ColumnInfo{}, 0.5f);
  net->Emplace<BatchNormLayer>({"conv"}, {"bn"}, "bn");
  auto* fc = net->Emplace<FullyConnectedLayer>({"bn"}, {"fc"}, "fc", 5, ColumnInfo{}, 0.25f);
  fc->weight().wd_mult = 3.0f;  // a per-layer multiplier, as cuda-convnet's fc layers have
  net->Emplace<SoftmaxLossLayer>({"fc", "label"}, {"loss", "probs"}, "loss");
  EXPECT_TRUE(net->Build(2, Device::kCPU).ok());
  net->InitParams(7);
  return net;
}

// One SGD step from zero velocity with a known gradient on every learnable parameter;
// each element must be bitwise what the update formula gives with the decay the rule
// assigns (computed in float, as the kernel does).
void ExpectOneStep(DecayOn rule, bool biases_decayed) {
  std::unique_ptr<Net> net = TinyNet();
  const float lr = 0.1f, momentum = 0.9f, wd = 0.01f;
  std::vector<std::vector<float>> before;
  int index = 0;
  for (const NamedParam& p : net->params()) {
    before.push_back(p.param->value.ToHost());
    std::vector<float> g(before.back().size());
    for (size_t i = 0; i < g.size(); ++i) {
      g[i] = 0.01f * static_cast<float>((i + index) % 7) - 0.03f;
    }
    p.param->grad.CopyFromHost(g);
    ++index;
  }
  SgdOptions o;
  o.momentum = momentum;
  o.weight_decay = wd;
  o.decay_on = rule;
  SgdOptimizer(o).Step(*net, lr);
  index = 0;
  int decayed_biases = 0;
  for (const NamedParam& p : net->params()) {
    const std::vector<float>& w0 = before[index];
    const std::vector<float> w1 = p.param->value.ToHost();
    const std::vector<float> g = p.param->grad.ToHost();
    ++index;
    if (!p.param->learnable) continue;
    const bool weight = p.name == "conv/weight" || p.name == "fc/weight";
    EXPECT_EQ(p.param->is_weight, weight) << p.name;
    const float decay = weight ? wd * p.param->wd_mult : biases_decayed ? wd : 0.0f;
    if (!weight && decay != 0.0f) ++decayed_biases;
    for (size_t i = 0; i < w0.size(); ++i) {
      const float v = momentum * 0.0f - lr * (g[i] + decay * w0[i]);
      const float want = w0[i] + v;
      EXPECT_EQ(std::memcmp(&w1[i], &want, sizeof(float)), 0)
          << p.name << "[" << i << "]: " << w1[i] << " vs " << want;
    }
  }
  // conv/bias, bn/gamma, bn/beta, fc/bias.
  EXPECT_EQ(decayed_biases, biases_decayed ? 4 : 0);
}

TEST(WeightDecayRule, DefaultDecaysConvAndFcWeightsOnly) {
  EXPECT_EQ(SgdOptions{}.decay_on, DecayOn::kWeights);
  ExpectOneStep(DecayOn::kWeights, false);
}

TEST(WeightDecayRule, AllDecaysBiasesAndBatchNormToo) { ExpectOneStep(DecayOn::kAll, true); }

TEST(WeightDecayRule, AllMovesABiasWithZeroGradient) {
  // The PyTorch rule made visible: a bias with no gradient still shrinks by lr * wd * b.
  std::unique_ptr<Net> net = TinyNet();
  for (const NamedParam& p : net->params()) p.param->grad.Fill(0.0f);
  Param* bias = nullptr;
  Param* gamma = nullptr;
  for (const NamedParam& p : net->params()) {
    if (p.name == "conv/bias") bias = p.param;
    if (p.name == "bn/gamma") gamma = p.param;
  }
  ASSERT_NE(bias, nullptr);
  ASSERT_NE(gamma, nullptr);
  SgdOptions o;
  o.weight_decay = 0.5f;
  o.decay_on = DecayOn::kWeights;
  SgdOptimizer(o).Step(*net, 0.1f);
  EXPECT_EQ(bias->value.ToHost()[0], 0.5f);   // the initial bias, untouched
  EXPECT_EQ(gamma->value.ToHost()[0], 1.0f);  // the initial gamma, untouched
  o.decay_on = DecayOn::kAll;
  SgdOptimizer(o).Step(*net, 0.1f);
  EXPECT_FLOAT_EQ(bias->value.ToHost()[0], 0.5f * (1.0f - 0.1f * 0.5f));
  EXPECT_FLOAT_EQ(gamma->value.ToHost()[0], 1.0f - 0.1f * 0.5f);
}

TEST(WeightDecayRule, ParsesTheFlagValues) {
  EXPECT_EQ(*ParseDecayOn("weights"), DecayOn::kWeights);
  EXPECT_EQ(*ParseDecayOn("all"), DecayOn::kAll);
  absl::StatusOr<DecayOn> bad = ParseDecayOn("biases");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--weight_decay_on=biases"), std::string::npos);
}

TEST(WeightDecayRule, EveryRecipeStatesItsRule) {
  // Today every recipe decays weights only (docs/MODELS.md); a change must be deliberate.
  for (const ModelInfo& m : ModelZoo()) {
    EXPECT_EQ(m.recipe.weight_decay_on, DecayOn::kWeights) << m.name;
  }
}

TEST(LrScheduleWarmup, FirstStepIsZeroAndTheRampIsKOverN) {
  // 10 steps per epoch, 2 warm-up epochs: n = 20 warm-up steps; step k has lr k / n.
  auto s = LrSchedule::Parse("constant+warmup:2");
  ASSERT_TRUE(s.ok());
  const int per_epoch = 10;
  EXPECT_EQ(s->At(0.1f, 0.0 / per_epoch, 5), 0.0f);
  for (int k = 1; k <= 25; ++k) {
    const double want = 0.1 * std::min(1.0, k / 20.0);
    EXPECT_NEAR(s->At(0.1f, static_cast<double>(k) / per_epoch, 5), want, 1e-8) << k;
  }
}

TEST(LrScheduleParse, RejectsNonFiniteEpochs) {
  for (const char* spec : {"cosine+warmup:nan", "cosine+warmup:inf", "step:nan", "step:inf",
                           "multistep:nan", "multistep:10,nan", "multistep:10,inf"}) {
    EXPECT_FALSE(LrSchedule::Parse(spec).ok()) << spec;
  }
}

}  // namespace
}  // namespace colonnade
