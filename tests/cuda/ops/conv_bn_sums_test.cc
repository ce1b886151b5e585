// The convolution + batch-norm statistics fusion (Net::Fusions::conv_bn): the wgmma forward's
// staged epilogue leaves each column tile's per-channel sum and sum of squares of y as stored
// (TcConvArgs::stats, conv/wgmma.cu StoreTileStaged), and the next training batch norm of that
// y takes its statistics from them (CudaOps::BatchNormForwardTrain, BatchNormTileStatsKernel)
// instead of two passes over y.
//   TileSumsAreTheStoredOutputs: every tile's sums against sums taken here from y as stored,
//     for each wgmma configuration (two column-tile widths), with and without the fused ReLU.
//   BatchNormFromSumsAsFromPasses: y, the saved and running statistics of the fused pair
//     against the same batch norm computing its own (two-pass) statistics, within the
//     precision the sums' arithmetic gives (docs/PRECISION.md); the fused path ran (counter);
//     a batch norm of another tensor does not take the sums.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <optional>
#include <vector>

#include "cuda/conv/catalogue.h"
#include "absl/strings/str_format.h"
#include "cuda/conv/conv.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

const ConvLayerCase kSumsCases[] = {
    {16, 16, 6, 6, 24, 3, 1, 1},  // j = 576: four and a half 128-column tiles
    {32, 64, 7, 7, 80, 1, 1, 0},  // the 1 x 1 shape of the short-K GEMMs, rows beyond m
};

class ConvBnSumsTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!cuda::TcWgmmaAvailable()) GTEST_SKIP() << "built without sm_90a or not a 9.0 device";
    math_ = Cuda().conv_math();
    Cuda().set_conv_math(cuda::MathMode::kBF16);
    config_.emplace("wgmma");
  }
  void TearDown() override {
    if (config_) Cuda().set_conv_math(math_);
    config_.reset();
  }
  cuda::MathMode math_ = cuda::MathMode::kFP32;
  std::optional<cuda::ScopedConvConfig> config_;
};

TEST_F(ConvBnSumsTest, TileSumsAreTheStoredOutputs) {
  for (const ConvLayerCase& s : kSumsCases) {
    for (const char* config : {"wgmma_128x128x64_6", "wgmma_128x256x64_4", "wgmma_ws_128x256x64_4",
                               "wgmma_tma_128x256x64_4", "wgmma_tma_persistent_128x128x64_4"}) {
      // The TMA tiles run plain GEMMs only (1 x 1, stride 1, no padding); the persistent one
      // indexes the sums by the tile it took, not by its block.
      const bool tma = absl::string_view(config).find("tma") != absl::string_view::npos;
      if (tma && !(s.k == 1 && s.stride == 1 && s.pad == 0)) continue;
      // y stored as float too: 128 x 128 sums the chunks as they leave, 128 x 256 (whose
      // partials do not fit beside its float tile) each row of the staged tile.
      for (const DType yt : {DType::kBF16, DType::kFloat32}) {
        for (const bool relu : {false, true}) {
          if (yt == DType::kFloat32 &&
              (relu || absl::string_view(config).find("ws") != absl::string_view::npos))
            continue;
          config_->Set(config);
          const ConvParams p = s.params();
          const int oh = s.oh(), ow = s.ow();
          const Tensor x =
              OnGpuAs(RandomCpu(Shape::CHWN(s.c, s.h, s.w, s.n), 301, -1.0f, 2.0f), DType::kBF16);
          const Tensor w = OnGpu(RandomCpu(Shape{s.f, s.c, s.k, s.k}, 302, -0.2f, 0.2f));
          const Tensor b = OnGpu(RandomCpu(Shape{s.f}, 303));
          Tensor y = PoisonedAs(Shape::CHWN(s.f, oh, ow, s.n), yt);
          cuda::TcConvArgs a;
          a.dims = cuda::ConvDims{s.n, s.c, s.h, s.w, s.f, oh, ow};
          a.conv = p;
          a.math = cuda::MathMode::kBF16;
          a.x = cuda::TcInput{x.raw(), StorageType::kBF16};
          a.w = w.data();
          a.bias = b.data();
          a.relu = relu;
          a.y = cuda::TcOutput{y.raw(), Storage(yt)};
          const int64_t cap = cuda::StatsCapacity(a.dims);
          Tensor stats = Poisoned(Shape{cap}, Device::kCUDA);
          a.stats = stats.data();
          const cuda::ConvLaunchInfo info = cuda::ConvForwardTc(Ctx(), a);
          const std::string what =
              absl::StrFormat("n%d c%d %dx%d f%d k%d, %s%s, y %s", s.n, s.c, s.h, s.w, s.f, s.k,
                              config, relu ? ", relu" : "", DTypeName(yt));
          ASSERT_TRUE(info.wgmma) << what;
          const int64_t j = int64_t(oh) * ow * s.n;
          ASSERT_EQ(info.stats_tiles, (j + info.bn - 1) / info.bn) << what;
          ASSERT_LE(2 * int64_t(s.f) * info.stats_tiles, cap) << what;
          const std::vector<float> yv = y.ToHost(), sv = stats.ToHost();
          double worst = 0.0;
          for (int t = 0; t < info.stats_tiles; ++t) {
            for (int ch = 0; ch < s.f; ++ch) {
              double sum = 0.0, sq = 0.0, mag = 0.0;
              for (int64_t col = int64_t(t) * info.bn;
                   col < std::min<int64_t>(j, (t + 1) * info.bn); ++col) {
                const double v = yv[ch * j + col];
                sum += v;
                sq += v * v;
                mag += std::fabs(v);
              }
              const float* got = &sv[(int64_t(t) * s.f + ch) * 2];
              // FP32 sums of at most 256 values in order: within 256 u of the sum of |v|.
              const double tol = 256 * std::ldexp(1.0, -24);
              worst = std::max(worst, std::fabs(got[0] - sum) / std::max(mag, 1e-30));
              EXPECT_LE(std::fabs(got[0] - sum), tol * mag + 1e-30)
                  << what << " tile " << t << " channel " << ch;
              EXPECT_LE(std::fabs(got[1] - sq), tol * sq + 1e-30)
                  << what << " tile " << t << " channel " << ch;
            }
          }
          std::printf("  %s: %d tiles of %d, worst sum error %.1e of sum |y|\n", what.c_str(),
                      info.stats_tiles, info.bn, worst);
        }
      }
    }
  }
}

TEST_F(ConvBnSumsTest, BatchNormFromSumsAsFromPasses) {
  for (const ConvLayerCase& s : kSumsCases) {
    const ConvParams p = s.params();
    const int oh = s.oh(), ow = s.ow();
    const Shape ys = Shape::CHWN(s.f, oh, ow, s.n), cs{s.f};
    // An offset mean (+3) so that the sum of squares' cancellation is exercised.
    const Tensor x =
        OnGpuAs(RandomCpu(Shape::CHWN(s.c, s.h, s.w, s.n), 311, 0.5f, 2.0f), DType::kBF16);
    const Tensor w = OnGpu(RandomCpu(Shape{s.f, s.c, s.k, s.k}, 312, -0.1f, 0.3f));
    const Tensor gamma = OnGpu(RandomCpu(cs, 313)), beta = OnGpu(RandomCpu(cs, 314));
    const Tensor rm0 = RandomCpu(cs, 315), rv0 = RandomCpu(cs, 316, 0.5f, 2.0f);
    BatchNormParams bp;
    struct Run {
      Tensor conv, y, rm, rv, sm, si, sc;
    };
    auto run = [&](bool sums) {
      Run r{PoisonedAs(ys, DType::kBF16),
            PoisonedAs(ys, DType::kBF16),
            OnGpu(rm0),
            OnGpu(rv0),
            Poisoned(cs, Device::kCUDA),
            Poisoned(cs, Device::kCUDA),
            Poisoned(cs, Device::kCUDA)};
      Gpu().ConvLayerForward(x, w, nullptr, false, r.conv, p, sums);
      Gpu().BatchNormForwardTrain(r.conv, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, bp, true);
      return r;
    };
    const int64_t before = Cuda().batch_norms_from_conv_sums();
    const Run passes = run(false);
    EXPECT_EQ(Cuda().batch_norms_from_conv_sums(), before);
    const Run fused = run(true);
    EXPECT_EQ(Cuda().batch_norms_from_conv_sums(), before + 1) << "the sums were not used";
    EXPECT_BITWISE(fused.conv, passes.conv);
    // Mean: the same double sum of the same values in another order. Variance: sum of squares
    // minus the squared sum, FP32 tile partials: relative 1e-5 here (mean / std about 3).
    EXPECT_LT(RelErr(fused.sm, passes.sm), 1e-6);
    EXPECT_LT(RelErr(fused.rm, passes.rm), 1e-6);
    EXPECT_LT(RelErr(fused.si, passes.si), 1e-5);
    EXPECT_LT(RelErr(fused.sc, passes.sc), 1e-5);
    EXPECT_LT(RelErr(fused.rv, passes.rv), 1e-5);
    // y: the same bf16 rounding of values that differ by ~1e-5 relative: a few values a
    // rounding apart.
    EXPECT_LT(RelErr(fused.y, passes.y), 2e-3);
    std::printf("  n%d c%d f%d k%d: save_invstd %.1e, y %.1e relative\n", s.n, s.c, s.f, s.k,
                RelErr(fused.si, passes.si), RelErr(fused.y, passes.y));

    // Sums left for one tensor are not taken by the batch norm of another, nor twice.
    Run other = run(false);
    Tensor y2 = PoisonedAs(ys, DType::kBF16);
    Gpu().ConvLayerForward(x, w, nullptr, false, y2, p, true);
    const int64_t mid = Cuda().batch_norms_from_conv_sums();
    Gpu().BatchNormForwardTrain(other.conv, gamma, beta, other.y, other.rm, other.rv, other.sm,
                                other.si, other.sc, bp, true);
    Gpu().BatchNormForwardTrain(y2, gamma, beta, other.y, other.rm, other.rv, other.sm, other.si,
                                other.sc, bp, true);
    EXPECT_EQ(Cuda().batch_norms_from_conv_sums(), mid) << "sums used by another batch norm";
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
