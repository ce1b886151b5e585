// Dropout (core/ops/dropout.h): Philox masks keyed by the global element index, reproducible
// and independent of how channels and images are split; the layer's gradients.
#include <cmath>
#include <random>

#include "core/backend.h"
#include "core/layers.h"
#include "core/philox.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// ---- dropout ------------------------------------------------------------------------------

RunContext TrainContext(uint64_t seed, int64_t step) {
  RunContext ctx;
  ctx.phase = Phase::kTrain;
  ctx.seed = seed;
  ctx.step = step;
  return ctx;
}

// Runs a dropout layer over a tensor of ones and returns the output, which is the mask.
std::vector<float> MaskOf(DropoutLayer& layer, const Shape& xs, const RunContext& ctx) {
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  Tensor x = TensorFrom(xs, std::vector<float>(xs.elements(), 1.0f));
  return RunForward(layer, {&x}, out, ctx)[0].ToHost();
}

// The mask written out in the test from the contract in ops.h (DropoutParams) and the
// key derivation in DropoutLayer: a CUDA kernel must produce exactly this.
TEST(Dropout, MaskIsThePhiloxFunctionOfTheGlobalElementIndex) {
  const float p = 0.4f;
  const Shape xs = Shape::CHWN(3, 2, 3, 5);
  const int64_t channel_offset = 7, image_offset = 4, global_batch = 16;
  DropoutLayer layer("drop6", p);
  layer.set_channel_slice(channel_offset);
  RunContext ctx = TrainContext(42, 9);
  ctx.image_offset = image_offset;
  ctx.global_batch = global_batch;
  std::vector<float> mask = MaskOf(layer, xs, ctx);
  const uint64_t key =
      MixKey(MixKey(42, static_cast<uint64_t>(RandomPurpose::kDropout)), StringHash("drop6"));
  const Dims d = DimsOf(xs);
  int64_t dropped = 0;
  for (int64_t c = 0; c < d.c; ++c)
    for (int64_t h = 0; h < d.h; ++h)
      for (int64_t w = 0; w < d.w; ++w)
        for (int64_t n = 0; n < d.n; ++n) {
          const uint64_t index =
              (((c + channel_offset) * d.h + h) * d.w + w) * global_batch + n + image_offset;
          const bool drop = PhiloxUniform(key, 9, index) < p;
          dropped += drop;
          EXPECT_EQ(mask[d.at(c, h, w, n)], drop ? 0.0f : 1.0f / (1.0f - p))
              << "c=" << c << " h=" << h << " w=" << w << " n=" << n;
        }
  EXPECT_GT(dropped, 0);
}

TEST(Dropout, SameStepSameMaskOtherStepOtherMask) {
  const Shape xs = Shape::CHWN(8, 3, 3, 7);
  DropoutLayer a("drop", 0.5f), b("drop", 0.5f);
  std::vector<float> m1 = MaskOf(a, xs, TrainContext(1, 3));
  std::vector<float> m2 = MaskOf(b, xs, TrainContext(1, 3));
  std::vector<float> m3 = MaskOf(a, xs, TrainContext(1, 4));
  std::vector<float> m4 = MaskOf(a, xs, TrainContext(2, 3));
  EXPECT_EQ(m1, m2);
  EXPECT_NE(m1, m3);
  EXPECT_NE(m1, m4);
  DropoutLayer other_name("drop7", 0.5f);
  EXPECT_NE(m1, MaskOf(other_name, xs, TrainContext(1, 3)));
}

// DESIGN.md: the same masks whatever the (dp, mp) split. The full tensor's mask equals
// the masks of its channel halves (channel_offset) and image halves (image_offset with
// the global batch).
TEST(Dropout, MaskIndependentOfChannelAndImageSplit) {
  const int64_t C = 6, H = 2, W = 3, N = 8;
  const Shape full = Shape::CHWN(C, H, W, N);
  DropoutLayer whole("drop", 0.5f);
  std::vector<float> m = MaskOf(whole, full, TrainContext(5, 2));
  const Dims fd = DimsOf(full);
  for (int64_t c0 : {int64_t{0}, C / 2}) {
    for (int64_t n0 : {int64_t{0}, N / 2}) {
      DropoutLayer part("drop", 0.5f);
      part.set_channel_slice(c0);
      RunContext ctx = TrainContext(5, 2);
      ctx.image_offset = n0;
      ctx.global_batch = N;
      const Shape ps = Shape::CHWN(C / 2, H, W, N / 2);
      std::vector<float> pm = MaskOf(part, ps, ctx);
      const Dims pd = DimsOf(ps);
      for (int64_t c = 0; c < pd.c; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t w = 0; w < W; ++w)
            for (int64_t n = 0; n < pd.n; ++n)
              ASSERT_EQ(pm[pd.at(c, h, w, n)], m[fd.at(c + c0, h, w, n + n0)])
                  << "slice c0=" << c0 << " n0=" << n0;
    }
  }
}

TEST(Dropout, KeepFractionAndScale) {
  for (float p : {0.5f, 0.3f}) {
    const Shape xs = Shape::CHWN(64, 8, 8, 32);  // 131072 draws: sd of the fraction ~0.0014
    DropoutLayer layer("drop", p);
    std::vector<float> m = MaskOf(layer, xs, TrainContext(3, 1));
    int64_t kept = 0;
    for (float v : m) {
      ASSERT_TRUE(v == 0.0f || v == 1.0f / (1.0f - p)) << v;
      kept += v != 0.0f;
    }
    EXPECT_NEAR(static_cast<double>(kept) / m.size(), 1.0 - p, 0.01) << "p=" << p;
  }
}

TEST(Dropout, EvalIsIdentity) {
  std::mt19937 rng(3);
  const Shape xs = Shape::CHWN(4, 3, 3, 5);
  std::vector<float> x = RandomUniform(xs.elements(), rng);
  Tensor xt = TensorFrom(xs, x);
  DropoutLayer layer("drop", 0.5f);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  RunContext ctx;
  ctx.phase = Phase::kEval;
  EXPECT_EQ(RunForward(layer, {&xt}, out, ctx)[0].ToHost(), x);
}

// Backward multiplies by the mask of the last forward: dx = dy * y / x elementwise.
TEST(Dropout, BackwardUsesTheForwardMask) {
  std::mt19937 rng(4);
  const Shape xs = Shape::CHWN(5, 3, 3, 7);
  std::vector<float> x = RandomAwayFromZero(xs.elements(), rng, 0.5f, 1.0f);
  std::vector<float> g = RandomUniform(xs.elements(), rng);
  Tensor xt = TensorFrom(xs, x), gt = TensorFrom(xs, g);
  DropoutLayer layer("drop", 0.5f);
  std::vector<Shape> out = SetUpLayer(layer, {xs});
  const RunContext ctx = TrainContext(8, 8);
  std::vector<Tensor> y = RunForward(layer, {&xt}, out, ctx);
  Tensor dx = PoisonedTensor(xs);
  layer.Backward(OpsFor(Device::kCPU), ctx, {&xt}, {&y[0]}, {&gt}, {&dx});
  std::vector<float> yv = y[0].ToHost(), dv = dx.ToHost();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(dv[i], g[i] * (yv[i] / x[i])) << i;
}

TEST(Dropout, Gradients) {
  DropoutLayer layer("drop", 0.5f);
  GradientCheckOptions o;
  o.ctx = TrainContext(6, 1);
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(5, 3, 3, 7)}, o));
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
