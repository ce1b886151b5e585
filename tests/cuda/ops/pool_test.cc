// The pooling family's CUDA kernels (src/cuda/ops/pool.cu) against CpuOps, and in bf16 storage
// against the float kernels: max and average pooling (ceil and floor mode, ties routed to the
// first maximum), max pooling with the forward's argmax record, global average pooling.

#include <cmath>
#include <string>
#include <vector>

#include "../../op_shapes_cases.h"
#include "absl/strings/str_format.h"
#include "core/zoo_builders.h"
#include "cuda/kernels.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

TEST_F(CudaTest, Pooling) {
  for (const PoolCase& k : kPoolingCases) {
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
      // (Max-pool backward version 2 against this one, bit for bit: dev/pool_backward.)
      Tensor gdx = Poisoned(xs, Device::kCUDA);
      Gpu().PoolBackward(gx, gyc, gdy, gdx, p);
      EXPECT_CLOSE(gdx, dx) << name << (ties ? " (ties)" : "");
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

// Pooling forward and backward in every storage pair, batches 1, 7,
// 33 and multiples of 4 (the 4-image moves: 8 bytes of bf16), ties (few distinct values,
// exact in bf16) routed to the first maximum.
TEST_F(CudaTest, PoolingBf16Storage) {
  for (const PoolCase& k : kPoolingBf16Cases) {
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
        Tensor gdx = PoisonedAs(xs, st.x);
        Gpu().PoolBackward(gx, gy, gdy, gdx, p);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), want)) << name << ", backward";
      }
    }
  }
}

// The float launchers are wrappers of the typed ones: float storage through either gives the
// same bits (and max pooling the CPU's).
TEST_F(CudaTest, PoolingFloatStorageTyped) {
  const StorageType f = StorageType::kFloat;
  for (const PoolCase& k : kPoolingTypedCases) {
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
    Tensor dx_old = Poisoned(xs, Device::kCUDA), dx_new = Poisoned(xs, Device::kCUDA);
    cuda::PoolBackwardGpu(Ctx(), gx.data(), y_old.data(), gdy.data(), dx_old.data(), k.c, k.h, k.w,
                          k.n, oh, ow, p);
    cuda::PoolBackwardGpu(Ctx(), gx.raw(), y_old.raw(), gdy.raw(), dx_new.raw(), f, f, k.c, k.h,
                          k.w, k.n, oh, ow, p);
    EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << name;
  }
}

// Max pooling with the forward's argmax record (PoolForward / PoolBackward given a record, what
// PoolLayer runs): y and dx bit for bit those of PoolForward and PoolBackward without one, in
// float and bf16 storage, with and without ties (the first maximum takes the gradient),
// clipped windows (padding) included; windows over 256 pixels fall back to the primitives.
// Windows that tile x (stride == size, pad 0) take the scatter kernel: 2 x 2 and 3 x 3, the
// last window clipped, one image per thread and four. Overlapping windows of at most stride + 1
// a side take the block gather: 3 x 3 of stride 2 with and without padding, odd and even
// sizes (a last block of one row or column), 4 x 4 of stride 3, 3 x 3 of stride 3 padded.
TEST_F(CudaTest, MaxPoolRecordMatchesThePrimitives) {
  const PoolCase cases[] = {
      {PoolParams::kMax, 3, 2, 0, 5, 13, 13, 33}, {PoolParams::kMax, 2, 2, 0, 3, 9, 7, 1},
      {PoolParams::kMax, 2, 2, 0, 4, 11, 9, 8},   {PoolParams::kMax, 3, 3, 0, 2, 10, 11, 4},
      {PoolParams::kMax, 3, 1, 1, 48, 7, 7, 8},   {PoolParams::kMax, 3, 2, 1, 3, 11, 10, 12},
      {PoolParams::kMax, 3, 3, 1, 2, 10, 11, 5},  {PoolParams::kMax, 3, 2, 0, 96, 13, 13, 32},
      {PoolParams::kMax, 3, 2, 1, 2, 12, 9, 1},   {PoolParams::kMax, 4, 3, 1, 2, 10, 11, 4},
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
        Gpu().PoolForward(gx, gy, p, &rec);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), ref_y.ToHost())) << name;
        Tensor ref_dx = PoisonedAs(xs, t), gdx = PoisonedAs(xs, t);
        Gpu().PoolBackward(gx, ref_y, gdy, ref_dx, p);
        // x and y poisoned: the recorded backward must not read them.
        Gpu().PoolBackward(MaxPoolRecordFits(p) ? PoisonedAs(xs, t) : gx,
                           MaxPoolRecordFits(p) ? PoisonedAs(ys, t) : gy, gdy, gdx, p, &rec);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), ref_dx.ToHost())) << name;
      }
    }
  }
}

// Max-pool backward cannot find a rounded maximum's pixel in float x; CudaOps refuses x / dx
// (or y / dy) of different storage.
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

}  // namespace
}  // namespace testing
}  // namespace colonnade
