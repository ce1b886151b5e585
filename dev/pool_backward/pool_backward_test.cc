// dev/pool_backward's version 2 of max-pool backward against the main path's version 3
// (Ops::PoolBackward, src/cuda/ops/pool.cu) bit for bit and against CpuOps, in every storage:
// the version loops of tests/cuda/ops/pool_test.cc's Pooling, PoolingBf16Storage and
// PoolingFloatStorageTyped, which raced both versions before version 2 moved here.

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "dev/pool_backward/pool_backward.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// Version 2 on GPU tensors (x and dx of one storage, y and dy of another).
void PoolBackwardV2(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    const PoolParams& p) {
  cuda::dev::PoolBackwardV2Gpu(Ctx(), x.raw(), y.raw(), dy.raw(), dx.raw(), Storage(x.dtype()),
                               Storage(y.dtype()), x.c(), x.h(), x.w(), x.n(), y.h(), y.w(), p);
}

// Pooling's shapes (ceil mode, max and average, batches 1, 7, 33 and multiples of 4, ties):
// version 2 against the CPU, and against the main path bit for bit.
TEST_F(CudaTest, PoolBackwardV2AsMainPath) {
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
      Tensor dy = RandomCpu(ys, 62), dx(xs, Device::kCPU);
      Cpu().PoolBackward(x, y, dy, dx, p);
      Tensor gx = OnGpu(x), gy = OnGpu(y), gdy = OnGpu(dy);
      Tensor v3 = Poisoned(xs, Device::kCUDA), v2 = Poisoned(xs, Device::kCUDA);
      Gpu().PoolBackward(gx, gy, gdy, v3, p);
      PoolBackwardV2(gx, gy, gdy, v2, p);
      EXPECT_CLOSE(v2, dx) << name << (ties ? " (ties)" : "") << " version 2";
      EXPECT_EQ(v2.ToHost(), v3.ToHost()) << name << ": pool backward versions differ";
    }
  }
}

// PoolingBf16Storage's shapes in every storage pair: version 2 gives the float run's dx on the
// widened inputs, rounded once, as the main path does.
TEST_F(CudaTest, PoolBackwardV2Bf16Storage) {
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
        if (k.kind == PoolParams::kMax && st.x == DType::kFloat32) continue;  // refused
        const std::string name = absl::StrFormat(
            "%s size %d stride %d pad %d on %s%s, %s", k.kind == PoolParams::kMax ? "max" : "avg",
            k.size, k.stride, k.pad, xs.ToString(), ties ? " (ties)" : "", PairName(st));
        Tensor gx = OnGpuAs(x, st.x), xw = Widened(gx), gy = PoisonedAs(ys, st.y);
        Gpu().PoolForward(gx, gy, p);
        Tensor gdy = OnGpuAs(dy, st.y), ref_dx = Poisoned(xs, Device::kCUDA);
        Gpu().PoolBackward(xw, Widened(gy), Widened(gdy), ref_dx, p);
        Tensor gdx = PoisonedAs(xs, st.x);
        PoolBackwardV2(gx, gy, gdy, gdx, p);
        EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), StoredAs(ref_dx.ToHost(), st.x)))
            << name << ", backward v2";
      }
    }
  }
}

// PoolingFloatStorageTyped's shapes: version 2 with float storage gives the main path's float
// launcher's bits.
TEST_F(CudaTest, PoolBackwardV2FloatStorage) {
  const cuda::StorageType f = cuda::StorageType::kFloat;
  for (const PoolCase& k : kPoolingTypedCases) {
    const PoolParams p = k.params();
    const Shape xs = k.x_shape(), ys = k.y_shape();
    const int oh = static_cast<int>(ys.h()), ow = static_cast<int>(ys.w());
    const std::string name =
        absl::StrFormat("size %d stride %d pad %d on %s", k.size, k.stride, k.pad, xs.ToString());
    Tensor x = RandomCpu(xs, 65);
    for (int64_t i = 0; i < x.size(); ++i) x.data()[i] = std::floor(x.data()[i] * 2.0f);  // ties
    Tensor gx = OnGpu(x), gy = Poisoned(ys, Device::kCUDA);
    cuda::PoolForwardGpu(Ctx(), gx.data(), gy.data(), k.c, k.h, k.w, k.n, oh, ow, p);
    Tensor gdy = OnGpu(RandomCpu(ys, 66));
    Tensor dx_main = Poisoned(xs, Device::kCUDA), dx_v2 = Poisoned(xs, Device::kCUDA);
    cuda::PoolBackwardGpu(Ctx(), gx.data(), gy.data(), gdy.data(), dx_main.data(), k.c, k.h, k.w,
                          k.n, oh, ow, p);
    cuda::dev::PoolBackwardV2Gpu(Ctx(), gx.raw(), gy.raw(), gdy.raw(), dx_v2.raw(), f, f, k.c, k.h,
                                 k.w, k.n, oh, ow, p);
    EXPECT_TRUE(BitwiseEqual(dx_v2.ToHost(), dx_main.ToHost())) << name << " v2";
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
