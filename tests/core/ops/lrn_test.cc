// Response normalisation: across channels (AlexNet's LRN, with groups and both alpha
// conventions) and within a map (cuda-convnet's rnorm). Forward output and denominator
// against naive loops, then gradient checks with constants large enough that the
// non-linear (window) term of the gradient is of the same order as the linear one.
#include <ostream>
#include <random>
#include <sstream>

#include "core/backend.h"
#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

struct LrnCase {
  int c, groups, size;
  float alpha, beta, k;
  bool alpha_over_size;
  float input_scale;  // forward test: scales inputs so alpha * sum x^2 is not negligible
};
std::ostream& operator<<(std::ostream& os, const LrnCase& l) {
  return os << "c" << l.c << "_g" << l.groups << "_n" << l.size
            << (l.alpha_over_size ? "_alphaOverSize" : "_alpha") << "_b"
            << static_cast<int>(l.beta * 100);
}

LrnCrossParams ParamsOf(const LrnCase& l) {
  LrnCrossParams p;
  p.size = l.size;
  p.alpha = l.alpha;
  p.beta = l.beta;
  p.k = l.k;
  p.alpha_over_size = l.alpha_over_size;
  p.groups = l.groups;
  return p;
}

class LrnCrossTest : public ::testing::TestWithParam<LrnCase> {};

TEST_P(LrnCrossTest, ForwardAndDenominatorMatchNaive) {
  const LrnCase& l = GetParam();
  std::mt19937 rng(21);
  const Shape xs = Shape::CHWN(l.c, 5, 4, 7);
  std::vector<float> x = RandomUniform(xs.elements(), rng, -l.input_scale, l.input_scale);
  Tensor xt = TensorFrom(xs, x);
  // Through the layer for y ...
  LrnCrossLayer layer("lrn", ParamsOf(l));
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  std::vector<Tensor> y = RunForward(layer, {&xt}, out);
  std::vector<double> denom_ref;
  std::vector<double> ref = RefLrnCross(x, DimsOf(xs), l.size, l.alpha, l.beta, l.k,
                                        l.alpha_over_size, l.groups, &denom_ref);
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
  // ... and through Ops for the saved denominator, which backward reuses.
  Tensor y2 = PoisonedTensor(xs), denom = PoisonedTensor(xs);
  OpsFor(Device::kCPU).LrnCrossForward(xt, y2, denom, ParamsOf(l));
  EXPECT_LT(RelativeError(denom.ToHost(), denom_ref), kForwardTolerance);
  // The normalisation must actually do something at this input scale.
  double min_denom = 1e30, max_denom = 0;
  for (double d : denom_ref) min_denom = std::min(min_denom, d), max_denom = std::max(max_denom, d);
  EXPECT_GT(max_denom, 1.2 * l.k);
}

TEST_P(LrnCrossTest, Gradients) {
  LrnCase l = GetParam();
  // alpha' * sum x^2 ~ 1 for x in [-1, 1]: the window term of the gradient matters.
  l.alpha = l.alpha_over_size ? 3.0f * l.size : 3.0f;
  LrnCrossLayer layer("lrn", ParamsOf(l));
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(l.c, 3, 4, 7)}));
}

INSTANTIATE_TEST_SUITE_P(
    Params, LrnCrossTest,
    ::testing::Values(
        LrnCase{5, 1, 5, 1e-4f, 0.75f, 2.0f, false, 60.0f},   // AlexNet constants
        LrnCase{10, 2, 5, 1e-4f, 0.75f, 2.0f, false, 60.0f},  // AlexNet, two columns
        LrnCase{7, 1, 5, 1e-3f, 0.75f, 1.0f, true, 30.0f},    // cuda-convnet/PyTorch alpha/size
        LrnCase{6, 2, 3, 1e-3f, 0.75f, 1.0f, true, 30.0f},    // alpha/size, two groups of 3
        LrnCase{9, 1, 3, 2e-3f, 0.6f, 1.5f, false, 20.0f},    // beta != 0.75 (generic power)
        LrnCase{14, 2, 7, 1e-3f, 0.75f, 1.0f, true, 30.0f}),  // window wider than half a group
    [](const ::testing::TestParamInfo<LrnCase>& info) {
      std::ostringstream os;
      os << info.param;
      return os.str();
    });

// The window is centred on its channel, so an even size is refused by the layer.
TEST(LrnCross, EvenSizeIsRefused) {
  LrnCrossParams p;
  p.size = 4;
  LrnCrossLayer layer("lrn", p);
  absl::StatusOr<std::vector<Shape>> out = layer.Setup({Shape::CHWN(8, 3, 3, 2)});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("odd"), std::string::npos) << out.status();
}

// Two groups must be independent: changing group 0's inputs leaves group 1's outputs.
TEST(LrnCross, GroupsDoNotInteract) {
  std::mt19937 rng(4);
  LrnCrossParams p;
  p.groups = 2;
  p.alpha = 1.0f;
  const Shape xs = Shape::CHWN(6, 2, 2, 3);
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  Tensor a = TensorFrom(xs, x);
  for (int64_t i = 0; i < 3 * 2 * 2 * 3; ++i) x[i] *= 3.0f;  // channels 0-2 only
  Tensor b = TensorFrom(xs, x);
  Ops& ops = OpsFor(Device::kCPU);
  Tensor ya(xs), yb(xs), da(xs), db(xs);
  ops.LrnCrossForward(a, ya, da, p);
  ops.LrnCrossForward(b, yb, db, p);
  std::vector<float> va = ya.ToHost(), vb = yb.ToHost();
  const int64_t half = xs.elements() / 2;
  for (int64_t i = half; i < xs.elements(); ++i) EXPECT_EQ(va[i], vb[i]) << i;
}

// ---- within a map (rnorm) ----------------------------------------------------------------
struct RnormCase {
  int size;
  float alpha, beta, k;
  float input_scale;
};
std::ostream& operator<<(std::ostream& os, const RnormCase& r) {
  return os << "n" << r.size << "_b" << static_cast<int>(r.beta * 100);
}
LrnWithinParams ParamsOf(const RnormCase& r) {
  LrnWithinParams p;
  p.size = r.size;
  p.alpha = r.alpha;
  p.beta = r.beta;
  p.k = r.k;
  return p;
}

class RnormTest : public ::testing::TestWithParam<RnormCase> {};

TEST_P(RnormTest, ForwardAndDenominatorMatchNaive) {
  const RnormCase& r = GetParam();
  std::mt19937 rng(8);
  for (const Shape& xs : {Shape::CHWN(3, 7, 6, 7), Shape::CHWN(5, 8, 9, 1)}) {
    std::vector<float> x = RandomUniform(xs.elements(), rng, -r.input_scale, r.input_scale);
    Tensor xt = TensorFrom(xs, x);
    LrnWithinLayer layer("rnorm", ParamsOf(r));
    std::vector<Shape> out = SetUpLayer(layer, {xs});
    std::vector<Tensor> y = RunForward(layer, {&xt}, out);
    std::vector<double> denom_ref;
    std::vector<double> ref = RefLrnWithin(x, DimsOf(xs), r.size, r.alpha, r.beta, r.k, &denom_ref);
    EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance) << xs.ToString();
    Tensor y2 = PoisonedTensor(xs), denom = PoisonedTensor(xs);
    OpsFor(Device::kCPU).LrnWithinForward(xt, y2, denom, ParamsOf(r));
    EXPECT_LT(RelativeError(denom.ToHost(), denom_ref), kForwardTolerance) << xs.ToString();
    double max_denom = 0;
    for (double d : denom_ref) max_denom = std::max(max_denom, d);
    EXPECT_GT(max_denom, 1.2 * r.k);
  }
}

TEST_P(RnormTest, Gradients) {
  RnormCase r = GetParam();
  r.alpha = 3.0f * r.size * r.size / 4.0f;  // alpha/size^2 * sum x^2 ~ 1 for x in [-1, 1]
  LrnWithinLayer layer("rnorm", ParamsOf(r));
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(3, 6, 5, 7)}));
}

INSTANTIATE_TEST_SUITE_P(
    Params, RnormTest,
    ::testing::Values(RnormCase{3, 5e-5f, 0.75f, 1.0f, 100.0f},  // cuda-convnet 18pct constants
                      RnormCase{5, 1e-3f, 0.75f, 2.0f, 60.0f},
                      RnormCase{4, 1e-3f, 0.5f, 1.0f, 30.0f}),  // even window [y-2, y+2)
    [](const ::testing::TestParamInfo<RnormCase>& info) {
      std::ostringstream os;
      os << info.param;
      return os.str();
    });

}  // namespace
}  // namespace testing
}  // namespace colonnade
