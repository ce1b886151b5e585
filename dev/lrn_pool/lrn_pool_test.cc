// dev/lrn_pool's fused LRN + max-pool kernels against the unfused ops (src/cuda/ops/lrn.cu,
// pool.cu) bit for bit and against CpuOps within the FP32 tolerance, both forward versions, in
// every storage. Moved with the kernels from tests/cuda/cuda_ops_test.cc (the same assertions;
// the unfused reference is now written out here instead of being Ops' default).

#include <cmath>
#include <string>
#include <vector>

#include "../../tests/op_shapes_cases.h"
#include "absl/strings/str_format.h"
#include "core/zoo_builders.h"
#include "dev/lrn_pool/lrn_pool.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

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

// The unfused passes the fused kernels must equal (what Ops::LrnMaxPoolForward/Backward's
// defaults ran when the fusion was on the main path): the LRN into scratch, then the max pool;
// backward, the LRN again, the pool's backward, the LRN's backward.
void UnfusedForward(Ops& o, const Tensor& x, Tensor& y, const LrnCrossParams& lp,
                    const PoolParams& pp) {
  Tensor norm(x.shape(), o.device()), denom(x.shape(), o.device());
  o.LrnCrossForward(x, norm, denom, lp);
  o.PoolForward(norm, y, pp);
}
void UnfusedBackward(Ops& o, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                     const LrnCrossParams& lp, const PoolParams& pp) {
  Tensor norm(x.shape(), o.device()), denom(x.shape(), o.device()), dnorm(x.shape(), o.device());
  o.LrnCrossForward(x, norm, denom, lp);
  o.PoolBackward(norm, y, dy, dnorm, pp);
  o.LrnCrossBackward(x, norm, denom, dnorm, dx, lp);
}

// The fused kernels on GPU tensors (float or bf16 storage; arg float).
void FusedForward(const Tensor& x, Tensor& y, Tensor& arg, const LrnCrossParams& lp,
                  const PoolParams& pp, int version) {
  ASSERT_TRUE(cuda::dev::LrnMaxPoolFusable(lp, pp));
  cuda::dev::LrnMaxPoolForwardGpu(Ctx(), x.raw(), Storage(x.dtype()), y.raw(), Storage(y.dtype()),
                                  arg.data(), x.c(), x.h(), x.w(), x.n(), y.h(), y.w(), lp, pp,
                                  version);
}
void FusedBackward(const Tensor& x, const Tensor& arg, const Tensor& dy, Tensor& dx,
                   const LrnCrossParams& lp, const PoolParams& pp) {
  cuda::dev::LrnMaxPoolBackwardGpu(Ctx(), x.raw(), Storage(x.dtype()), arg.data(), dy.raw(),
                                   Storage(dy.dtype()), dx.raw(), x.c(), x.h(), x.w(), x.n(),
                                   dy.h(), dy.w(), lp, pp);
}

// LRN + max pooling fused: the fused kernels against the same GPU's unfused kernels (Ops'
// LrnCross and Pool calls in the unfused order), bit for bit:
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
      Tensor y(ys, Device::kCPU);
      UnfusedForward(Cpu(), x, y, lp, pp);
      Tensor gx = OnGpu(x);
      Tensor uy = Poisoned(ys, Device::kCUDA);
      UnfusedForward(Gpu(), gx, uy, lp, pp);
      Tensor gy, garg;
      for (int version : {1, 2}) {  // per window, tiled: the same bits
        gy = Poisoned(ys, Device::kCUDA), garg = Poisoned(ys, Device::kCUDA);
        FusedForward(gx, gy, garg, lp, pp, version);
        EXPECT_TRUE(BitwiseEqual(gy.ToHost(), uy.ToHost())) << name << ": forward v" << version;
      }
      EXPECT_CLOSE(gy, y) << name;
      Tensor dy = RandomCpu(ys, 92), dx(xs, Device::kCPU);
      UnfusedBackward(Cpu(), x, y, dy, dx, lp, pp);
      Tensor gdy = OnGpu(dy);
      Tensor gdx = Poisoned(xs, Device::kCUDA), udx = Poisoned(xs, Device::kCUDA);
      FusedBackward(gx, garg, gdy, gdx, lp, pp);
      UnfusedBackward(Gpu(), gx, uy, gdy, udx, lp, pp);
      EXPECT_TRUE(BitwiseEqual(gdx.ToHost(), udx.ToHost())) << name << ": backward";
      EXPECT_CLOSE(gdx, dx) << name;
    }
  }
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
        FusedForward(xw, ref_y, ref_arg, lp, pp, 2);
        const std::vector<float> want_y = StoredAs(ref_y.ToHost(), st.y);
        Tensor gy, garg;
        for (int version : {1, 2}) {
          gy = PoisonedAs(ys, st.y), garg = Poisoned(ys, Device::kCUDA);
          FusedForward(gx, gy, garg, lp, pp, version);
          EXPECT_TRUE(BitwiseEqual(gy.ToHost(), want_y)) << name << ": forward v" << version;
          EXPECT_TRUE(BitwiseEqual(garg.ToHost(), ref_arg.ToHost()))
              << name << ": arg v" << version;
        }
        Tensor gdy = OnGpuAs(dy, st.y);
        Tensor ref_dx = Poisoned(xs, Device::kCUDA), gdx = PoisonedAs(xs, st.x);
        FusedBackward(xw, ref_arg, Widened(gdy), ref_dx, lp, pp);
        FusedBackward(gx, garg, gdy, gdx, lp, pp);
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
    Tensor y_old = Poisoned(ys, Device::kCUDA), arg_old = Poisoned(ys, Device::kCUDA);
    Tensor y_new = Poisoned(ys, Device::kCUDA), arg_new = Poisoned(ys, Device::kCUDA);
    cuda::dev::LrnMaxPoolForwardGpu(Ctx(), gx.data(), y_old.data(), arg_old.data(), c, h, w, n, oh,
                                    ow, lp, pp, version);
    cuda::dev::LrnMaxPoolForwardGpu(Ctx(), gx.raw(), f, y_new.raw(), f, arg_new.data(), c, h, w, n,
                                    oh, ow, lp, pp, version);
    EXPECT_TRUE(BitwiseEqual(y_new.ToHost(), y_old.ToHost())) << "forward v" << version;
    EXPECT_TRUE(BitwiseEqual(arg_new.ToHost(), arg_old.ToHost())) << "arg v" << version;
    Tensor dx_old = Poisoned(xs, Device::kCUDA), dx_new = Poisoned(xs, Device::kCUDA);
    cuda::dev::LrnMaxPoolBackwardGpu(Ctx(), gx.data(), arg_old.data(), gdy.data(), dx_old.data(), c,
                                     h, w, n, oh, ow, lp, pp);
    cuda::dev::LrnMaxPoolBackwardGpu(Ctx(), gx.raw(), f, arg_old.data(), gdy.raw(), f, dx_new.raw(),
                                     c, h, w, n, oh, ow, lp, pp);
    EXPECT_TRUE(BitwiseEqual(dx_new.ToHost(), dx_old.ToHost())) << "backward";
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
