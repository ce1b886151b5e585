#include "checkpoint/signals.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace colonnade::checkpoint {
namespace {

// Only lock-free atomics may be touched from a signal handler.
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free");
std::atomic<int> g_signal{0};

constexpr int kSignals[] = {SIGUSR1, SIGTERM, SIGINT};
struct sigaction g_old[3];
bool g_installed = false;
std::mutex g_mu;  // guards install/restore (never taken in the handler)

// ExitOnStopSignal's state: the exit code (-1: record only) and the note for each
// signal of kSignals, formatted in advance because the handler may only call write().
std::atomic<int> g_exit_code{-1};
char g_exit_note[3][256];
size_t g_exit_note_len[3] = {0, 0, 0};

void OnSignal(int sig) {
  const int code = g_exit_code.load();
  if (code >= 0) {
    for (int i = 0; i < 3; ++i) {
      if (kSignals[i] != sig) continue;
      ssize_t unused = write(STDERR_FILENO, g_exit_note[i], g_exit_note_len[i]);
      (void)unused;
    }
    _exit(code);
  }
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) return;
  if (sig == SIGINT) {
    // Second Ctrl-C: the user wants out now. signal() and raise() are async-signal-safe.
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
  }
}

}  // namespace

absl::Status InstallStopSignalHandlers() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_installed) return absl::OkStatus();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnSignal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
  for (int i = 0; i < 3; ++i) {
    if (sigaction(kSignals[i], &sa, &g_old[i]) != 0) {
      int e = errno;
      for (int j = 0; j < i; ++j) sigaction(kSignals[j], &g_old[j], nullptr);
      return absl::InternalError(absl::StrCat("cannot install a handler for ",
                                              SignalName(kSignals[i]), ": ", std::strerror(e)));
    }
  }
  g_installed = true;
  return absl::OkStatus();
}

void RestoreSignalHandlers() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_installed) return;
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  g_installed = false;
}

void ExitOnStopSignal(const std::string& program, const std::string& when, int exit_code) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    // Disarm while the notes change so the handler never reads a half-written one.
    g_exit_code.store(-1);
    for (int i = 0; i < 3; ++i) {
      const std::string note = absl::StrCat(program, ": stopped by ", SignalName(kSignals[i]), " ",
                                            when, "; exit ", exit_code, "\n");
      g_exit_note_len[i] = std::min(note.size(), sizeof(g_exit_note[i]));
      std::memcpy(g_exit_note[i], note.data(), g_exit_note_len[i]);
    }
    g_exit_code.store(exit_code);
  }
  if (const int sig = g_signal.load(); sig != 0) OnSignal(sig);
}

void ExitQuietlyOnStopSignal(int exit_code) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_exit_code.store(-1);
    for (size_t& len : g_exit_note_len) len = 0;
    g_exit_code.store(exit_code);
  }
  if (const int sig = g_signal.load(); sig != 0) OnSignal(sig);
}

void RecordStopSignal() { g_exit_code.store(-1); }

bool StopRequested() { return g_signal.load(std::memory_order_relaxed) != 0; }

int SignalReceived() { return g_signal.load(std::memory_order_relaxed); }

std::string SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    case SIGKILL:
      return "SIGKILL";
    default:
      return absl::StrCat("signal ", sig);
  }
}

void ClearStopRequest() { g_signal.store(0); }

}  // namespace colonnade::checkpoint
