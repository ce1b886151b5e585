// The ReLU-gradient fusion (Net::Fusions::relu_grad): a convolution or pooling layer whose
// input is the in-place ReLU output of the convolution before writes its dx already passed
// through that ReLU (Ops::ConvLayerBackward / PoolBackward's relu_dx), and the convolution
// before takes that gradient without its own mask pass. The CUDA backend masks in the
// backward-data epilogue (conv/tensor_core.h StoreAccumulators, conv/wgmma.cu StoreTileStaged),
// where a staged wgmma tile also leaves dx's per-channel tile sums, from which the convolution
// before takes its bias gradient (CudaOps::ConvLayerBackward, TileSumsGpu); and in the
// recorded max pool's gather (only windows whose maximum is above 0 pass dy).
//   DxIsTheMaskedGradient: dx (and dw) bit for bit the unfused backward's with the mask
//     applied after, for every tensor-core family and tile (bf16 and TF32, stride 1 and 2);
//     the mask is no trivial one (about half of x is 0).
//   BiasFromTheTileSums: the convolution before, given that dx as its dy without its mask,
//     computes its bias from the sums (counter) within FP32 summation error of the row sums,
//     and its dw bit for bit the unfused one; sums left for one tensor serve no other.
//   PoolDxIsTheMaskedGradient: max (recorded and not) and average pooling, both storages.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// A ReLU's output: uniform in [lo, 1), the negative part set to 0.
Tensor ReluOutput(const Shape& s, uint64_t seed, float lo = -1.0f) {
  Tensor t = RandomCpu(s, seed, lo, 1.0f);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = std::max(t.data()[i], 0.0f);
  return t;
}

// g where mask > 0, else 0 (ReluBackward's rule), on host values.
std::vector<float> Masked(std::vector<float> g, const std::vector<float>& mask) {
  for (size_t i = 0; i < g.size(); ++i)
    if (!(mask[i] > 0.0f)) g[i] = 0.0f;
  return g;
}

// dx of 24 channels (rows beyond m in every row tile), 288 or 800 columns (a partial column
// tile), K = 32 x 9 (a partial K slice); stride 2: backward data in four phases. And 136
// channels: a whole 128-row tile and a partial one, so that every chunk a staged epilogue's
// thread stores (its batches reach rows 112-127 of a 128-row tile) is a masked one.
const ConvLayerCase kCases[] = {
    {8, 24, 6, 6, 32, 3, 1, 1},
    {8, 136, 6, 6, 32, 3, 1, 1},
    {16, 24, 10, 5, 32, 3, 1, 1},
    {8, 24, 8, 8, 16, 3, 2, 1},
};

struct Mode {
  cuda::MathMode math;
  DType storage;
  const char* config;  // COLONNADE_CONV_CONFIG's value
  bool sums;           // a staged wgmma tile of bf16: dx's tile sums are left
};
const Mode kModes[] = {
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_128x128x64_6", true},
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_128x256x64_4", true},
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_64x256x64_5", true},
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_ws_128x128x64_6", true},
    {cuda::MathMode::kBF16, DType::kBF16, "mma", false},
    {cuda::MathMode::kBF16, DType::kFloat32, "wgmma_128x256x64_4", false},  // masked after
    {cuda::MathMode::kTF32, DType::kFloat32, "mma", false},
};

class ReluGradTest : public ConvModeTest {};

std::string ModeName(const Mode& m) {
  return absl::StrFormat("%s %s storage, %s", cuda::MathModeName(m.math), DTypeName(m.storage),
                         m.config);
}

TEST_F(ReluGradTest, DxIsTheMaskedGradient) {
  for (const Mode& m : kModes) {
    if (!Use(m.math, m.config)) continue;
    for (const ConvLayerCase& s : kCases) {
      const std::string what = s.name() + ", " + ModeName(m);
      const ConvParams p = s.params();
      const Shape xs = Shape::CHWN(s.c, s.h, s.w, s.n), ys = Shape::CHWN(s.f, s.oh(), s.ow(), s.n);
      const Tensor x_cpu = ReluOutput(xs, 401);
      const Tensor x = OnGpuAs(x_cpu, m.storage);
      const Tensor w = OnGpu(RandomCpu(Shape{s.f, s.c, s.k, s.k}, 402, -0.3f, 0.3f));
      const Tensor dy = OnGpuAs(RandomCpu(ys, 403), m.storage);
      Tensor dw_ref = Poisoned(w.shape(), Device::kCUDA), dw = Poisoned(w.shape(), Device::kCUDA);
      Tensor dx_ref = PoisonedAs(xs, m.storage), dx = PoisonedAs(xs, m.storage);
      Gpu().ConvLayerBackward(x, w, nullptr, dy, dw_ref, nullptr, &dx_ref, p, false);
      Gpu().ConvLayerBackward(x, w, nullptr, dy, dw, nullptr, &dx, p, true);
      const std::vector<float> want = Masked(dx_ref.ToHost(), x.ToHost()), got = dx.ToHost();
      EXPECT_EQ(got, want) << what;
      EXPECT_BITWISE(dw, dw_ref) << what;
      const int64_t zeros = std::count(got.begin(), got.end(), 0.0f);
      EXPECT_GT(zeros, int64_t(got.size()) / 3) << what << ": the mask left too few zeros";
      EXPECT_LT(zeros, int64_t(got.size())) << what;
    }
  }
}

TEST_F(ReluGradTest, BiasFromTheTileSums) {
  for (const Mode& m : kModes) {
    if (!Use(m.math, m.config)) continue;
    for (const ConvLayerCase& s : kCases) {
      if (kEmulated && &s == &kCases[1]) continue;  // CI time: one stride-1 case there
      const std::string what = s.name() + ", " + ModeName(m);
      const ConvParams p = s.params();
      const Shape xs = Shape::CHWN(s.c, s.h, s.w, s.n), ys = Shape::CHWN(s.f, s.oh(), s.ow(), s.n);
      // The layer before: a 1 x 1 convolution of 8 channels whose ReLU output is x.
      ConvParams p0;
      p0.kernel_h = p0.kernel_w = 1;
      p0.stride = 1;
      p0.pad = 0;
      const Tensor x0 = OnGpuAs(RandomCpu(Shape::CHWN(8, s.h, s.w, s.n), 404), m.storage);
      const Tensor w0 = OnGpu(RandomCpu(Shape{s.c, 8, 1, 1}, 405));
      const Tensor x = OnGpuAs(ReluOutput(xs, 406), m.storage);
      const Tensor w = OnGpu(RandomCpu(Shape{s.f, s.c, s.k, s.k}, 407, -0.3f, 0.3f));
      const Tensor dy = OnGpuAs(RandomCpu(ys, 408), m.storage);
      Tensor dw = Poisoned(w.shape(), Device::kCUDA);
      Tensor dx_plain = PoisonedAs(xs, m.storage), dx = PoisonedAs(xs, m.storage);
      const Shape w0s = w0.shape(), bs{s.c};
      Tensor dw0_ref = Poisoned(w0s, Device::kCUDA), db0_ref = Poisoned(bs, Device::kCUDA);
      Tensor dw0 = Poisoned(w0s, Device::kCUDA), db0 = Poisoned(bs, Device::kCUDA);
      // Unfused: dx unmasked, the layer before masks it by its y (= x) and sums its bias.
      Gpu().ConvLayerBackward(x, w, nullptr, dy, dw, nullptr, &dx_plain, p, false);
      Gpu().ConvLayerBackward(x0, w0, &x, dx_plain, dw0_ref, &db0_ref, nullptr, p0);
      // Fused.
      Gpu().ConvLayerBackward(x, w, nullptr, dy, dw, nullptr, &dx, p, true);
      const int64_t before = Cuda().biases_from_dx_sums();
      Gpu().ConvLayerBackward(x0, w0, nullptr, dx, dw0, &db0, nullptr, p0);
      const bool sums = m.sums && s.stride == 1;
      EXPECT_EQ(Cuda().biases_from_dx_sums(), before + (sums ? 1 : 0)) << what;
      EXPECT_BITWISE(dw0, dw0_ref) << what;
      // Row sums of the masked gradient as stored, in double, against the bias gradient:
      // FP32 tile partials of at most 256 values, added in double (256 u of sum |v|).
      const std::vector<float> g = dx.ToHost(), db = db0.ToHost(), db_ref = db0_ref.ToHost();
      const int64_t inner = int64_t(s.h) * s.w * s.n;
      for (int ch = 0; ch < s.c; ++ch) {
        double sum = 0.0, mag = 0.0;
        for (int64_t i = 0; i < inner; ++i) {
          sum += g[ch * inner + i];
          mag += std::fabs(g[ch * inner + i]);
        }
        const double tol = 256 * std::ldexp(1.0, -24) * mag + 1e-30;
        EXPECT_LE(std::fabs(db[ch] - sum), tol) << what << " channel " << ch;
        EXPECT_LE(std::fabs(db_ref[ch] - sum), tol) << what << " channel " << ch << " (unfused)";
      }
      // Sums left for one tensor serve no other: a convolution with another dy sums its own.
      Gpu().ConvLayerBackward(x, w, nullptr, dy, dw, nullptr, &dx, p, true);
      const int64_t mid = Cuda().biases_from_dx_sums();
      Gpu().ConvLayerBackward(x0, w0, nullptr, dx_plain, dw0, &db0, nullptr, p0);
      EXPECT_EQ(Cuda().biases_from_dx_sums(), mid) << what;
    }
  }
}

TEST_F(ReluGradTest, PoolDxIsTheMaskedGradient) {
  // x mostly 0 (lo), so that some windows are all 0: their dy must not pass.
  struct Case {
    PoolCase k;
    float lo;
  };
  const Case cases[] = {
      {{PoolParams::kMax, 2, 2, 0, 5, 12, 12, 8}, -3.0f},
      {{PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12}, -3.0f},
      {{PoolParams::kMax, 17, 1, 0, 2, 18, 18, 4}, -2000.0f},  // 289 pixels: no record
      {{PoolParams::kAvg, 3, 2, 0, 5, 12, 12, 7}, -1.0f},
  };
  for (const auto& [k, lo] : cases) {
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    const Tensor x_cpu = ReluOutput(xs, 409, lo), dy_cpu = RandomCpu(ys, 410);
    for (DType t : {DType::kFloat32, DType::kBF16}) {
      const std::string what = absl::StrFormat("%s size %d stride %d on %s, %s",
                                               k.kind == PoolParams::kMax ? "max" : "avg", k.size,
                                               k.stride, xs.ToString(), DTypeName(t));
      const Tensor x = OnGpuAs(x_cpu, t), dy = OnGpuAs(dy_cpu, t);
      Tensor y = PoisonedAs(ys, t), rec = PoisonedAs(ys, DType::kBF16);
      const bool record = k.kind == PoolParams::kMax && MaxPoolRecordFits(p);
      Gpu().PoolForward(x, y, p, record ? &rec : nullptr);
      Tensor dx_ref = PoisonedAs(xs, t), dx = PoisonedAs(xs, t);
      Gpu().PoolBackward(x, y, dy, dx_ref, p, record ? &rec : nullptr, false);
      Gpu().PoolBackward(x, y, dy, dx, p, record ? &rec : nullptr, true);
      const std::vector<float> got = dx.ToHost(), want = Masked(dx_ref.ToHost(), x.ToHost());
      EXPECT_EQ(got, want) << what;
      // Not a trivial mask: some routed gradient was dropped.
      EXPECT_NE(dx_ref.ToHost(), got) << what;
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
