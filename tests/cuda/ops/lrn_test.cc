// The LRN family's CUDA kernels (src/cuda/ops/lrn.cu) against CpuOps, and in bf16 storage
// against the float kernels: across channels (the register rings and the generic kernels, with
// and without stored denominators) and within a map.

#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/philox.h"
#include "cuda/kernels.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

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

// Without stored denominators (an empty denom, which the GPU leaves empty for window
// half-widths 1-4: Ops::LrnCrossForward, cuda::LrnCrossRecomputesDenominator) the forward writes
// the same y and the backward, computing each denominator again from x, the same dx bit for
// bit, in float and bf16 storage; the denominators of window 11 (half-width 5) are always
// stored: an empty denom gets them, the same bits as a given one.
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
    const bool recompute = cuda::LrnCrossRecomputesDenominator(p);
    EXPECT_EQ(recompute, k.size / 2 >= 1 && k.size / 2 <= 4) << "size " << k.size;
    const Shape s{k.c, k.h, k.w, k.n};
    if (!recompute) {
      Tensor gx = OnGpu(RandomCpu(s, 83, -3.0f, 3.0f)), y = Poisoned(s, Device::kCUDA);
      Tensor d = Poisoned(s, Device::kCUDA), empty;
      Gpu().LrnCrossForward(gx, y, d, p);
      Gpu().LrnCrossForward(gx, y, empty, p);
      EXPECT_TRUE(BitwiseEqual(empty.ToHost(), d.ToHost())) << "size " << k.size;
      continue;
    }
    for (DType t : {DType::kFloat32, DType::kBF16}) {
      const std::string name =
          absl::StrFormat("%s size %d, %s", s.ToString(), k.size, DTypeName(t));
      Tensor gx = OnGpuAs(RandomCpu(s, 83, -3.0f, 3.0f), t), gdy = OnGpuAs(RandomCpu(s, 84), t);
      Tensor y1 = PoisonedAs(s, t), y2 = PoisonedAs(s, t), d = Poisoned(s, Device::kCUDA);
      Tensor none;
      Gpu().LrnCrossForward(gx, y1, d, p);
      Gpu().LrnCrossForward(gx, y2, none, p);
      EXPECT_TRUE(none.empty()) << name << ": denominators stored";
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

}  // namespace
}  // namespace testing
}  // namespace colonnade
