// What the GPU test files share: whether the kernels run on the CPU emulator (smaller
// shapes there), and the fixture that skips a test without a GPU and registers the CUDA
// backend on device 0.
#pragma once

#include "absl/status/status.h"
#include "cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace colonnade {

#if defined(COLONNADE_CUDA_EMULATE)
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::Available()) GTEST_SKIP() << "no CUDA device present: GPU tests skipped";
    absl::Status s = cuda::RegisterBackend(0);
    ASSERT_TRUE(s.ok()) << s;
  }
};

}  // namespace colonnade
