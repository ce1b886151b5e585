// The SGD update (core/ops/sgd.h) on the CPU against the formula in double precision.
#include <random>

#include "core/backend.h"
#include "core/cpu_ops.h"
#include "layer_test_util.h"

namespace colonnade {
namespace testing {
namespace {

TEST(CpuOpsSgd, MomentumAndWeightDecay) {
  std::mt19937 rng(7);
  const Shape s{333};
  std::vector<float> w = RandomUniform(333, rng), g = RandomUniform(333, rng),
                     v = RandomUniform(333, rng);
  Tensor wt = TensorFrom(s, w), gt = TensorFrom(s, g), vt = TensorFrom(s, v);
  SgdParams p;
  p.lr = 0.05f;
  p.momentum = 0.9f;
  p.weight_decay = 5e-4f;
  Cpu().SgdUpdate(wt, gt, vt, p);
  std::vector<double> vref(333), wref(333);
  for (int i = 0; i < 333; ++i) {
    vref[i] = 0.9 * v[i] - 0.05 * (g[i] + 5e-4 * w[i]);
    wref[i] = w[i] + vref[i];
  }
  EXPECT_LT(RelativeError(vt.ToHost(), vref), kForwardTolerance);
  EXPECT_LT(RelativeError(wt.ToHost(), wref), kForwardTolerance);
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
