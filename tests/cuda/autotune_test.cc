// The kernel autotuner (src/cuda/autotune.h) of the SIMT convolutions' configurations
// (conv/catalogue.cc):
// a forced version (Force or the environment) is run without timing; otherwise the first
// call of a key races the candidates (on a GPU: each once, then three times each) and
// later calls of that key reuse the choice; the emulator runs its fixed version.
#include <cstdlib>

#include "cuda/autotune.h"
#include "cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "gpu_test.h"

namespace colonnade::cuda {
namespace {

class KernelAutotunerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Available()) GTEST_SKIP() << "no CUDA device present: GPU tests skipped";
    unsetenv("COLONNADE_TEST_TUNER");
  }
  void TearDown() override { unsetenv("COLONNADE_TEST_TUNER"); }
};

TEST_F(KernelAutotunerTest, EnvironmentThenForceChooseWithoutTiming) {
  setenv("COLONNADE_TEST_TUNER", "v3", 1);
  KernelAutotuner tuner("COLONNADE_TEST_TUNER", {2, 3}, 2);
  int runs = 0;
  auto run = [&](int) { ++runs; };
  EXPECT_EQ(tuner.Choose(nullptr, {1, 2}, run), 3);
  tuner.Force(2);
  EXPECT_EQ(tuner.Choose(nullptr, {1, 2}, run), 2);
  EXPECT_EQ(runs, 0);
}

TEST_F(KernelAutotunerTest, RacesOncePerKey) {
  setenv("COLONNADE_TEST_TUNER", "v1", 1);  // not a candidate: tune
  KernelAutotuner tuner("COLONNADE_TEST_TUNER", {2, 3}, 3);
  int runs = 0, last = 0;
  auto run = [&](int v) {
    ++runs;
    last = v;
  };
  const int first = tuner.Choose(nullptr, {7}, run);
  if (kEmulated) {
    EXPECT_EQ(first, 3);
    EXPECT_EQ(runs, 0);
  } else {
    EXPECT_TRUE(first == 2 || first == 3);
    EXPECT_EQ(runs, 2 * (1 + 3));  // each candidate once, then three times each
    EXPECT_EQ(last, 3);            // in candidate order
  }
  const int before = runs;
  EXPECT_EQ(tuner.Choose(nullptr, {7}, run), first);
  EXPECT_EQ(runs, before) << "the choice of a key is cached";
  tuner.Force(0);
  EXPECT_EQ(tuner.Choose(nullptr, {7}, run), first) << "Force(0) tunes, from the cache";
}

TEST_F(KernelAutotunerTest, ForceRefusesAnUnknownVersion) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  KernelAutotuner tuner("COLONNADE_TEST_TUNER", {2, 3}, 2);
  EXPECT_DEATH(tuner.Force(1), "no kernel version 1");
}

}  // namespace
}  // namespace colonnade::cuda
