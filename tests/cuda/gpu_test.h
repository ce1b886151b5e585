// What the GPU test files share: whether the kernels run on the CPU emulator (smaller
// shapes there), and the fixture that skips a test without a GPU and registers the CUDA
// backend on device 0.
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "core/net.h"
#include "core/optimizer.h"
#include "core/philox.h"
#include "cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace colonnade {

#if defined(COLONNADE_CUDA_EMULATE)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

// First differing float (bitwise: 0.0f and -0.0f differ, NaN never equals).
inline ::testing::AssertionResult BitwiseEqual(const std::vector<float>& got,
                                               const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, want " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "value " << i << " of " << got.size() << ": " << got[i] << " != " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// ||got - ref|| / ||ref|| (||got - ref|| where ref is 0); infinite if got has a NaN or
// another size.
inline double RelErr(const std::vector<float>& got, const std::vector<float>& ref) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::Available()) GTEST_SKIP() << "no CUDA device present: GPU tests skipped";
    absl::Status s = cuda::RegisterBackend(0);
    ASSERT_TRUE(s.ok()) << s;
  }
};

// One SGD step of `net` (built with "data" and "label" blobs) on random inputs keyed by
// (seed, step): Gaussian images, labels uniform over `classes`. Returns the mean loss.
inline double TrainStepOnRandomData(Net& net, SgdOptimizer& opt, int step, uint64_t seed,
                                    int classes, float lr) {
  Tensor& data = net.blob("data");
  Tensor& label = net.blob("label");
  const int64_t batch = label.size();
  const uint64_t key = MixKey(seed, static_cast<uint64_t>(RandomPurpose::kSynthetic));
  std::vector<float> img(data.size()), lab(label.size());
  for (size_t i = 0; i < img.size(); ++i) img[i] = PhiloxNormal(key, 2 * step, i);
  for (size_t i = 0; i < lab.size(); ++i)
    lab[i] = static_cast<float>(static_cast<int>(PhiloxUniform(key, 2 * step + 1, i) * classes) %
                                classes);
  data.CopyFromHost(img);
  label.CopyFromHost(lab);
  RunContext ctx;
  ctx.phase = Phase::kTrain;
  ctx.seed = seed;
  ctx.step = step;
  ctx.global_batch = batch;
  ctx.loss_scale = 1.0f / static_cast<float>(batch);
  net.Forward(ctx);
  double sum = 0;
  for (float v : net.blob("loss").ToHost()) sum += v;
  net.Backward(ctx);
  opt.Step(net, lr);
  return sum / batch;
}

}  // namespace colonnade
