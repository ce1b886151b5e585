// The gradient checker must be able to fail: toy layers with a correct backward pass,
// and with the kinds of mistakes it exists to catch (a slightly wrong factor, a gradient
// sent to a neighbouring element, an element left unwritten, a wrong parameter gradient).
#include <cmath>
#include <cstring>
#include <random>

#include "core/backend.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// y = a * x^3 + x (element-wise), with a learnable scalar parameter a.
class CubeLayer : public Layer {
 public:
  enum Bug { kNone, kFactor, kShifted, kUnwritten, kParam };
  CubeLayer(Bug bug) : Layer("cube"), bug_(bug) { a_.name = "a"; }
  const char* type() const override { return "cube"; }
  absl::StatusOr<std::vector<Shape>> Setup(const std::vector<Shape>& in) override {
    return std::vector<Shape>{in[0]};
  }
  void AllocateParams(Device d) override {
    a_.value = Tensor(Shape{1}, d);
    a_.grad = Tensor(Shape{1}, d);
  }
  void Forward(Ops&, const RunContext&, const std::vector<const Tensor*>& x,
               const std::vector<Tensor*>& y) override {
    const float a = a_.value.data()[0];
    for (int64_t i = 0; i < x[0]->size(); ++i) {
      const float v = x[0]->data()[i];
      y[0]->data()[i] = a * v * v * v + v;
    }
  }
  void Backward(Ops&, const RunContext&, const std::vector<const Tensor*>& x,
                const std::vector<const Tensor*>&, const std::vector<const Tensor*>& dy,
                const std::vector<Tensor*>& dx) override {
    const float a = a_.value.data()[0];
    const int64_t n = x[0]->size();
    double da = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[0]->data()[i], g = dy[0]->data()[i];
      da += g * v * v * v;
      if (bug_ == kUnwritten && i == n / 3) continue;  // stays as the checker's NaN poison
      dx[0]->data()[i] = g * (3 * a * v * v + 1) * (bug_ == kFactor ? 1.03f : 1.0f);
    }
    if (bug_ == kShifted) {  // one element's gradient lands on its neighbour
      dx[0]->data()[n / 2 + 1] = dx[0]->data()[n / 2];
      dx[0]->data()[n / 2] = 0.0f;
    }
    a_.grad.data()[0] = static_cast<float>(bug_ == kParam ? 1.05 * da : da);
  }
  std::vector<Param*> params() override { return {&a_}; }

 private:
  Bug bug_;
  Param a_;
};

const std::vector<Shape> kShape = {Shape::CHWN(3, 4, 5, 7)};  // 420 elements: sampled

TEST(GradientCheck, PassesACorrectLayer) {
  CubeLayer layer(CubeLayer::kNone);
  EXPECT_TRUE(CheckLayerGradients(layer, kShape));
}

TEST(GradientCheck, CatchesAWrongFactor) {
  CubeLayer layer(CubeLayer::kFactor);
  EXPECT_FALSE(CheckLayerGradients(layer, kShape));
}

TEST(GradientCheck, CatchesAGradientSentToTheWrongElement) {
  CubeLayer layer(CubeLayer::kShifted);
  GradientCheckOptions o;
  o.check_all_up_to = 1000;  // the bug is in one element: look at all of them
  EXPECT_FALSE(CheckLayerGradients(layer, kShape, o));
}

TEST(GradientCheck, CatchesAnUnwrittenElement) {
  CubeLayer layer(CubeLayer::kUnwritten);
  GradientCheckOptions o;
  o.check_all_up_to = 1000;
  EXPECT_FALSE(CheckLayerGradients(layer, kShape, o));
}

TEST(GradientCheck, CatchesAWrongParameterGradient) {
  CubeLayer layer(CubeLayer::kParam);
  EXPECT_FALSE(CheckLayerGradients(layer, kShape));
}

TEST(GradientCheck, SamplesAtLeastTwoHundredElementsOfBigTensors) {
  // A loss that counts how often each element is perturbed, through a fake target.
  std::vector<float> v(5000, 0.0f);
  int64_t evaluations = 0;
  std::vector<GradTarget> targets = {{"big", v.data(), 5000, std::vector<float>(5000, 0.0f)}};
  GradientCheckOptions o;
  o.noise_samples = 0;  // count only the central differences
  EXPECT_TRUE(CompareWithFiniteDifferences(
      [&] {
        ++evaluations;
        return 0.0;
      },
      targets, o));
  EXPECT_GE(evaluations, 2 * 200);
  EXPECT_EQ(evaluations, 2 * o.samples);
}

// L = sum v_i^2 plus a rounding-like error that jumps with the last bits of v: the same
// correct gradient is accepted when the noise is small for the step, and refused (with
// the reason) when the step would turn the noise into a machine-dependent result.
double NoisyLoss(const std::vector<float>& v, double noise) {
  double l = 0.0;
  for (float x : v) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const double jitter = ((bits * 2654435761u) >> 16 & 0xff) / 255.0 - 0.5;
    l += static_cast<double>(x) * x + noise * jitter;
  }
  return l;
}

TEST(GradientCheck, RefusesAStepThatTheLossNoiseWouldSwamp) {
  std::mt19937 rng(5);
  std::vector<float> v = RandomUniform(50, rng);
  std::vector<float> grad(v.size());
  for (size_t i = 0; i < v.size(); ++i) grad[i] = 2.0f * v[i];
  std::vector<GradTarget> targets = {{"v", v.data(), 50, grad}};
  GradientCheckOptions o;
  o.step = 1e-2f;
  EXPECT_TRUE(CompareWithFiniteDifferences([&] { return NoisyLoss(v, 1e-7); }, targets, o));
  const ::testing::AssertionResult noisy =
      CompareWithFiniteDifferences([&] { return NoisyLoss(v, 1e-5); }, targets, o);
  EXPECT_FALSE(noisy);
  EXPECT_NE(std::string(noisy.message()).find("use a larger step"), std::string::npos)
      << noisy.message();
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
