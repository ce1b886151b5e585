// FullyConnectedLayer: a CHWN input is the (C*H*W) x N matrix; forward against a naive
// double loop, then the gradient check.
#include <random>

#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

void CheckFcForward(const Shape& xs, int outputs) {
  std::mt19937 rng(11);
  FullyConnectedLayer layer("fc", outputs);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  ASSERT_EQ(out[0], Shape::CHWN(outputs, 1, 1, xs.n()));
  const int64_t inputs = xs.c() * xs.h() * xs.w();
  ASSERT_EQ(layer.weight().value.shape(), (Shape{outputs, inputs}));
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  std::vector<float> w = RandomUniform(outputs * inputs, rng);
  std::vector<float> b = RandomUniform(outputs, rng);
  SetValues(layer.weight().value, w);
  SetValues(layer.bias().value, b);
  Tensor xt = TensorFrom(xs, x);
  std::vector<Tensor> y = RunForward(layer, {&xt}, out);
  std::vector<double> ref = RefFullyConnected(x, inputs, xs.n(), w, outputs, b);
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
}

TEST(FullyConnected, ForwardMatchesNaiveOnFlatInput) {
  CheckFcForward(Shape::CHWN(13, 1, 1, 7), 5);
}
TEST(FullyConnected, ForwardMatchesNaiveOnSpatialInput) {
  CheckFcForward(Shape::CHWN(5, 2, 3, 7), 4);
}
TEST(FullyConnected, ForwardMatchesNaiveBatchOne) { CheckFcForward(Shape::CHWN(3, 3, 3, 1), 6); }

TEST(FullyConnected, Gradients) {
  FullyConnectedLayer layer("fc", 4);
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(5, 2, 3, 7)}));
}

// With an output scale s (ResNet-9's 0.125): y = s W x + b against the naive product, and
// the gradients of W, b and x by finite differences.
TEST(FullyConnected, OutputScaleForwardAndGradients) {
  std::mt19937 rng(12);
  const Shape xs = Shape::CHWN(5, 2, 3, 7);
  const int outputs = 4;
  FullyConnectedLayer layer("fc", outputs);
  layer.set_output_scale(0.125f);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  const int64_t inputs = xs.c() * xs.h() * xs.w();
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  std::vector<float> w = RandomUniform(outputs * inputs, rng);
  std::vector<float> b = RandomUniform(outputs, rng);
  SetValues(layer.weight().value, w);
  SetValues(layer.bias().value, b);
  Tensor xt = TensorFrom(xs, x);
  std::vector<Tensor> y = RunForward(layer, {&xt}, out);
  std::vector<float> scaled_w(w);
  for (float& v : scaled_w) v *= 0.125f;  // exact: a power of two
  std::vector<double> ref = RefFullyConnected(x, inputs, xs.n(), scaled_w, outputs, b);
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
  FullyConnectedLayer grad_layer("fc", 3);
  grad_layer.set_output_scale(0.125f);
  EXPECT_TRUE(CheckLayerGradients(grad_layer, {Shape::CHWN(5, 2, 3, 7)}));
}

TEST(FullyConnected, GradientsBatchOne) {
  FullyConnectedLayer layer("fc", 3);
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(7, 1, 1, 1)}));
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
