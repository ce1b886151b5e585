// BatchNormLayer: training forward (batch statistics over H, W, N; biased variance to
// normalise, unbiased for the running update), inference forward (running statistics),
// and the gradient check of input, gamma and beta in training mode.
#include <cstring>
#include <random>

#include "core/backend.h"
#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// BatchNormLayer::params() order: gamma, beta, running_mean, running_var.
struct BnParams {
  Param *gamma, *beta, *mean, *var;
};
BnParams Params(BatchNormLayer& l) {
  std::vector<Param*> p = l.params();
  return {p[0], p[1], p[2], p[3]};
}

TEST(BatchNorm, ParamsAreNamedAndRunningStatsNotLearnable) {
  BatchNormLayer layer("bn");
  SetUpLayer(layer, {Shape::CHWN(3, 2, 2, 2)});
  BnParams p = Params(layer);
  EXPECT_EQ(p.gamma->name, "gamma");
  EXPECT_EQ(p.beta->name, "beta");
  EXPECT_EQ(p.mean->name, "running_mean");
  EXPECT_EQ(p.var->name, "running_var");
  EXPECT_TRUE(p.gamma->learnable && p.beta->learnable);
  EXPECT_FALSE(p.mean->learnable || p.var->learnable);
}

void CheckTrainForward(const Shape& xs) {
  std::mt19937 rng(31);
  BatchNormParams bp;
  bp.eps = 1e-3f;
  bp.momentum = 0.2f;
  BatchNormLayer layer("bn", bp);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  BnParams p = Params(layer);
  const int64_t C = xs.c();
  std::vector<float> gamma = RandomUniform(C, rng, 0.5f, 2.0f), beta = RandomUniform(C, rng);
  std::vector<float> rm0 = RandomUniform(C, rng), rv0 = RandomUniform(C, rng, 0.5f, 2.0f);
  SetValues(p.gamma->value, gamma);
  SetValues(p.beta->value, beta);
  SetValues(p.mean->value, rm0);
  SetValues(p.var->value, rv0);
  // Per-channel offsets and scales so the statistics differ between channels.
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  const int64_t per_channel = xs.elements() / C;
  for (int64_t i = 0; i < xs.elements(); ++i)
    x[i] = x[i] * (1 + i / per_channel) + 3.0f * (i / per_channel);
  Tensor xt = TensorFrom(xs, x);
  RunContext ctx;
  ctx.phase = Phase::kTrain;
  std::vector<Tensor> y = RunForward(layer, {&xt}, out, ctx);
  std::vector<double> mean, var, unbiased;
  std::vector<double> ref =
      RefBatchNormTrain(x, DimsOf(xs), gamma, beta, bp.eps, &mean, &var, &unbiased);
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance) << xs.ToString();
  std::vector<double> rm(C), rv(C);
  for (int64_t c = 0; c < C; ++c) {
    rm[c] = (1 - bp.momentum) * rm0[c] + bp.momentum * mean[c];
    rv[c] = (1 - bp.momentum) * rv0[c] + bp.momentum * unbiased[c];
  }
  EXPECT_LT(RelativeError(p.mean->value.ToHost(), rm), kForwardTolerance);
  EXPECT_LT(RelativeError(p.var->value.ToHost(), rv), kForwardTolerance);
}

TEST(BatchNorm, TrainForwardMatchesNaive) { CheckTrainForward(Shape::CHWN(5, 3, 4, 7)); }
TEST(BatchNorm, TrainForwardMatchesNaiveBatchOne) { CheckTrainForward(Shape::CHWN(3, 5, 5, 1)); }
TEST(BatchNorm, TrainForwardMatchesNaiveFlat) { CheckTrainForward(Shape::CHWN(6, 1, 1, 7)); }

TEST(BatchNorm, InferForwardUsesRunningStatistics) {
  std::mt19937 rng(32);
  const Shape xs = Shape::CHWN(5, 3, 2, 7);
  BatchNormParams bp;
  BatchNormLayer layer("bn", bp);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  BnParams p = Params(layer);
  std::vector<float> gamma = RandomUniform(5, rng), beta = RandomUniform(5, rng);
  std::vector<float> rm = RandomUniform(5, rng), rv = RandomUniform(5, rng, 0.1f, 3.0f);
  SetValues(p.gamma->value, gamma);
  SetValues(p.beta->value, beta);
  SetValues(p.mean->value, rm);
  SetValues(p.var->value, rv);
  std::vector<float> x = RandomUniform(xs.elements(), rng, -2.0f, 2.0f);
  Tensor xt = TensorFrom(xs, x);
  RunContext ctx;
  ctx.phase = Phase::kEval;
  std::vector<Tensor> y = RunForward(layer, {&xt}, out, ctx);
  EXPECT_LT(
      RelativeError(y[0].ToHost(), RefBatchNormInfer(x, DimsOf(xs), gamma, beta, rm, rv, bp.eps)),
      kForwardTolerance);
  // Inference leaves the running statistics alone.
  EXPECT_EQ(p.mean->value.ToHost(), rm);
  EXPECT_EQ(p.var->value.ToHost(), rv);
}

// Recompute (the memory plan's recomputation, docs/MEMORY.md) writes the training
// forward's y again bitwise from x and the saved mean and scale, also where the float
// rounding of gamma * invstd matters: large per-channel means, gammas far from 1.
TEST(BatchNorm, RecomputeIsBitwiseTheTrainingForward) {
  std::mt19937 rng(33);
  const Shape xs = Shape::CHWN(7, 3, 5, 9);
  BatchNormLayer layer("bn");
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  BnParams p = Params(layer);
  SetValues(p.gamma->value, RandomUniform(7, rng, -3.0f, 3.0f));
  SetValues(p.beta->value, RandomUniform(7, rng, -1.0f, 1.0f));
  std::vector<float> x = RandomUniform(xs.elements(), rng, -1.0f, 1.0f);
  const int64_t per_channel = xs.elements() / 7;
  for (int64_t i = 0; i < xs.elements(); ++i) x[i] = x[i] * 0.37f + 113.0f * (i / per_channel);
  Tensor xt = TensorFrom(xs, x);
  RunContext ctx;
  ctx.phase = Phase::kTrain;
  const std::vector<float> y = RunForward(layer, {&xt}, out, ctx)[0].ToHost();
  Tensor again(xs, Device::kCPU);
  layer.Recompute(OpsFor(Device::kCPU), {&xt}, {&again});
  const std::vector<float> z = again.ToHost();
  ASSERT_EQ(z.size(), y.size());
  EXPECT_EQ(std::memcmp(z.data(), y.data(), y.size() * sizeof(float)), 0);
  EXPECT_TRUE(layer.can_recompute());
}

TEST(BatchNorm, Gradients) {
  BatchNormLayer layer("bn");
  GradientCheckOptions o;
  o.ctx.phase = Phase::kTrain;
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(3, 4, 3, 7)}, o));
}

TEST(BatchNorm, GradientsBatchOne) {
  BatchNormLayer layer("bn");
  GradientCheckOptions o;
  o.ctx.phase = Phase::kTrain;
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(2, 3, 3, 1)}, o));
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
