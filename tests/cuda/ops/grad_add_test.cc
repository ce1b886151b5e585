// The gradient-sum fusion (Net::Fusions::grad_add): a convolution whose input gradient another
// reader wrote first adds its part to it (Ops::ConvLayerBackward's add_dx) instead of writing a
// scratch that an Add pass then sums. The CUDA backend adds in the backward-data epilogue
// (conv/tensor_core.h AddStored in StoreAccumulators, conv/wgmma.cu AddChunk in
// StoreTileStaged) where the GEMMs write all of dx, and falls back to the scratch and the Add
// elsewhere (a 1 x 1 convolution of stride 2 leaves pixels zero; FP32 math; a ReLU mask the
// epilogue cannot apply).
//   DxIsTheSumTheAddWrites: dx (and dw) bit for bit the unfused backward's (this layer's dx in
//     a buffer of dx's type, through the ReLU's mask under relu_dx, then Add(dx, it, dx)), for
//     every tensor-core family and tile, staged and not (3 x 3 of stride 1 and 2, 1 x 1 of
//     stride 1 and 2), bf16 and float storage, and FP32; the sum differs from both of its
//     terms (neither term is dropped).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// 3 x 3 of stride 1 (one GEMM, accumulator-layout epilogue) and 2 (four phase GEMMs); 1 x 1
// of stride 1 (a plain GEMM: the staged epilogue, and the TMA tiles) and 2 (one phase of four:
// dx zeroed first, so the add falls back to the scratch and the Add). The 1 x 1 also at 136
// channels: a whole 128-row tile and a partial one, so that every chunk a staged epilogue's
// thread stores (its batches reach rows 112-127 of a 128-row tile) adds to dx.
const ConvLayerCase kCases[] = {
    {8, 24, 6, 6, 32, 3, 1, 1},   {8, 24, 8, 8, 16, 3, 2, 1}, {16, 40, 8, 8, 24, 1, 1, 0},
    {16, 136, 8, 8, 24, 1, 1, 0}, {8, 16, 8, 8, 24, 1, 2, 0},
};

struct Mode {
  cuda::MathMode math;
  DType storage;
  const char* config;  // COLONNADE_CONV_CONFIG's value
};
const Mode kModes[] = {
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_128x128x64_6"},
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_64x256x64_5"},
    {cuda::MathMode::kBF16, DType::kBF16, "wgmma_tma_128x256x64_4"},
    {cuda::MathMode::kBF16, DType::kBF16, "mma"},
    {cuda::MathMode::kBF16, DType::kFloat32, "wgmma_128x256x64_4"},  // relu_dx: falls back
    {cuda::MathMode::kTF32, DType::kFloat32, "mma"},
    {cuda::MathMode::kFP32, DType::kFloat32, "auto"},  // the SIMT kernels: falls back
};

class GradAddTest : public ConvModeTest {};

TEST_F(GradAddTest, DxIsTheSumTheAddWrites) {
  for (const Mode& m : kModes) {
    if (!Use(m.math, m.config)) continue;
    for (const ConvLayerCase& s : kCases) {
      for (const bool relu_dx : {false, true}) {
        const std::string what =
            absl::StrFormat("%s, %s %s storage, %s%s", s.name(), cuda::MathModeName(m.math),
                            DTypeName(m.storage), m.config, relu_dx ? ", relu_dx" : "");
        const ConvParams p = s.params();
        const Shape xs = Shape::CHWN(s.c, s.h, s.w, s.n);
        const Shape ys = Shape::CHWN(s.f, s.oh(), s.ow(), s.n);
        // x: a ReLU's output (about a third 0) when relu_dx masks by it.
        Tensor x_cpu = RandomCpu(xs, 501, -0.5f, 1.0f);
        for (int64_t i = 0; i < x_cpu.size(); ++i)
          x_cpu.data()[i] = std::max(x_cpu.data()[i], 0.0f);
        const Tensor x = OnGpuAs(x_cpu, m.storage);
        const Tensor w = OnGpu(RandomCpu(Shape{s.f, s.c, s.k, s.k}, 502, -0.3f, 0.3f));
        const Tensor dy = OnGpuAs(RandomCpu(ys, 503), m.storage);
        const Tensor other = OnGpuAs(RandomCpu(xs, 504), m.storage);  // the first writer's part
        // Unfused: this layer's dx in its own buffer, then the Add.
        Tensor dw_ref = Poisoned(w.shape(), Device::kCUDA), dw = Poisoned(w.shape(), Device::kCUDA);
        Tensor own = PoisonedAs(xs, m.storage), ref = PoisonedAs(xs, m.storage);
        Gpu().Copy(other, ref);
        Gpu().ConvLayerBackward(x, w, nullptr, dy, dw_ref, nullptr, &own, p, relu_dx, false);
        Gpu().Add(ref, own, ref);
        // Fused: added to the gradient as it stands.
        Tensor dx = PoisonedAs(xs, m.storage);
        Gpu().Copy(other, dx);
        Gpu().ConvLayerBackward(x, w, nullptr, dy, dw, nullptr, &dx, p, relu_dx, true);
        EXPECT_BITWISE(dx, ref) << what;
        EXPECT_BITWISE(dw, dw_ref) << what;
        EXPECT_NE(dx.ToHost(), other.ToHost()) << what << ": nothing was added";
        EXPECT_NE(dx.ToHost(), own.ToHost()) << what << ": the gradient was overwritten";
      }
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
