// The shared shape checks (core/op_shapes.h) as CpuOps applies them: every call of the
// table in tests/op_shapes_cases.h dies with its message. tests/cuda/cuda_ops_test.cc runs
// the same table against the CUDA backend.
#include <string>

#include "../op_shapes_cases.h"
#include "core/cpu_ops.h"
#include "gtest/gtest.h"

namespace colonnade::testing {
namespace {

class CpuOpsShapes : public ::testing::TestWithParam<BadOpsCall> {};

TEST_P(CpuOpsShapes, Refused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // CpuOps runs a thread pool
  const BadOpsCall& c = GetParam();
  CpuOps ops;
  EXPECT_DEATH(c.call(ops, Device::kCPU), c.message);
}

INSTANTIATE_TEST_SUITE_P(Table, CpuOpsShapes, ::testing::ValuesIn(BadOpsCalls()),
                         [](const ::testing::TestParamInfo<BadOpsCall>& i) {
                           return i.param.name;
                         });

// The sizes the layers infer are accepted, in both pooling modes.
TEST(CpuOpsShapes, PoolAcceptsTheInferredSizeInBothModes) {
  CpuOps ops;
  for (bool ceil_mode : {true, false}) {
    const PoolParams p = MaxPool(3, 2, 0, ceil_mode);
    const int64_t o = PoolOutSize(8, 3, 2, 0, ceil_mode);
    EXPECT_EQ(o, ceil_mode ? 4 : 3);
    Tensor x = ZeroTensor(Shape{2, 8, 8, 3}, Device::kCPU);
    Tensor y = ZeroTensor(Shape{2, o, o, 3}, Device::kCPU);
    Tensor dx = ZeroTensor(x.shape(), Device::kCPU);
    ops.PoolForward(x, y, p);
    ops.PoolBackward(x, y, y, dx, p);
  }
}

}  // namespace
}  // namespace colonnade::testing
