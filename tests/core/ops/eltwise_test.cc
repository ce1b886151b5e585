// The element-wise family (core/ops/eltwise.h) on the CPU: ConcatLayer (channel blocks of
// CHWN), AddLayer (with its fused ReLU), ReluLayer (also in place), and the CpuOps calls no
// single layer covers: Fill, Copy, Axpby, CopyChannelsIn/Out, AddBias / BiasBackward and the
// double-precision Sum, against naive references.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/backend.h"
#include "core/cpu_ops.h"
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

// ---- ReLU ------------------------------------------------------------------------------

TEST(Relu, ForwardMatchesNaive) {
  std::mt19937 rng(1);
  const Shape xs = Shape::CHWN(5, 3, 7, 7);
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  Tensor xt = TensorFrom(xs, x);
  ReluLayer layer("relu");
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  std::vector<Tensor> y = RunForward(layer, {&xt}, out);
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] > 0 ? x[i] : 0.0;
  EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
}

TEST(Relu, InPlaceForwardAndBackward) {
  std::mt19937 rng(2);
  const Shape xs = Shape::CHWN(3, 4, 5, 7);
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  std::vector<float> g = RandomUniform(xs.elements(), rng);
  Tensor t = TensorFrom(xs, x), d = TensorFrom(xs, g);
  ReluLayer layer("relu");
  ASSERT_TRUE(layer.in_place_ok());
  SetUpLayer(layer, {xs});
  Ops& ops = OpsFor(Device::kCPU);
  layer.Forward(ops, {}, {&t}, {&t});
  layer.Backward(ops, {}, {&t}, {&t}, {&d}, {&d});
  std::vector<float> y = t.ToHost(), dx = d.ToHost();
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], x[i] > 0 ? x[i] : 0.0f);
    EXPECT_EQ(dx[i], x[i] > 0 ? g[i] : 0.0f);
  }
}

// Inputs at least 0.05 away from the kink at 0 (the step is 0.01).
TEST(Relu, Gradients) {
  ReluLayer layer("relu");
  GradientCheckOptions o;
  o.input_values = [](int, int64_t n, std::mt19937& rng) {
    return RandomAwayFromZero(n, rng, 0.05f, 1.0f);
  };
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(5, 3, 3, 7)}, o));
}

// ---- CpuOps element-wise and memory calls ----------------------------------------------

TEST(CpuOpsElementwise, AxpbyWithBetaZeroIgnoresOldValues) {
  std::mt19937 rng(2);
  const Shape s{1000};
  std::vector<float> x = RandomUniform(1000, rng);
  Tensor xt = TensorFrom(s, x), y = PoisonedTensor(s);
  Cpu().Axpby(2.0f, xt, 0.0f, y);
  std::vector<float> v = y.ToHost();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(v[i], 2.0f * x[i]);
}

TEST(CpuOpsElementwise, AxpbyAndAddAllowAliasing) {
  std::mt19937 rng(3);
  const Shape s = Shape::CHWN(3, 17, 19, 23);  // big enough to be split over threads
  std::vector<float> x = RandomUniform(s.elements(), rng), y = RandomUniform(s.elements(), rng);
  Tensor xt = TensorFrom(s, x), yt = TensorFrom(s, y);
  Cpu().Axpby(0.5f, xt, 3.0f, yt);
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = 0.5 * x[i] + 3.0 * y[i];
  EXPECT_LT(RelativeError(yt.ToHost(), ref), kForwardTolerance);
  Cpu().Axpby(2.0f, xt, 1.0f, xt);  // x = 3x
  for (size_t i = 0; i < x.size(); ++i) ref[i] = 3.0 * x[i];
  EXPECT_LT(RelativeError(xt.ToHost(), ref), kForwardTolerance);
  Tensor a = TensorFrom(s, x), b = TensorFrom(s, y);
  Cpu().Add(a, b, a);  // the Net accumulates gradients in place like this
  for (size_t i = 0; i < x.size(); ++i) ref[i] = static_cast<double>(x[i]) + y[i];
  EXPECT_LT(RelativeError(a.ToHost(), ref), kForwardTolerance);
}

TEST(CpuOpsElementwise, FillAndCopy) {
  const Shape s = Shape::CHWN(4, 30, 30, 9);
  Tensor a(s), b = PoisonedTensor(s);
  Cpu().Fill(a, -1.5f);
  Cpu().Copy(a, b);
  for (float v : b.ToHost()) ASSERT_EQ(v, -1.5f);
}

TEST(CpuOpsElementwise, CopyChannelsInAndOut) {
  std::mt19937 rng(4);
  const Shape part = Shape::CHWN(2, 3, 4, 5), whole = Shape::CHWN(7, 3, 4, 5);
  std::vector<float> p = RandomUniform(part.elements(), rng);
  Tensor pt = TensorFrom(part, p), wt(whole), back = PoisonedTensor(part);
  Cpu().Fill(wt, 9.0f);
  Cpu().CopyChannelsIn(pt, 3, wt);
  std::vector<float> w = wt.ToHost();
  const Dims wd = DimsOf(whole), pd = DimsOf(part);
  for (int64_t c = 0; c < wd.c; ++c)
    for (int64_t h = 0; h < wd.h; ++h)
      for (int64_t x = 0; x < wd.w; ++x)
        for (int64_t n = 0; n < wd.n; ++n) {
          const float expect = (c >= 3 && c < 5) ? p[pd.at(c - 3, h, x, n)] : 9.0f;
          ASSERT_EQ(w[wd.at(c, h, x, n)], expect);
        }
  Cpu().CopyChannelsOut(wt, 3, back);
  EXPECT_EQ(back.ToHost(), p);
}

TEST(CpuOpsElementwise, BiasAddAndBackward) {
  std::mt19937 rng(5);
  const Shape s = Shape::CHWN(5, 3, 4, 7);
  std::vector<float> y = RandomUniform(s.elements(), rng), b = RandomUniform(5, rng);
  Tensor yt = TensorFrom(s, y), bt = TensorFrom(Shape{5}, b), db = PoisonedTensor(Shape{5});
  Cpu().AddBias(yt, bt);
  Cpu().BiasBackward(TensorFrom(s, y), db);
  const int64_t per = s.elements() / 5;
  std::vector<double> ref(y.size()), dref(5, 0.0);
  for (int64_t i = 0; i < s.elements(); ++i) {
    ref[i] = static_cast<double>(y[i]) + b[i / per];
    dref[i / per] += y[i];
  }
  EXPECT_LT(RelativeError(yt.ToHost(), ref), kForwardTolerance);
  EXPECT_LT(RelativeError(db.ToHost(), dref), kForwardTolerance);
}

// 2^24 + 2^20 ones: a float accumulator would stop at 2^24.
TEST(CpuOpsSum, AccumulatesInDouble) {
  const int64_t n = (int64_t{1} << 24) + (int64_t{1} << 20);
  Tensor t(Shape{n});
  Cpu().Fill(t, 1.0f);
  EXPECT_EQ(Cpu().Sum(t), static_cast<double>(n));
  std::mt19937 rng(6);
  std::vector<float> v = RandomUniform(12345, rng);
  double ref = 0.0;
  for (float x : v) ref += x;
  EXPECT_NEAR(Cpu().Sum(TensorFrom(Shape{12345}, v)), ref, 1e-9);
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
