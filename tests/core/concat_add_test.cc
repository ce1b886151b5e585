// ConcatLayer (channel blocks of CHWN) and AddLayer.
#include <algorithm>
#include <random>

#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

TEST(Concat, ForwardPlacesChannelBlocks) {
  std::mt19937 rng(1);
  const std::vector<Shape> in = {Shape::CHWN(2, 3, 4, 7), Shape::CHWN(3, 3, 4, 7),
                                 Shape::CHWN(1, 3, 4, 7)};
  ConcatLayer layer("concat");
  std::vector<Shape> out = SetUpLayer(layer, in);
  ASSERT_EQ(out[0], Shape::CHWN(6, 3, 4, 7));
  std::vector<std::vector<float>> x;
  std::vector<Tensor> xt;
  for (const Shape& s : in) {
    x.push_back(RandomUniform(s.elements(), rng));
    xt.push_back(TensorFrom(s, x.back()));
  }
  std::vector<Tensor> y = RunForward(layer, {&xt[0], &xt[1], &xt[2]}, out);
  const Dims od = DimsOf(out[0]);
  std::vector<double> ref(od.size());
  int64_t c0 = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const Dims d = DimsOf(in[k]);
    for (int64_t c = 0; c < d.c; ++c)
      for (int64_t h = 0; h < d.h; ++h)
        for (int64_t w = 0; w < d.w; ++w)
          for (int64_t n = 0; n < d.n; ++n) ref[od.at(c0 + c, h, w, n)] = x[k][d.at(c, h, w, n)];
    c0 += d.c;
  }
  EXPECT_EQ(RelativeError(y[0].ToHost(), ref), 0.0);
}

TEST(Concat, RejectsMismatchedSpatialSize) {
  ConcatLayer layer("concat");
  EXPECT_FALSE(layer.Setup({Shape::CHWN(2, 3, 4, 7), Shape::CHWN(2, 3, 5, 7)}).ok());
}

TEST(Concat, Gradients) {
  ConcatLayer layer("concat");
  EXPECT_TRUE(CheckLayerGradients(
      layer, {Shape::CHWN(2, 3, 3, 5), Shape::CHWN(3, 3, 3, 5), Shape::CHWN(1, 3, 3, 5)}));
}

TEST(Add, ForwardMatchesNaive) {
  std::mt19937 rng(2);
  const Shape s = Shape::CHWN(5, 3, 2, 7);
  std::vector<float> a = RandomUniform(s.elements(), rng), b = RandomUniform(s.elements(), rng);
  Tensor at = TensorFrom(s, a), bt = TensorFrom(s, b);
  AddLayer layer("add");
  std::vector<Shape> out = SetUpLayer(layer, {s, s});
  std::vector<Tensor> y = RunForward(layer, {&at, &bt}, out);
  std::vector<double> ref(a.size());
  for (size_t i = 0; i < a.size(); ++i) ref[i] = static_cast<double>(a[i]) + b[i];
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
}

TEST(Add, RejectsDifferentShapes) {
  AddLayer layer("add");
  EXPECT_FALSE(layer.Setup({Shape::CHWN(2, 3, 4, 7), Shape::CHWN(3, 3, 4, 7)}).ok());
}

TEST(Add, Gradients) {
  AddLayer layer("add");
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(3, 2, 3, 7), Shape::CHWN(3, 2, 3, 7)}));
}

// A sum fused with the ReLU after it (Net::Fusions::add_relu) writes max(a + b, 0) and gives
// both inputs dy through the ReLU's mask, also when the plan lets the first input's gradient
// share dy's buffer (masked in place; the other input masks the masked dy alike).
TEST(Add, FusedReluMasksBothInputsEvenInPlace) {
  std::mt19937 rng(3);
  const Shape s = Shape::CHWN(4, 3, 2, 5);
  std::vector<float> a = RandomUniform(s.elements(), rng), b = RandomUniform(s.elements(), rng),
                     g = RandomUniform(s.elements(), rng);
  Tensor at = TensorFrom(s, a), bt = TensorFrom(s, b);
  AddLayer layer("add");
  layer.set_fused_relu(true);
  std::vector<Shape> out = SetUpLayer(layer, {s, s});
  std::vector<Tensor> y = RunForward(layer, {&at, &bt}, out);
  const std::vector<float> yv = y[0].ToHost();
  int zeros = 0;
  for (size_t i = 0; i < yv.size(); ++i) {
    ASSERT_EQ(yv[i], std::max(a[i] + b[i], 0.0f)) << i;
    zeros += yv[i] == 0.0f;
  }
  ASSERT_GT(zeros, 0);
  Tensor dy = TensorFrom(s, g), other(s, Device::kCPU);
  Ops& ops = OpsFor(Device::kCPU);
  layer.Backward(ops, RunContext(), {&at, &bt}, {&y[0]}, {&dy}, {&dy, &other});
  const std::vector<float> d0 = dy.ToHost(), d1 = other.ToHost();
  for (size_t i = 0; i < g.size(); ++i) {
    const float want = yv[i] > 0.0f ? g[i] : 0.0f;
    EXPECT_EQ(d0[i], want) << i;
    EXPECT_EQ(d1[i], want) << i;
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
