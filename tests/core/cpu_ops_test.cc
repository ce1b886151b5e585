// What CpuOps shares across the op families (cpu_ops.cc): GEMM transposes, host and bf16
// tensors, thread settings, and results that must not depend on the number of threads. Each
// family's own CPU tests are in tests/core/ops/<family>_test.cc.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/cpu_ops.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// Restores the thread count at the end of a test that changes it.
class ThreadCount {
 public:
  ThreadCount() : saved_(CpuThreads()) {}
  ~ThreadCount() { SetCpuThreads(saved_); }

 private:
  int saved_;
};

TEST(CpuOpsGemm, AllTransposesMatchNaive) {
  std::mt19937 rng(1);
  const int64_t m = 5, n = 7, k = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      std::vector<float> a = RandomUniform(m * k, rng), b = RandomUniform(k * n, rng);
      std::vector<float> c = RandomUniform(m * n, rng);
      const float alpha = 0.7f, beta = -1.3f;
      std::vector<double> ref(m * n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t l = 0; l < k; ++l)
            s += static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) *
                 (tb ? b[j * k + l] : b[l * n + j]);
          ref[i * n + j] = alpha * s + beta * c[i * n + j];
        }
      Cpu().Gemm(ta, tb, m, n, k, alpha, a.data(), b.data(), beta, c.data());
      EXPECT_LT(RelativeError(c, ref), kForwardTolerance) << "ta=" << ta << " tb=" << tb;
    }
}

// Without a device that gives page-locked memory (the CPU, or a build without CUDA),
// PinnedHost is an ordinary host tensor and CopyFromAsync a plain copy.
TEST(TensorHost, PinnedHostFallsBackToOrdinaryMemory) {
  const Shape s = Shape::CHWN(3, 4, 5, 6);
  for (Device d : {Device::kCPU, Device::kCUDA}) {
    if (d == Device::kCUDA && GetBackend(d) != nullptr) continue;  // tests/cuda covers it
    Tensor h = Tensor::PinnedHost(s, d);
    ASSERT_FALSE(h.empty());
    EXPECT_EQ(h.device(), Device::kCPU);
    EXPECT_EQ(h.shape(), s);
    Tensor x(s, Device::kCPU);
    for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = 0.25f * static_cast<float>(i);
    h.CopyFromAsync(x);
    for (int64_t i = 0; i < x.size(); ++i) ASSERT_EQ(h.data()[i], x.data()[i]) << i;
  }
}

// bf16 storage (Tensor::dtype): the host conversion rounds to nearest even (ties to the
// even mantissa), keeps infinities and NaN, overflows to infinity; bf16 tensors convert on
// the host copies, views and channel slices count 2-byte elements, Fill writes the rounded
// value to exactly the tensor's elements (an odd-sized slice leaves its neighbour alone).
TEST(TensorBf16, RoundingAndStorage) {
  auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to the even neighbour, 1.
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(FloatToBf16Bits(-2.5f), 0xc020);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // overflows
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
  // A NaN whose payload lies only in the low half stays a NaN (not infinity).
  uint32_t low_nan = 0x7f800001u;
  float f;
  std::memcpy(&f, &low_nan, 4);
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(f))));
  EXPECT_EQ(bits(Bf16BitsToFloat(0x3f81)), 0x3f810000u);

  const Shape s = Shape::CHWN(3, 1, 1, 5);  // odd channel size: 5 elements, 10 bytes
  Tensor t(s, Device::kCPU, DType::kBF16);
  EXPECT_TRUE(t.is_bf16());
  EXPECT_EQ(t.bytes(), 30u);
  std::vector<float> v(15);
  for (int i = 0; i < 15; ++i) v[i] = 1.0f + i * std::ldexp(1.0f, -9);  // some round
  t.CopyFromHost(v);
  const std::vector<float> back = t.ToHost();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(back[i], Bf16BitsToFloat(FloatToBf16Bits(v[i]))) << i;
  Tensor mid = t.Channels(1, 1);
  EXPECT_EQ(mid.ToHost(), std::vector<float>(back.begin() + 5, back.begin() + 10));
  mid.Fill(-3.0f);  // 5 elements from an odd offset: the host path
  std::vector<float> filled = t.ToHost();
  for (int i = 0; i < 15; ++i) EXPECT_EQ(filled[i], i / 5 == 1 ? -3.0f : back[i]) << i;
  t.Fill(0.5f);
  EXPECT_EQ(t.ToHost(), std::vector<float>(15, 0.5f));
  // A bf16 view in a float32 buffer: offsets count the buffer's (4-byte) elements.
  Tensor arena(Shape{8}, Device::kCPU);
  arena.Fill(0.0f);
  Tensor view = arena.View(Shape{4}, 2, DType::kBF16);
  view.CopyFromHost(std::vector<float>{1, 2, 3, 4});
  const std::vector<float> a = arena.ToHost();
  EXPECT_EQ(a[0], 0.0f);
  EXPECT_EQ(a[1], 0.0f);
  EXPECT_NE(a[2], 0.0f);  // two bf16 values
  EXPECT_NE(a[3], 0.0f);
  EXPECT_EQ(a[4], 0.0f);
  Tensor copy = view.To(Device::kCPU);
  EXPECT_TRUE(copy.is_bf16());
  EXPECT_EQ(copy.ToHost(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_DEATH(arena.View(Shape{13}, 2, DType::kBF16), "outside");
  EXPECT_DEATH(t.data(), "bf16 tensor");
  EXPECT_DEATH(copy.CopyFrom(arena.View(Shape{4}, 0)), "CopyFrom float32 into bf16");
}

TEST(CpuThreads, EnvironmentDefaultAndOverride) {
  ThreadCount restore;
  if (const char* env = std::getenv("COLONNADE_CPU_THREADS")) {
    EXPECT_EQ(CpuThreads(), std::atoi(env));
  } else {
    EXPECT_EQ(CpuThreads(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  SetCpuThreads(3);
  EXPECT_EQ(CpuThreads(), 3);
}

// Everything computed with our own threads must be bitwise independent of the thread
// count (resume equivalence is bitwise on the CPU backend); the GEMM-based conv is
// compared with a tolerance since OpenBLAS may block differently with other counts.
TEST(CpuThreads, ResultsDoNotDependOnThreadCount) {
  ThreadCount restore;
  std::mt19937 rng(8);
  const Shape xs = Shape::CHWN(12, 19, 17, 9);
  Tensor x = RandomTensor(xs, rng), g = RandomTensor(xs, rng);
  ConvParams cp;
  cp.kernel_h = cp.kernel_w = 3;
  cp.pad = 1;
  const Shape ws{8, 12, 3, 3};
  Tensor w = RandomTensor(ws, rng);
  PoolParams pp;
  const Shape ps = Shape::CHWN(12, PoolOutSize(19, 3, 2, 0), PoolOutSize(17, 3, 2, 0), 9);
  Tensor pg = RandomTensor(ps, rng);
  LrnCrossParams lp;
  lp.alpha = 1.0f;
  lp.groups = 2;
  LrnWithinParams rp;
  rp.alpha = 1.0f;
  auto run = [&](int threads) {
    SetCpuThreads(threads);
    std::vector<std::vector<float>> out;
    Tensor y(xs), d(xs), dx(xs);
    Cpu().LrnCrossForward(x, y, d, lp);
    Cpu().LrnCrossBackward(x, y, d, g, dx, lp);
    out.push_back(y.ToHost());
    out.push_back(dx.ToHost());
    Cpu().LrnWithinForward(x, y, d, rp);
    Cpu().LrnWithinBackward(x, y, d, g, dx, rp);
    out.push_back(y.ToHost());
    out.push_back(dx.ToHost());
    Tensor py(ps), pdx(xs);
    Cpu().PoolForward(x, py, pp);
    Cpu().PoolBackward(x, py, pg, pdx, pp);
    out.push_back(py.ToHost());
    out.push_back(pdx.ToHost());
    Tensor gamma(Shape{12}), beta(Shape{12}), rm(Shape{12}), rv(Shape{12}), sm(Shape{12}),
        si(Shape{12}), sc(Shape{12}), dg(Shape{12}), dbt(Shape{12});
    Cpu().Fill(gamma, 1.5f);
    Cpu().Fill(beta, 0.25f);
    Cpu().Fill(rm, 0.0f);
    Cpu().Fill(rv, 1.0f);
    Cpu().BatchNormForwardTrain(x, gamma, beta, y, rm, rv, sm, si, sc, {}, false);
    Cpu().BatchNormBackward(x, gamma, sm, si, nullptr, g, dx, dg, dbt);
    out.push_back(y.ToHost());
    out.push_back(dx.ToHost());
    out.push_back(dg.ToHost());
    out.push_back({static_cast<float>(Cpu().Sum(x))});
    const Shape cs = Shape::CHWN(8, 19, 17, 9);
    Tensor cy(cs), cdx(xs), cdw(ws);
    Cpu().ConvForward(x, w, cy, cp);
    Cpu().ConvBackwardData(cy, w, cdx, cp);
    Cpu().ConvBackwardFilter(x, cy, cdw, cp);
    out.push_back(cy.ToHost());
    out.push_back(cdx.ToHost());
    out.push_back(cdw.ToHost());
    return out;
  };
  std::vector<std::vector<float>> one = run(1);
  for (int threads : {2, 3}) {
    std::vector<std::vector<float>> many = run(threads);
    ASSERT_EQ(one.size(), many.size());
    const size_t conv_first = one.size() - 3;
    for (size_t k = 0; k < conv_first; ++k) EXPECT_EQ(one[k], many[k]) << "output " << k;
    for (size_t k = conv_first; k < one.size(); ++k)
      EXPECT_LT(RelativeError(many[k], ToDouble(one[k])), 1e-6) << "conv output " << k;
  }
}

// Two threads calling CpuOps at once (the pool is busy for one of them, which then runs
// inline) both get correct results.
TEST(CpuThreads, ConcurrentCallersGetCorrectResults) {
  std::mt19937 rng(9);
  const Shape s = Shape::CHWN(16, 32, 32, 8);
  std::vector<float> x = RandomUniform(s.elements(), rng);
  std::vector<double> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = x[i] > 0 ? x[i] : 0.0;
  auto work = [&](double* err) {
    Tensor in = TensorFrom(s, x), out(s);
    double worst = 0.0;
    for (int r = 0; r < 20; ++r) {
      Cpu().ReluForward(in, out);
      worst = std::max(worst, RelativeError(out.ToHost(), ref));
    }
    *err = worst;
  };
  double e1 = 1.0, e2 = 1.0;
  std::thread t1(work, &e1), t2(work, &e2);
  t1.join();
  t2.join();
  EXPECT_EQ(e1, 0.0);
  EXPECT_EQ(e2, 0.0);
}

// A child forked after the pool started (MPI launchers, data workers) has none of the
// parent's worker threads; its CpuOps calls must still complete.
TEST(CpuThreads, ForkedChildCanUseOps) {
  ThreadCount restore;
  SetCpuThreads(2);
  const Shape s = Shape::CHWN(16, 32, 32, 8);
  std::mt19937 rng(10);
  Tensor x = RandomTensor(s, rng), y(s);
  Cpu().ReluForward(x, y);  // big enough to run on the pool
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(30);         // a hang becomes a SIGALRM death instead of a stuck test
    SetCpuThreads(3);  // replaces the inherited pool, whose threads are not here to join
    Tensor z(s);
    Cpu().ReluForward(x, z);
    _exit(z.ToHost() == y.ToHost() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
