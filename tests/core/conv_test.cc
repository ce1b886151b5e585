// ConvLayer / CpuOps convolution: forward against a naive double loop on awkward shapes
// (batch 1 and 7, odd channel counts, groups, strides 1/2/4, padding 0/1/2, 1x1 and
// non-square kernels), the chunked im2col path forced with a tiny scratch budget, and the
// gradient check of input, weight and bias.
#include <ostream>
#include <random>
#include <sstream>

#include "core/cpu_ops.h"
#include "core/layers.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

struct ConvCase {
  int c, h, w, n, filters, kh, kw, stride, pad, groups;
};
std::ostream& operator<<(std::ostream& os, const ConvCase& k) {
  return os << "x" << k.c << "x" << k.h << "x" << k.w << "x" << k.n << "_f" << k.filters << "_k"
            << k.kh << "x" << k.kw << "_s" << k.stride << "_p" << k.pad << "_g" << k.groups;
}

ConvParams ParamsOf(const ConvCase& k) {
  ConvParams p;
  p.kernel_h = k.kh;
  p.kernel_w = k.kw;
  p.stride = k.stride;
  p.pad = k.pad;
  p.groups = k.groups;
  return p;
}

// Restores the default scratch budget when a test that shrinks it ends.
class ScratchBudget {
 public:
  explicit ScratchBudget(size_t bytes) : saved_(CpuConvScratchBytes()) {
    SetCpuConvScratchBytes(bytes);
  }
  ~ScratchBudget() { SetCpuConvScratchBytes(saved_); }

 private:
  size_t saved_;
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {
 protected:
  // Runs the layer forward on fresh random data and compares with RefConv.
  void CheckForward() {
    const ConvCase& k = GetParam();
    std::mt19937 rng(7);
    ConvLayer layer("conv", k.filters, ParamsOf(k));
    const Shape xs = Shape::CHWN(k.c, k.h, k.w, k.n);
    std::vector<Shape> out = SetUpLayer(layer, {xs});
    ASSERT_EQ(out.size(), 1u);
    std::vector<float> x = RandomUniform(xs.elements(), rng);
    std::vector<float> w = RandomUniform(layer.weight().value.size(), rng);
    std::vector<float> b = RandomUniform(k.filters, rng);
    SetValues(layer.weight().value, w);
    SetValues(layer.bias().value, b);
    Tensor xt = TensorFrom(xs, x);
    std::vector<Tensor> y = RunForward(layer, {&xt}, out);
    Dims yd;
    std::vector<double> ref =
        RefConv(x, DimsOf(xs), w, k.filters, k.kh, k.kw, k.stride, k.pad, k.groups, &b, &yd);
    ASSERT_EQ(out[0], Shape::CHWN(yd.c, yd.h, yd.w, yd.n));
    EXPECT_LT(RelativeError(y[0].ToHost(), ref), kForwardTolerance);
  }
};

TEST_P(ConvTest, ForwardMatchesNaive) { CheckForward(); }

TEST_P(ConvTest, ForwardMatchesNaiveInTinyChunks) {
  ScratchBudget budget(256);  // a few output pixels per chunk, often a partial row
  CheckForward();
}

TEST_P(ConvTest, Gradients) {
  ConvLayer layer("conv", GetParam().filters, ParamsOf(GetParam()));
  const ConvCase& k = GetParam();
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(k.c, k.h, k.w, k.n)}));
}

// The chunked backward paths (col2im per chunk, filter gradient accumulated over chunks)
// against the finite differences too.
TEST_P(ConvTest, GradientsInTinyChunks) {
  ScratchBudget budget(512);
  ConvLayer layer("conv", GetParam().filters, ParamsOf(GetParam()));
  const ConvCase& k = GetParam();
  GradientCheckOptions o;
  o.seed = 99;
  EXPECT_TRUE(CheckLayerGradients(layer, {Shape::CHWN(k.c, k.h, k.w, k.n)}, o));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Values(ConvCase{3, 9, 9, 7, 4, 3, 3, 1, 1, 1},      // 3x3 same, batch 7
                      ConvCase{5, 11, 10, 1, 6, 5, 5, 2, 2, 1},    // 5x5/2 pad 2, batch 1
                      ConvCase{6, 9, 9, 7, 4, 3, 3, 1, 0, 2},      // groups 2, no padding
                      ConvCase{3, 19, 19, 2, 4, 11, 11, 4, 2, 1},  // AlexNet conv1-like 11x11/4
                      ConvCase{4, 7, 7, 3, 6, 1, 1, 1, 0, 2},    // pointwise (no im2col), groups 2
                      ConvCase{5, 8, 8, 7, 3, 1, 1, 2, 0, 1},    // 1x1 stride 2
                      ConvCase{6, 6, 5, 7, 4, 3, 2, 1, 1, 2},    // non-square kernel, groups 2
                      ConvCase{3, 5, 5, 1, 2, 5, 5, 1, 2, 1},    // kernel = image, pad 2
                      ConvCase{5, 10, 10, 2, 3, 3, 3, 4, 1, 1},  // stride 4 > kernel: gaps
                      ConvCase{4, 7, 9, 5, 4, 3, 3, 2, 2, 2}),   // pad 2 stride 2 groups 2
    [](const ::testing::TestParamInfo<ConvCase>& info) {
      std::ostringstream os;
      os << info.param;
      return os.str();
    });

// Chunking must not change the result beyond float reassociation in the filter gradient.
TEST(ConvChunking, BackwardMatchesUnchunked) {
  std::mt19937 rng(3);
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride = 2;
  p.pad = 1;
  p.groups = 2;
  const Shape xs = Shape::CHWN(6, 11, 9, 5);
  const Shape ws{8, 3, 3, 3};
  const Shape ys = Shape::CHWN(8, ConvOutSize(11, 3, 2, 1), ConvOutSize(9, 3, 2, 1), 5);
  Tensor x = RandomTensor(xs, rng), w = RandomTensor(ws, rng), dy = RandomTensor(ys, rng);
  Ops& ops = OpsFor(Device::kCPU);
  Tensor dx1 = PoisonedTensor(xs), dw1 = PoisonedTensor(ws);
  ops.ConvBackwardData(dy, w, dx1, p);
  ops.ConvBackwardFilter(x, dy, dw1, p);
  Tensor dx2 = PoisonedTensor(xs), dw2 = PoisonedTensor(ws);
  {
    ScratchBudget budget(300);
    ops.ConvBackwardData(dy, w, dx2, p);
    ops.ConvBackwardFilter(x, dy, dw2, p);
  }
  EXPECT_LT(RelativeError(dx2.ToHost(), ToDouble(dx1.ToHost())), 1e-6);
  EXPECT_LT(RelativeError(dw2.ToHost(), ToDouble(dw1.ToHost())), 1e-6);
}

TEST(ConvLayerSetup, RejectsBadGroupsAndTooSmallInput) {
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.groups = 2;
  ConvLayer odd("conv", 4, p);
  EXPECT_FALSE(odd.Setup({Shape::CHWN(3, 8, 8, 1)}).ok());
  p.groups = 1;
  ConvLayer small("conv", 4, p);
  EXPECT_FALSE(small.Setup({Shape::CHWN(3, 2, 2, 1)}).ok());
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
