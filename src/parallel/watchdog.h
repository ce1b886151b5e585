// The collective watchdog: ends a job whose ranks wait in a collective for a rank that
// will never come (a crashed node, a stopped process, a cut network link, a rank stuck
// outside MPI), instead of letting MPI wait forever, and names that rank and its host.
//
// How it works (docs/OPERATIONS.md, "When a rank stops answering"):
//   * Every blocking MPI call of the process (collectives, waits, point-to-point, the
//     communicator constructors, MPI_Finalize) passes through the MPI profiling interface:
//     watchdog.cc defines MPI_Allreduce, MPI_Wait, ... which note on entry that the main
//     thread waits (the call, since when) and call PMPI_Allreduce, ... This covers every
//     blocking call of every library linked into the program (the gradient all-reduce, the
//     per-step agreement, checkpoint gathers, mesh set-up), without touching the callers.
//     A program that never starts the watchdog pays one relaxed atomic load per call.
//   * A watchdog thread per rank sends a small UDP heartbeat (rank, step, whether and for
//     how long it waits in which call) every heartbeat interval to a monitor, world rank 0,
//     whose addresses every rank learns at start-up (one gather and one broadcast,
//     themselves bounded by the timeout). The main thread alone calls MPI
//     (MPI_THREAD_FUNNELED); the watchdog thread never does.
//   * The monitor decides: a rank that has sent nothing for `timeout_s` (dead, stopped,
//     unreachable), with every rank silent for three heartbeats; or, when some rank has
//     waited in one call for `timeout_s`, the ranks silent for three heartbeats, else those
//     outside any collective (busy elsewhere), else those in the least common call, are the
//     culprits. It sends every rank the verdict; every rank that gets it writes one line
//     naming the culprit rank(s) and host(s) and ends with _exit(exit_code), so no rank is
//     left waiting and mpirun (or srun) sees the job fail. A rank that hears nothing from
//     the monitor for `timeout_s` names the monitor itself (it, or the network to it,
//     failed) and ends the same way. A rank whose own thread was stopped or starved for
//     three heartbeats first reads what came meanwhile and starts counting again.
//   * A job therefore ends within about timeout_s + 2-3 heartbeats of the fault.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace colonnade {

struct WatchdogOptions {
  // Seconds a rank may wait in one blocking call, and a rank may stay silent, before the
  // job is ended. 0: no watchdog.
  double timeout_s = 300;
  // The code every rank ends with when the watchdog ends the job.
  int exit_code = 1;
  // Prefix of the lines it writes ("trainer: error on rank ...").
  std::string program = "trainer";
  // Heartbeat interval; 0: timeout_s / 10, kept within [0.05 s, 2 s].
  double heartbeat_s = 0;
};

// Starts the watchdog of this process. Collective over `world` (every rank must call it
// with the same timeout); a world of one rank or a timeout of 0 starts nothing. Returns
// an error (and starts nothing) when the options are invalid, a UDP socket cannot be
// made, or the MPI wrappers are not linked into the program. If the start-up exchange
// itself does not complete within the timeout, the rank writes a line and exits with
// exit_code.
absl::Status StartCollectiveWatchdog(MPI_Comm world, const WatchdogOptions& options);
// Stops the watchdog thread (FinalizeMpi calls it after MPI_Finalize).
void StopCollectiveWatchdog();
bool CollectiveWatchdogRunning();
// The training step the main thread works on, for the messages (-1: none yet).
void WatchdogSetStep(int64_t step);
// Blocking calls of the main thread so far (a test of the wrappers).
int64_t WatchdogCallsEntered();

// While alive, names what the main thread's blocking calls are for ("gradient all-reduce",
// "checkpoint"), for the messages. `what` must be a string literal (or live as long).
class WatchdogLabel {
 public:
  explicit WatchdogLabel(const char* what);
  ~WatchdogLabel();
  WatchdogLabel(const WatchdogLabel&) = delete;
  WatchdogLabel& operator=(const WatchdogLabel&) = delete;

 private:
  const char* previous_;
};

// Marks a blocking wait of the main thread outside MPI's wrapped calls (the NCCL
// backend's wait for a collective), so the watchdog sees it as one. `call`: a literal.
class WatchdogWait {
 public:
  explicit WatchdogWait(const char* call);
  ~WatchdogWait();
  WatchdogWait(const WatchdogWait&) = delete;
  WatchdogWait& operator=(const WatchdogWait&) = delete;

 private:
  bool armed_;
};

}  // namespace colonnade
