// What the GPU tests of the op families share (tests/cuda/ops/<family>_test.cc, cuda_ops_test.cc):
// the CPU and GPU Ops, the fixture (skips without a GPU), random and NaN-poisoned tensors, the
// FP32 tolerance, and the bf16-storage helpers (a float tensor's values stored as bf16, the
// expected rounding). Each family's test file checks its CUDA kernels against CpuOps on random
// inputs of awkward sizes, with the output poisoned so an unwritten element fails:
// ||gpu - cpu|| / ||cpu|| < 1e-5 in FP32, bit equality where the op is exact; with bf16
// storage, the float kernel's result on the widened inputs rounded once, bit for bit. The same
// files build against the CPU emulator (cuda_emu_tests), with smaller shapes there.
#pragma once

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/zoo_builders.h"
#include "cuda/cuda_backend.h"
#include "cuda/conv/catalogue.h"
#include "cuda/cuda_ops.h"
#include "gpu_test.h"
#include "gtest/gtest.h"

namespace colonnade::testing {

inline constexpr double kTol = 1e-5;
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline Ops& Cpu() {
  static CpuOps* ops = new CpuOps();
  return *ops;
}
inline Ops& Gpu() { return OpsFor(Device::kCUDA); }
inline cuda::CudaOps& Cuda() { return dynamic_cast<cuda::CudaOps&>(Gpu()); }

class CudaTest : public GpuTest {};

// A test that runs convolutions in several math modes and configurations (ops/relu_grad_test.cc,
// ops/grad_add_test.cc): Use sets both, and the test's end restores the math mode and the
// automatic choice.
class ConvModeTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    math_ = Cuda().conv_math();
    config_.emplace("auto");
  }
  void TearDown() override {
    if (config_) Cuda().set_conv_math(math_);
    config_.reset();
  }
  // Sets math and COLONNADE_CONV_CONFIG's value; false (with a message) where this build or
  // device cannot run a wgmma configuration.
  bool Use(cuda::MathMode math, const char* config) {
    if (absl::string_view(config).substr(0, 5) == "wgmma" && !cuda::TcWgmmaAvailable()) {
      std::printf("  %s: skipped (built without sm_90a or not a 9.0 device)\n", config);
      return false;
    }
    Cuda().set_conv_math(math);
    config_->Set(config);
    return true;
  }

 private:
  cuda::MathMode math_ = cuda::MathMode::kFP32;
  std::optional<cuda::ScopedConvConfig> config_;
};

inline Tensor RandomCpu(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(s, Device::kCPU);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = u(rng);
  return t;
}
inline Tensor OnGpu(const Tensor& t) { return t.To(Device::kCUDA); }
inline Tensor Poisoned(const Shape& s, Device d) {
  Tensor t(s, d);
  std::vector<float> nan(t.size(), kNaN);
  t.CopyFromHost(nan);
  return t;
}

// ||got - ref|| / ||ref|| (or ||got - ref|| when ref is 0); infinite if got has a NaN.
inline double RelErr(const Tensor& got, const Tensor& ref) {
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

// ---- bf16 activation storage (cuda::StorageType xt / yt) --------------------------------------
// The typed launchers against the float kernels: with bf16 storage a kernel must give the float
// kernel's result on the widened (bf16-rounded) inputs, rounded once to nearest even at its
// store, bit for bit; with float storage, the float launcher's bits.

using cuda::StorageType;

inline const cuda::DeviceContext& Ctx() { return dynamic_cast<cuda::CudaOps&>(Gpu()).context(); }
inline StorageType Storage(DType t) {
  return t == DType::kBF16 ? StorageType::kBF16 : StorageType::kFloat;
}

// v rounded to bf16, to nearest even (NaN kept), computed here rather than by the code tested.
inline float RoundBf16(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return v;
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}
// What storing v as t gives back.
inline std::vector<float> StoredAs(std::vector<float> v, DType t) {
  if (t == DType::kBF16)
    for (float& e : v) e = RoundBf16(e);
  return v;
}
// cpu's values on the GPU stored as t.
inline Tensor OnGpuAs(const Tensor& cpu, DType t) {
  Tensor g(cpu.shape(), Device::kCUDA, t);
  g.CopyFromHost(cpu.ToHost());
  return g;
}
inline Tensor PoisonedAs(const Shape& s, DType t) {
  Tensor g(s, Device::kCUDA, t);
  g.CopyFromHost(std::vector<float>(static_cast<size_t>(g.size()), kNaN));
  return g;
}
// A float32 GPU copy of t's values (bf16 widened).
inline Tensor Widened(const Tensor& t) {
  Tensor f(t.shape(), Device::kCUDA);
  f.CopyFromHost(t.ToHost());
  return f;
}

struct StoragePair {
  DType x, y;  // x and dx; y and dy
};
inline const StoragePair kStoragePairs[] = {
    {DType::kBF16, DType::kBF16},
    {DType::kBF16, DType::kFloat32},
    {DType::kFloat32, DType::kBF16},  // max-pool backward refuses it (PoolBackwardRefusals)
};
inline std::string PairName(const StoragePair& st) {
  return absl::StrFormat("x %s, y %s", DTypeName(st.x), DTypeName(st.y));
}

// cpu's values stored as t on the GPU, `offset` elements into a larger allocation (poisoned
// around): offset 1 puts a bf16 tensor 2 bytes off the 8-byte quads, a float one 4 bytes.
inline Tensor OnGpuAsAt(const Tensor& cpu, DType t, int64_t offset) {
  Tensor base = PoisonedAs(Shape{cpu.size() + offset + 1}, t);
  Tensor v = base.View(cpu.shape(), offset);
  v.CopyFromHost(cpu.ToHost());
  return v;
}
inline Tensor PoisonedAsAt(const Shape& s, DType t, int64_t offset) {
  return PoisonedAs(Shape{s.elements() + offset + 1}, t).View(s, offset);
}

inline const DType kTypes[] = {DType::kFloat32, DType::kBF16};

// A square-kernel convolution of the fusion tests (ops/conv_bn_sums_test.cc,
// ops/relu_grad_test.cc): batch n, c x h x w in, f filters of k x k.
struct ConvLayerCase {
  int n, c, h, w, f, k, stride, pad;
  ConvParams params() const {
    ConvParams p;
    p.kernel_h = p.kernel_w = k;
    p.stride = stride;
    p.pad = pad;
    return p;
  }
  int oh() const { return static_cast<int>(ConvOutSize(h, k, stride, pad)); }
  int ow() const { return static_cast<int>(ConvOutSize(w, k, stride, pad)); }
  std::string name() const {
    return absl::StrFormat("n%d c%d %dx%d f%d k%d s%d", n, c, h, w, f, k, stride);
  }
};

// A pooling problem of the tests (ops/pool_test.cc, dev/pool_backward).
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

// Pooling (ops/pool_test.cc Pooling, dev/pool_backward): max and average, ceil mode, batches
// 1, 7, 33, 128 and multiples of 4 (the float4 kernels, four images per thread).
inline const PoolCase kPoolingCases[] = {
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

// Pooling in every storage pair (PoolingBf16Storage, dev/pool_backward).
inline const PoolCase kPoolingBf16Cases[] = {
    {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33},  {PoolParams::kMax, 2, 2, 0, 3, 9, 7, 1},
    {PoolParams::kAvg, 3, 2, 0, 5, 12, 12, 7},   {PoolParams::kMax, 3, 1, 1, 48, 7, 7, 8},
    {PoolParams::kAvg, 3, 1, 1, 3, 8, 8, 32},    {PoolParams::kAvg, 2, 2, 0, 5, 9, 9, 8},
    {PoolParams::kMax, 3, 2, 0, 96, 13, 13, 32}, {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12},
};

// The float launchers against the typed ones (PoolingFloatStorageTyped, dev/pool_backward).
inline const PoolCase kPoolingTypedCases[] = {
    {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33},
    {PoolParams::kAvg, 3, 1, 1, 3, 8, 8, 32},
    {PoolParams::kMax, 2, 2, 0, 48, 9, 7, 8},
    {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 1},
};

}  // namespace colonnade::testing
