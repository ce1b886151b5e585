// Bad layouts end the job promptly on every rank: runs layout_probe under mpirun and
// checks the exit status, that every rank left by itself with status 2, that rank 0
// printed exactly one error line, and that it all took far less than the timeout.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#ifndef COLONNADE_TEST_MPIRUN
#error "COLONNADE_TEST_MPIRUN (the mpirun command line with its flags) must be defined"
#endif
#ifndef COLONNADE_TEST_PROBE
#error "COLONNADE_TEST_PROBE (the layout_probe path) must be defined"
#endif

namespace {

namespace fs = std::filesystem;

struct ProbeRun {
  int status = -1;  // exit status of the timeout+mpirun command
  double seconds = 0;
  std::string stderr_text;
  std::vector<std::string> markers;
};

constexpr int kTimeoutSeconds = 60;

// Runs `env timeout mpirun mpi_args -np np layout_probe args`.
ProbeRun Probe(int np, const std::string& args, const std::string& env = "",
               const std::string& mpi_args = "") {
  fs::path dir = fs::temp_directory_path() /
                 absl::StrFormat("layout_probe_%d_%d", static_cast<int>(getpid()), std::rand());
  fs::create_directories(dir);
  fs::path err = dir / "stderr.txt";
  const std::string cmd = absl::StrFormat(
      "%s PROBE_MARKER_DIR=%s timeout %d %s -x PROBE_MARKER_DIR %s -np %d %s %s 2>%s >/dev/null",
      env, dir.string(), kTimeoutSeconds, COLONNADE_TEST_MPIRUN, mpi_args, np, COLONNADE_TEST_PROBE,
      args, err.string());
  auto t0 = std::chrono::steady_clock::now();
  int rc = std::system(cmd.c_str());
  ProbeRun r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  if (FILE* f = std::fopen(err.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) r.stderr_text.append(buf, n);
    std::fclose(f);
  }
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0) r.markers.push_back(name);
  }
  std::sort(r.markers.begin(), r.markers.end());
  fs::remove_all(dir);
  return r;
}

int ErrorLines(const std::string& text) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n'))
    if (line.find("layout_probe: error:") != absl::string_view::npos) ++n;
  return n;
}

void ExpectAllRanksExit(const ProbeRun& r, int np, int code, const std::string& what) {
  EXPECT_NE(r.status, 124) << what << ": timed out (a rank waited in a collective)";
  if (code == 0) {
    EXPECT_EQ(r.status, 0) << what << "\n" << r.stderr_text;
  } else {
    EXPECT_NE(r.status, 0) << what;
  }
  std::vector<std::string> want;
  for (int i = 0; i < np; ++i) want.push_back(absl::StrFormat("rank%d.exit%d", i, code));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(r.markers, want) << what << "\n" << r.stderr_text;
  EXPECT_LT(r.seconds, kTimeoutSeconds / 2) << what << ": took too long";
}

TEST(LayoutErrors, MpNotDividingTheWorld) {
  ProbeRun r = Probe(4, "--mp=3 --columns=3 --batch_size=8");
  ExpectAllRanksExit(r, 4, 2, "--mp=3 on 4 ranks");
  EXPECT_EQ(ErrorLines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("--mp=3 does not divide the world size 4"), std::string::npos)
      << r.stderr_text;
}

TEST(LayoutErrors, ColumnsNotDivisibleByMp) {
  ProbeRun r = Probe(4, "--mp=4 --columns=2 --batch_size=8");
  ExpectAllRanksExit(r, 4, 2, "--columns=2 with --mp=4");
  EXPECT_EQ(ErrorLines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("not divisible by --mp=4"), std::string::npos) << r.stderr_text;
}

TEST(LayoutErrors, BatchNotDivisibleByDp) {
  ProbeRun r = Probe(4, "--mp=2 --columns=2 --batch_size=7");
  ExpectAllRanksExit(r, 4, 2, "--batch_size=7 with dp 2");
  EXPECT_EQ(ErrorLines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("--batch_size=7"), std::string::npos) << r.stderr_text;
}

// Found by a collective (the node check), agreed on by every rank.
TEST(LayoutErrors, MpGroupSpanningNodes) {
  ProbeRun r = Probe(4, "--mp=2 --columns=2 --batch_size=8", "COLONNADE_TEST_RANKS_PER_NODE=3",
                     "-x COLONNADE_TEST_RANKS_PER_NODE");
  ExpectAllRanksExit(r, 4, 2, "an mp group across fake nodes");
  EXPECT_EQ(ErrorLines(r.stderr_text), 1) << r.stderr_text;
  EXPECT_NE(r.stderr_text.find("spans two nodes"), std::string::npos) << r.stderr_text;
}

// The control: a good layout runs to the barrier and exits 0 everywhere.
TEST(LayoutErrors, GoodLayoutRuns) {
  ProbeRun r = Probe(4, "--mp=2 --columns=2 --batch_size=8");
  ExpectAllRanksExit(r, 4, 0, "a good layout");
  EXPECT_EQ(ErrorLines(r.stderr_text), 0) << r.stderr_text;
}

}  // namespace
