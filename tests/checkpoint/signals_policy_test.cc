// Stop-signal handlers (raised in-process) and the checkpoint policy.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "checkpoint/policy.h"
#include "checkpoint/signals.h"
#include "gtest/gtest.h"

namespace colonnade::checkpoint {
namespace {

class StopSignals : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(InstallStopSignalHandlers().ok());
    ClearStopRequest();
  }
  void TearDown() override {
    RestoreSignalHandlers();
    ClearStopRequest();
  }
};

TEST_F(StopSignals, EachSignalSetsTheFlag) {
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) {
    ClearStopRequest();
    EXPECT_FALSE(StopRequested());
    EXPECT_EQ(SignalReceived(), 0);
    ASSERT_EQ(raise(sig), 0);  // the process survives: only the flag is set
    EXPECT_TRUE(StopRequested()) << SignalName(sig);
    EXPECT_EQ(SignalReceived(), sig);
  }
}

TEST_F(StopSignals, FirstSignalIsReported) {
  ASSERT_EQ(raise(SIGTERM), 0);
  ASSERT_EQ(raise(SIGUSR1), 0);
  ASSERT_EQ(raise(SIGTERM), 0);
  EXPECT_TRUE(StopRequested());
  EXPECT_EQ(SignalReceived(), SIGTERM);
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(SignalName(SIGINT), "SIGINT");
}

TEST_F(StopSignals, InstallIsIdempotent) {
  ASSERT_TRUE(InstallStopSignalHandlers().ok());
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_EQ(SignalReceived(), SIGUSR1);
}

// Runs `body` in a child process; returns its wait status.
template <typename F>
int InChild(F body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(StopSignalsProcess, SecondSigintKillsAtOnce) {
  int status = InChild([] {
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    raise(SIGINT);
    if (!StopRequested()) _exit(11);
    raise(SIGINT);  // the default action: the process dies here
    _exit(12);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT) << "status " << status;
}

TEST(StopSignalsProcess, SecondSigtermOnlyKeepsTheFlag) {
  int status = InChild([] {
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    raise(SIGTERM);
    raise(SIGTERM);
    raise(SIGUSR1);
    _exit(StopRequested() && SignalReceived() == SIGTERM ? 0 : 13);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(StopSignalsProcess, RestoreBringsBackTheDefaultAction) {
  int status = InChild([] {
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    RestoreSignalHandlers();
    raise(SIGUSR1);  // default action of SIGUSR1: terminate
    _exit(14);
  });
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGUSR1) << "status " << status;
}

TEST(StopSignalsProcess, SignalFromAnotherProcessIsSeen) {
  // kill(2) from outside, as Slurm does, while the process is in a blocking sleep.
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    char ready = 'r';
    if (write(pipefd[1], &ready, 1) != 1) _exit(15);
    for (int i = 0; i < 5000 && !StopRequested(); ++i) usleep(1000);
    _exit(StopRequested() && SignalReceived() == SIGTERM ? 0 : 16);
  }
  close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  close(pipefd[0]);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(StopSignalsProcess, ExitOnStopSignalEndsABlockedProcess) {
  // Start-up blocked in open() on a FIFO nobody writes (a shard on a hung file system):
  // SIGTERM from outside ends it at once with the chosen code and a note on stderr.
  char dir[] = "/tmp/colonnade_signals_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string fifo = std::string(dir) + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  int err[2], ready[2];
  ASSERT_EQ(pipe(err), 0);
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(err[0]);
    close(ready[0]);
    dup2(err[1], STDERR_FILENO);
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    ExitOnStopSignal("prog", "before the loop", 75);
    char r = 'r';
    if (write(ready[1], &r, 1) != 1) _exit(15);
    open(fifo.c_str(), O_RDONLY);  // blocks until SIGTERM
    _exit(17);
  }
  close(err[1]);
  close(ready[1]);
  char r = 0;
  ASSERT_EQ(read(ready[0], &r, 1), 1);
  close(ready[0]);
  usleep(100 * 1000);  // let it reach open()
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  for (int i = 0; i < 500 && waitpid(pid, &status, WNOHANG) == 0; ++i) usleep(10 * 1000);
  const bool ended = WIFEXITED(status) || WIFSIGNALED(status);
  if (!ended) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  char note[256] = {0};
  ssize_t n = read(err[0], note, sizeof(note) - 1);
  close(err[0]);
  unlink(fifo.c_str());
  rmdir(dir);
  ASSERT_TRUE(ended) << "still blocked 5 s after SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 75) << "status " << status;
  ASSERT_GT(n, 0);
  EXPECT_STREQ(note, "prog: stopped by SIGTERM before the loop; exit 75\n");
}

TEST(StopSignalsProcess, RecordStopSignalGoesBackToRecording) {
  int status = InChild([] {
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    ExitOnStopSignal("prog", "early", 75);
    RecordStopSignal();
    raise(SIGUSR1);  // recorded only: the process goes on
    _exit(StopRequested() && SignalReceived() == SIGUSR1 ? 0 : 18);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST(StopSignalsProcess, ASignalRecordedBeforeExitOnStopSignalEndsTheProcessThere) {
  int status = InChild([] {
    if (!InstallStopSignalHandlers().ok()) _exit(10);
    raise(SIGTERM);  // arrives between Install and ExitOnStopSignal
    ExitOnStopSignal("prog", "early", 42);
    _exit(19);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 42) << "status " << status;
}

// ---- policy ------------------------------------------------------------------------------------

TEST(CheckpointPolicy, EveryNSteps) {
  CheckpointPolicy p(3, 0.0);
  std::vector<int64_t> due;
  for (int64_t step = 1; step <= 10; ++step)
    if (p.Due(step, 1e9)) due.push_back(step);
  EXPECT_EQ(due, (std::vector<int64_t>{3, 6, 9}));
}

TEST(CheckpointPolicy, EveryTSeconds) {
  CheckpointPolicy p(0, 10.0, 0, 100.0);
  EXPECT_FALSE(p.Due(1, 105.0));
  EXPECT_FALSE(p.Due(2, 109.9));
  EXPECT_TRUE(p.Due(3, 110.0));
  EXPECT_FALSE(p.Due(4, 115.0)) << "the timer restarts at each checkpoint";
  EXPECT_TRUE(p.Due(5, 121.0));
  EXPECT_FALSE(p.Due(5, 200.0)) << "a step is never due twice";
}

TEST(CheckpointPolicy, WhicheverComesFirst) {
  CheckpointPolicy p(5, 10.0, 0, 0.0);
  EXPECT_FALSE(p.Due(1, 1.0));
  EXPECT_TRUE(p.Due(2, 10.5));  // time
  EXPECT_FALSE(p.Due(3, 12.0));
  EXPECT_FALSE(p.Due(4, 13.0));
  EXPECT_TRUE(p.Due(5, 14.0));  // steps; restarts the timer too
  EXPECT_FALSE(p.Due(6, 23.0));
  EXPECT_TRUE(p.Due(7, 24.0));
}

TEST(CheckpointPolicy, OffAndResume) {
  CheckpointPolicy off(0, 0.0);
  for (int64_t step = 1; step < 100; ++step) EXPECT_FALSE(off.Due(step, step * 1000.0));
  // Resumed at step 6 with every 3 steps: 6 is already saved, 9 is next.
  CheckpointPolicy p(3, 0.0, 6, 0.0);
  EXPECT_FALSE(p.Due(6, 0.0));
  EXPECT_FALSE(p.Due(7, 0.0));
  EXPECT_TRUE(p.Due(9, 0.0));
  // A signal-triggered checkpoint at step 10 restarts the timer and blocks step 10.
  CheckpointPolicy q(0, 5.0, 0, 0.0);
  q.MarkWritten(10, 100.0);
  EXPECT_FALSE(q.Due(10, 200.0));
  EXPECT_FALSE(q.Due(11, 104.0));
  EXPECT_TRUE(q.Due(12, 105.0));
  EXPECT_EQ(q.last_step(), 12);
}

}  // namespace
}  // namespace colonnade::checkpoint
