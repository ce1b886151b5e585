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

}  // namespace
}  // namespace testing
}  // namespace colonnade
