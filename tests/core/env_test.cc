// The COLONNADE_* environment variables: a set variable is meant (core/env.h).
#include "core/env.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace colonnade {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* n : {"COLONNADE_CPU_THREADS", "COLONNADE_TC_WGMMA", "COLONNADE_NOT_A_THING",
                          "COLONNADE_SHARED_DATA", "COLONNADE_POOL_BWD", "COLONNADE_CONV_CONFIG"}) {
      unsetenv(n);
    }
  }
};

TEST_F(EnvTest, UnsetIsNothingAndWholeIntegersAreRead) {
  unsetenv("COLONNADE_CPU_THREADS");
  absl::StatusOr<std::optional<int64_t>> v = EnvInt("COLONNADE_CPU_THREADS");
  ASSERT_TRUE(v.ok());
  EXPECT_FALSE(v->has_value());
  setenv("COLONNADE_CPU_THREADS", "12", 1);
  v = EnvInt("COLONNADE_CPU_THREADS");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ(**v, 12);
}

TEST_F(EnvTest, EmptyPaddedAndOutOfRangeValuesAreErrors) {
  for (const char* bad : {"", " 5", "5 ", "+5", "0x5", "5x", "0", "1025", "-1"}) {
    setenv("COLONNADE_CPU_THREADS", bad, 1);
    absl::StatusOr<std::optional<int64_t>> v = EnvInt("COLONNADE_CPU_THREADS");
    ASSERT_FALSE(v.ok()) << "'" << bad << "'";
    EXPECT_EQ(v.status().message(),
              std::string("environment variable COLONNADE_CPU_THREADS='") + bad +
                  "' is not an integer from 1 to 1024 (CPU-op threads of the library): unset it "
                  "or give a valid value (docs/OPERATIONS.md §3)");
    EXPECT_FALSE(CheckEnvironment().ok()) << "'" << bad << "'";
  }
}

TEST_F(EnvTest, WordsMustBeOneOfTheSet) {
  setenv("COLONNADE_TC_WGMMA", "1", 1);
  absl::StatusOr<std::optional<std::string>> w = EnvWord("COLONNADE_TC_WGMMA");
  ASSERT_TRUE(w.ok() && w->has_value());
  EXPECT_EQ(**w, "1");
  for (const char* bad : {"", "yes", " 1"}) {
    setenv("COLONNADE_TC_WGMMA", bad, 1);
    w = EnvWord("COLONNADE_TC_WGMMA");
    ASSERT_FALSE(w.ok()) << "'" << bad << "'";
    EXPECT_NE(w.status().message().find("is not one of 0, 1"), std::string::npos) << w.status();
  }
  // A script's variable takes any value but the empty one.
  setenv("COLONNADE_SHARED_DATA", "", 1);
  EXPECT_FALSE(EnvWord("COLONNADE_SHARED_DATA").ok());
  setenv("COLONNADE_SHARED_DATA", "/data", 1);
  EXPECT_TRUE(EnvWord("COLONNADE_SHARED_DATA").ok());
}

// A variable whose words a library sets (the CUDA backend's COLONNADE_CONV_CONFIG): any
// non-empty value until then (no library of this binary reads it), then only those words.
TEST_F(EnvTest, WordsSetByALibrary) {
  setenv("COLONNADE_CONV_CONFIG", "anything", 1);
  EXPECT_TRUE(EnvWord("COLONNADE_CONV_CONFIG").ok());
  SetEnvWords("COLONNADE_CONV_CONFIG", {"auto", "mma"});
  EXPECT_FALSE(CheckEnvironment().ok());
  absl::StatusOr<std::optional<std::string>> w = EnvWord("COLONNADE_CONV_CONFIG");
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("is not one of auto, mma"), std::string::npos) << w.status();
  setenv("COLONNADE_CONV_CONFIG", "mma", 1);
  w = EnvWord("COLONNADE_CONV_CONFIG");
  ASSERT_TRUE(w.ok() && w->has_value());
  EXPECT_EQ(**w, "mma");
  EXPECT_DEATH(SetEnvWords("COLONNADE_CPU_THREADS", {"1"}), "not a known word variable");
}

TEST_F(EnvTest, UnknownVariablesAreReportedNotRefused) {
  setenv("COLONNADE_NOT_A_THING", "1", 1);
  std::vector<std::string> unknown;
  ASSERT_TRUE(CheckEnvironment(&unknown).ok());
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "COLONNADE_NOT_A_THING"), unknown.end());
  for (const EnvVariable& v : KnownEnvVariables()) {
    EXPECT_EQ(std::find(unknown.begin(), unknown.end(), v.name), unknown.end()) << v.name;
  }
}

// A variable an earlier version read (a kernel version to force) is neither an error nor a
// typo: the program prints what became of it.
TEST_F(EnvTest, RemovedVariablesAreNotedAsGone) {
  setenv("COLONNADE_POOL_BWD", "v2", 1);
  std::vector<std::string> unknown, gone;
  ASSERT_TRUE(CheckEnvironment(&unknown, &gone).ok());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "COLONNADE_POOL_BWD"), unknown.end());
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].find("COLONNADE_POOL_BWD is set but gone, and ignored: "), 0u) << gone[0];
  EXPECT_NE(gone[0].find("dev/pool_backward"), std::string::npos) << gone[0];
  for (const RemovedEnvVariable& r : RemovedEnvVariables()) {
    for (const EnvVariable& v : KnownEnvVariables()) EXPECT_STRNE(r.name, v.name);
  }
}

}  // namespace
}  // namespace colonnade
