// Every CUDA Ops operation against the CPU reference (CpuOps) on random inputs of awkward
// sizes, with the GPU output poisoned (NaN) before each run so that an unwritten element
// fails: ||gpu - cpu|| / ||cpu|| < 1e-5 in FP32, bit equality where the op is exact.
// Without a GPU every test skips with a message. The same file also builds against the
// CPU emulator of the CUDA backend (cuda_emu_tests), with smaller problem sizes.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "../op_shapes_cases.h"
#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "core/philox.h"
#include "core/zoo_builders.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernels.h"
#include "cuda/port.h"
#include "gtest/gtest.h"
#include "gpu_test.h"

namespace colonnade {
namespace {

constexpr double kTol = 1e-5;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

Ops& Cpu() {
  static CpuOps* ops = new CpuOps();
  return *ops;
}
Ops& Gpu() { return OpsFor(Device::kCUDA); }

class CudaTest : public GpuTest {};

Tensor RandomCpu(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s, Device::kCPU);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = u(rng);
  return t;
}
Tensor OnGpu(const Tensor& t) { return t.To(Device::kCUDA); }
Tensor Poisoned(const Shape& s, Device d) {
  Tensor t(s, d);
  std::vector<float> nan(t.size(), kNaN);
  t.CopyFromHost(nan);
  return t;
}

// ||got - ref|| / ||ref|| (or ||got - ref|| when ref is 0); infinite if got has a NaN.
double RelErr(const Tensor& got, const Tensor& ref) {
  std::vector<float> a = got.ToHost(), b = ref.ToHost();
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

#define EXPECT_CLOSE(got, ref) EXPECT_LT(RelErr(got, ref), kTol)
#define EXPECT_BITWISE(got, ref) EXPECT_EQ((got).ToHost(), (ref).ToHost())

// ---- convolution ----------------------------------------------------------------------------
struct ConvCase {
  int n, c, h, w, f, kh, kw, stride, pad, groups;
  bool large;  // skipped on the emulator
};

std::string CaseName(const ConvCase& k) {
  return absl::StrFormat("n%d_c%d_%dx%d_f%d_k%dx%d_s%d_p%d_g%d", k.n, k.c, k.h, k.w, k.f, k.kh,
                         k.kw, k.stride, k.pad, k.groups);
}

const ConvCase kConvCases[] = {
    {1, 3, 13, 13, 5, 3, 3, 1, 1, 1, false},      // batch 1, odd everything
    {7, 5, 11, 11, 8, 3, 3, 2, 0, 1, false},      // batch 7, stride 2 (dilated bwd data)
    {33, 48, 9, 9, 96, 5, 5, 1, 2, 2, false},     // batch 33, two groups
    {128, 96, 7, 7, 96, 3, 3, 1, 1, 2, false},    // batch 128, groups (bwd data M = 48)
    {32, 3, 27, 27, 96, 11, 11, 4, 2, 1, false},  // conv1-like, stride 4, BM = 96
    {4, 6, 10, 12, 10, 3, 3, 2, 1, 2, false},     // non-square image, stride 2, groups
    {33, 5, 9, 9, 7, 1, 1, 1, 0, 1, false},       // 1x1
    {64, 16, 8, 8, 192, 3, 3, 1, 1, 1, false},    // M = 192 -> BM = 96 tiles
    {8, 4, 9, 11, 6, 3, 5, 1, 1, 1, false},       // non-square kernel
    {33, 3, 19, 19, 8, 7, 7, 4, 3, 1, false},     // stride 4, odd batch (scalar paths)
    {5, 3, 6, 6, 4, 1, 1, 1, 1, 1, false},        // pad larger than kernel - 1
    {128, 3, 31, 31, 16, 5, 5, 2, 2, 1, false},   // stride 2, batch 128
    {2, 96, 13, 13, 256, 3, 3, 1, 1, 2, false},   // conv5-like with batch 2
    {128, 48, 13, 13, 128, 3, 3, 1, 1, 1, true},  // BM = 128 tiles, batch 128
    {128, 8, 32, 32, 16, 3, 3, 1, 1, 1, true},    // long reduction: split-K backward filter
    {128, 96, 27, 27, 256, 5, 5, 1, 2, 2, true},  // AlexNet conv2 at batch 128
};

class ConvTest : public CudaTest, public ::testing::WithParamInterface<ConvCase> {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    if (kEmulated && GetParam().large) GTEST_SKIP() << "large case skipped on the emulator";
  }
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
  Shape XShape() const {
    const ConvCase& k = GetParam();
    return Shape{k.c, k.h, k.w, k.n};
  }
  Shape WShape() const {
    const ConvCase& k = GetParam();
    return Shape{k.f, k.c / k.groups, k.kh, k.kw};
  }
  Shape YShape() const {
    const ConvCase& k = GetParam();
    return Shape{k.f, ConvOutSize(k.h, k.kh, k.stride, k.pad),
                 ConvOutSize(k.w, k.kw, k.stride, k.pad), k.n};
  }
};

// Forward and backward data run each kernel version the autotuner races (2 and 3: cp.async
// pipeline with 8- and 16-deep slices; shapes whose batch is not a multiple of 4 take the
// general path, version 1, whatever is forced); each must match the CPU, and the versions
// each other bit for bit.
TEST_P(ConvTest, Forward) {
  const ConvParams p = Params();
  Tensor x = RandomCpu(XShape(), 1), w = RandomCpu(WShape(), 2);
  Tensor ref(YShape(), Device::kCPU);
  Cpu().ConvForward(x, w, ref, p);
  Tensor gx = OnGpu(x), gw = OnGpu(w);
  std::vector<std::vector<float>> outs;
  for (int version : {2, 3}) {
    cuda::SetConvGemmVersion(version);
    Tensor gy = Poisoned(YShape(), Device::kCUDA);
    Gpu().ConvForward(gx, gw, gy, p);
    EXPECT_CLOSE(gy, ref) << CaseName(GetParam()) << " version " << version;
    outs.push_back(gy.ToHost());
  }
  cuda::SetConvGemmVersion(0);
  EXPECT_EQ(outs[0], outs[1]) << "versions 2 and 3 differ";
}

TEST_P(ConvTest, BackwardData) {
  const ConvParams p = Params();
  Tensor dy = RandomCpu(YShape(), 3), w = RandomCpu(WShape(), 4);
  Tensor ref(XShape(), Device::kCPU);
  Cpu().ConvBackwardData(dy, w, ref, p);
  Tensor gdy = OnGpu(dy), gw = OnGpu(w);
  std::vector<std::vector<float>> outs;
  for (int version : {2, 3}) {
    cuda::SetConvGemmVersion(version);
    Tensor gdx = Poisoned(XShape(), Device::kCUDA);
    Gpu().ConvBackwardData(gdy, gw, gdx, p);
    EXPECT_CLOSE(gdx, ref) << CaseName(GetParam()) << " version " << version;
    outs.push_back(gdx.ToHost());
  }
  cuda::SetConvGemmVersion(0);
  EXPECT_EQ(outs[0], outs[1]) << "versions 2 and 3 differ";
}

TEST_P(ConvTest, BackwardFilter) {
  const ConvParams p = Params();
  Tensor x = RandomCpu(XShape(), 5), dy = RandomCpu(YShape(), 6);
  Tensor ref(WShape(), Device::kCPU);
  Cpu().ConvBackwardFilter(x, dy, ref, p);
  Tensor gx = OnGpu(x), gdy = OnGpu(dy), gdw = Poisoned(WShape(), Device::kCUDA);
  Gpu().ConvBackwardFilter(gx, gdy, gdw, p);
  EXPECT_CLOSE(gdw, ref) << CaseName(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvTest, ::testing::ValuesIn(kConvCases),
                         [](const ::testing::TestParamInfo<ConvCase>& i) {
                           return CaseName(i.param);
                         });

// A convolution reading a channel slice of a larger tensor (a misaligned view: the general
// path must take over from the float4 one).
TEST_F(CudaTest, ConvOnMisalignedChannelView) {
  ConvParams p;
  p.kernel_h = p.kernel_w = 3;
  p.pad = 1;
  const int n = 8, h = 5, w = 5;  // h*w*n = 200 floats per channel: offset 1 breaks 16 B
  Tensor big = RandomCpu(Shape{7, h, w, n}, 11);
  Tensor wt = RandomCpu(Shape{6, 4, 3, 3}, 12);
  Tensor ref(Shape{6, h, w, n}, Device::kCPU);
  Tensor cpu_view = big.Channels(1, 4);
  Cpu().ConvForward(cpu_view, wt, ref, p);
  Tensor gbig = OnGpu(big);
  Tensor gview = gbig.Channels(1, 4);
  Tensor gy = Poisoned(Shape{6, h, w, n}, Device::kCUDA);
  Gpu().ConvForward(gview, OnGpu(wt), gy, p);
  EXPECT_CLOSE(gy, ref);
}

// ---- element-wise and memory -------------------------------------------------------------------
TEST_F(CudaTest, FillCopyAxpbyAdd) {
  const Shape s{5, 3, 7, 33};
  Tensor x = RandomCpu(s, 21), y = RandomCpu(s, 22);
  Tensor gy = Poisoned(s, Device::kCUDA);
  Gpu().Fill(gy, 0.5f);
  Tensor half(s, Device::kCPU);
  Cpu().Fill(half, 0.5f);
  EXPECT_BITWISE(gy, half);

  Tensor gx = OnGpu(x);
  Tensor gc = Poisoned(s, Device::kCUDA);
  Gpu().Copy(gx, gc);
  EXPECT_BITWISE(gc, x);

  Tensor ref = y.To(Device::kCPU);
  Cpu().Axpby(0.7f, x, -1.3f, ref);
  Tensor gz = OnGpu(y);
  Gpu().Axpby(0.7f, gx, -1.3f, gz);
  EXPECT_BITWISE(gz, ref);

  Tensor ref0(s, Device::kCPU);
  Cpu().Fill(ref0, kNaN);
  Cpu().Axpby(2.5f, x, 0.0f, ref0);  // beta = 0: y is not read
  Tensor gz0 = Poisoned(s, Device::kCUDA);
  Gpu().Axpby(2.5f, gx, 0.0f, gz0);
  EXPECT_BITWISE(gz0, ref0);

  Tensor sum_ref(s, Device::kCPU);
  Cpu().Add(x, y, sum_ref);
  Tensor gsum = Poisoned(s, Device::kCUDA);
  Gpu().Add(gx, OnGpu(y), gsum);
  EXPECT_BITWISE(gsum, sum_ref);
  Tensor galias = OnGpu(x);  // in place: y = y + b
  Gpu().Add(galias, OnGpu(y), galias);
  EXPECT_BITWISE(galias, sum_ref);
}

// Training batches: page-locked host tensors whose copy to the device is only enqueued;
// the copy must land after the work queued before it and before the work queued after.
TEST_F(CudaTest, PinnedHostTensorAndAsyncCopy) {
  const Shape s{3, 5, 5, 36};
  Tensor h = Tensor::PinnedHost(s, Device::kCUDA);
  ASSERT_EQ(h.device(), Device::kCPU);
  ASSERT_EQ(h.shape(), s);
#if !defined(COLONNADE_CUDA_EMULATE)
  cudaPointerAttributes attr;
  ASSERT_EQ(cudaPointerGetAttributes(&attr, h.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost) << "PinnedHost did not return page-locked memory";
#endif
  Tensor x = RandomCpu(s, 31);
  std::memcpy(h.data(), x.data(), x.bytes());
  Tensor g = Poisoned(s, Device::kCUDA);
  Gpu().Fill(g, 3.0f);  // queued before the copy
  g.CopyFromAsync(h);
  Tensor y = Poisoned(s, Device::kCUDA);
  Gpu().Copy(g, y);  // queued after it
  EXPECT_BITWISE(y, x);
  EXPECT_BITWISE(g, x);
}

// The trainer's metrics path: a device -> pinned host copy is only enqueued behind the
// device's work, and holds the data once a fence recorded after it has passed; fences
// measure device time in order.
TEST_F(CudaTest, AsyncCopyToPinnedHostAndFences) {
  const Shape s{7, 3, 3, 33};
  Tensor x = RandomCpu(s, 41);
  Tensor g = Poisoned(s, Device::kCUDA);
  Backend* b = GetBackend(Device::kCUDA);
  std::unique_ptr<Fence> start = b->RecordFence(Backend::FenceUse::kTimed);
  g.CopyFrom(x);
  Tensor doubled = Poisoned(s, Device::kCUDA);
  Gpu().Add(g, g, doubled);  // queued before the copy back: the copy must see its result
  Tensor h = Tensor::PinnedHost(s, Device::kCUDA);
  std::fill(h.data(), h.data() + h.size(), std::nanf(""));
  h.CopyFromAsync(doubled);
  std::unique_ptr<Fence> ordered = b->RecordFence();  // untimed
  std::unique_ptr<Fence> done = b->RecordFence(Backend::FenceUse::kTimed);
  ordered->Wait();
  std::vector<float> want = x.ToHost();
  for (float& v : want) v += v;
  for (int64_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(h.data()[i], want[i]) << "element " << i;
  }
  done->Wait();
  EXPECT_GE(done->MillisecondsSince(*start), 0.0);
  Gpu().Fill(g, 1.0f);  // later work does not change the copy already made
  Gpu().Copy(g, doubled);
  b->Synchronize();
  EXPECT_EQ(h.data()[0], want[0]);
}

TEST_F(CudaTest, CopyChannelsAndSum) {
  Tensor a = RandomCpu(Shape{3, 5, 5, 7}, 31), b = RandomCpu(Shape{5, 5, 5, 7}, 32);
  Tensor ref(Shape{8, 5, 5, 7}, Device::kCPU);
  Cpu().CopyChannelsIn(a, 0, ref);
  Cpu().CopyChannelsIn(b, 3, ref);
  Tensor g = Poisoned(Shape{8, 5, 5, 7}, Device::kCUDA);
  Gpu().CopyChannelsIn(OnGpu(a), 0, g);
  Gpu().CopyChannelsIn(OnGpu(b), 3, g);
  EXPECT_BITWISE(g, ref);
  Tensor out = Poisoned(Shape{5, 5, 5, 7}, Device::kCUDA);
  Gpu().CopyChannelsOut(g, 3, out);
  EXPECT_BITWISE(out, b);

  Tensor big = RandomCpu(Shape{kEmulated ? 1000 : 1000003}, 33, 0.0f, 1.0f);
  const double want = Cpu().Sum(big), got = Gpu().Sum(OnGpu(big));
  EXPECT_NEAR(got, want, 1e-9 * std::abs(want));
}

TEST_F(CudaTest, BiasForwardBackward) {
  for (const Shape& s :
       {Shape{5, 7, 7, 33}, Shape{96, 3, 3, 128}, Shape{4096, 1, 1, 7}, Shape{3, 64, 64, 128}}) {
    if (kEmulated && s.elements() > 2000000) continue;
    Tensor y = RandomCpu(s, 41), b = RandomCpu(Shape{s[0]}, 42);
    Tensor gy = OnGpu(y);
    Cpu().AddBias(y, b);
    Gpu().AddBias(gy, OnGpu(b));
    EXPECT_BITWISE(gy, y) << s.ToString();

    Tensor dy = RandomCpu(s, 43);
    Tensor db(Shape{s[0]}, Device::kCPU);
    Cpu().BiasBackward(dy, db);
    Tensor gdb = Poisoned(Shape{s[0]}, Device::kCUDA);
    Gpu().BiasBackward(OnGpu(dy), gdb);
    EXPECT_CLOSE(gdb, db) << s.ToString();
  }
}

TEST_F(CudaTest, GemmAllTransposes) {
  const int64_t m = 33, n = 17, k = 29;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 0.5f}) {
        Tensor a = RandomCpu(Shape{m * k}, 51), b = RandomCpu(Shape{k * n}, 52);
        Tensor c = RandomCpu(Shape{m * n}, 53);
        Tensor gc = beta == 0.0f ? Poisoned(Shape{m * n}, Device::kCUDA) : OnGpu(c);
        Tensor ga = OnGpu(a), gb = OnGpu(b);
        Cpu().Gemm(ta, tb, m, n, k, 1.5f, a.data(), b.data(), beta, c.data());
        Gpu().Gemm(ta, tb, m, n, k, 1.5f, ga.data(), gb.data(), beta, gc.data());
        EXPECT_CLOSE(gc, c) << "ta " << ta << " tb " << tb << " beta " << beta;
      }
}

// ---- pooling ------------------------------------------------------------------------------------
struct PoolCase {
  PoolParams::Kind kind;
  int size, stride, pad;
  int c, h, w, n;
  PoolParams params() const { return zoo::Pool(kind, size, stride, pad); }
  Shape x_shape() const { return Shape{c, h, w, n}; }
  Shape y_shape() const {
    return Shape{c, PoolOutSize(h, size, stride, pad), PoolOutSize(w, size, stride, pad), n};
  }
};

TEST_F(CudaTest, Pooling) {
  const PoolCase cases[] = {
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33},
      {PoolParams::kMax, 3, 2, 0, 3, 12, 12, 7},
      {PoolParams::kAvg, 3, 2, 0, 5, 12, 12, 33},
      {PoolParams::kMax, 2, 2, 0, 4, 9, 7, 1},
      {PoolParams::kAvg, 3, 2, 1, 3, 8, 8, 128},
      {PoolParams::kMax, 3, 3, 1, 2, 10, 11, 5},
      {PoolParams::kAvg, 5, 3, 2, 4, 11, 11, 4},
      {PoolParams::kMax, 3, 2, 0, 96, 27, 27, 32},
      // Batches that are multiples of 4 take the float4 kernels (four images per thread).
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 8},
      {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12},
  };
  for (const PoolCase& k : cases) {
    if (kEmulated && k.c * k.h * k.w * k.n > 500000) continue;
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    const std::string name = absl::StrFormat("%s size %d stride %d pad %d on %s",
                                             k.kind == PoolParams::kMax ? "max" : "avg", k.size,
                                             k.stride, k.pad, xs.ToString());
    for (bool ties : {false, true}) {
      Tensor x = RandomCpu(xs, 61);
      if (ties)  // few distinct values: max pooling must route to the first maximum
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i] * 2.0f);
      Tensor y(ys, Device::kCPU);
      Cpu().PoolForward(x, y, p);
      Tensor gx = OnGpu(x), gy = Poisoned(ys, Device::kCUDA);
      Gpu().PoolForward(gx, gy, p);
      if (k.kind == PoolParams::kMax) {
        EXPECT_BITWISE(gy, y) << name;
      } else {
        EXPECT_CLOSE(gy, y) << name;
      }
      Tensor dy = RandomCpu(ys, 62), dx(xs, Device::kCPU);
      Cpu().PoolBackward(x, y, dy, dx, p);
      Tensor gyc = OnGpu(y), gdy = OnGpu(dy);
      std::vector<std::vector<float>> outs;
      for (int version : {2, 3}) {  // max pooling backward: both versions, bit-identical
        cuda::SetPoolBackwardVersion(version);
        Tensor gdx = Poisoned(xs, Device::kCUDA);
        Gpu().PoolBackward(gx, gyc, gdy, gdx, p);
        EXPECT_CLOSE(gdx, dx) << name << (ties ? " (ties)" : "") << " version " << version;
        outs.push_back(gdx.ToHost());
      }
      cuda::SetPoolBackwardVersion(0);
      EXPECT_EQ(outs[0], outs[1]) << name << ": pool backward versions differ";
    }
  }
}

TEST_F(CudaTest, GlobalAvgPool) {
  const Shape xs{7, 6, 5, 33}, ys{7, 1, 1, 33};
  Tensor x = RandomCpu(xs, 71), y(ys, Device::kCPU);
  Cpu().GlobalAvgPoolForward(x, y);
  Tensor gy = Poisoned(ys, Device::kCUDA);
  Gpu().GlobalAvgPoolForward(OnGpu(x), gy);
  EXPECT_CLOSE(gy, y);
  Tensor dy = RandomCpu(ys, 72), dx(xs, Device::kCPU);
  Cpu().GlobalAvgPoolBackward(dy, dx);
  Tensor gdx = Poisoned(xs, Device::kCUDA);
  Gpu().GlobalAvgPoolBackward(OnGpu(dy), gdx);
  EXPECT_BITWISE(gdx, dx);
}

// ---- normalisation
// ----------------------------------------------------------------------------------
TEST_F(CudaTest, LrnAcrossChannels) {
  struct Case {
    int c, h, w, n, size, groups;
    bool over_size;
    float alpha, beta, k;
  };
  const Case cases[] = {
      {96, 5, 5, 33, 5, 2, false, 1e-4f, 0.75f, 2.0f},  // AlexNet's norm1 with two columns
      {5, 3, 4, 7, 5, 1, true, 1e-2f, 0.75f, 1.0f},
      {48, 3, 3, 128, 3, 1, false, 0.5f, 0.6f, 1.5f},  // large alpha, beta != 0.75
      {6, 2, 2, 1, 4, 2, false, 0.3f, 0.75f, 1.0f},    // even size
  };
  for (const Case& k : cases) {
    LrnCrossParams p;
    p.size = k.size;
    p.groups = k.groups;
    p.alpha_over_size = k.over_size;
    p.alpha = k.alpha;
    p.beta = k.beta;
    p.k = k.k;
    const Shape s{k.c, k.h, k.w, k.n};
    Tensor x = RandomCpu(s, 81, -3.0f, 3.0f), y(s, Device::kCPU), d(s, Device::kCPU);
    Cpu().LrnCrossForward(x, y, d, p);
    Tensor gx = OnGpu(x), gy = Poisoned(s, Device::kCUDA), gd = Poisoned(s, Device::kCUDA);
    Gpu().LrnCrossForward(gx, gy, gd, p);
    EXPECT_CLOSE(gy, y) << s.ToString();
    EXPECT_CLOSE(gd, d) << s.ToString();
    Tensor dy = RandomCpu(s, 82), dx(s, Device::kCPU);
    Cpu().LrnCrossBackward(x, y, d, dy, dx, p);
    Tensor gdx = Poisoned(s, Device::kCUDA);
    Gpu().LrnCrossBackward(gx, OnGpu(y), OnGpu(d), OnGpu(dy), gdx, p);
    EXPECT_CLOSE(gdx, dx) << s.ToString();
  }
}

// The LRN + max-pool shapes of the fused kernels' tests: AlexNet's norm1 + pool1 with two
// columns (small), batches 7, 33, 8 and 1, LRN windows of 5, 3 and 9 channels, pooling 3/2,
// 2/2 and 3/1 with padding.
struct LrnPoolCase {
  int c, h, w, n, lrn_size, groups, pool, stride, pad;
  LrnCrossParams lrn_params() const {
    LrnCrossParams lp;
    lp.size = lrn_size;
    lp.groups = groups;
    return lp;
  }
  PoolParams pool_params() const { return zoo::Pool(PoolParams::kMax, pool, stride, pad); }
  Shape x_shape() const { return Shape{c, h, w, n}; }
  Shape y_shape() const {
    return Shape{c, PoolOutSize(h, pool, stride, pad), PoolOutSize(w, pool, stride, pad), n};
  }
};
std::vector<LrnPoolCase> LrnPoolCases() {
  return {
      {96, 13, 13, 7, 5, 2, 3, 2, 0},
      {5, 6, 7, 33, 3, 1, 2, 2, 0},
      {20, 5, 5, 8, 9, 2, 3, 1, 1},
      {48, 9, 9, 1, 5, 1, 3, 2, 1},
  };
}

// LRN + max pooling fused (Ops::LrnMaxPoolForward / Backward): the fused kernels against
// the same GPU's unfused kernels (the Ops defaults, which CudaOps overrides), bit for bit:
// the fusion must change no result (each LRN value recomputed with the same arithmetic,
// the same first maximum, the pooling gradient summed in the same order). Against the CPU
// with the suite's FP32 tolerance. Shapes: AlexNet's norm + pool with two columns, batches
// 7 and 33, LRN windows of 3, 5 and 9 channels (HALF 1, 2, 4), channels 5 and 96, pooling 3/2,
// 2/2 and 3/1 with padding, ties (few distinct values) and a chunked channel walk (small
// grids split a group's channels among threads, with halos); both forward versions (the
// tiled one with partial tiles of windows and of images).
TEST_F(CudaTest, LrnMaxPoolFusedAsUnfused) {
  std::vector<LrnPoolCase> cases = LrnPoolCases();
  if (!kEmulated) cases.push_back({96, 55, 55, 32, 5, 2, 3, 2, 0});  // whole groups per thread
  for (const LrnPoolCase& k : cases) {
    const LrnCrossParams lp = k.lrn_params();
    const PoolParams pp = k.pool_params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    for (bool ties : {false, true}) {
      const std::string name =
          absl::StrFormat("%s lrn %d, pool %d/%d pad %d%s", xs.ToString(), k.lrn_size, k.pool,
                          k.stride, k.pad, ties ? " (ties)" : "");
      Tensor x = RandomCpu(xs, 91, -3.0f, 3.0f);
      if (ties)
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i]);
      Tensor y(ys, Device::kCPU), arg(ys, Device::kCPU);
      Cpu().LrnMaxPoolForward(x, y, arg, lp, pp);
      Tensor gx = OnGpu(x);
      Tensor uy = Poisoned(ys, Device::kCUDA), uarg(ys, Device::kCUDA);
      Gpu().Ops::LrnMaxPoolForward(gx, uy, uarg, lp, pp);
      Tensor gy, garg;
      for (int version : {1, 2}) {  // per window, tiled: the same bits
        cuda::SetLrnMaxPoolForwardVersion(version);
        gy = Poisoned(ys, Device::kCUDA), garg = Poisoned(ys, Device::kCUDA);
        Gpu().LrnMaxPoolForward(gx, gy, garg, lp, pp);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), uy.ToHost())) << name << ": forward v" << version;
      }
      cuda::SetLrnMaxPoolForwardVersion(0);
      EXPECT_CLOSE(gy, y) << name;
      Tensor dy = RandomCpu(ys, 92), dx(xs, Device::kCPU);
      Cpu().LrnMaxPoolBackward(x, y, arg, dy, dx, lp, pp);
      Tensor gdy = OnGpu(dy);
      Tensor gdx = Poisoned(xs, Device::kCUDA), udx = Poisoned(xs, Device::kCUDA);
      Gpu().LrnMaxPoolBackward(gx, gy, garg, gdy, gdx, lp, pp);
      Gpu().Ops::LrnMaxPoolBackward(gx, uy, uarg, gdy, udx, lp, pp);
      EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), udx.ToHost())) << name << ": backward";
      EXPECT_CLOSE(gdx, dx) << name;
    }
  }
}

TEST_F(CudaTest, LrnWithinMap) {
  for (int size : {3, 4, 5}) {
    LrnWithinParams p;
    p.size = size;
    p.alpha = 0.5f;
    const Shape s{3, 7, 6, 33};
    Tensor x = RandomCpu(s, 91, -2.0f, 2.0f), y(s, Device::kCPU), d(s, Device::kCPU);
    Cpu().LrnWithinForward(x, y, d, p);
    Tensor gx = OnGpu(x), gy = Poisoned(s, Device::kCUDA), gd = Poisoned(s, Device::kCUDA);
    Gpu().LrnWithinForward(gx, gy, gd, p);
    EXPECT_CLOSE(gy, y) << "size " << size;
    EXPECT_CLOSE(gd, d) << "size " << size;
    Tensor dy = RandomCpu(s, 92), dx(s, Device::kCPU);
    Cpu().LrnWithinBackward(x, y, d, dy, dx, p);
    Tensor gdx = Poisoned(s, Device::kCUDA);
    Gpu().LrnWithinBackward(gx, OnGpu(y), OnGpu(d), OnGpu(dy), gdx, p);
    EXPECT_CLOSE(gdx, dx) << "size " << size;
  }
}

// Small channels (one block each) and long ones (inner 12,920: split over blocks, the
// partial sums added in order; the last split shorter).
class CudaBatchNormTest : public CudaTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(CudaBatchNormTest, AgreesWithTheCpu) {
  const Shape s = GetParam(), c{s[0]};
  BatchNormParams p;
  Tensor x = RandomCpu(s, 101, -2.0f, 3.0f), gamma = RandomCpu(c, 102), beta = RandomCpu(c, 103);
  Tensor rm = RandomCpu(c, 104), rv = RandomCpu(c, 105, 0.5f, 2.0f);
  Tensor grm = OnGpu(rm), grv = OnGpu(rv);
  Tensor y(s, Device::kCPU), sm(c, Device::kCPU), si(c, Device::kCPU), sc(c, Device::kCPU);
  Cpu().BatchNormForwardTrain(x, gamma, beta, y, rm, rv, sm, si, sc, p);
  Tensor gx = OnGpu(x), gg = OnGpu(gamma), gb = OnGpu(beta);
  Tensor gy = Poisoned(s, Device::kCUDA), gsm = Poisoned(c, Device::kCUDA),
         gsi = Poisoned(c, Device::kCUDA), gsc = Poisoned(c, Device::kCUDA);
  Gpu().BatchNormForwardTrain(gx, gg, gb, gy, grm, grv, gsm, gsi, gsc, p);
  EXPECT_CLOSE(gy, y);
  EXPECT_CLOSE(gsm, sm);
  EXPECT_CLOSE(gsi, si);
  EXPECT_CLOSE(gsc, sc);
  EXPECT_CLOSE(grm, rm);
  EXPECT_CLOSE(grv, rv);
  // The recomputation of the backward pass (docs/MEMORY.md): bitwise the forward's y.
  Tensor ga = Poisoned(s, Device::kCUDA);
  Gpu().BatchNormApply(gx, gsm, gsc, gb, ga);
  EXPECT_BITWISE(ga, gy);

  Tensor yi(s, Device::kCPU);
  Cpu().BatchNormForwardInfer(x, gamma, beta, rm, rv, yi, p);
  Tensor gyi = Poisoned(s, Device::kCUDA);
  Gpu().BatchNormForwardInfer(gx, gg, gb, OnGpu(rm), OnGpu(rv), gyi, p);
  EXPECT_CLOSE(gyi, yi);

  Tensor dy = RandomCpu(s, 106), dx(s, Device::kCPU), dg(c, Device::kCPU), db(c, Device::kCPU);
  Cpu().BatchNormBackward(x, gamma, sm, si, dy, dx, dg, db);
  Tensor gdx = Poisoned(s, Device::kCUDA), gdg = Poisoned(c, Device::kCUDA),
         gdb = Poisoned(c, Device::kCUDA);
  Gpu().BatchNormBackward(gx, gg, OnGpu(sm), OnGpu(si), OnGpu(dy), gdx, gdg, gdb);
  EXPECT_CLOSE(gdx, dx);
  EXPECT_CLOSE(gdg, dg);
  EXPECT_CLOSE(gdb, db);
}

// Batch norm + ReLU fused (Ops::BatchNormRelu*): the CUDA passes against the same GPU's
// primitives in the unfused order (the Ops defaults), bit for bit: y, the saved and running
// statistics, the recomputation's y, and dx, dgamma, dbeta with dy masked by the ReLU
// (about half the elements rectified: x straddles the mean).
TEST_P(CudaBatchNormTest, ReluFusedAsUnfused) {
  const Shape s = GetParam(), c{s[0]};
  BatchNormParams p;
  Tensor x = OnGpu(RandomCpu(s, 121, -2.0f, 3.0f)), gamma = OnGpu(RandomCpu(c, 122)),
         beta = OnGpu(RandomCpu(c, 123));
  struct Run {
    Tensor y, rm, rv, sm, si, sc, apply, dx, dg, db;
  };
  auto run = [&](bool fused) {
    Run r{Poisoned(s, Device::kCUDA),           OnGpu(RandomCpu(c, 124)),
          OnGpu(RandomCpu(c, 125, 0.5f, 2.0f)), Poisoned(c, Device::kCUDA),
          Poisoned(c, Device::kCUDA),           Poisoned(c, Device::kCUDA),
          Poisoned(s, Device::kCUDA),           Poisoned(s, Device::kCUDA),
          Poisoned(c, Device::kCUDA),           Poisoned(c, Device::kCUDA)};
    Tensor dy = OnGpu(RandomCpu(s, 126));
    Ops& o = Gpu();
    if (fused) {
      o.BatchNormReluForwardTrain(x, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p);
      o.BatchNormReluApply(x, r.sm, r.sc, beta, r.apply);
      o.BatchNormReluBackward(x, gamma, r.sm, r.si, r.y, dy, r.dx, r.dg, r.db);
    } else {
      o.Ops::BatchNormReluForwardTrain(x, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p);
      o.Ops::BatchNormReluApply(x, r.sm, r.sc, beta, r.apply);
      o.Ops::BatchNormReluBackward(x, gamma, r.sm, r.si, r.y, dy, r.dx, r.dg, r.db);
    }
    return r;
  };
  const Run a = run(false), b = run(true);
  int rectified = 0;
  for (float v : a.y.ToHost()) rectified += v == 0.0f;
  EXPECT_GT(rectified, s.elements() / 5) << "the ReLU should zero a good part of y";
  const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> outs[] = {
      {"y", {&a.y, &b.y}},
      {"running_mean", {&a.rm, &b.rm}},
      {"running_var", {&a.rv, &b.rv}},
      {"save_mean", {&a.sm, &b.sm}},
      {"save_invstd", {&a.si, &b.si}},
      {"save_scale", {&a.sc, &b.sc}},
      {"apply", {&a.apply, &b.apply}},
      {"dx", {&a.dx, &b.dx}},
      {"dgamma", {&a.dg, &b.dg}},
      {"dbeta", {&a.db, &b.db}}};
  for (const auto& [name, t] : outs)
    EXPECT_TRUE(BitwiseEqual(t.second->ToHost(), t.first->ToHost())) << name;
  EXPECT_TRUE(BitwiseEqual(b.apply.ToHost(), b.y.ToHost())) << "recomputed y";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaBatchNormTest,
                         ::testing::Values(Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return "c" + std::to_string(info.param[0]) + "_inner" +
                                  std::to_string(info.param.elements() / info.param[0]);
                         });

// The residual sum + ReLU pass against the GPU primitives (Add, then ReluForward in place)
// and both against the CPU: bitwise; an odd size (one element per thread step) and a multiple
// of 4 (quads: BinaryKernel's V = 4).
TEST_F(CudaTest, AddReluFusedAsUnfused) {
  for (const Shape& s : {Shape{7, 5, 5, 33}, Shape{4, 5, 5, 32}}) {
    Tensor a = OnGpu(RandomCpu(s, 131)), b = OnGpu(RandomCpu(s, 132));
    Tensor fused = Poisoned(s, Device::kCUDA), apart = Poisoned(s, Device::kCUDA);
    Gpu().AddRelu(a, b, fused);
    Gpu().Ops::AddRelu(a, b, apart);
    EXPECT_TRUE(BitwiseEqual(fused.ToHost(), apart.ToHost())) << s.ToString();
    Tensor y(s, Device::kCPU);
    Cpu().AddRelu(a.To(Device::kCPU), b.To(Device::kCPU), y);
    EXPECT_BITWISE(fused, y);
    Tensor sum = Poisoned(s, Device::kCUDA), sum_ref(s, Device::kCPU);
    Gpu().Add(a, b, sum);
    Cpu().Add(a.To(Device::kCPU), b.To(Device::kCPU), sum_ref);
    EXPECT_BITWISE(sum, sum_ref);
  }
}

// ---- activations, dropout, loss, optimiser
// ------------------------------------------------------------
TEST_F(CudaTest, Relu) {
  const Shape s{7, 5, 5, 33};
  Tensor x = RandomCpu(s, 111), y(s, Device::kCPU);
  Cpu().ReluForward(x, y);
  Tensor gx = OnGpu(x), gy = Poisoned(s, Device::kCUDA);
  Gpu().ReluForward(gx, gy);
  EXPECT_BITWISE(gy, y);
  Gpu().ReluForward(gx, gx);  // in place
  EXPECT_BITWISE(gx, y);
  Tensor dy = RandomCpu(s, 112), dx(s, Device::kCPU);
  Cpu().ReluBackward(y, dy, dx);
  Tensor gdy = OnGpu(dy);
  Gpu().ReluBackward(gy, gdy, gdy);  // in place
  EXPECT_BITWISE(gdy, dx);
}

TEST_F(CudaTest, DropoutMaskIsBitIdentical) {
  const Shape s{9, 3, 2, 33};
  for (int split = 0; split < 2; ++split) {
    DropoutParams p;
    p.p = 0.5f;
    p.seed = MixKey(1234, 5);
    p.step = 17;
    if (split) {  // a column/replica slice of a larger layer
      p.channel_offset = 9;
      p.image_offset = 33;
      p.global_batch = 99;
    }
    Tensor x = RandomCpu(s, 121), y(s, Device::kCPU), m(s, Device::kCPU);
    Cpu().DropoutForward(x, y, m, p);
    Tensor gx = OnGpu(x), gy = Poisoned(s, Device::kCUDA), gm = Poisoned(s, Device::kCUDA);
    Gpu().DropoutForward(gx, gy, gm, p);
    EXPECT_BITWISE(gm, m);
    EXPECT_BITWISE(gy, y);
    Tensor dy = RandomCpu(s, 122), dx(s, Device::kCPU);
    Cpu().DropoutBackward(dy, m, dx);
    Tensor gdx = Poisoned(s, Device::kCUDA);
    Gpu().DropoutBackward(OnGpu(dy), gm, gdx);
    EXPECT_BITWISE(gdx, dx);
  }
}

TEST_F(CudaTest, SoftmaxCrossEntropy) {
  for (int k : {10, 1000}) {
    const int n = 33;
    Tensor logits = RandomCpu(Shape{k, 1, 1, n}, 131, -5.0f, 5.0f);
    Tensor labels(Shape{1, 1, 1, n}, Device::kCPU);
    for (int i = 0; i < n; ++i) labels.data()[i] = static_cast<float>((i * 7919) % k);
    Tensor probs(logits.shape(), Device::kCPU), loss(Shape{1, 1, 1, n}, Device::kCPU);
    Cpu().SoftmaxCrossEntropyForward(logits, labels, probs, loss);
    Tensor glabels = OnGpu(labels);
    Tensor gp = Poisoned(logits.shape(), Device::kCUDA), gl = Poisoned(loss.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyForward(OnGpu(logits), glabels, gp, gl);
    EXPECT_CLOSE(gp, probs) << k << " classes";
    EXPECT_CLOSE(gl, loss) << k << " classes";
    Tensor d(logits.shape(), Device::kCPU);
    Cpu().SoftmaxCrossEntropyBackward(probs, labels, 1.0f / n, d);
    Tensor gd = Poisoned(logits.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyBackward(OnGpu(probs), glabels, 1.0f / n, gd);
    EXPECT_BITWISE(gd, d) << k << " classes";
  }
}

// The results kernel against CpuOps::AccumulateResults (core/results.h; tests/core/
// results_test.cc checks that against a full sort): equal counts, the loss sum to double
// rounding (another order of additions), over steps added in a row, with ties (few
// probability levels), a label outside the classes, and a non-finite step whose number
// comes from the device (a graphed step's StepScalars::step).
TEST_F(CudaTest, AccumulateResults) {
  struct Case {
    int k, n, levels;
  };
  for (const Case& c : {Case{10, 33, 3}, Case{1000, 128, 20}, Case{3, 1, 2}, Case{10, 257, 1000}}) {
    if (kEmulated && c.k * c.n > 20000) continue;
    SCOPED_TRACE(absl::StrFormat("%d classes, %d images", c.k, c.n));
    Tensor cpu_totals = NewResultTotals(Device::kCPU);
    Tensor gpu_totals = NewResultTotals(Device::kCUDA);
    int64_t* step_on_device = nullptr;
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&step_on_device), sizeof(int64_t)));
    const int64_t device_step = 41;
    COLONNADE_CUDA_CHECK(
        cudaMemcpy(step_on_device, &device_step, sizeof(int64_t), cudaMemcpyHostToDevice));
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    for (int step = 0; step < 3; ++step) {
      std::mt19937 rng(c.k * 7 + c.n + step);
      std::uniform_int_distribution<int> level(0, c.levels - 1), cls(0, c.k - 1);
      Tensor probs(Shape{c.k, 1, 1, c.n}), labels(Shape{1, 1, 1, c.n}), loss(Shape{c.n});
      for (int64_t i = 0; i < probs.size(); ++i) {
        probs.data()[i] = static_cast<float>(level(rng)) / c.levels;
      }
      for (int j = 0; j < c.n; ++j) {
        labels.data()[j] = static_cast<float>(cls(rng));
        loss.data()[j] = static_cast<float>(level(rng)) + 0.37f;
      }
      if (step == 1) labels.data()[0] = static_cast<float>(c.k);  // not a class
      if (step == 2) loss.data()[c.n / 2] = kNaN;
      Cpu().AccumulateResults(probs, labels, loss, 41, nullptr, cpu_totals);
      Gpu().AccumulateResults(OnGpu(probs), OnGpu(labels), OnGpu(loss), 7,
                              step == 2 ? step_on_device : nullptr, gpu_totals);
    }
    const ResultTotals want = ReadResultTotals(cpu_totals), got = ReadResultTotals(gpu_totals);
    COLONNADE_CUDA_CHECK(cudaFree(step_on_device));  // the kernels have run (read above)
    EXPECT_EQ(got.top1, want.top1);
    EXPECT_EQ(got.top5, want.top5);
    EXPECT_EQ(got.steps, 3);
    EXPECT_TRUE(std::isnan(got.loss_sum) && std::isnan(got.last_loss_sum));
    EXPECT_EQ(got.nonfinite_steps, 1);
    EXPECT_EQ(got.first_nonfinite_step, 41);  // from the device, not the argument 7
    EXPECT_TRUE(std::isnan(got.first_nonfinite_loss));
    EXPECT_GT(want.top5, want.top1);
  }
}

// Two finite steps: the loss sums agree to double rounding.
TEST_F(CudaTest, AccumulateResultsLossSum) {
  const int k = 10, n = 200;
  Tensor probs = RandomCpu(Shape{k, 1, 1, n}, 5, 0.0f, 1.0f);
  Tensor labels(Shape{1, 1, 1, n});
  for (int j = 0; j < n; ++j) labels.data()[j] = static_cast<float>(j % k);
  Tensor loss = RandomCpu(Shape{n}, 6, 0.0f, 4.0f);
  Tensor cpu_totals = NewResultTotals(Device::kCPU), gpu_totals = NewResultTotals(Device::kCUDA);
  for (int step = 0; step < 2; ++step) {
    Cpu().AccumulateResults(probs, labels, loss, step, nullptr, cpu_totals);
    Gpu().AccumulateResults(OnGpu(probs), OnGpu(labels), OnGpu(loss), step, nullptr, gpu_totals);
  }
  const ResultTotals want = ReadResultTotals(cpu_totals), got = ReadResultTotals(gpu_totals);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-12 * want.loss_sum);
  EXPECT_NEAR(got.last_loss_sum, want.last_loss_sum, 1e-12 * want.last_loss_sum);
  EXPECT_EQ(got.top1, want.top1);
  EXPECT_EQ(got.top5, want.top5);
  EXPECT_EQ(got.nonfinite_steps, 0);
  EXPECT_EQ(got.steps, 2);
}

TEST_F(CudaTest, SgdUpdate) {
  const Shape s{1001};
  SgdParams p;
  p.lr = 0.01f;
  p.momentum = 0.9f;
  p.weight_decay = 5e-4f;
  Tensor w = RandomCpu(s, 141), g = RandomCpu(s, 142), v = RandomCpu(s, 143, -0.1f, 0.1f);
  Tensor gw = OnGpu(w), gv = OnGpu(v), gg = OnGpu(g);
  for (int i = 0; i < 3; ++i) {
    Cpu().SgdUpdate(w, g, v, p);
    Gpu().SgdUpdate(gw, gg, gv, p);
  }
  EXPECT_BITWISE(gw, w);
  EXPECT_BITWISE(gv, v);
}

// ---- allocator
// ------------------------------------------------------------------------------------------
TEST_F(CudaTest, AllocatorCachesBlocks) {
  { Tensor warm(Shape{1 << 20}, Device::kCUDA); }
  const size_t before = cuda::GetMemoryStats().device_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor a(Shape{1 << 20}, Device::kCUDA);
    Tensor b(Shape{1000}, Device::kCUDA);
    Gpu().Fill(a, 1.0f);
  }
  { Tensor again(Shape{1 << 20}, Device::kCUDA); }
  const cuda::MemoryStats s = cuda::GetMemoryStats();
  EXPECT_LE(s.device_allocations, before + 1);  // only the 1000-float block is new
  EXPECT_GE(s.peak_bytes_reserved, size_t(4) << 20);
  EXPECT_GE(GetBackend(Device::kCUDA)->PeakBytes(), size_t(4) << 20);
}

// ---- a whole network, GPU against CPU
// ---------------------------------------------------------------------- Trains `model` for `steps`
// SGD steps from one seed on one device (synthetic images and labels, the same on both devices, as
// are the dropout masks). Returns the per-step mean losses and every learnable parameter before and
// after.
struct TrainResult {
  std::vector<double> losses;
  std::vector<std::vector<float>> init, final;
  std::vector<std::string> names;
};

TrainResult Train(Device device, const std::string& model, int input, int classes, int batch,
                  int steps, uint64_t seed, float lr) {
  TrainResult r;
  ModelOptions o;
  o.input_size = input;
  o.num_classes = classes;
  absl::StatusOr<std::unique_ptr<Net>> built = BuildModel(model, o);
  EXPECT_TRUE(built.ok()) << built.status();
  if (!built.ok()) return r;
  Net& net = **built;
  absl::Status s = net.Build(batch, device);
  EXPECT_TRUE(s.ok()) << s;
  net.InitParams(seed);
  for (const NamedParam& np : net.params()) {
    if (!np.param->learnable) continue;
    r.names.push_back(np.name);
    r.init.push_back(np.param->value.ToHost());
  }
  SgdOptions so;
  so.momentum = 0.9f;
  so.weight_decay = 5e-4f;
  SgdOptimizer opt(so);
  for (int step = 0; step < steps; ++step) {
    r.losses.push_back(TrainStepOnRandomData(net, opt, step, seed, classes, lr));
  }
  for (const NamedParam& np : net.params())
    if (np.param->learnable) r.final.push_back(np.param->value.ToHost());
  return r;
}

// Losses within 1e-4 relative at every step, and the weights' total change over the run
// (final - initial) the same within `update_tol` relative over all learnable parameters
// together and within `param_tol` for each parameter on its own: the aggregate is
// dominated by the largest layers, so a wrong gradient of a small one (a conv1 bias) would
// pass it unnoticed.
void ExpectSameTraining(const std::string& model, int input, int classes, int batch, int steps,
                        float lr, double update_tol, double param_tol) {
  const TrainResult cpu = Train(Device::kCPU, model, input, classes, batch, steps, 7, lr);
  const TrainResult gpu = Train(Device::kCUDA, model, input, classes, batch, steps, 7, lr);
  ASSERT_EQ(cpu.losses.size(), static_cast<size_t>(steps));
  ASSERT_EQ(gpu.losses.size(), static_cast<size_t>(steps));
  std::string trace;
  for (int i = 0; i < steps; ++i) {
    EXPECT_TRUE(std::isfinite(gpu.losses[i])) << "step " << i;
    EXPECT_LT(std::abs(gpu.losses[i] - cpu.losses[i]), 1e-4 * std::abs(cpu.losses[i]))
        << model << " step " << i << ": gpu " << gpu.losses[i] << " cpu " << cpu.losses[i];
    trace += absl::StrFormat(" %.7f/%.7f", cpu.losses[i], gpu.losses[i]);
  }
  std::printf("%s lr %g losses cpu/gpu:%s\n", model.c_str(), lr, trace.c_str());
  ASSERT_EQ(cpu.final.size(), gpu.final.size());
  double diff = 0, change = 0;
  std::string per_param;
  for (size_t p = 0; p < cpu.final.size(); ++p) {
    double d = 0, c = 0;
    for (size_t i = 0; i < cpu.final[p].size(); ++i) {
      const double e = static_cast<double>(gpu.final[p][i]) - cpu.final[p][i];
      const double u = static_cast<double>(cpu.final[p][i]) - cpu.init[p][i];
      d += e * e;
      c += u * u;
    }
    diff += d;
    change += c;
    const double param_rel = c > 0 ? std::sqrt(d / c) : std::sqrt(d);
    per_param += absl::StrFormat(" %s %.1e", cpu.names[p], param_rel);
    EXPECT_LT(param_rel, param_tol) << cpu.names[p] << ": accumulated update differs";
  }
  const double rel = std::sqrt(diff / change);
  std::printf("%s weight update gpu vs cpu: %.2e relative (per parameter:%s)\n", model.c_str(), rel,
              per_param.c_str());
  EXPECT_GT(change, 0.0);
  EXPECT_LT(rel, update_tol) << "accumulated weight updates differ";
}

// Tolerances from measured figures with a 10x margin: the accumulated updates differed by
// 5.0e-8 relative overall on the H200 (3.0e-8 on the emulator), and by at most 2.2e-6 for
// one parameter on the H200 (conv2/weight; 9.9e-6 on the emulator). A wrong gradient of
// any one parameter gives differences of order 1e-2 and more.
TEST_F(CudaTest, Cifar18TrainsLikeCpu) {
  ExpectSameTraining("cifar10-18pct", 32, 10, kEmulated ? 4 : 33, kEmulated ? 3 : 10, 0.01f,
                     /*update_tol=*/5e-7, /*param_tol=*/1e-4);
}

// The spec: 20 steps of AlexNet at batch 32 from one seed, losses within 1e-4 relative.
// At the paper's lr 0.01 (or 0.001) no two FP32 implementations can meet that: the dynamics
// amplify rounding. On the CPU alone, moving initial weights by one ulp changes the loss by
// up to 3e-3 (lr 0.01, every 97th fc6 weight; 2e-2 with every weight on one fixed batch) or
// 3e-4 (lr 0.001, every weight) relative within 20 steps, but by at most 9e-6 at lr 1e-4
// (experiments/gpu_bench/e2e_sensitivity, paper init). So the comparison runs at 1e-4,
// where the losses barely depend on the updates; the accumulated weight updates, compared
// relative to their size, are what would expose a wrong gradient (errors of order 1). Their
// tolerance comes from the same experiment: the one-ulp perturbation alone moves them by
// 3.8e-3 overall (up to 5e-2 for single parameters); GPU vs CPU measured 3.5e-3 overall
// and at most 3.8e-2 for one parameter (conv2/bias) on the H200 (run 3). Tolerances:
// 1e-2 overall (2.6x the ulp sensitivity), 0.1 per parameter (2x); a wrong gradient of
// one parameter (a conv1 bias) makes its own figure of order 1.
TEST_F(CudaTest, AlexNetTwentyStepsLikeCpu) {
  if (kEmulated) GTEST_SKIP() << "AlexNet is too large for the emulator";
  ExpectSameTraining("alexnet", 224, 1000, 32, 20, 1e-4f, /*update_tol=*/1e-2, /*param_tol=*/0.1);
}

// ---- shape checks shared with CpuOps (core/op_shapes.h) --------------------------------------
// Every call of tests/op_shapes_cases.h dies with the message the CPU gives (tests/core,
// op_shapes_test.cc): the backends accept exactly the same calls.
class CudaOpsShapes : public CudaTest, public ::testing::WithParamInterface<testing::BadOpsCall> {};

TEST_P(CudaOpsShapes, Refused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend (and emulator) run threads
  const testing::BadOpsCall& c = GetParam();
  EXPECT_DEATH(c.call(Gpu(), Device::kCUDA), c.message);
}

INSTANTIATE_TEST_SUITE_P(Table, CudaOpsShapes, ::testing::ValuesIn(testing::BadOpsCalls()),
                         [](const ::testing::TestParamInfo<testing::BadOpsCall>& i) {
                           return i.param.name;
                         });

// Floor-mode pooling (ResNet's stem) on the GPU, against the CPU: its output size is the
// floor one, which the GPU used to check against the ceil-mode size only when asked.
TEST_F(CudaTest, PoolingFloorMode) {
  for (PoolParams::Kind kind : {PoolParams::kMax, PoolParams::kAvg}) {
    PoolParams p = testing::MaxPool(3, 2, 1, false);
    p.kind = kind;
    const Shape xs{3, 8, 8, 5};
    const int64_t o = PoolOutSize(8, 3, 2, 1, false);
    const Shape ys{3, o, o, 5};
    Tensor x = RandomCpu(xs, 81), y(ys, Device::kCPU);
    Cpu().PoolForward(x, y, p);
    Tensor gy = Poisoned(ys, Device::kCUDA);
    Gpu().PoolForward(OnGpu(x), gy, p);
    EXPECT_CLOSE(gy, y);
    Tensor dy = RandomCpu(ys, 82), dx(xs, Device::kCPU);
    Cpu().PoolBackward(x, y, dy, dx, p);
    Tensor gdx = Poisoned(xs, Device::kCUDA);
    Gpu().PoolBackward(OnGpu(x), OnGpu(y), OnGpu(dy), gdx, p);
    EXPECT_CLOSE(gdx, dx);
  }
}

// ---- bf16 activation storage (kernels.h: StorageType xt / yt) ----------------------------------
// The typed launchers against the float kernels: with bf16 storage a kernel must give the float
// kernel's result on the widened (bf16-rounded) inputs, rounded once to nearest even at its
// store, bit for bit; with float storage, the float launcher's bits.

using cuda::StorageType;

const cuda::DeviceContext& Ctx() { return dynamic_cast<cuda::CudaOps&>(Gpu()).context(); }
StorageType Storage(DType t) {
  return t == DType::kBF16 ? StorageType::kBF16 : StorageType::kFloat;
}

// v rounded to bf16, to nearest even (NaN kept), computed here rather than by the code tested.
float RoundBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return v;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}
// What storing v as t gives back.
std::vector<float> StoredAs(std::vector<float> v, DType t) {
  if (t == DType::kBF16)
    for (float& e : v) e = RoundBf16(e);
  return v;
}
// cpu's values on the GPU stored as t.
Tensor OnGpuAs(const Tensor& cpu, DType t) {
  Tensor g(cpu.shape(), Device::kCUDA, t);
  g.CopyFromHost(cpu.ToHost());
  return g;
}
Tensor PoisonedAs(const Shape& s, DType t) {
  Tensor g(s, Device::kCUDA, t);
  g.CopyFromHost(std::vector<float>(static_cast<size_t>(g.size()), kNaN));
  return g;
}
// A float32 GPU copy of t's values (bf16 widened).
Tensor Widened(const Tensor& t) {
  Tensor f(t.shape(), Device::kCUDA);
  f.CopyFromHost(t.ToHost());
  return f;
}

struct StoragePair {
  DType x, y;  // x and dx; y and dy
};
const StoragePair kStoragePairs[] = {
    {DType::kBF16, DType::kBF16},
    {DType::kBF16, DType::kFloat32},
    {DType::kFloat32, DType::kBF16},  // max-pool backward refuses it (PoolBackwardRefusals)
};
std::string PairName(const StoragePair& st) {
  return absl::StrFormat("x %s, y %s", DTypeName(st.x), DTypeName(st.y));
}

// Pooling forward and backward (max: versions 2 and 3) in every storage pair, batches 1, 7,
// 33 and multiples of 4 (the 4-image moves: 8 bytes of bf16), ties (few distinct values,
// exact in bf16) routed to the first maximum.
TEST_F(CudaTest, PoolingBf16Storage) {
  const PoolCase cases[] = {
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33},  {PoolParams::kMax, 2, 2, 0, 3, 9, 7, 1},
      {PoolParams::kAvg, 3, 2, 0, 5, 12, 12, 7},   {PoolParams::kMax, 3, 1, 1, 48, 7, 7, 8},
      {PoolParams::kAvg, 3, 1, 1, 3, 8, 8, 32},    {PoolParams::kAvg, 2, 2, 0, 5, 9, 9, 8},
      {PoolParams::kMax, 3, 2, 0, 96, 13, 13, 32}, {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12},
  };
  for (const PoolCase& k : cases) {
    if (kEmulated && k.c * k.h * k.w * k.n > 500000) continue;
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    for (bool ties : {false, true}) {
      Tensor x = RandomCpu(xs, 63);
      if (ties)
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i] * 2.0f);
      Tensor dy = RandomCpu(ys, 64);
      for (const StoragePair& st : kStoragePairs) {
        const std::string name = absl::StrFormat(
            "%s size %d stride %d pad %d on %s%s, %s", k.kind == PoolParams::kMax ? "max" : "avg",
            k.size, k.stride, k.pad, xs.ToString(), ties ? " (ties)" : "", PairName(st));
        Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx);
        Tensor ref_y = Poisoned(ys, Device::kCUDA), gy = PoisonedAs(ys, st.y);
        Gpu().PoolForward(xw, ref_y, p);
        Gpu().PoolForward(gx, gy, p);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref_y.ToHost(), st.y))) << name;
        if (k.kind == PoolParams::kMax && st.x == DType::kFloat32) continue;  // refused
        Tensor gdy = OnGpuAs(dy, st.y), ref_dx = Poisoned(xs, Device::kCUDA);
        Gpu().PoolBackward(xw, Widened(gy), Widened(gdy), ref_dx, p);
        const std::vector<float> want = StoredAs(ref_dx.ToHost(), st.x);
        for (int version : {2, 3}) {
          cuda::SetPoolBackwardVersion(version);
          Tensor gdx = PoisonedAs(xs, st.x);
          Gpu().PoolBackward(gx, gy, gdy, gdx, p);
          EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), want)) << name << ", backward v" << version;
        }
        cuda::SetPoolBackwardVersion(0);
      }
    }
  }
}

// The float launchers are wrappers of the typed ones: float storage through either gives the
// same bits (and max pooling the CPU's).
TEST_F(CudaTest, PoolingFloatStorageTyped) {
  const StorageType f = StorageType::kFloat;
  const PoolCase cases[] = {
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33},
      {PoolParams::kAvg, 3, 1, 1, 3, 8, 8, 32},
      {PoolParams::kMax, 2, 2, 0, 48, 9, 7, 8},
      {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 1},
  };
  for (const PoolCase& k : cases) {
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    const int oh = static_cast<int>(ys.h()), ow = static_cast<int>(ys.w());
    const std::string name =
        absl::StrFormat("size %d stride %d pad %d on %s", k.size, k.stride, k.pad, xs.ToString());
    Tensor x = RandomCpu(xs, 65);
    for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i] * 2.0f);  // ties
    Tensor y(ys, Device::kCPU);
    Cpu().PoolForward(x, y, p);
    Tensor gx = OnGpu(x), y_old = Poisoned(ys, Device::kCUDA), y_new = Poisoned(ys, Device::kCUDA);
    cuda::PoolForwardGpu(Ctx(), gx.data(), y_old.data(), k.c, k.h, k.w, k.n, oh, ow, p);
    cuda::PoolForwardGpu(Ctx(), gx.raw(), f, y_new.raw(), f, k.c, k.h, k.w, k.n, oh, ow, p);
    EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y_old.ToHost())) << name;
    if (k.kind == PoolParams::kMax) EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y.ToHost())) << name;
    Tensor gdy = OnGpu(RandomCpu(ys, 66));
    for (int version : {2, 3}) {
      cuda::SetPoolBackwardVersion(version);
      Tensor dx_old = Poisoned(xs, Device::kCUDA), dx_new = Poisoned(xs, Device::kCUDA);
      cuda::PoolBackwardGpu(Ctx(), gx.data(), y_old.data(), gdy.data(), dx_old.data(), k.c, k.h,
                            k.w, k.n, oh, ow, p);
      cuda::PoolBackwardGpu(Ctx(), gx.raw(), y_old.raw(), gdy.raw(), dx_new.raw(), f, f, k.c, k.h,
                            k.w, k.n, oh, ow, p);
      EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << name << " v" << version;
    }
    cuda::SetPoolBackwardVersion(0);
  }
}

// Max-pool backward cannot find a rounded maximum's pixel in float x; CudaOps refuses x / dx
// (or y / dy) of different storage.
// Max pooling with the forward's argmax record (MaxPoolForwardArg / MaxPoolBackwardArg, what
// PoolLayer runs): y and dx bit for bit those of PoolForward and PoolBackward (version 3), in
// float and bf16 storage, with and without ties (the first maximum takes the gradient),
// clipped windows (padding) included; windows over 256 pixels fall back to the primitives.
TEST_F(CudaTest, MaxPoolRecordMatchesThePrimitives) {
  const PoolCase cases[] = {
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33}, {PoolParams::kMax, 2, 2, 0, 3, 9, 7, 1},
      {PoolParams::kMax, 3, 1, 1, 48, 7, 7, 8},   {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12},
      {PoolParams::kMax, 3, 3, 1, 2, 10, 11, 5},  {PoolParams::kMax, 3, 2, 0, 96, 13, 13, 32},
      {PoolParams::kMax, 17, 1, 0, 2, 18, 18, 4},  // 289 pixels: no record, the primitives
  };
  for (const PoolCase& k : cases) {
    if (kEmulated && k.c * k.h * k.w * k.n > 500000) continue;
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    for (bool ties : {false, true}) {
      Tensor x = RandomCpu(xs, 65);
      if (ties)
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i] * 2.0f);
      Tensor dy = RandomCpu(ys, 66);
      for (DType t : {DType::kFloat32, DType::kBF16}) {
        const std::string name =
            absl::StrFormat("size %d stride %d pad %d on %s%s, %s", k.size, k.stride, k.pad,
                            xs.ToString(), ties ? " (ties)" : "", DTypeName(t));
        Tensor gx = OnGpuAs(x, t), gdy = OnGpuAs(dy, t);
        Tensor ref_y = PoisonedAs(ys, t), gy = PoisonedAs(ys, t);
        Tensor rec = PoisonedAs(ys, DType::kBF16);
        Gpu().PoolForward(gx, ref_y, p);
        Gpu().MaxPoolForwardArg(gx, gy, rec, p);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), ref_y.ToHost())) << name;
        cuda::SetPoolBackwardVersion(3);
        Tensor ref_dx = PoisonedAs(xs, t), gdx = PoisonedAs(xs, t);
        Gpu().PoolBackward(gx, ref_y, gdy, ref_dx, p);
        cuda::SetPoolBackwardVersion(0);
        // x and y poisoned: the recorded backward must not read them.
        Gpu().MaxPoolBackwardArg(cuda::MaxPoolRecordFits(p) ? PoisonedAs(xs, t) : gx,
                                 cuda::MaxPoolRecordFits(p) ? PoisonedAs(ys, t) : gy, rec, gdy, gdx,
                                 p);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), ref_dx.ToHost())) << name;
      }
    }
  }
}

TEST_F(CudaTest, PoolBackwardBf16Refusals) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend (and emulator) run threads
  const PoolParams p = testing::MaxPool(2, 2, 0, true);
  const Shape xs{3, 4, 4, 2}, ys{3, 2, 2, 2};
  Tensor x = OnGpu(RandomCpu(xs, 67)), y = PoisonedAs(ys, DType::kBF16);
  Tensor dy = PoisonedAs(ys, DType::kBF16), dx = PoisonedAs(xs, DType::kFloat32);
  EXPECT_DEATH(Gpu().PoolBackward(x, y, dy, dx, p), "float x with bf16 y is not supported");
  Tensor dx_bf16 = PoisonedAs(xs, DType::kBF16);
  EXPECT_DEATH(Gpu().PoolBackward(x, y, dy, dx_bf16, p), "must share a storage type");
}

// LRN + max pooling in every storage pair, both forward versions (the argmax on the FP32
// normalised values: arg as the float kernels'), shapes of LrnMaxPoolFusedAsUnfused.
TEST_F(CudaTest, LrnMaxPoolBf16Storage) {
  for (const LrnPoolCase& k : LrnPoolCases()) {
    const LrnCrossParams lp = k.lrn_params();
    const PoolParams pp = k.pool_params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    for (bool ties : {false, true}) {
      Tensor x = RandomCpu(xs, 95, -3.0f, 3.0f);
      if (ties)
        for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i]);
      Tensor dy = RandomCpu(ys, 96);
      for (const StoragePair& st : kStoragePairs) {
        const std::string name =
            absl::StrFormat("%s lrn %d, pool %d/%d pad %d%s, %s", xs.ToString(), k.lrn_size, k.pool,
                            k.stride, k.pad, ties ? " (ties)" : "", PairName(st));
        Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx);
        Tensor ref_y = Poisoned(ys, Device::kCUDA), ref_arg = Poisoned(ys, Device::kCUDA);
        Gpu().LrnMaxPoolForward(xw, ref_y, ref_arg, lp, pp);
        const std::vector<float> want_y = StoredAs(ref_y.ToHost(), st.y);
        Tensor gy, garg;
        for (int version : {1, 2}) {
          cuda::SetLrnMaxPoolForwardVersion(version);
          gy = PoisonedAs(ys, st.y), garg = Poisoned(ys, Device::kCUDA);
          Gpu().LrnMaxPoolForward(gx, gy, garg, lp, pp);
          EXPECT_TRUE(BitwiseEqual(gy.ToHost(), want_y)) << name << ": forward v" << version;
          EXPECT_TRUE(BitwiseEqual(garg.ToHost(), ref_arg.ToHost()))
              << name << ": arg v" << version;
        }
        cuda::SetLrnMaxPoolForwardVersion(0);
        Tensor gdy = OnGpuAs(dy, st.y);
        Tensor ref_dx = Poisoned(xs, Device::kCUDA), gdx = PoisonedAs(xs, st.x);
        Gpu().LrnMaxPoolBackward(xw, ref_y, ref_arg, Widened(gdy), ref_dx, lp, pp);
        Gpu().LrnMaxPoolBackward(gx, gy, garg, gdy, gdx, lp, pp);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
            << name << ": backward";
      }
    }
  }
}

TEST_F(CudaTest, LrnMaxPoolFloatStorageTyped) {
  const StorageType f = StorageType::kFloat;
  LrnCrossParams lp;
  lp.size = 5;
  lp.groups = 2;
  const PoolParams pp = testing::MaxPool(3, 2, 0, true);
  const int c = 20, h = 9, w = 9, n = 7, oh = 4, ow = 4;
  const Shape xs{c, h, w, n}, ys{c, oh, ow, n};
  Tensor gx = OnGpu(RandomCpu(xs, 97, -3.0f, 3.0f)), gdy = OnGpu(RandomCpu(ys, 98));
  for (int version : {1, 2}) {
    cuda::SetLrnMaxPoolForwardVersion(version);
    Tensor y_old = Poisoned(ys, Device::kCUDA), arg_old = Poisoned(ys, Device::kCUDA);
    Tensor y_new = Poisoned(ys, Device::kCUDA), arg_new = Poisoned(ys, Device::kCUDA);
    cuda::LrnMaxPoolForwardGpu(Ctx(), gx.data(), y_old.data(), arg_old.data(), c, h, w, n, oh, ow,
                               lp, pp);
    cuda::LrnMaxPoolForwardGpu(Ctx(), gx.raw(), f, y_new.raw(), f, arg_new.data(), c, h, w, n, oh,
                               ow, lp, pp);
    EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y_old.ToHost())) << "forward v" << version;
    EXPECT_TRUE(BitwiseEqual(arg_new.ToHost(), arg_old.ToHost())) << "arg v" << version;
    Tensor dx_old = Poisoned(xs, Device::kCUDA), dx_new = Poisoned(xs, Device::kCUDA);
    cuda::LrnMaxPoolBackwardGpu(Ctx(), gx.data(), arg_old.data(), gdy.data(), dx_old.data(), c, h,
                                w, n, oh, ow, lp, pp);
    cuda::LrnMaxPoolBackwardGpu(Ctx(), gx.raw(), f, arg_old.data(), gdy.raw(), f, dx_new.raw(), c,
                                h, w, n, oh, ow, lp, pp);
    EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << "backward";
  }
  cuda::SetLrnMaxPoolForwardVersion(0);
}

// GradToBf16Gpu with bf16 dy and mask against the float overload on the widened values: the
// same bf16 out and the same row sums exactly. The widened values are the same floats, and
// the launch makes the same choices for both (quads when inner is a multiple of 4 and the
// pointers are aligned to 4 elements, the same chunks and splits), so every thread adds the
// same values in the same order, and the partials are combined in the same order too.
// Rows of 79 (elements), rows of 12,920 in splits (quads), the same one element off
// alignment (elements); out null (bf16: sums only).
TEST_F(CudaTest, GradToBf16Bf16Storage) {
  struct Case {
    int64_t rows, inner, offset;
  };
  for (const Case k : {Case{13, 79, 0}, Case{3, 12920, 0}, Case{3, 12920, 1}, Case{5, 64, 0}}) {
    const int64_t n = k.rows * k.inner;
    const Shape s{n + 1};
    Tensor dyv = RandomCpu(s, 101 + k.inner), mv = RandomCpu(s, 102 + k.inner);
    mv.data()[5] = 0.0f;
    mv.data()[6] = -0.0f;
    mv.data()[7] = 1e-41f;  // positive in float, 0 in bf16: the mask is read as stored
    Tensor bdy = OnGpuAs(dyv, DType::kBF16), bm = OnGpuAs(mv, DType::kBF16);
    Tensor fdy = Widened(bdy), fm = Widened(bm);
    const uint16_t* bdy_p = static_cast<const uint16_t*>(bdy.raw()) + k.offset;
    const uint16_t* bm_p = static_cast<const uint16_t*>(bm.raw()) + k.offset;
    const float* fdy_p = fdy.data() + k.offset;
    const float* fm_p = fm.data() + k.offset;
    const std::vector<float> dyw = fdy.ToHost(), mw = fm.ToHost();
    for (const bool with_mask : {true, false}) {
      for (const bool with_out : {true, false}) {
        for (const bool with_sums : {true, false}) {
          if (!with_out && !with_sums) continue;
          const std::string what =
              absl::StrFormat("rows %d x %d, offset %d, mask %d, out %d, sums %d", k.rows, k.inner,
                              k.offset, with_mask, with_out, with_sums);
          Tensor out = PoisonedAs(s, DType::kBF16), ref = PoisonedAs(s, DType::kBF16);
          Tensor sums = Poisoned(Shape{k.rows}, Device::kCUDA);
          Tensor ref_sums = Poisoned(Shape{k.rows}, Device::kCUDA);
          cuda::GradToBf16Gpu(Ctx(), bdy_p, with_mask ? bm_p : nullptr, StorageType::kBF16,
                              with_out ? static_cast<uint16_t*>(out.raw()) + k.offset : nullptr,
                              with_sums ? sums.data() : nullptr, k.rows, k.inner);
          cuda::GradToBf16Gpu(Ctx(), fdy_p, with_mask ? fm_p : nullptr,
                              static_cast<uint16_t*>(ref.raw()) + k.offset,
                              with_sums ? ref_sums.data() : nullptr, k.rows, k.inner);
          if (with_out) {
            const std::vector<float> got = out.ToHost();
            EXPECT_TRUE(BitwiseEqual(got, ref.ToHost())) << what;
            // And on the host: g = dy, or 0 where the mask is not > 0 (exact in bf16).
            std::vector<float> got_g(got.begin() + k.offset, got.begin() + k.offset + n), want_g;
            for (int64_t i = k.offset; i < n + k.offset; ++i)
              want_g.push_back(with_mask && !(mw[size_t(i)] > 0.0f) ? 0.0f : dyw[size_t(i)]);
            EXPECT_TRUE(BitwiseEqual(got_g, want_g)) << what << " (host)";
          } else {
            for (float v : out.ToHost()) ASSERT_TRUE(std::isnan(v)) << what << ": out written";
          }
          if (with_sums) {
            EXPECT_TRUE(BitwiseEqual(sums.ToHost(), ref_sums.ToHost())) << what;
          } else {
            for (float v : sums.ToHost()) ASSERT_TRUE(std::isnan(v)) << what << ": sums written";
          }
        }
      }
    }
  }
}

TEST_F(CudaTest, GradToBf16FloatStorageTyped) {
  for (const int64_t offset : {0, 1}) {
    const int64_t rows = 3, inner = 12920, n = rows * inner;
    const Shape s{n + 1};
    Tensor dy = OnGpu(RandomCpu(s, 103)), mask = OnGpu(RandomCpu(s, 104));
    Tensor out_old = PoisonedAs(s, DType::kBF16), out_new = PoisonedAs(s, DType::kBF16);
    Tensor sums_old = Poisoned(Shape{rows}, Device::kCUDA);
    Tensor sums_new = Poisoned(Shape{rows}, Device::kCUDA);
    cuda::GradToBf16Gpu(Ctx(), dy.data() + offset, mask.data() + offset,
                        static_cast<uint16_t*>(out_old.raw()) + offset, sums_old.data(), rows,
                        inner);
    cuda::GradToBf16Gpu(Ctx(), dy.data() + offset, mask.data() + offset, StorageType::kFloat,
                        static_cast<uint16_t*>(out_new.raw()) + offset, sums_new.data(), rows,
                        inner);
    EXPECT_TRUE(BitwiseEqual(out_new.ToHost(), out_old.ToHost())) << "offset " << offset;
    EXPECT_TRUE(BitwiseEqual(sums_new.ToHost(), sums_old.ToHost())) << "offset " << offset;
  }
}

// ---- bf16 storage of the element-wise ops, concat, global pooling and batch norm ------------
// Each CudaOps method with bf16 (or mixed) storage against the same method on float tensors
// holding the widened values: the float result rounded once to bf16 where the output is bf16,
// bit for bit (statistics and parameter gradients: the float run's bits).

// cpu's values stored as t on the GPU, `offset` elements into a larger allocation (poisoned
// around): offset 1 puts a bf16 tensor 2 bytes off the 8-byte quads, a float one 4 bytes.
Tensor OnGpuAsAt(const Tensor& cpu, DType t, int64_t offset) {
  Tensor base = PoisonedAs(Shape{cpu.size() + offset + 1}, t);
  Tensor v = base.View(cpu.shape(), offset);
  v.CopyFromHost(cpu.ToHost());
  return v;
}
Tensor PoisonedAsAt(const Shape& s, DType t, int64_t offset) {
  return PoisonedAs(Shape{s.elements() + offset + 1}, t).View(s, offset);
}

const DType kTypes[] = {DType::kFloat32, DType::kBF16};

// Fill: every element bf16(v), for odd counts and 2-byte aligned starts; the elements around
// the filled range stay unwritten.
TEST_F(CudaTest, FillBf16Storage) {
  const float values[] = {0.1f, 1.0f + 1.0f / 256.0f /* a tie: to even */, -3.3e38f, 1e-41f, -2.5f};
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{1001}, int64_t{12921}}) {
    for (const int64_t offset : {0, 1, 3}) {
      for (const float v : values) {
        Tensor base = PoisonedAs(Shape{n + offset + 1}, DType::kBF16);
        Tensor y = base.View(Shape{n}, offset);
        Gpu().Fill(y, v);
        const std::vector<float> got = base.ToHost();
        const std::string what = absl::StrFormat("n %d, offset %d, v %g", n, offset, v);
        for (int64_t i = 0; i < n + offset + 1; ++i) {
          if (i < offset || i >= offset + n) {
            ASSERT_TRUE(std::isnan(got[size_t(i)])) << what << ": element " << i << " written";
          } else {
            ASSERT_TRUE(BitwiseEqual({got[size_t(i)]}, {RoundBf16(v)}))
                << what << ", element " << i;
          }
        }
      }
    }
  }
}

// Add and AddRelu in all eight storage combinations of a, b, y (odd sizes, batch 33 and 8),
// then in place (the gradient sum g += s: Add(g, s, g)) with bf16 g.
TEST_F(CudaTest, AddBf16Storage) {
  for (const Shape& s : {Shape{5, 3, 7, 33}, Shape{3, 2, 3, 8}, Shape{48, 1, 1, 1}}) {
    const Tensor a = RandomCpu(s, 141), b = RandomCpu(s, 142, -0.01f, 0.01f);
    for (const bool relu : {false, true}) {
      auto op = [&](const Tensor& x, const Tensor& z, Tensor& y) {
        relu ? Gpu().AddRelu(x, z, y) : Gpu().Add(x, z, y);
      };
      for (DType at : kTypes) {
        for (DType bt : kTypes) {
          for (DType yt : kTypes) {
            const std::string what =
                absl::StrFormat("%s%s: a %s, b %s, y %s", relu ? "AddRelu " : "Add ", s.ToString(),
                                DTypeName(at), DTypeName(bt), DTypeName(yt));
            Tensor ga = OnGpuAs(a, at), gb = OnGpuAs(b, bt);
            Tensor ref = Poisoned(s, Device::kCUDA), gy = PoisonedAs(s, yt);
            op(Widened(ga), Widened(gb), ref);
            op(ga, gb, gy);
            EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref.ToHost(), yt))) << what;
          }
        }
      }
      for (DType bt : kTypes) {  // in place, bf16 y = a
        Tensor ga = OnGpuAs(a, DType::kBF16), gb = OnGpuAs(b, bt);
        Tensor ref = Poisoned(s, Device::kCUDA);
        op(Widened(ga), Widened(gb), ref);
        op(ga, gb, ga);
        EXPECT_TRUE(BitwiseEqual(ga.ToHost(), StoredAs(ref.ToHost(), DType::kBF16)))
            << (relu ? "AddRelu" : "Add") << " in place, b " << DTypeName(bt) << ", "
            << s.ToString();
      }
    }
  }
}

// ReluForward (x, y; in place) and ReluBackward (y and dy, dx) in the storage pairs, with the
// quads (aligned) and without (one element off), sizes odd and a multiple of 8.
TEST_F(CudaTest, ReluBf16Storage) {
  for (const Shape& s : {Shape{7, 5, 5, 33}, Shape{3, 2, 2, 8}, Shape{5, 1, 1, 1}}) {
    Tensor x = RandomCpu(s, 151), dy = RandomCpu(s, 152);
    x.data()[0] = 1e-41f;  // positive in float, 0 in bf16: the mask is read as stored
    for (const StoragePair& st : kStoragePairs) {
      for (const int64_t offset : {0, 1}) {
        const std::string what =
            absl::StrFormat("%s, offset %d, %s", s.ToString(), offset, PairName(st));
        Tensor gx = OnGpuAsAt(x, st.x, offset), ref = Poisoned(s, Device::kCUDA);
        Tensor gy = PoisonedAsAt(s, st.y, offset);
        Gpu().ReluForward(Widened(gx), ref);
        Gpu().ReluForward(gx, gy);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref.ToHost(), st.y))) << what;
        // Backward: y and dy st.y (gy: rectified, with its zeros), dx st.x.
        Tensor gdy = OnGpuAsAt(dy, st.y, offset), ref_dx = Poisoned(s, Device::kCUDA);
        Tensor gdx = PoisonedAsAt(s, st.x, offset);
        Gpu().ReluBackward(Widened(gy), Widened(gdy), ref_dx);
        Gpu().ReluBackward(gy, gdy, gdx);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
            << what << ": backward";
        // A mask read as float y: x as the mask, st.x for both y and dy.
        Tensor gdy2 = OnGpuAsAt(dy, st.x, offset), gdx2 = PoisonedAsAt(s, st.y, offset);
        Tensor ref_dx2 = Poisoned(s, Device::kCUDA);
        Gpu().ReluBackward(Widened(gx), Widened(gdy2), ref_dx2);
        Gpu().ReluBackward(gx, gdy2, gdx2);
        EXPECT_TRUE(BitwiseEqual(gdx2.ToHost(), StoredAs(ref_dx2.ToHost(), st.y)))
            << what << ": backward, x as the mask";
      }
    }
    for (const int64_t offset : {0, 1}) {  // in place, bf16
      Tensor gx = OnGpuAsAt(x, DType::kBF16, offset), ref = Poisoned(s, Device::kCUDA);
      Gpu().ReluForward(Widened(gx), ref);
      Gpu().ReluForward(gx, gx);
      EXPECT_TRUE(BitwiseEqual(gx.ToHost(), StoredAs(ref.ToHost(), DType::kBF16)))
          << s.ToString() << " in place, offset " << offset;
      Tensor gdy = OnGpuAsAt(dy, DType::kBF16, offset), ref_dx = Poisoned(s, Device::kCUDA);
      Gpu().ReluBackward(Widened(gx), Widened(gdy), ref_dx);
      Gpu().ReluBackward(gx, gdy, gdy);
      EXPECT_TRUE(BitwiseEqual(gdy.ToHost(), StoredAs(ref_dx.ToHost(), DType::kBF16)))
          << s.ToString() << " backward in place, offset " << offset;
    }
  }
}

// Concat forward and backward: parts and whole in each storage pair (x: the parts, y: the
// whole) and both bf16; channel offsets put bf16 blocks at odd 2-byte offsets.
TEST_F(CudaTest, CopyChannelsBf16Storage) {
  for (const auto& [h, w, n] : {std::tuple{5, 5, 7}, std::tuple{3, 3, 8}, std::tuple{3, 1, 1}}) {
    const Shape as{3, h, w, n}, bs{5, h, w, n}, ws{8, h, w, n};
    const Tensor a = RandomCpu(as, 161), b = RandomCpu(bs, 162);
    StoragePair pairs[4] = {
        kStoragePairs[0], kStoragePairs[1], kStoragePairs[2], {DType::kFloat32, DType::kFloat32}};
    for (const StoragePair& st : pairs) {
      const std::string what = absl::StrFormat("whole %s, parts %s, whole %s", ws.ToString(),
                                               DTypeName(st.x), DTypeName(st.y));
      Tensor ga = OnGpuAs(a, st.x), gb = OnGpuAs(b, st.x);
      Tensor ref = Poisoned(ws, Device::kCUDA), gw = PoisonedAs(ws, st.y);
      Gpu().CopyChannelsIn(Widened(ga), 0, ref);
      Gpu().CopyChannelsIn(Widened(gb), 3, ref);
      Gpu().CopyChannelsIn(ga, 0, gw);
      Gpu().CopyChannelsIn(gb, 3, gw);
      EXPECT_TRUE(BitwiseEqual(gw.ToHost(), StoredAs(ref.ToHost(), st.y))) << what << ": in";
      // Out: from a whole of st.y (random values: rounding when st.x is bf16) into parts.
      Tensor gwhole = OnGpuAs(RandomCpu(ws, 163), st.y);
      for (const auto& [c0, ps] : {std::pair{int64_t{0}, as}, std::pair{int64_t{3}, bs}}) {
        Tensor ref_out = Poisoned(ps, Device::kCUDA), out = PoisonedAs(ps, st.x);
        Gpu().CopyChannelsOut(Widened(gwhole), c0, ref_out);
        Gpu().CopyChannelsOut(gwhole, c0, out);
        EXPECT_TRUE(BitwiseEqual(out.ToHost(), StoredAs(ref_out.ToHost(), st.x)))
            << what << ": out at " << c0;
      }
    }
  }
}

// Global average pooling: x / dx in st.x, y / dy in st.y.
TEST_F(CudaTest, GlobalAvgPoolBf16Storage) {
  for (const Shape& xs : {Shape{7, 6, 5, 33}, Shape{3, 2, 2, 1}, Shape{48, 3, 3, 8}}) {
    const Shape ys{xs[0], 1, 1, xs[3]};
    const Tensor x = RandomCpu(xs, 171), dy = RandomCpu(ys, 172);
    for (const StoragePair& st : kStoragePairs) {
      const std::string what = absl::StrFormat("%s, %s", xs.ToString(), PairName(st));
      Tensor gx = OnGpuAs(x, st.x), ref = Poisoned(ys, Device::kCUDA), gy = PoisonedAs(ys, st.y);
      Gpu().GlobalAvgPoolForward(Widened(gx), ref);
      Gpu().GlobalAvgPoolForward(gx, gy);
      EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref.ToHost(), st.y))) << what;
      Tensor gdy = OnGpuAs(dy, st.y), ref_dx = Poisoned(xs, Device::kCUDA);
      Tensor gdx = PoisonedAs(xs, st.x);
      Gpu().GlobalAvgPoolBackward(Widened(gdy), ref_dx);
      Gpu().GlobalAvgPoolBackward(gdy, gdx);
      EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
          << what << ": backward";
    }
  }
}

// Batch norm, every entry, plain and with the fused ReLU: x / dx in st.x, y / dy / relu_y in
// st.y; y and dx as the float run's rounded once, the statistics (saved and running) and
// dgamma, dbeta as the float run's. Channels split over blocks (inner 12,920) and not.
TEST_F(CudaTest, BatchNormBf16Storage) {
  const Shape shapes[] = {Shape{5, 4, 3, 33}, Shape{3, 17, 19, 40}, Shape{48, 3, 3, 8},
                          Shape{3, 5, 5, 1}, Shape{5, 3, 3, 7}};
  BatchNormParams p;
  for (const Shape& s : shapes) {
    const Shape c{s[0]};
    const Tensor x = RandomCpu(s, 181, -2.0f, 3.0f), dy = RandomCpu(s, 182);
    const Tensor gamma = OnGpu(RandomCpu(c, 183)), beta = OnGpu(RandomCpu(c, 184));
    const Tensor rm0 = RandomCpu(c, 185), rv0 = RandomCpu(c, 186, 0.5f, 2.0f);
    for (const StoragePair& st : kStoragePairs) {
      for (const bool relu : {false, true}) {
        const std::string what =
            absl::StrFormat("%s%s, %s", relu ? "relu, " : "", s.ToString(), PairName(st));
        Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx);
        struct Run {
          Tensor y, rm, rv, sm, si, sc, apply, infer, dx, dg, db;
        };
        auto fresh = [&](DType yt, DType xt) {
          return Run{PoisonedAs(s, yt),
                     OnGpu(rm0),
                     OnGpu(rv0),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA),
                     PoisonedAs(s, yt),
                     PoisonedAs(s, yt),
                     PoisonedAs(s, xt),
                     Poisoned(c, Device::kCUDA),
                     Poisoned(c, Device::kCUDA)};
        };
        Run ref = fresh(DType::kFloat32, DType::kFloat32), got = fresh(st.y, st.x);
        Ops& o = Gpu();
        auto forward = [&](const Tensor& in, Run& r) {
          if (relu) {
            o.BatchNormReluForwardTrain(in, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p);
            o.BatchNormReluApply(in, r.sm, r.sc, beta, r.apply);
          } else {
            o.BatchNormForwardTrain(in, gamma, beta, r.y, r.rm, r.rv, r.sm, r.si, r.sc, p);
            o.BatchNormApply(in, r.sm, r.sc, beta, r.apply);
          }
          o.BatchNormForwardInfer(in, gamma, beta, OnGpu(rm0), OnGpu(rv0), r.infer, p);
        };
        forward(xw, ref);
        forward(gx, got);
        // Backward: dy (and relu_y = the y of its run) stored as st.y.
        Tensor gdy = OnGpuAs(dy, st.y), dyw = Widened(gdy);
        auto backward = [&](const Tensor& in, const Tensor& relu_y, const Tensor& g, Run& r) {
          if (relu) {
            o.BatchNormReluBackward(in, gamma, ref.sm, ref.si, relu_y, g, r.dx, r.dg, r.db);
          } else {
            o.BatchNormBackward(in, gamma, ref.sm, ref.si, g, r.dx, r.dg, r.db);
          }
        };
        backward(xw, Widened(got.y), dyw, ref);
        backward(gx, got.y, gdy, got);
        const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> same[] = {
            {"running_mean", {&ref.rm, &got.rm}}, {"running_var", {&ref.rv, &got.rv}},
            {"save_mean", {&ref.sm, &got.sm}},    {"save_invstd", {&ref.si, &got.si}},
            {"save_scale", {&ref.sc, &got.sc}},   {"dgamma", {&ref.dg, &got.dg}},
            {"dbeta", {&ref.db, &got.db}}};
        for (const auto& [name, t] : same)
          EXPECT_TRUE(BitwiseEqual(t.second->ToHost(), t.first->ToHost())) << what << ": " << name;
        const std::pair<const char*, std::pair<const Tensor*, const Tensor*>> rounded[] = {
            {"y", {&ref.y, &got.y}},
            {"apply", {&ref.apply, &got.apply}},
            {"infer", {&ref.infer, &got.infer}},
            {"dx", {&ref.dx, &got.dx}}};
        for (const auto& [name, t] : rounded) {
          EXPECT_TRUE(
              BitwiseEqual(t.second->ToHost(), StoredAs(t.first->ToHost(), t.second->dtype())))
              << what << ": " << name;
        }
      }
    }
  }
}

// Without stored denominators (an empty denom: Ops::LrnCrossRecomputesDenominator, window
// half-widths 1-4 on the GPU) the forward writes the same y and the backward, computing
// each denominator again from x, the same dx bit for bit, in float and bf16 storage; the
// denominators of window 11 (half-width 5) are always stored.
TEST_F(CudaTest, LrnCrossRecomputedDenominatorsAsStored) {
  struct Case {
    int c, h, w, n, size, groups;
  };
  const Case cases[] = {{96, 5, 5, 33, 5, 2},
                        {48, 3, 3, 128, 3, 1},
                        {20, 3, 4, 8, 9, 1},
                        {7, 2, 3, 4, 7, 1},
                        {12, 2, 2, 5, 11, 1}};
  for (const Case& k : cases) {
    LrnCrossParams p;
    p.size = k.size;
    p.groups = k.groups;
    p.alpha = 1e-2f;
    p.beta = 0.75f;
    p.k = 2.0f;
    const bool recompute = Gpu().LrnCrossRecomputesDenominator(p);
    EXPECT_EQ(recompute, k.size / 2 >= 1 && k.size / 2 <= 4) << "size " << k.size;
    if (!recompute) continue;
    const Shape s{k.c, k.h, k.w, k.n};
    for (DType t : {DType::kFloat32, DType::kBF16}) {
      const std::string name =
          absl::StrFormat("%s size %d, %s", s.ToString(), k.size, DTypeName(t));
      Tensor gx = OnGpuAs(RandomCpu(s, 83, -3.0f, 3.0f), t), gdy = OnGpuAs(RandomCpu(s, 84), t);
      Tensor y1 = PoisonedAs(s, t), y2 = PoisonedAs(s, t), d = Poisoned(s, Device::kCUDA);
      Tensor none;
      Gpu().LrnCrossForward(gx, y1, d, p);
      Gpu().LrnCrossForward(gx, y2, none, p);
      EXPECT_TRUE(BitwiseEqual(y2.ToHost(), y1.ToHost())) << name;
      Tensor dx1 = PoisonedAs(s, t), dx2 = PoisonedAs(s, t);
      Gpu().LrnCrossBackward(gx, y1, d, gdy, dx1, p);
      Gpu().LrnCrossBackward(gx, y1, none, gdy, dx2, p);
      EXPECT_TRUE(BitwiseEqual(dx2.ToHost(), dx1.ToHost())) << name;
    }
  }
}

// Cross-channel LRN, unfused: x / dx in st.x, y / dy in st.y, denom float. Window sizes 3 and
// 5 (and 4, even) take the register ring, 11 the generic kernel; groups 1 and 2; batches 1, 7,
// 33 and 8. y and dx as the float run's on the widened inputs, rounded once; denom its bits.
TEST_F(CudaTest, LrnCrossBf16Storage) {
  struct Case {
    int c, h, w, n, size, groups;
    bool over_size;
  };
  const Case cases[] = {
      {12, 3, 3, 1, 3, 1, false},  {16, 2, 3, 7, 5, 2, true},   {24, 2, 2, 33, 11, 2, false},
      {10, 3, 2, 8, 5, 1, false},  {8, 2, 2, 32, 3, 2, true},   {22, 2, 2, 7, 11, 1, true},
      {14, 2, 2, 33, 4, 2, false}, {13, 1, 2, 1, 11, 1, false},
  };
  for (const Case& k : cases) {
    LrnCrossParams p;
    p.size = k.size;
    p.groups = k.groups;
    p.alpha_over_size = k.over_size;
    p.alpha = k.over_size ? 0.5f : 1e-2f;
    p.beta = 0.75f;
    p.k = 1.5f;
    const Shape s{k.c, k.h, k.w, k.n};
    const Tensor x = RandomCpu(s, 201, -3.0f, 3.0f), dy = RandomCpu(s, 202);
    for (const StoragePair& st : kStoragePairs) {
      const std::string what =
          absl::StrFormat("%s size %d groups %d, %s", s.ToString(), k.size, k.groups, PairName(st));
      Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx);
      Tensor ref_y = Poisoned(s, Device::kCUDA), ref_d = Poisoned(s, Device::kCUDA);
      Tensor gy = PoisonedAs(s, st.y), gd = Poisoned(s, Device::kCUDA);
      Gpu().LrnCrossForward(xw, ref_y, ref_d, p);
      Gpu().LrnCrossForward(gx, gy, gd, p);
      EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref_y.ToHost(), st.y))) << what << ": y";
      EXPECT_TRUE(BitwiseEqual(gd.ToHost(), ref_d.ToHost())) << what << ": denom";
      // Backward: y (this run's), dy st.y; dx st.x.
      Tensor gdy = OnGpuAs(dy, st.y), ref_dx = Poisoned(s, Device::kCUDA);
      Tensor gdx = PoisonedAs(s, st.x);
      Gpu().LrnCrossBackward(xw, Widened(gy), ref_d, Widened(gdy), ref_dx, p);
      Gpu().LrnCrossBackward(gx, gy, gd, gdy, gdx, p);
      EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x))) << what << ": dx";
    }
  }
}

// Dropout forward and backward in the storage pairs (and in place, bf16), several steps, p 0.5
// (and 0.3: a scale that rounds in bf16): the mask is the CPU's bits whatever the storage, y and
// dx the float run's on the widened inputs rounded once.
TEST_F(CudaTest, DropoutBf16Storage) {
  for (const Shape& s :
       {Shape{9, 3, 2, 33}, Shape{4, 2, 2, 8}, Shape{5, 1, 1, 1}, Shape{3, 2, 3, 7}}) {
    const Tensor x = RandomCpu(s, 211), dy = RandomCpu(s, 212);
    for (const float rate : {0.5f, 0.3f}) {
      for (const int64_t step : {int64_t{0}, int64_t{17}, int64_t{18}}) {
        DropoutParams p;
        p.p = rate;
        p.seed = MixKey(4321, 7);
        p.step = step;
        Tensor cy(s, Device::kCPU), cm(s, Device::kCPU);
        Cpu().DropoutForward(x, cy, cm, p);
        const std::vector<float> mask = cm.ToHost();
        for (const StoragePair& st : kStoragePairs) {
          const std::string what =
              absl::StrFormat("%s, p %g, step %d, %s", s.ToString(), rate, step, PairName(st));
          Tensor gx = OnGpuAs(x, st.x), ref_y = Poisoned(s, Device::kCUDA);
          Tensor ref_m = Poisoned(s, Device::kCUDA), gy = PoisonedAs(s, st.y);
          Tensor gm = Poisoned(s, Device::kCUDA);
          Gpu().DropoutForward(Widened(gx), ref_y, ref_m, p);
          Gpu().DropoutForward(gx, gy, gm, p);
          EXPECT_TRUE(BitwiseEqual(gm.ToHost(), mask)) << what << ": mask";
          EXPECT_TRUE(BitwiseEqual(ref_m.ToHost(), mask)) << what << ": float run's mask";
          EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(ref_y.ToHost(), st.y))) << what << ": y";
          // And on the host (independently of the GPU's float path): y = x * mask, dx = dy * mask.
          const std::vector<float> xw = gx.ToHost();
          std::vector<float> want_y(xw.size());
          for (size_t i = 0; i < xw.size(); ++i) want_y[i] = xw[i] * mask[i];
          EXPECT_TRUE(BitwiseEqual(gy.ToHost(), StoredAs(want_y, st.y))) << what << ": y (host)";
          Tensor gdy = OnGpuAs(dy, st.y), ref_dx = Poisoned(s, Device::kCUDA);
          Tensor gdx = PoisonedAs(s, st.x);
          Gpu().DropoutBackward(Widened(gdy), ref_m, ref_dx);
          Gpu().DropoutBackward(gdy, gm, gdx);
          EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
              << what << ": dx";
          const std::vector<float> dyw = gdy.ToHost();
          std::vector<float> want_dx(dyw.size());
          for (size_t i = 0; i < dyw.size(); ++i) want_dx[i] = dyw[i] * mask[i];
          EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(want_dx, st.x))) << what << ": dx (host)";
        }
        // In place, bf16: y over x, dx over dy.
        Tensor gx = OnGpuAs(x, DType::kBF16), ref_y = Poisoned(s, Device::kCUDA);
        Tensor ref_m = Poisoned(s, Device::kCUDA), gm = Poisoned(s, Device::kCUDA);
        Gpu().DropoutForward(Widened(gx), ref_y, ref_m, p);
        Gpu().DropoutForward(gx, gx, gm, p);
        EXPECT_TRUE(BitwiseEqual(gm.ToHost(), mask)) << s.ToString() << " in place: mask";
        EXPECT_TRUE(BitwiseEqual(gx.ToHost(), StoredAs(ref_y.ToHost(), DType::kBF16)))
            << s.ToString() << ", p " << rate << " in place";
        Tensor gdy = OnGpuAs(dy, DType::kBF16), ref_dx = Poisoned(s, Device::kCUDA);
        Gpu().DropoutBackward(Widened(gdy), ref_m, ref_dx);
        Gpu().DropoutBackward(gdy, gm, gdy);
        EXPECT_TRUE(BitwiseEqual(gdy.ToHost(), StoredAs(ref_dx.ToHost(), DType::kBF16)))
            << s.ToString() << ", p " << rate << " backward in place";
      }
    }
  }
}

// The float launchers are wrappers of the typed ones: float storage through either, the same bits.
TEST_F(CudaTest, LrnCrossDropoutFloatStorageTyped) {
  const StorageType f = StorageType::kFloat;
  const int c = 12, h = 2, w = 3, n = 7, hwn = h * w * n;
  const Shape s{c, h, w, n};
  Tensor gx = OnGpu(RandomCpu(s, 221, -3.0f, 3.0f)), gdy = OnGpu(RandomCpu(s, 222));
  for (const int size : {3, 5, 11}) {
    LrnCrossParams lp;
    lp.size = size;
    lp.groups = 2;
    Tensor y_old = Poisoned(s, Device::kCUDA), d_old = Poisoned(s, Device::kCUDA);
    Tensor y_new = Poisoned(s, Device::kCUDA), d_new = Poisoned(s, Device::kCUDA);
    cuda::LrnCrossForwardGpu(Ctx(), gx.data(), y_old.data(), d_old.data(), c, hwn, lp);
    cuda::LrnCrossForwardGpu(Ctx(), gx.raw(), f, y_new.raw(), f, d_new.data(), c, hwn, lp);
    EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y_old.ToHost())) << "LRN y, size " << size;
    EXPECT_TRUE(BitwiseEqual(d_new.ToHost(), d_old.ToHost())) << "LRN denom, size " << size;
    Tensor dx_old = Poisoned(s, Device::kCUDA), dx_new = Poisoned(s, Device::kCUDA);
    cuda::LrnCrossBackwardGpu(Ctx(), gx.data(), y_old.data(), d_old.data(), gdy.data(),
                              dx_old.data(), c, hwn, lp);
    cuda::LrnCrossBackwardGpu(Ctx(), gx.raw(), f, y_old.raw(), d_old.data(), gdy.raw(), f,
                              dx_new.raw(), c, hwn, lp);
    EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << "LRN dx, size " << size;
  }
  DropoutParams dp;
  dp.p = 0.5f;
  dp.seed = MixKey(99, 1);
  dp.step = 3;
  Tensor y_old = Poisoned(s, Device::kCUDA), m_old = Poisoned(s, Device::kCUDA);
  Tensor y_new = Poisoned(s, Device::kCUDA), m_new = Poisoned(s, Device::kCUDA);
  cuda::DropoutForwardGpu(Ctx(), gx.data(), y_old.data(), m_old.data(), c, h, w, n, dp);
  cuda::DropoutForwardGpu(Ctx(), gx.raw(), f, y_new.raw(), f, m_new.data(), c, h, w, n, dp);
  EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y_old.ToHost())) << "dropout y";
  EXPECT_TRUE(BitwiseEqual(m_new.ToHost(), m_old.ToHost())) << "dropout mask";
  Tensor dx_old = Poisoned(s, Device::kCUDA), dx_new = Poisoned(s, Device::kCUDA);
  cuda::MulGpu(Ctx(), gdy.data(), m_old.data(), dx_old.data(), gdy.size());
  cuda::MulGpu(Ctx(), gdy.raw(), f, m_old.raw(), f, dx_new.raw(), f, gdy.size());
  EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << "dropout dx";
}

// Tensors that must share a storage type: CudaOps refuses the mixtures its kernels cannot take.
TEST_F(CudaTest, Bf16StorageRefusals) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the backend (and emulator) run threads
  const Shape s{3, 2, 2, 4}, c{3};
  Tensor xb = PoisonedAs(s, DType::kBF16), xf = Poisoned(s, Device::kCUDA);
  Tensor yb = PoisonedAs(s, DType::kBF16), yf = Poisoned(s, Device::kCUDA);
  Tensor g = OnGpu(RandomCpu(c, 191)), m = OnGpu(RandomCpu(c, 192)),
         dg = Poisoned(c, Device::kCUDA);
  EXPECT_DEATH(Gpu().BatchNormBackward(xb, g, m, m, yb, xf, dg, dg),
               "BatchNormBackward: x and dx must share a storage type");
  EXPECT_DEATH(Gpu().BatchNormReluBackward(xb, g, m, m, yf, yb, xb, dg, dg),
               "BatchNormReluBackward: relu_y and dy must share a storage type");
  EXPECT_DEATH(Gpu().ReluBackward(yb, yf, xb), "ReluBackward: y and dy must share a storage type");
  Tensor alias = xf.View(s, 0, DType::kBF16);  // xf's bytes read as bf16
  EXPECT_DEATH(Gpu().Add(xf, yf, alias), "Add: a and y \\(in place\\) must share a storage type");
  EXPECT_DEATH(Gpu().ReluForward(xf, alias),
               "ReluForward: x and y \\(in place\\) must share a storage type");
  LrnCrossParams lp;
  Tensor df = Poisoned(s, Device::kCUDA);
  EXPECT_DEATH(Gpu().LrnCrossBackward(xb, yb, df, yb, xf, lp),
               "LrnCrossBackward: x and dx must share a storage type");
  EXPECT_DEATH(Gpu().LrnCrossBackward(xb, yf, df, yb, xb, lp),
               "LrnCrossBackward: y and dy must share a storage type");
  DropoutParams dp;
  Tensor mf = Poisoned(s, Device::kCUDA);
  EXPECT_DEATH(Gpu().DropoutForward(xf, alias, mf, dp),
               "DropoutForward: x and y \\(in place\\) must share a storage type");
  EXPECT_DEATH(Gpu().DropoutBackward(xf, mf, alias),
               "DropoutBackward: dy and y \\(in place\\) must share a storage type");
}

}  // namespace
}  // namespace colonnade
