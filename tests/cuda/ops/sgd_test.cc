// The SGD update's CUDA kernel (src/cuda/ops/sgd.cu): bit for bit CpuOps's.

#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

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

// Nesterov (--nesterov): bit for bit the CPU's update.
TEST_F(CudaTest, SgdUpdateNesterov) {
  const Shape s{1001};
  SgdParams p;
  p.lr = 0.01f;
  p.momentum = 0.9f;
  p.weight_decay = 5e-4f;
  p.nesterov = true;
  Tensor w = RandomCpu(s, 151), g = RandomCpu(s, 152), v = RandomCpu(s, 153, -0.1f, 0.1f);
  Tensor gw = OnGpu(w), gv = OnGpu(v), gg = OnGpu(g);
  for (int i = 0; i < 3; ++i) {
    Cpu().SgdUpdate(w, g, v, p);
    Gpu().SgdUpdate(gw, gg, gv, p);
  }
  EXPECT_BITWISE(gw, w);
  EXPECT_BITWISE(gv, v);
}

// LARS (--optimizer=lars): the squared norms on the device (a 40000-element tensor: many
// elements per thread), within the tolerance of the summation order; the update from the
// same norms bit for bit; and the device's norms feeding the device's update match the CPU's
// whole step within the tolerance.
TEST_F(CudaTest, SgdUpdateLars) {
  const Shape s{40001};
  Tensor w = RandomCpu(s, 161), g = RandomCpu(s, 162), v = RandomCpu(s, 163, -0.1f, 0.1f);
  Tensor norms(Shape{2}, Device::kCPU);
  Cpu().SquaredNorms(w, g, norms);
  Tensor gw = OnGpu(w), gv = OnGpu(v), gg = OnGpu(g);
  Tensor gnorms = Poisoned(Shape{2}, Device::kCUDA);
  Gpu().SquaredNorms(gw, gg, gnorms);
  EXPECT_CLOSE(gnorms, norms);
  SgdParams p;
  p.lr = 0.5f;
  p.momentum = 0.9f;
  p.weight_decay = 5e-4f;
  p.lars_eta = 0.001f;
  // The same norms on both sides: the trust ratio and the update bit for bit.
  Tensor same = OnGpu(norms);
  Tensor w2(s, Device::kCPU), v2(s, Device::kCPU);
  w2.CopyFromHost(w.ToHost());
  v2.CopyFromHost(v.ToHost());
  Tensor gw2 = OnGpu(w), gv2 = OnGpu(v);
  p.lars_norms = norms.data();
  Cpu().SgdUpdate(w2, g, v2, p);
  p.lars_norms = same.data();
  Gpu().SgdUpdate(gw2, gg, gv2, p);
  EXPECT_BITWISE(gw2, w2);
  EXPECT_BITWISE(gv2, v2);
  // The device's own norms.
  p.lars_norms = norms.data();
  Cpu().SgdUpdate(w, g, v, p);
  p.lars_norms = gnorms.data();
  Gpu().SgdUpdate(gw, gg, gv, p);
  EXPECT_CLOSE(gw, w);
  EXPECT_CLOSE(gv, v);
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
