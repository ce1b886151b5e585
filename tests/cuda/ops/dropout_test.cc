// Dropout's CUDA kernel (src/cuda/ops/dropout.cu): the mask bit for bit CpuOps's (also for a
// column / replica slice of a layer), in every storage.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/philox.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

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

}  // namespace
}  // namespace testing
}  // namespace colonnade
