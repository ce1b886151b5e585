// The results kernel (src/cuda/ops/results.cu) against CpuOps::AccumulateResults.

#include <cmath>
#include <random>

#include "absl/strings/str_format.h"
#include "core/results.h"
#include "cuda/port.h"
#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

// The results kernel against CpuOps::AccumulateResults (core/results.h; tests/core/
// results_test.cc checks that against a full sort): equal counts, the loss sum to double
// rounding (another order of additions), over steps added in a row, with ties (few
// probability levels), a label outside the classes, and a non-finite step whose number
// comes from the device (a graphed step's StepScalars::step).
TEST_F(CudaTest, AccumulateResults) {
  struct Case {
    int k, n, levels;
  };
  for (const Case& c : {Case{10, 33, 3}, Case{1000, 128, 20}, Case{3, 1, 2}, Case{10, 257, 1000}}) {
    if (kEmulated && c.k * c.n > 20000) continue;
    SCOPED_TRACE(absl::StrFormat("%d classes, %d images", c.k, c.n));
    Tensor cpu_totals = NewResultTotals(Device::kCPU);
    Tensor gpu_totals = NewResultTotals(Device::kCUDA);
    int64_t* step_on_device = nullptr;
    COLONNADE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&step_on_device), sizeof(int64_t)));
    const int64_t device_step = 41;
    COLONNADE_CUDA_CHECK(
        cudaMemcpy(step_on_device, &device_step, sizeof(int64_t), cudaMemcpyHostToDevice));
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    for (int step = 0; step < 3; ++step) {
      std::mt19937 rng(c.k * 7 + c.n + step);
      std::uniform_int_distribution<int> level(0, c.levels - 1), cls(0, c.k - 1);
      Tensor probs(Shape{c.k, 1, 1, c.n}), labels(Shape{1, 1, 1, c.n}), loss(Shape{c.n});
      for (int64_t i = 0; i < probs.size(); ++i) {
        probs.data()[i] = static_cast<float>(level(rng)) / c.levels;
      }
      for (int j = 0; j < c.n; ++j) {
        labels.data()[j] = static_cast<float>(cls(rng));
        loss.data()[j] = static_cast<float>(level(rng)) + 0.37f;
      }
      if (step == 1) labels.data()[0] = static_cast<float>(c.k);  // not a class
      if (step == 2) loss.data()[c.n / 2] = kNaN;
      Cpu().AccumulateResults(probs, labels, loss, 41, nullptr, cpu_totals);
      Gpu().AccumulateResults(OnGpu(probs), OnGpu(labels), OnGpu(loss), 7,
                              step == 2 ? step_on_device : nullptr, gpu_totals);
    }
    const ResultTotals want = ReadResultTotals(cpu_totals), got = ReadResultTotals(gpu_totals);
    COLONNADE_CUDA_CHECK(cudaFree(step_on_device));  // the kernels have run (read above)
    EXPECT_EQ(got.top1, want.top1);
    EXPECT_EQ(got.top5, want.top5);
    EXPECT_EQ(got.steps, 3);
    EXPECT_TRUE(std::isnan(got.loss_sum) && std::isnan(got.last_loss_sum));
    EXPECT_EQ(got.nonfinite_steps, 1);
    EXPECT_EQ(got.first_nonfinite_step, 41);  // from the device, not the argument 7
    EXPECT_TRUE(std::isnan(got.first_nonfinite_loss));
    EXPECT_GT(want.top5, want.top1);
  }
}

// Two finite steps: the loss sums agree to double rounding.
TEST_F(CudaTest, AccumulateResultsLossSum) {
  const int k = 10, n = 200;
  Tensor probs = RandomCpu(Shape{k, 1, 1, n}, 5, 0.0f, 1.0f);
  Tensor labels(Shape{1, 1, 1, n});
  for (int j = 0; j < n; ++j) labels.data()[j] = static_cast<float>(j % k);
  Tensor loss = RandomCpu(Shape{n}, 6, 0.0f, 4.0f);
  Tensor cpu_totals = NewResultTotals(Device::kCPU), gpu_totals = NewResultTotals(Device::kCUDA);
  for (int step = 0; step < 2; ++step) {
    Cpu().AccumulateResults(probs, labels, loss, step, nullptr, cpu_totals);
    Gpu().AccumulateResults(OnGpu(probs), OnGpu(labels), OnGpu(loss), step, nullptr, gpu_totals);
  }
  const ResultTotals want = ReadResultTotals(cpu_totals), got = ReadResultTotals(gpu_totals);
  EXPECT_NEAR(got.loss_sum, want.loss_sum, 1e-12 * want.loss_sum);
  EXPECT_NEAR(got.last_loss_sum, want.last_loss_sum, 1e-12 * want.last_loss_sum);
  EXPECT_EQ(got.top1, want.top1);
  EXPECT_EQ(got.top5, want.top5);
  EXPECT_EQ(got.nonfinite_steps, 0);
  EXPECT_EQ(got.steps, 2);
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
