// SoftmaxLossLayer: probabilities and per-image cross-entropy against a double
// reference, numerical stability with huge logits, and the gradient
// dlogits = loss_scale * (probs - onehot) checked as the derivative of loss_scale * sum(loss).
#include <cmath>
#include <random>

#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

std::vector<float> RandomLabels(int64_t n, int classes, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(0, classes - 1);
  std::vector<float> l(n);
  for (float& v : l) v = static_cast<float>(u(rng));
  return l;
}

void CheckForward(int classes, int n, float offset, float spread) {
  std::mt19937 rng(41);
  SoftmaxLossLayer layer("loss");
  const Shape ls = Shape::CHWN(classes, 1, 1, n), labs = Shape::CHWN(1, 1, 1, n);
  std::vector<Shape> out = SetUpLayer(layer, {ls, labs});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], labs);
  EXPECT_EQ(out[1], ls);
  std::vector<float> logits = RandomUniform(ls.elements(), rng, offset - spread, offset + spread);
  std::vector<float> labels = RandomLabels(n, classes, rng);
  Tensor lt = TensorFrom(ls, logits), yt = TensorFrom(labs, labels);
  std::vector<Tensor> y = RunForward(layer, {&lt, &yt}, out);
  std::vector<double> probs, loss;
  RefSoftmaxCrossEntropy(logits, classes, n, labels, &probs, &loss);
  EXPECT_LT(RelativeError(y[0].ToHost(), loss), kForwardTolerance);
  EXPECT_LT(RelativeError(y[1].ToHost(), probs), kForwardTolerance);
  for (float v : y[0].ToHost()) EXPECT_TRUE(std::isfinite(v));
}

TEST(SoftmaxLoss, ForwardMatchesNaive) { CheckForward(10, 7, 0.0f, 3.0f); }
TEST(SoftmaxLoss, ForwardMatchesNaiveBatchOne) { CheckForward(5, 1, 0.0f, 3.0f); }
TEST(SoftmaxLoss, StableForHugeLogits) {
  CheckForward(10, 7, 1000.0f, 40.0f);   // exp would overflow without the max shift
  CheckForward(10, 7, -1000.0f, 40.0f);  // ... or underflow to 0/0
}

TEST(SoftmaxLoss, Gradients) {
  SoftmaxLossLayer layer("loss");
  const int classes = 6, n = 7;
  GradientCheckOptions o;
  o.ctx.loss_scale = 0.37f;
  o.skip_inputs = {1};  // labels
  o.input_values = [&](int input, int64_t size, std::mt19937& rng) {
    return input == 0 ? RandomUniform(size, rng, -3.0f, 3.0f) : RandomLabels(size, classes, rng);
  };
  // L = loss_scale * sum of the per-image losses; the probabilities do not enter L.
  o.output_weights = [&](int output, int64_t size, std::mt19937&) {
    return std::vector<float>(size, output == 0 ? o.ctx.loss_scale : 0.0f);
  };
  EXPECT_TRUE(
      CheckLayerGradients(layer, {Shape::CHWN(classes, 1, 1, n), Shape::CHWN(1, 1, 1, n)}, o));
}

TEST(SoftmaxLoss, RejectsSpatialLogits) {
  SoftmaxLossLayer layer("loss");
  EXPECT_FALSE(layer.Setup({Shape::CHWN(10, 2, 2, 4), Shape::CHWN(1, 1, 1, 4)}).ok());
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
