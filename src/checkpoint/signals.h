// Graceful stop on SIGUSR1, SIGTERM and SIGINT: the handler only records the signal in a
// lock-free atomic (async-signal-safe); the training loop polls StopRequested() once per
// step, all-reduces it (logical OR over all ranks) so that every rank stops after the same
// step, writes a checkpoint and exits with kExitPreempted (75, apps/exit_codes.h).
//
//   SIGTERM  Slurm preemption / scancel / time limit (followed by SIGKILL after KillWait)
//   SIGUSR1  `sbatch --signal=B:USR1@120`: a warning ahead of the time limit
//   SIGINT   Ctrl-C. A second SIGINT after the first restores the default action and
//            re-raises it, so an impatient Ctrl-C Ctrl-C still kills the process at once
//            (the previous checkpoint stays valid: writes are atomic).
//
// Handlers are installed with SA_RESTART, so an interrupted read() or write() in the data
// pipeline resumes instead of failing with EINTR.
//
// Recording a signal only helps while a loop polls it. A program that is still starting
// (the trainer opening its data, which may block in open() on a FIFO or a slow file
// system, or waiting for the other ranks) calls ExitOnStopSignal first: a stop signal then
// ends the process at once with a one-line note and a chosen exit code, so `timeout`,
// scancel or Ctrl-C stop it; RecordStopSignal() switches to the graceful behaviour when
// the loop that polls StopRequested() begins.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace colonnade::checkpoint {

// Installs the handlers (idempotent). Call once, early in main, before starting threads
// that should not see the default action.
absl::Status InstallStopSignalHandlers();
// Restores the dispositions that were in place before InstallStopSignalHandlers().
void RestoreSignalHandlers();

// From now on a stop signal ends the process at once: the handler writes
// "<program>: stopped by <SIGNAL> <when>; exit <exit_code>" to stderr and calls
// _exit(exit_code). `program` and `when` are copied. A signal recorded before the call
// (between InstallStopSignalHandlers and here) ends the process in this call.
void ExitOnStopSignal(const std::string& program, const std::string& when, int exit_code);
// From now on a stop signal ends the process at once with `exit_code` and prints nothing:
// for a process whose outcome is already decided and said (a usage error agreed by every
// rank), so that the launcher's SIGTERM to the ranks still finishing does not add a
// misleading "stopped by SIGTERM ... exit 75" (75 asks for a requeue).
void ExitQuietlyOnStopSignal(int exit_code);
// From now on a stop signal is only recorded (the behaviour after Install): for the loop
// that polls StopRequested().
void RecordStopSignal();

// True once one of the signals has been received.
bool StopRequested();
// The first signal received (SIGTERM, ...), or 0.
int SignalReceived();
// "SIGTERM", "SIGUSR1", "SIGINT", or "signal N": for the stop message.
std::string SignalName(int sig);

// Forgets a received signal (tests; a trainer that keeps running after a handled stop).
void ClearStopRequest();

}  // namespace colonnade::checkpoint
