// PoolLayer (max and average, cuda-convnet ceil mode with clipped windows) and
// GlobalAvgPoolLayer: output sizes, forward against naive loops, first-maximum routing of
// ties, and gradient checks.
#include <cstring>
#include <ostream>
#include <random>
#include <sstream>

#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

struct PoolCase {
  int c, h, w, n, size, stride, pad;
  int expected_out_h;  // checked against the layer's Setup
};
std::ostream& operator<<(std::ostream& os, const PoolCase& k) {
  return os << "x" << k.c << "x" << k.h << "x" << k.w << "x" << k.n << "_z" << k.size << "_s"
            << k.stride << "_p" << k.pad;
}

PoolParams ParamsOf(const PoolCase& k, PoolParams::Kind kind) {
  PoolParams p;
  p.kind = kind;
  p.size = k.size;
  p.stride = k.stride;
  p.pad = k.pad;
  return p;
}

class PoolTest : public ::testing::TestWithParam<PoolCase> {
 protected:
  void CheckForward(PoolParams::Kind kind) {
    const PoolCase& k = GetParam();
    std::mt19937 rng(5);
    PoolLayer layer("pool", ParamsOf(k, kind));
    const Shape xs = Shape::CHWN(k.c, k.h, k.w, k.n);
    std::vector<Shape> out = SetUpLayer(layer, {xs});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].h(), k.expected_out_h);
    EXPECT_EQ(RefPoolOutSize(k.h, k.size, k.stride, k.pad), k.expected_out_h);
    std::vector<float> x = RandomUniform(xs.elements(), rng);
    Tensor xt = TensorFrom(xs, x);
    std::vector<Tensor> y = RunForward(layer, {&xt}, out);
    Dims yd;
    std::vector<double> ref =
        RefPool(x, DimsOf(xs), kind == PoolParams::kMax, k.size, k.stride, k.pad, &yd);
    ASSERT_EQ(out[0], Shape::CHWN(yd.c, yd.h, yd.w, yd.n));
    EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
  }
};

TEST_P(PoolTest, MaxForwardMatchesNaive) { CheckForward(PoolParams::kMax); }
TEST_P(PoolTest, AvgForwardMatchesNaive) { CheckForward(PoolParams::kAvg); }

// Distinct inputs spaced 0.05 apart (more than twice the finite-difference step), so the
// argmax of a window cannot switch under the perturbation.
TEST_P(PoolTest, MaxGradients) {
  const PoolCase& k = GetParam();
  PoolLayer layer("maxpool", ParamsOf(k, PoolParams::kMax));
  GradientCheckOptions o;
  o.input_values = [](int, int64_t n, std::mt19937& rng) { return RandomDistinct(n, rng, 0.05f); };
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(k.c, k.h, k.w, k.n)}, o));
}

TEST_P(PoolTest, AvgGradients) {
  const PoolCase& k = GetParam();
  PoolLayer layer("avgpool", ParamsOf(k, PoolParams::kAvg));
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(k.c, k.h, k.w, k.n)}));
}

// Ties: inputs drawn from {0, 1} so most windows have several maxima; the gradient must
// go to the first of them in row-major window order (ops.h), exactly.
TEST_P(PoolTest, MaxBackwardRoutesTiesToFirstMaximum) {
  const PoolCase& k = GetParam();
  std::mt19937 rng(17);
  const PoolParams p = ParamsOf(k, PoolParams::kMax);
  const Shape xs = Shape::CHWN(k.c, k.h, k.w, k.n);
  PoolLayer layer("maxpool", p);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  std::vector<float> x(xs.elements());
  std::bernoulli_distribution coin(0.5);
  for (float& v : x) v = coin(rng) ? 1.0f : 0.0f;
  std::vector<float> dy = RandomUniform(out[0].elements(), rng);
  Tensor xt = TensorFrom(xs, x), dyt = TensorFrom(out[0], dy);
  std::vector<Tensor> y = RunForward(layer, {&xt}, out);
  Tensor dx = PoisonedTensor(xs);
  layer.Backward(OpsFor(Device::kCPU), {}, {&xt}, {&y[0]}, {&dyt}, {&dx});
  std::vector<double> ref = RefMaxPoolBackward(x, DimsOf(xs), dy, k.size, k.stride, k.pad);
  EXPECT_LT(RelativeError(dx.ToHost(), ref), kForwardTolerance);
}

// The argmax record (ops.h): the forward writes each window's first maximum's offset, and the
// backward given it routes dy there reading neither x nor y (both NaN here; y real under
// relu_dx, whose mask it is): bitwise the backward that searches x and y. Ties (inputs from
// {-1, 0, 1}) and clipped windows make the first maximum matter; relu_dx masks the pixels not
// above 0.
TEST_P(PoolTest, MaxBackwardByTheRecordIsTheSearch) {
  const PoolCase& k = GetParam();
  std::mt19937 rng(23);
  const PoolParams p = ParamsOf(k, PoolParams::kMax);
  ASSERT_TRUE(MaxPoolRecordFits(p));
  const Shape xs = Shape::CHWN(k.c, k.h, k.w, k.n);
  const Shape ys = Shape::CHWN(k.c, k.expected_out_h,
                               PoolOutSize(k.w, k.size, k.stride, k.pad, p.ceil_mode), k.n);
  std::vector<float> x(xs.elements());
  std::uniform_int_distribution<int> tri(-1, 1);
  for (float& v : x) v = static_cast<float>(tri(rng));
  Ops& ops = OpsFor(Device::kCPU);
  Tensor xt = TensorFrom(xs, x), dyt = TensorFrom(ys, RandomUniform(ys.elements(), rng));
  Tensor y = PoisonedTensor(ys), y_rec = PoisonedTensor(ys);
  Tensor rec(ys, Device::kCPU, DType::kBF16);
  ops.PoolForward(xt, y, p);
  ops.PoolForward(xt, y_rec, p, &rec);
  EXPECT_EQ(y.ToHost(), y_rec.ToHost()) << "the record changed the forward";
  for (const bool relu_dx : {false, true}) {
    SCOPED_TRACE(relu_dx ? "relu_dx" : "plain");
    Tensor searched = PoisonedTensor(xs), routed = PoisonedTensor(xs);
    ops.PoolBackward(xt, y, dyt, searched, p, nullptr, relu_dx);
    const Tensor nan_x = PoisonedTensor(xs), nan_y = PoisonedTensor(ys);
    ops.PoolBackward(nan_x, relu_dx ? y : nan_y, dyt, routed, p, &rec, relu_dx);
    const std::vector<float> a = searched.ToHost(), b = routed.ToHost();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "dx by the record differs from the search's";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PoolTest,
    ::testing::Values(PoolCase{3, 13, 13, 7, 3, 2, 0, 6},   // AlexNet 3x3/2 overlapping, odd size
                      PoolCase{2, 55, 55, 1, 3, 2, 0, 27},  // AlexNet pool1 55 -> 27
                      PoolCase{5, 32, 32, 2, 3, 2, 0, 16},  // cuda-convnet 18pct 32 -> 16
                      PoolCase{3, 7, 7, 7, 2, 2, 0, 4},     // last window clipped to 1 row
                      PoolCase{5, 10, 9, 3, 3, 3, 0, 4},    // non-overlapping, last clipped
                      PoolCase{3, 5, 5, 7, 3, 1, 1, 5},     // pad 1, stride 1
                      PoolCase{2, 7, 7, 3, 4, 2, 2, 5},     // pad 2, even window
                      PoolCase{3, 5, 5, 1, 2, 2, 1,
                               3}),  // a last window in the padding only is dropped
    [](const ::testing::TestParamInfo<PoolCase>& info) {
      std::ostringstream os;
      os << info.param;
      return os.str();
    });

// The clipped windows of average pooling divide by the in-image pixel count: a constant
// image pools to the same constant everywhere, corners included.
TEST(AvgPool, ConstantImageStaysConstantAtBorders) {
  PoolParams p;
  p.kind = PoolParams::kAvg;
  p.size = 3;
  p.stride = 2;
  p.pad = 1;
  PoolLayer layer("avg", p);
  const Shape xs = Shape::CHWN(2, 6, 7, 3);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  Tensor x = TensorFrom(xs, std::vector<float>(xs.elements(), 2.5f));
  std::vector<Tensor> y = RunForward(layer, {&x}, out);
  for (float v : y[0].ToHost()) EXPECT_FLOAT_EQ(v, 2.5f);
}

TEST(GlobalAvgPool, ForwardMatchesNaive) {
  std::mt19937 rng(2);
  for (const Shape& xs :
       {Shape::CHWN(5, 7, 6, 7), Shape::CHWN(3, 1, 1, 1), Shape::CHWN(4, 13, 13, 2)}) {
    GlobalAvgPoolLayer layer("gap");
    std::vector<Shape> out = SetUpLayer(layer, {xs});
    ASSERT_EQ(out[0], Shape::CHWN(xs.c(), 1, 1, xs.n()));
    std::vector<float> x = RandomUniform(xs.elements(), rng);
    Tensor xt = TensorFrom(xs, x);
    std::vector<Tensor> y = RunForward(layer, {&xt}, out);
    EXPECT_LT(RelativeError(y[0].ToHost(), RefGlobalAvgPool(x, DimsOf(xs))), kForwardTolerance)
        << xs.ToString();
  }
}

TEST(GlobalAvgPool, Gradients) {
  GlobalAvgPoolLayer layer("gap");
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(5, 4, 3, 7)}));
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
