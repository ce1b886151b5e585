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

// The optimiser's batched update (Ops::SgdUpdateMany, SgdManyKernel): 110 tensors, so three
// launches of at most 48, of sizes around the 2,048-element block (1 to 40,001) and empty
// ones, each with its own rate, decay, Nesterov or not, LARS from the same norms or not, the
// rate read on the device or not: bit for bit the CPU's update of each tensor, three steps.
TEST_F(CudaTest, SgdUpdateManyIsEachTensorsUpdate) {
  const int64_t sizes[] = {1, 7, 0, 255, 2047, 2048, 2049, 4096, 5000, 40001, 300};
  constexpr int kTensors = 110;
  std::vector<Tensor> w, g, v, gw, gg, gv, norms, gnorms;
  std::vector<SgdParams> cpu_p, gpu_p;
  Tensor lr_dev(Shape{1}, Device::kCUDA);
  lr_dev.CopyFromHost(std::vector<float>{0.0375f});
  for (int t = 0; t < kTensors; ++t) {
    const Shape s{std::max<int64_t>(sizes[t % 11], 1)};
    const uint64_t seed = 1000 + 3 * t;
    w.push_back(RandomCpu(s, seed));
    g.push_back(RandomCpu(s, seed + 1));
    v.push_back(RandomCpu(s, seed + 2, -0.1f, 0.1f));
    gw.push_back(OnGpu(w.back()));
    gg.push_back(OnGpu(g.back()));
    gv.push_back(OnGpu(v.back()));
    norms.emplace_back(Shape{2}, Device::kCPU);
    Cpu().SquaredNorms(w.back(), g.back(), norms.back());
    gnorms.push_back(OnGpu(norms.back()));
    SgdParams p;
    p.lr_mult = t % 5 == 0 ? 2.0f : 1.0f;
    p.lr = 0.0375f * p.lr_mult;
    p.momentum = t % 2 ? 0.9f : 0.8f;
    p.weight_decay = t % 3 ? 5e-4f : 0.0f;
    p.nesterov = t % 4 == 1;
    cpu_p.push_back(p);
    if (t % 7 == 3) {  // LARS, the same norms on both sides
      cpu_p.back().lars_norms = norms.back().data();
      p.lars_norms = gnorms.back().data();
      cpu_p.back().lars_eta = p.lars_eta = 0.002f;
    }
    if (t % 3 == 2) p.lr_on_device = lr_dev.data();  // as a graphed step reads it
    gpu_p.push_back(p);
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<Ops::SgdTensor> updates;
    for (int t = 0; t < kTensors; ++t) {
      if (sizes[t % 11] == 0) continue;  // empty: left out, as no parameter is empty
      Cpu().SgdUpdate(w[t], g[t], v[t], cpu_p[t]);
      updates.push_back(Ops::SgdTensor{&gw[t], &gg[t], &gv[t], gpu_p[t]});
    }
    Gpu().SgdUpdateMany(updates);
  }
  for (int t = 0; t < kTensors; ++t) {
    SCOPED_TRACE(t);
    EXPECT_BITWISE(gw[t], w[t]);
    EXPECT_BITWISE(gv[t], v[t]);
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
