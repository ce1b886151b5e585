// The tensor-core convolutions (src/cuda/conv/mma.cu: bf16 mma.sync m16n8k16 and tf32
// mma.sync m16n8k8; src/cuda/conv/wgmma.cu: bf16 wgmma; FP32 accumulation) against the CPU FP32
// reference (CpuOps) on fresh random inputs of awkward sizes, outputs poisoned with NaN before
// every run, for every storage combination (float or bf16 activations and gradients). Runs on the
// GPU (cuda_tests) and on the CPU emulator (cuda_emu_tests, small shapes only: an emulated mma is a
// rendezvous of 32 fibers).
//
// Tolerances, ||out - ref|| / ||ref||, from the formats (p significand bits, unit roundoff
// u = 2^-p, round to nearest):
//   bf16, p = 8:  u = 2^-8 = 3.9e-3 at worst; the RMS relative rounding error of a random
//     value is about u / sqrt(3) * 0.72 (relative error shrinks across a binade) = 1.6e-3.
//     A product of two rounded operands carries about sqrt(2) * 1.6e-3 = 2.3e-3, and the
//     FP32 sum of K such products with random signs has the same relative error in the
//     2-norm (independent errors add in quadrature, as the terms do). A bf16 output adds
//     its own 1.6e-3: about 2.8e-3 in all. Bound 1e-2 (3.5x margin), the figure.
//   tf32, p = 11: u = 4.9e-4, per operand 2.0e-4, per product 2.9e-4. Bound 2e-3 (7x). A
//     bf16 operand or output (1.6e-3 on its own) puts a tf32 run under the bf16 bound.
// FP32 accumulation of up to a few thousand terms adds ~1e-6: negligible. Measured figures
// are printed; a wrong index, a missing tap or a lost K slice gives errors of order 0.1-1
// (the negative controls below check that the bound does bite).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "cuda/cuda_backend.h"
#include "cuda/conv/conv.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernels.h"
#include "cuda/port.h"
#include "gtest/gtest.h"
#include "gpu_test.h"

namespace colonnade {
namespace {

using cuda::MathMode;
using cuda::StorageType;

constexpr double kTolBf16 = 1e-2;
constexpr double kTolTf32 = 2e-3;

Ops& Cpu() {
  static CpuOps* ops = new CpuOps();
  return *ops;
}

// ---- host-side bf16 (round to nearest even, as cvt.rn.bf16.f32): core/tensor.h's ----------
uint16_t ToBf16(float f) { return FloatToBf16Bits(f); }
float FromBf16(uint16_t b) { return Bf16BitsToFloat(b); }

// A device buffer of float or bf16 elements.
class DeviceBuffer {
 public:
  DeviceBuffer(int64_t n, StorageType t) : n_(n), type_(t) {
    COLONNADE_CUDA_CHECK(cudaMalloc(&p_, Bytes()));
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  size_t Bytes() const { return size_t(n_) * (type_ == StorageType::kBF16 ? 2 : 4); }
  void* data() const { return p_; }
  StorageType type() const { return type_; }
  // Uploads v (which must already be representable when the buffer is bf16).
  void Upload(const std::vector<float>& v) {
    if (type_ == StorageType::kFloat) {
      COLONNADE_CUDA_CHECK(cudaMemcpy(p_, v.data(), Bytes(), cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = ToBf16(v[i]);
      COLONNADE_CUDA_CHECK(cudaMemcpy(p_, b.data(), Bytes(), cudaMemcpyHostToDevice));
    }
    // A pageable cudaMemcpy may return before its DMA lands, ordered only on the legacy
    // stream, which the backend's non-blocking stream does not wait for: finish it.
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void Poison() {
    if (type_ == StorageType::kFloat) {
      Upload(std::vector<float>(size_t(n_), std::numeric_limits<float>::quiet_NaN()));
    } else {
      COLONNADE_CUDA_CHECK(cudaMemset(p_, 0xff, Bytes()));  // 0xffff: a bf16 NaN
      COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());        // asynchronous, legacy stream
    }
  }
  std::vector<float> Download() const {
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<float> v(static_cast<size_t>(n_));
    if (type_ == StorageType::kFloat) {
      COLONNADE_CUDA_CHECK(cudaMemcpy(v.data(), p_, Bytes(), cudaMemcpyDeviceToHost));
    } else {
      std::vector<uint16_t> b(static_cast<size_t>(n_));
      COLONNADE_CUDA_CHECK(cudaMemcpy(b.data(), p_, Bytes(), cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < b.size(); ++i) v[i] = FromBf16(b[i]);
    }
    return v;
  }

 private:
  int64_t n_;
  StorageType type_;
  void* p_ = nullptr;
};

std::vector<float> Random(int64_t n, std::mt19937_64& rng, StorageType t) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  if (t == StorageType::kBF16)  // the values a bf16 tensor holds: the reference sees them too
    for (float& x : v) x = FromBf16(ToBf16(x));
  return v;
}

Tensor HostTensor(const Shape& s, const std::vector<float>& v) {
  Tensor t(s, Device::kCPU);
  std::memcpy(t.data(), v.data(), v.size() * sizeof(float));
  return t;
}

struct Mode {
  MathMode math;
  StorageType in, out;  // storage of the activation operands and of the activation output
};
std::string ModeName(const Mode& m) {
  auto st = [](StorageType t) { return t == StorageType::kBF16 ? "bf16" : "f32"; };
  return absl::StrFormat("%s math, %s in, %s out", cuda::MathModeName(m.math), st(m.in), st(m.out));
}
double Tolerance(const Mode& m, bool output_bf16_possible = true) {
  const bool any_bf16 = m.math == MathMode::kBF16 || m.in == StorageType::kBF16 ||
                        (output_bf16_possible && m.out == StorageType::kBF16);
  return any_bf16 ? kTolBf16 : kTolTf32;
}

// Every storage combination for the small cases on the GPU; on the emulator and for the
// large cases the three that matter most (training in bf16 stores bf16, TF32 mode stores
// float, bf16 math on float tensors is the converting load path) unless a case asks for all.
const Mode kModes[] = {
    {MathMode::kBF16, StorageType::kBF16, StorageType::kBF16},
    {MathMode::kTF32, StorageType::kFloat, StorageType::kFloat},
    {MathMode::kBF16, StorageType::kFloat, StorageType::kFloat},
    {MathMode::kTF32, StorageType::kBF16, StorageType::kFloat},
    {MathMode::kBF16, StorageType::kBF16, StorageType::kFloat},
    {MathMode::kBF16, StorageType::kFloat, StorageType::kBF16},
};

class TcTest : public GpuTest {
 protected:
  static cuda::CudaOps& Ops() { return dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)); }
  static const cuda::DeviceContext& Ctx() { return Ops().context(); }
};

struct ConvCase {
  int n, c, h, w, f, kh, kw, stride, pad, groups;
  bool large;      // GPU only
  bool all_modes;  // every storage combination (else the first three) on the emulator or,
                   // for large cases, on the GPU
};

std::string CaseName(const ConvCase& k) {
  return absl::StrFormat("n%d_c%d_%dx%d_f%d_k%dx%d_s%d_p%d_g%d", k.n, k.c, k.h, k.w, k.f, k.kh,
                         k.kw, k.stride, k.pad, k.groups);
}

// Awkward shapes of the model zoo in small (emulator) and real (GPU) sizes.
const ConvCase kCases[] = {
    {1, 3, 13, 13, 5, 3, 3, 1, 1, 1, false, true},      // batch 1: element-wise loads
    {7, 5, 11, 11, 8, 3, 3, 2, 0, 1, false, false},     // batch 7, stride 2
    {33, 48, 5, 5, 96, 5, 5, 1, 2, 2, false, false},    // batch 33, groups 2, K = 600
    {128, 96, 3, 3, 96, 3, 3, 1, 1, 2, false, true},    // batch 128, groups, M = 48
    {8, 3, 27, 27, 96, 11, 11, 4, 2, 1, false, false},  // AlexNet conv1: 11x11/4, K = 363
    {8, 16, 8, 8, 32, 1, 1, 2, 0, 1, false, false},     // ResNet 1x1 stride 2 (downsample)
    {16, 8, 14, 14, 16, 7, 7, 2, 3, 1, false, false},   // ResNet 7x7/2 stem
    {8, 16, 9, 9, 24, 3, 3, 2, 1, 1, false, true},      // ResNet 3x3 stride 2
    {16, 5, 6, 6, 7, 1, 1, 1, 0, 1, false, false},      // 1x1, odd channels
    {24, 8, 9, 11, 6, 3, 5, 1, 1, 1, false, false},     // non-square kernel and image
    {12, 6, 10, 12, 10, 3, 3, 2, 1, 2, false, false},   // batch 12: vector for tf32 only
    {4, 3, 6, 6, 4, 1, 1, 1, 1, 1, false, false},       // pad larger than kernel - 1
    // GPU only: real layer sizes (batches kept moderate: the CPU reference of every mode runs
    // in the same ctest budget as the rest of the GPU suite).
    {32, 3, 227, 227, 96, 11, 11, 4, 2, 1, true, false},  // AlexNet conv1
    {64, 96, 27, 27, 256, 5, 5, 1, 2, 2, true, true},     // AlexNet conv2 (groups 2)
    {64, 256, 13, 13, 384, 3, 3, 1, 1, 1, true, false},   // AlexNet conv3
    {33, 64, 28, 28, 128, 3, 3, 2, 1, 1, true, false},    // ResNet 3x3/2, batch 33
    {64, 256, 14, 14, 512, 1, 1, 2, 0, 1, true, false},   // ResNet 1x1/2 downsample
    {32, 3, 224, 224, 64, 7, 7, 2, 3, 1, true, false},    // ResNet stem
    {32, 64, 28, 28, 64, 3, 3, 1, 1, 1, true, false},     // VGG / ResNet 3x3
    {7, 96, 13, 13, 256, 3, 3, 1, 1, 2, true, true},      // batch 7 at full width
};

// The automatic choice on mma.sync (COLONNADE_CONV_CONFIG=mma: the process default may be
// wgmma on a Hopper GPU; the wgmma kernels have their own suite, TcWgmmaTest, on the same
// cases), the override before it restored afterwards.
class TcConvTest : public TcTest, public ::testing::WithParamInterface<ConvCase> {
 protected:
  void SetUp() override {
    TcTest::SetUp();
    if (IsSkipped()) return;
    if (kEmulated && GetParam().large) GTEST_SKIP() << "large case skipped on the emulator";
    config_.emplace("mma");
  }
  void TearDown() override { config_.reset(); }
  std::optional<cuda::ScopedConvConfig> config_;  // empty: skipped before SetUp set it
  ConvParams Params() const {
    const ConvCase& k = GetParam();
    ConvParams p;
    p.kernel_h = k.kh;
    p.kernel_w = k.kw;
    p.stride = k.stride;
    p.pad = k.pad;
    p.groups = k.groups;
    return p;
  }
  cuda::ConvDims Dims() const {
    const ConvCase& k = GetParam();
    cuda::ConvDims d;
    d.n = k.n;
    d.c = k.c;
    d.h = k.h;
    d.w = k.w;
    d.f = k.f;
    d.oh = static_cast<int>(ConvOutSize(k.h, k.kh, k.stride, k.pad));
    d.ow = static_cast<int>(ConvOutSize(k.w, k.kw, k.stride, k.pad));
    return d;
  }
  Shape XShape() const {
    const cuda::ConvDims d = Dims();
    return Shape{d.c, d.h, d.w, d.n};
  }
  Shape YShape() const {
    const cuda::ConvDims d = Dims();
    return Shape{d.f, d.oh, d.ow, d.n};
  }
  Shape WShape() const {
    const ConvCase& k = GetParam();
    return Shape{k.f, k.c / k.groups, k.kh, k.kw};
  }
  std::vector<Mode> Modes() const {
    std::vector<Mode> m(std::begin(kModes), std::end(kModes));
    if ((kEmulated || GetParam().large) && !GetParam().all_modes) m.resize(3);
    return m;
  }

  // Forward with bias and ReLU (every other mode) or without; returns the error.
  double RunForward(const Mode& mode, uint64_t seed, bool epilogue, int fault = 0,
                    std::vector<float>* out = nullptr, cuda::ConvLaunchInfo* info = nullptr) {
    std::mt19937_64 rng(seed);
    const Shape xs = XShape(), ys = YShape(), ws = WShape();
    const std::vector<float> x = Random(xs.elements(), rng, mode.in);
    const std::vector<float> w = Random(ws.elements(), rng, StorageType::kFloat);
    const std::vector<float> b = Random(ys.c(), rng, StorageType::kFloat);
    Tensor ref(ys, Device::kCPU);
    Cpu().ConvForward(HostTensor(xs, x), HostTensor(ws, w), ref, Params());
    std::vector<float> r(ref.data(), ref.data() + ref.size());
    if (epilogue) {
      const int64_t inner = ys.elements() / ys.c();
      for (int64_t i = 0; i < ys.elements(); ++i) r[i] = std::max(r[i] + b[i / inner], 0.0f);
    }
    DeviceBuffer gx(xs.elements(), mode.in), gy(ys.elements(), mode.out);
    DeviceBuffer gw(ws.elements(), StorageType::kFloat), gb(ys.c(), StorageType::kFloat);
    gx.Upload(x);
    gw.Upload(w);
    gb.Upload(b);
    gy.Poison();
    cuda::TcConvArgs a;
    a.dims = Dims();
    a.conv = Params();
    a.math = mode.math;
    a.x = {gx.data(), mode.in};
    a.w = static_cast<const float*>(gw.data());
    a.bias = epilogue ? static_cast<const float*>(gb.data()) : nullptr;
    a.relu = epilogue;
    a.y = {gy.data(), mode.out};
    a.fault = fault;
    const cuda::ConvLaunchInfo li = cuda::ConvForwardTc(Ctx(), a);
    if (info) *info = li;
    const std::vector<float> got = gy.Download();
    if (out) *out = got;
    return RelErr(got, r);
  }

  double RunBackwardData(const Mode& mode, uint64_t seed, int fault = 0,
                         std::vector<float>* out = nullptr, cuda::ConvLaunchInfo* info = nullptr) {
    std::mt19937_64 rng(seed);
    const Shape xs = XShape(), ys = YShape(), ws = WShape();
    const std::vector<float> dy = Random(ys.elements(), rng, mode.in);
    const std::vector<float> w = Random(ws.elements(), rng, StorageType::kFloat);
    Tensor ref(xs, Device::kCPU);
    Cpu().ConvBackwardData(HostTensor(ys, dy), HostTensor(ws, w), ref, Params());
    DeviceBuffer gdy(ys.elements(), mode.in), gdx(xs.elements(), mode.out);
    DeviceBuffer gw(ws.elements(), StorageType::kFloat);
    gdy.Upload(dy);
    gw.Upload(w);
    gdx.Poison();
    cuda::TcConvArgs a;
    a.dims = Dims();
    a.conv = Params();
    a.math = mode.math;
    a.dy = {gdy.data(), mode.in};
    a.w = static_cast<const float*>(gw.data());
    a.dx = {gdx.data(), mode.out};
    a.fault = fault;
    const cuda::ConvLaunchInfo li = cuda::ConvBackwardDataTc(Ctx(), a);
    if (info) *info = li;
    const std::vector<float> got = gdx.Download();
    if (out) *out = got;
    return RelErr(got, std::vector<float>(ref.data(), ref.data() + ref.size()));
  }

  // x and dy in the mode's input storage (dw is FP32).
  double RunBackwardFilter(const Mode& mode, uint64_t seed, int fault = 0,
                           cuda::ConvLaunchInfo* info = nullptr) {
    std::mt19937_64 rng(seed);
    const Shape xs = XShape(), ys = YShape(), ws = WShape();
    const std::vector<float> x = Random(xs.elements(), rng, mode.in);
    const std::vector<float> dy = Random(ys.elements(), rng, mode.out);
    Tensor ref(ws, Device::kCPU);
    Cpu().ConvBackwardFilter(HostTensor(xs, x), HostTensor(ys, dy), ref, Params());
    DeviceBuffer gx(xs.elements(), mode.in), gdy(ys.elements(), mode.out);
    DeviceBuffer gdw(ws.elements(), StorageType::kFloat);
    gx.Upload(x);
    gdy.Upload(dy);
    gdw.Poison();
    cuda::TcConvArgs a;
    a.dims = Dims();
    a.conv = Params();
    a.math = mode.math;
    a.x = {gx.data(), mode.in};
    a.dy = {gdy.data(), mode.out};
    a.dw = static_cast<float*>(gdw.data());
    a.fault = fault;
    const cuda::ConvLaunchInfo li = cuda::ConvBackwardFilterTc(Ctx(), a);
    if (info) *info = li;
    return RelErr(gdw.Download(), std::vector<float>(ref.data(), ref.data() + ref.size()));
  }
};

TEST_P(TcConvTest, Forward) {
  uint64_t seed = 100;
  for (const Mode& m : Modes()) {
    const bool epilogue = (seed % 2) == 0;
    const double err = RunForward(m, seed++, epilogue);
    std::printf("  fwd %-32s %s%s: rel err %.2e\n", ModeName(m).c_str(),
                CaseName(GetParam()).c_str(), epilogue ? " +bias+relu" : "", err);
    EXPECT_LT(err, Tolerance(m)) << CaseName(GetParam()) << " " << ModeName(m);
  }
}

TEST_P(TcConvTest, BackwardData) {
  uint64_t seed = 200;
  for (const Mode& m : Modes()) {
    const double err = RunBackwardData(m, seed++);
    std::printf("  bwd data %-32s %s: rel err %.2e\n", ModeName(m).c_str(),
                CaseName(GetParam()).c_str(), err);
    EXPECT_LT(err, Tolerance(m)) << CaseName(GetParam()) << " " << ModeName(m);
  }
}

// Here Mode::out is the storage of dy (an input); dw is always FP32.
TEST_P(TcConvTest, BackwardFilter) {
  uint64_t seed = 300;
  for (const Mode& m : Modes()) {
    cuda::ConvLaunchInfo info;
    const double err = RunBackwardFilter(m, seed++, 0, &info);
    std::printf("  bwd filter %-30s %s: rel err %.2e (splits %d)\n", ModeName(m).c_str(),
                CaseName(GetParam()).c_str(), err, info.splits);
    EXPECT_LT(err, Tolerance(m)) << CaseName(GetParam()) << " " << ModeName(m);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcConvTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });

// The mma.sync names of a math mode, in the catalogue's order (128 x 128 first).
std::vector<std::string> MmaConfigs(MathMode math) {
  std::vector<std::string> names;
  for (const cuda::ConvConfig& c : cuda::ConvCatalogue())
    if (c.family == cuda::ConvFamily::kMma && c.math == math) names.push_back(c.name);
  return names;
}

// Every mma.sync configuration (block tiles 128 x 128, 64 x 128, 128 x 256) meets the bounds,
// runs where it is asked for, and forward and backward data give the same bits with each (every
// output sums its K slices in the same order whatever the tile; only backward filter's split-K
// factor depends on it).
class TcTileTest : public TcConvTest {};

TEST_P(TcTileTest, EveryTileAgrees) {
  for (const Mode& m : {Mode{MathMode::kBF16, StorageType::kBF16, StorageType::kBF16},
                        Mode{MathMode::kTF32, StorageType::kFloat, StorageType::kFloat}}) {
    std::vector<float> fwd0, bwd0;
    const std::vector<std::string> names = MmaConfigs(m.math);
    for (const std::string& name : names) {
      config_->Set(name);
      std::vector<float> fwd, bwd;
      cuda::ConvLaunchInfo fi, bi, wi;
      const double ef = RunForward(m, 700, true, 0, &fwd, &fi);
      const double eb = RunBackwardData(m, 701, 0, &bwd, &bi);
      const double ew = RunBackwardFilter(m, 702, 0, &wi);
      std::printf("  %s %s: fwd %.2e bwd data %.2e bwd filter %.2e\n", name.c_str(),
                  ModeName(m).c_str(), ef, eb, ew);
      EXPECT_EQ(fi.config, name);
      EXPECT_EQ(bi.config, name);
      EXPECT_EQ(wi.config, name);
      EXPECT_LT(ef, Tolerance(m)) << name;
      EXPECT_LT(eb, Tolerance(m)) << name;
      EXPECT_LT(ew, Tolerance(m)) << name;
      if (name == names[0]) {
        fwd0 = fwd;
        bwd0 = bwd;
      } else {
        EXPECT_EQ(fwd, fwd0) << "forward: " << name << " differs from " << names[0];
        EXPECT_EQ(bwd, bwd0) << "backward data: " << name << " differs from " << names[0];
      }
    }
    config_->Set("mma");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TcTileTest,
    ::testing::Values(ConvCase{12, 6, 10, 12, 10, 3, 3, 2, 1, 2, false, false},
                      ConvCase{24, 8, 9, 11, 6, 3, 5, 1, 1, 1, false, false},
                      ConvCase{64, 256, 14, 14, 512, 1, 1, 2, 0, 1, true, false}),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return CaseName(i.param); });

// The wgmma kernels (sm_90a; the wgmma_* configurations, bf16 math on bf16 operands) against
// the CPU reference on every case, in all three ops, bf16 and float outputs (float dy for
// backward filter, which then runs mma.sync), each configuration forced and the automatic
// choice with wgmma enabled (COLONNADE_CONV_CONFIG=wgmma): they run exactly where the batch is
// a multiple of 8 (elsewhere mma.sync does, which the dispatch flag shows), meet the bf16
// bound, and a kernel that drops its first K slice fails it. Their operand layouts (the
// 128-byte-swizzled canonical layouts of the PTX ISA) are decoded by the emulator from the
// ISA's formulas, independently of the kernel's own addressing.
class TcWgmmaTest : public TcConvTest {};

TEST_P(TcWgmmaTest, EveryWgmmaTileMeetsTheBound) {
  if (!cuda::TcWgmmaAvailable()) GTEST_SKIP() << "built without sm_90a or not a 9.0 device";
  const bool eligible = GetParam().n % 8 == 0;
  const Mode modes[] = {{MathMode::kBF16, StorageType::kBF16, StorageType::kBF16},
                        {MathMode::kBF16, StorageType::kBF16, StorageType::kFloat}};
  // Each configuration with the seed offset the tiles 4-7 (and 0, the automatic choice) had.
  const struct {
    int tile;
    const char* config;
  } kRuns[] = {{4, "wgmma_128x128x64_6"},
               {5, "wgmma_64x256x64_5"},
               {6, "wgmma_128x256x64_4"},
               {7, "wgmma_128x128x64_3"},
               {8, "wgmma_ws_128x128x64_6"},
               {9, "wgmma_ws_128x256x64_4"},
               {10, "wgmma_tma_128x128x64_6"},
               {11, "wgmma_tma_128x256x64_4"},
               {12, "wgmma_tma_persistent_128x128x64_4"},
               {0, "wgmma"}};
  // The instantiations below: LongK refills every stage, ManySplits sums many splits, Plain
  // (1 x 1, stride 1, no padding) runs the TMA tiles, which run only such convolutions.
  const ConvCase& cc = GetParam();
  const bool long_k = cc.c == 64 && cc.h == 6 && cc.kh == 3, many_splits = cc.n == 64 && cc.h == 24;
  const bool plain = cc.kh == 1 && cc.kw == 1 && cc.stride == 1 && cc.pad == 0;
  const bool plain_case = (plain && cc.c == 832) || (cc.n == 64 && cc.c == 80);
  for (const Mode& m : modes) {
    const double tol = Tolerance(m);
    for (const auto& run : kRuns) {
      const int tile = run.tile;
      // The emulator (a wgmma is 128 fibers' worth of scalar products) checks float outputs
      // and the faulty kernel on the cooperative 128 x 128 tile, on the warp-specialized
      // one where its stages are refilled (LongK), and on the TMA ones on Plain (refilled,
      // two groups, rows and columns past the tensors' edges; the other tiles there only
      // 128 x 128 and the automatic choice); ManySplits (there for the split-K sum, the same
      // code after every tile, and the emulator's slowest case) on 128 x 128 and the
      // automatic choice only. The GPU every combination.
      const bool tma = tile >= 10;
      if (kEmulated && many_splits && tile != 4 && tile != 0) continue;
      if (kEmulated && plain_case && !tma && tile != 4 && tile != 0) continue;
      // (Elsewhere on the emulator a TMA tile runs where it falls back, cheaply, and not where
      // it would run: Plain and TapBoxes are its cases there.)
      if (kEmulated && tma && !plain_case && (plain || cc.n % 64 == 0)) continue;
      // Float outputs and the faulty kernel on the emulator: the 128 x 128 TMA tile and the
      // persistent one on Plain, the 128 x 256 TMA tile on TapBoxes.
      const bool tma_full = plain ? tile == 10 || tile == 12 : tile == 11;
      const bool full =
          !kEmulated || tile == 4 || (tile == 8 && long_k) || (tma && plain_case && tma_full);
      if (!full && m.out == StorageType::kFloat) continue;
      config_->Set(run.config);
      cuda::ConvLaunchInfo fi, bi, wi;
      const double ef = RunForward(m, 800 + tile, tile % 2 == 0, 0, nullptr, &fi);
      const double eb = RunBackwardData(m, 810 + tile, 0, nullptr, &bi);
      // Backward filter takes Mode::out as dy's storage: wgmma only when both are bf16.
      const double ew = RunBackwardFilter(m, 815 + tile, 0, &wi);
      std::printf("  %s (%s) %s: fwd %.2e bwd data %.2e bwd filter %.2e%s\n", run.config, fi.config,
                  ModeName(m).c_str(), ef, eb, ew, wi.wgmma ? "" : " (mma.sync)");
      // Where the forced configuration cannot run a problem, the automatic choice does:
      // wgmma on a GPU, mma.sync on the emulator. The TMA tiles run plain GEMMs, and forward
      // and backward data of any convolution whose batch is a multiple of 64 (tap boxes).
      const cuda::ConvConfig* forced = cuda::FindConvConfig(run.config);  // null: "wgmma"
      auto runs = [&](cuda::ConvProblem pr) {
        if (forced == nullptr) return true;
        if (!forced->Runs(pr)) return false;
        return !forced->tma || plain ||
               (pr != cuda::ConvProblem::kBackwardFilter && cc.n % 64 == 0);
      };
      auto want_wgmma = [&](cuda::ConvProblem pr) { return eligible && (runs(pr) || !kEmulated); };
      EXPECT_EQ(fi.wgmma, want_wgmma(cuda::ConvProblem::kForward)) << run.config;
      EXPECT_EQ(bi.wgmma, want_wgmma(cuda::ConvProblem::kBackwardData)) << run.config;
      EXPECT_EQ(wi.wgmma,
                want_wgmma(cuda::ConvProblem::kBackwardFilter) && m.out == StorageType::kBF16)
          << run.config;
      // ManySplits: the two-level split-K sum ran (SplitKOutput::kTwoLevel splits or more).
      if (many_splits && wi.wgmma) EXPECT_GE(wi.splits, 9) << run.config;
      if (eligible && tile != 0) {
        const struct {
          const cuda::ConvLaunchInfo& info;
          cuda::ConvProblem problem;
          bool checked;
        } launches[] = {{fi, cuda::ConvProblem::kForward, true},
                        {bi, cuda::ConvProblem::kBackwardData, true},
                        {wi, cuda::ConvProblem::kBackwardFilter, m.out == StorageType::kBF16}};
        for (const auto& l : launches) {
          if (!l.checked) continue;
          if (runs(l.problem)) {
            EXPECT_EQ(std::string(l.info.config), run.config) << cuda::ConvProblemName(l.problem);
          } else {
            EXPECT_NE(std::string(l.info.config), run.config) << cuda::ConvProblemName(l.problem);
          }
        }
      }
      EXPECT_LT(ef, tol) << run.config;
      EXPECT_LT(eb, tol) << run.config;
      EXPECT_LT(ew, tol) << run.config;
      if (full && eligible && m.out == StorageType::kBF16) {
        const double ff = RunForward(m, 820 + tile, false, /*fault=*/1);
        const double fb = RunBackwardData(m, 830 + tile, /*fault=*/1);
        const double fw = RunBackwardFilter(m, 840 + tile, /*fault=*/1);
        EXPECT_GT(ff, tol) << "forward, " << run.config << ": a lost K slice passes";
        EXPECT_GT(fb, tol) << "backward data, " << run.config << ": a lost K slice passes";
        EXPECT_GT(fw, tol) << "backward filter, " << run.config << ": a lost K slice passes";
      }
    }
    config_->Set("mma");  // TearDown restores the override before the test
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcWgmmaTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });
// K = 576: nine 64-wide slices, more than any wgmma tile has stages, so every stage is
// refilled while the wgmma of the slice before it may still run (the emulator computes a
// wgmma at the wait that retires it: a refill one slice too early shows as a wrong result).
INSTANTIATE_TEST_SUITE_P(LongK, TcWgmmaTest,
                         ::testing::Values(ConvCase{16, 64, 6, 6, 64, 3, 3, 1, 1, 1, false, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });
// 1 x 1, stride 1, no padding, in two groups of 416 input channels (7 K slices, more than any
// TMA tile has stages; rows past each group's 416 and 40 channels read as zero from the TMA
// boxes, not from the next group) over 1,024 columns (backward filter: 16 slices).
INSTANTIATE_TEST_SUITE_P(
    Plain, TcWgmmaTest, ::testing::Values(ConvCase{16, 832, 8, 8, 80, 1, 1, 1, 0, 2, false, false}),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return CaseName(i.param); });
// TMA tap boxes (forward and backward data of a 3 x 3 / 2 convolution at batch 64): 80 input
// channels padded to two 64-channel slices a tap (18 slices), taps that read the padding, the
// four stride phases of backward data (taps 1 x 1 to 2 x 2 over 72 channels).
INSTANTIATE_TEST_SUITE_P(TapBoxes, TcWgmmaTest,
                         ::testing::Values(ConvCase{64, 80, 5, 5, 72, 3, 3, 2, 1, 1, false, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });
// The cp.async tiles' tap-major gather (channels a multiple of 64) on a 3 x 3 / 2 convolution
// at a batch of a multiple of 8: forward over nine taps, backward data's four stride phases
// over 1 x 1 to 2 x 2 taps of dy's 64 channels (LongK has stride 1 only).
INSTANTIATE_TEST_SUITE_P(TapGather, TcWgmmaTest,
                         ::testing::Values(ConvCase{16, 64, 7, 7, 64, 3, 3, 2, 1, 1, false, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });
// Backward filter over 36,864 columns: enough splits of its reduction (16 on the emulator's
// four multiprocessors, hundreds on a GPU) that the tensor-core split-K sum takes
// SplitKOutput's two-level path (chunks of ceil(sqrt(splits)) splits, then the chunks).
INSTANTIATE_TEST_SUITE_P(
    ManySplits, TcWgmmaTest,
    ::testing::Values(ConvCase{64, 16, 24, 24, 16, 1, 1, 1, 0, 1, false, false}),
    [](const ::testing::TestParamInfo<ConvCase>& i) { return CaseName(i.param); });

// Negative controls: a deliberately wrong kernel (fault 1 skips the first K slice of every
// tile, as a lost pipeline stage would) must fail each bound, in every op and both math
// modes, on a case whose K spans several slices; and the same check must fail when the
// reference is perturbed by a bf16-rounding-sized amount per element times 5 (the bound is
// not so loose that a systematic error of a few ulps passes).
class TcNegativeControl : public TcConvTest {};

TEST_P(TcNegativeControl, WrongKernelFails) {
  for (const Mode& m : {Mode{MathMode::kBF16, StorageType::kBF16, StorageType::kBF16},
                        Mode{MathMode::kTF32, StorageType::kFloat, StorageType::kFloat}}) {
    const double tol = Tolerance(m);
    const double fwd = RunForward(m, 900, false, /*fault=*/1);
    const double bwd = RunBackwardData(m, 901, /*fault=*/1);
    const double wgt = RunBackwardFilter(m, 902, /*fault=*/1);
    std::printf("  faulty kernel, %s: fwd %.2e bwd data %.2e bwd filter %.2e (bound %.0e)\n",
                ModeName(m).c_str(), fwd, bwd, wgt, tol);
    EXPECT_GT(fwd, tol) << "forward: the check does not see a lost K slice";
    EXPECT_GT(bwd, tol) << "backward data: the check does not see a lost K slice";
    EXPECT_GT(wgt, tol) << "backward filter: the check does not see a lost K slice";
    // The same runs without the fault pass (so the failure above is the fault's).
    EXPECT_LT(RunForward(m, 900, false), tol);
    EXPECT_LT(RunBackwardData(m, 901), tol);
    EXPECT_LT(RunBackwardFilter(m, 902), tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TcNegativeControl,
                         ::testing::Values(ConvCase{33, 48, 5, 5, 96, 5, 5, 1, 2, 2, false, false},
                                           ConvCase{8, 16, 9, 9, 24, 3, 3, 2, 1, 1, false, false}),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });

// A systematic error of a few bf16 ulps must fail the bf16 bound: the bound sits between
// honest rounding (measured above, ~3e-3) and a kernel that, say, truncates instead of
// rounding twice over.
TEST(TcTolerance, BoundRejectsSystematicError) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> ref(4096), off(4096);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = u(rng);
    off[i] = ref[i] * (1.0f + 4.0f * 3.9e-3f * (i % 2 ? 1.0f : -1.0f));  // 4 ulps of bf16
  }
  EXPECT_GT(RelErr(off, ref), kTolBf16);
  for (size_t i = 0; i < ref.size(); ++i) off[i] = FromBf16(ToBf16(ref[i]));  // honest rounding
  EXPECT_LT(RelErr(off, ref), kTolBf16 / 3);
}

// The CudaOps hook: with set_conv_math the Ops calls run on the tensor cores (float tensors),
// and back in FP32 they are the FP32 kernels again, bit for bit.
TEST_F(TcTest, CudaOpsConvMathHook) {
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad = 1;
  const Shape xs{6, 7, 7, 8}, ws{10, 6, 3, 3}, ys{10, 7, 7, 8};
  std::mt19937_64 rng(42);
  Tensor x = HostTensor(xs, Random(xs.elements(), rng, StorageType::kFloat));
  Tensor w = HostTensor(ws, Random(ws.elements(), rng, StorageType::kFloat));
  Tensor dy = HostTensor(ys, Random(ys.elements(), rng, StorageType::kFloat));
  Tensor y(ys, Device::kCPU), dx(xs, Device::kCPU), dw(ws, Device::kCPU);
  Cpu().ConvForward(x, w, y, p);
  Cpu().ConvBackwardData(dy, w, dx, p);
  Cpu().ConvBackwardFilter(x, dy, dw, p);
  Tensor gx = x.To(Device::kCUDA), gw = w.To(Device::kCUDA), gdy = dy.To(Device::kCUDA);
  auto host = [](const Tensor& t) { return t.ToHost(); };
  auto vec = [](const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.size()); };
  std::vector<std::vector<float>> fp32;
  for (MathMode m : {MathMode::kBF16, MathMode::kTF32, MathMode::kFP32}) {
    Ops().set_conv_math(m);
    Tensor gy(ys, Device::kCUDA), gdx(xs, Device::kCUDA), gdw(ws, Device::kCUDA);
    Ops().ConvForward(gx, gw, gy, p);
    Ops().ConvBackwardData(gdy, gw, gdx, p);
    Ops().ConvBackwardFilter(gx, gdy, gdw, p);
    const double tol = m == MathMode::kBF16 ? kTolBf16 : m == MathMode::kTF32 ? kTolTf32 : 1e-5;
    EXPECT_LT(RelErr(host(gy), vec(y)), tol) << cuda::MathModeName(m);
    EXPECT_LT(RelErr(host(gdx), vec(dx)), tol) << cuda::MathModeName(m);
    EXPECT_LT(RelErr(host(gdw), vec(dw)), tol) << cuda::MathModeName(m);
    if (m == MathMode::kFP32) fp32 = {host(gy), host(gdx), host(gdw)};
  }
  Ops().set_conv_math(MathMode::kFP32);
  Tensor gy(ys, Device::kCUDA), gdx(xs, Device::kCUDA), gdw(ws, Device::kCUDA);
  cuda::ConvForwardGpu(Ctx(), cuda::ConvDims{8, 6, 7, 7, 10, 7, 7}, p, gx.data(), gw.data(),
                       gy.data());
  cuda::ConvBackwardDataGpu(Ctx(), cuda::ConvDims{8, 6, 7, 7, 10, 7, 7}, p, gdy.data(), gw.data(),
                            gdx.data());
  cuda::ConvBackwardFilterGpu(Ctx(), cuda::ConvDims{8, 6, 7, 7, 10, 7, 7}, p, gx.data(), gdy.data(),
                              gdw.data());
  EXPECT_EQ(fp32[0], host(gy));
  EXPECT_EQ(fp32[1], host(gdx));
  EXPECT_EQ(fp32[2], host(gdw));
}

// A convolution layer's backward from the primitives (the unfused reference of
// ConvLayerBackward): g = dy after the ReLU's mask of mask_y when there is one, then dw, db
// and dx from g.
void PrimitivesBackward(Ops& ops, const Tensor& x, const Tensor& w, const Tensor* mask_y,
                        const Tensor& dy, Tensor& g, Tensor& dw, Tensor& db, Tensor& dx,
                        const ConvParams& p) {
  if (mask_y) {
    ops.ReluBackward(*mask_y, dy, g);
  } else {
    ops.Copy(dy, g);
  }
  ops.ConvBackwardFilter(x, g, dw, p);
  ops.BiasBackward(g, db);
  ops.ConvBackwardData(g, w, dx, p);
}

// The layer-pass tests' convolution for batch n: 6 -> 10 channels, 3x3, stride 2, pad 1,
// groups 2, 9x9 -> 5x5, with a bias.
struct LayerPassCase {
  ConvParams p;
  Shape xs, ws, ys, bs;
};
LayerPassCase LayerPass(int n) {
  LayerPassCase k;
  k.p.kernel_h = k.p.kernel_w = 3;
  k.p.pad = 1;
  k.p.stride = 2;
  k.p.groups = 2;
  k.xs = Shape{6, 9, 9, n};
  k.ws = Shape{10, 3, 3, 3};
  k.ys = Shape{10, 5, 5, n};
  k.bs = Shape{10};
  return k;
}

// The fused layer pass (CudaOps::ConvLayerForward / ConvLayerBackward): in bf16 the
// operands are rounded to bf16 copies once (dy through the ReLU's mask when fused), bias and
// ReLU run in the epilogue; against the CPU's primitives on a vector batch (8: the cp.async
// path) and an awkward one (7: element loads), with and without bias and dx, with and
// without the ReLU. In FP32 it is the primitives, bit for bit.
TEST_F(TcTest, CudaOpsConvLayerPass) {
  for (const int n : {8, 7}) {
    for (const int variant : {0, 1, 2, 3}) {
      const bool with_bias_and_dx = variant % 2 == 0, relu = variant >= 2;
      const LayerPassCase k = LayerPass(n);
      const ConvParams& p = k.p;
      const Shape &xs = k.xs, &ws = k.ws, &ys = k.ys, &bs = k.bs;
      std::mt19937_64 rng(7 + n);
      Tensor x = HostTensor(xs, Random(xs.elements(), rng, StorageType::kFloat));
      Tensor w = HostTensor(ws, Random(ws.elements(), rng, StorageType::kFloat));
      Tensor b = HostTensor(bs, Random(bs.elements(), rng, StorageType::kFloat));
      Tensor dy = HostTensor(ys, Random(ys.elements(), rng, StorageType::kFloat));
      Tensor y(ys, Device::kCPU), dx(xs, Device::kCPU), dw(ws, Device::kCPU), db(bs, Device::kCPU);
      Cpu().ConvForward(x, w, y, p);
      if (with_bias_and_dx) Cpu().AddBias(y, b);
      if (relu) Cpu().ReluForward(y, y);
      // The backward reference from the ReLU's mask of `mask_y`: the device's own y, since in
      // bf16/tf32 a y within rounding of 0 may take the other sign than the CPU's, and one
      // such element moves a whole dy term (the fused pass must mask by the y it wrote).
      auto backward_ref = [&](const Tensor& mask_y) {
        Tensor g(ys, Device::kCPU);
        PrimitivesBackward(Cpu(), x, w, relu ? &mask_y : nullptr, dy, g, dw, db, dx, p);
      };
      Tensor gx = x.To(Device::kCUDA), gw = w.To(Device::kCUDA), gb = b.To(Device::kCUDA);
      Tensor gdy = dy.To(Device::kCUDA);
      auto host = [](const Tensor& t) { return t.ToHost(); };
      auto vec = [](const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.size()); };
      auto poisoned = [](const Shape& s) {
        return HostTensor(s, std::vector<float>(size_t(s.elements()),
                                                std::numeric_limits<float>::quiet_NaN()))
            .To(Device::kCUDA);
      };
      for (MathMode m : {MathMode::kBF16, MathMode::kTF32, MathMode::kFP32}) {
        const std::string what = absl::StrFormat("%s, batch %d, bias and dx %d, relu %d",
                                                 cuda::MathModeName(m), n, with_bias_and_dx, relu);
        Ops().set_conv_math(m);
        Tensor gy = poisoned(ys), gdx = poisoned(xs), gdw = poisoned(ws), gdb = poisoned(bs);
        Ops().ConvLayerForward(gx, gw, with_bias_and_dx ? &gb : nullptr, relu, gy, p);
        Ops().ConvLayerBackward(gx, gw, relu ? &gy : nullptr, gdy, gdw,
                                with_bias_and_dx ? &gdb : nullptr,
                                with_bias_and_dx ? &gdx : nullptr, p);
        const double tol = m == MathMode::kBF16 ? kTolBf16 : m == MathMode::kTF32 ? kTolTf32 : 1e-5;
        EXPECT_LT(RelErr(host(gy), vec(y)), tol) << what;
        Tensor device_y(ys, Device::kCPU);
        const std::vector<float> gy_host = host(gy);
        std::memcpy(device_y.data(), gy_host.data(), gy_host.size() * sizeof(float));
        backward_ref(device_y);
        EXPECT_LT(RelErr(host(gdw), vec(dw)), tol) << what;
        if (with_bias_and_dx) {
          EXPECT_LT(RelErr(host(gdx), vec(dx)), tol) << what;
          EXPECT_LT(RelErr(host(gdb), vec(db)), 1e-5) << what;  // FP32 row sums in every mode
        } else {
          EXPECT_TRUE(std::isnan(host(gdx)[0])) << what << ": dx written though not asked for";
        }
        if (m != MathMode::kFP32) continue;
        // FP32: the primitives' bits.
        Tensor py(ys, Device::kCUDA), pdx(xs, Device::kCUDA), pdw(ws, Device::kCUDA);
        Tensor pg(ys, Device::kCUDA), pdb(bs, Device::kCUDA);
        Ops().ConvForward(gx, gw, py, p);
        if (with_bias_and_dx) Ops().AddBias(py, gb);
        if (relu) Ops().ReluForward(py, py);
        PrimitivesBackward(Ops(), gx, gw, relu ? &py : nullptr, gdy, pg, pdw, pdb, pdx, p);
        EXPECT_EQ(host(py), host(gy)) << what;
        EXPECT_EQ(host(pdw), host(gdw)) << what;
        if (with_bias_and_dx) EXPECT_EQ(host(pdx), host(gdx)) << what;
        if (with_bias_and_dx) EXPECT_EQ(host(pdb), host(gdb)) << what;
      }
      Ops().set_conv_math(MathMode::kFP32);
    }
  }
}

// bf16 activation storage through the layer pass: x, y, dy and dx as bf16 tensors
// (Tensor::dtype) against float tensors holding the same bf16-representable x and dy. Both
// hand the tensor cores the same operands (the float path rounds them to the same bits), so
// every FP32 accumulator is the same: y and dx are the float results rounded once (bitwise
// bf16(float result)), dw is bitwise the float path's, the bias gradient sums the same
// values (1e-6: the order of double additions may differ between the passes). With a fused
// ReLU the mask is the bf16 y (same sign as the float y). Batch 8 (cp.async loads), 7 (element
// loads), groups 2, stride 2.
TEST_F(TcTest, CudaOpsConvLayerPassBf16Storage) {
  for (const int n : {8, 7}) {
    for (const bool relu : {false, true}) {
      const LayerPassCase k = LayerPass(n);
      const ConvParams& p = k.p;
      const Shape &xs = k.xs, &ws = k.ws, &ys = k.ys, &bs = k.bs;
      std::mt19937_64 rng(11 + n);
      const std::vector<float> xv = Random(xs.elements(), rng, StorageType::kBF16);
      const std::vector<float> wv = Random(ws.elements(), rng, StorageType::kFloat);
      const std::vector<float> bv = Random(bs.elements(), rng, StorageType::kFloat);
      const std::vector<float> dyv = Random(ys.elements(), rng, StorageType::kBF16);
      const std::string what = absl::StrFormat("batch %d, relu %d", n, relu);
      auto nan = [](const Shape& s, DType t) {
        Tensor g(s, Device::kCUDA, t);
        g.Fill(std::numeric_limits<float>::quiet_NaN());
        return g;
      };
      auto make = [](const Shape& s, const std::vector<float>& v, DType t) {
        Tensor g(s, Device::kCUDA, t);
        g.CopyFromHost(v);
        return g;
      };
      Ops().set_conv_math(MathMode::kBF16);
      Tensor gw = make(ws, wv, DType::kFloat32), gb = make(bs, bv, DType::kFloat32);
      // Float storage.
      Tensor fx = make(xs, xv, DType::kFloat32), fdy = make(ys, dyv, DType::kFloat32);
      Tensor fy = nan(ys, DType::kFloat32), fdx = nan(xs, DType::kFloat32);
      Tensor fdw = nan(ws, DType::kFloat32), fdb = nan(bs, DType::kFloat32);
      Ops().ConvLayerForward(fx, gw, &gb, relu, fy, p);
      // The mask the bf16 pass will use (its own y, rounded): same signs as fy.
      Ops().ConvLayerBackward(fx, gw, relu ? &fy : nullptr, fdy, fdw, &fdb, &fdx, p);
      // bf16 storage.
      Tensor bx = make(xs, xv, DType::kBF16), bdy = make(ys, dyv, DType::kBF16);
      Tensor by = nan(ys, DType::kBF16), bdx = nan(xs, DType::kBF16);
      Tensor bdw = nan(ws, DType::kFloat32), bdb = nan(bs, DType::kFloat32);
      Ops().ConvLayerForward(bx, gw, &gb, relu, by, p);
      Ops().ConvLayerBackward(bx, gw, relu ? &by : nullptr, bdy, bdw, &bdb, &bdx, p);
      Ops().set_conv_math(MathMode::kFP32);
      auto rounded = [](std::vector<float> v) {
        for (float& f : v) f = FromBf16(ToBf16(f));
        return v;
      };
      const std::vector<float> fyh = fy.ToHost(), byh = by.ToHost();
      EXPECT_EQ(byh, rounded(fyh)) << what << ": y";
      for (size_t i = 0; i < fyh.size(); ++i)
        ASSERT_EQ(fyh[i] > 0.0f, byh[i] > 0.0f) << what << ": the mask's sign, element " << i;
      EXPECT_EQ(bdw.ToHost(), fdw.ToHost()) << what << ": dw";
      EXPECT_EQ(bdx.ToHost(), rounded(fdx.ToHost())) << what << ": dx";
      EXPECT_LT(RelErr(bdb.ToHost(), fdb.ToHost()), 1e-6) << what << ": db";
      // A bf16 tensor outside bf16 math is refused, not misread.
      Ops().set_conv_math(MathMode::kTF32);
      EXPECT_DEATH(Ops().ConvLayerForward(bx, gw, &gb, relu, by, p), "needs --precision=bf16");
      Ops().set_conv_math(MathMode::kFP32);
    }
  }
}

// A convolution's output gradient into its bf16 operand (GradToBf16Gpu: the fused ReLU's
// mask, the rounding and the bias gradient's row sums in one pass) against the separate
// kernels: ReluBackward, FloatToBf16 (the same bits) and RowSum (the same sums up to the
// order of double additions: 1e-6). Rows of 79 (the element path), rows of 12,920 in three
// splits (quads), and the long rows again one element off alignment (the element path).
TEST_F(TcTest, GradToBf16MatchesTheSeparateKernels) {
  struct Case {
    int64_t rows, inner, offset;
  };
  for (const Case k : {Case{13, 79, 0}, Case{3, 12920, 0}, Case{3, 12920, 1}}) {
    const int64_t n = k.rows * k.inner;
    std::mt19937_64 rng(11 + k.inner + k.offset);
    std::vector<float> yv = Random(n + 1, rng, StorageType::kFloat),
                       gv = Random(n + 1, rng, StorageType::kFloat);
    yv[5] = 0.0f;
    yv[6] = -0.0f;
    DeviceBuffer y(n + 1, StorageType::kFloat), g(n + 1, StorageType::kFloat),
        masked(n, StorageType::kFloat);
    y.Upload(yv);
    g.Upload(gv);
    const float* yp = static_cast<const float*>(y.data()) + k.offset;
    const float* gp = static_cast<const float*>(g.data()) + k.offset;
    cuda::ReluBackwardGpu(Ctx(), yp, gp, static_cast<float*>(masked.data()), n);
    for (const bool with_mask : {true, false}) {
      for (const bool with_sums : {true, false}) {
        const std::string what = absl::StrFormat("rows %d x %d, offset %d, mask %d, sums %d",
                                                 k.rows, k.inner, k.offset, with_mask, with_sums);
        DeviceBuffer fused(n + 1, StorageType::kBF16), ref(n, StorageType::kBF16);
        DeviceBuffer sums(k.rows, StorageType::kFloat), ref_sums(k.rows, StorageType::kFloat);
        fused.Poison();
        sums.Poison();
        const float* src = with_mask ? static_cast<const float*>(masked.data()) : gp;
        cuda::GradToBf16Gpu(
            Ctx(), gp, with_mask ? yp : nullptr, static_cast<uint16_t*>(fused.data()) + k.offset,
            with_sums ? static_cast<float*>(sums.data()) : nullptr, k.rows, k.inner);
        cuda::FloatToBf16Gpu(Ctx(), src, ref.data(), n);
        cuda::RowSumGpu(Ctx(), src, static_cast<float*>(ref_sums.data()), k.rows, k.inner);
        const std::vector<float> got = fused.Download(), want = ref.Download();
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(got[size_t(i + k.offset)], want[size_t(i)]) << what << ", element " << i;
        const std::vector<float> s_got = sums.Download(), s_want = ref_sums.Download();
        for (int64_t r = 0; r < k.rows; ++r) {
          if (with_sums) {
            EXPECT_NEAR(s_got[size_t(r)], s_want[size_t(r)], 1e-6 * std::abs(s_want[size_t(r)]))
                << what << ", row " << r;
          } else {
            EXPECT_TRUE(std::isnan(s_got[size_t(r)])) << what << ": sums written, not asked for";
          }
        }
      }
    }
  }
}

// float <-> bf16 conversion kernels: round to nearest even, ties included, NaN kept.
TEST_F(TcTest, Bf16Conversions) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f /* tie: 1 + 2^-8 -> 1 */,
                          1.01171875f /* tie: 1 + 3*2^-8 -> 1 + 2^-6 */,
                          -3.14159f,
                          1e-40f,
                          3.0e38f,
                          std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) v.push_back(u(rng));
  const int64_t n = static_cast<int64_t>(v.size());
  DeviceBuffer f(n, StorageType::kFloat), b(n, StorageType::kBF16), back(n, StorageType::kFloat);
  f.Upload(v);
  cuda::FloatToBf16Gpu(Ctx(), static_cast<const float*>(f.data()), b.data(), n);
  cuda::Bf16ToFloatGpu(Ctx(), b.data(), static_cast<float*>(back.data()), n);
  const std::vector<float> got = back.Download();
  EXPECT_EQ(FromBf16(ToBf16(1.00390625f)), 1.0f);
  EXPECT_EQ(FromBf16(ToBf16(1.01171875f)), 1.015625f);
  for (int64_t i = 0; i < n; ++i) {
    const float want = FromBf16(ToBf16(v[size_t(i)]));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[size_t(i)])) << i;
    } else {
      EXPECT_EQ(got[size_t(i)], want) << "element " << i << " = " << v[size_t(i)];
    }
  }
}

}  // namespace
}  // namespace colonnade
