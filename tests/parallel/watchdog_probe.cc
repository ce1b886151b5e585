// A program for tests/parallel/watchdog_test.sh: starts the collective watchdog and does
// all-reduces in a loop (the shape of a training step), with one fault made on purpose.
//
//   watchdog_probe TIMEOUT_S ITERATIONS MODE [RANK]
//     ok       every rank takes part; waits up to TIMEOUT_S / 2 between steps (must end 0)
//     stall    RANK sleeps outside MPI for ever at iteration 3 (alive: heartbeats go on)
//     stop     RANK stops itself (SIGSTOP) at iteration 3 (silent)
//     exit     RANK leaves the loop at iteration 3 and waits in a barrier the others never
//              reach (every rank waits, in different calls)
//   Prints "probe: rank R done" at the end and exits 0; the watchdog ends a faulty run with
//   exit 5.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "parallel/mesh.h"
#include "parallel/watchdog.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: watchdog_probe TIMEOUT_S ITERATIONS ok|stall|stop|exit [RANK]\n");
    return 2;
  }
  const double timeout = std::atof(argv[1]);
  const int iterations = std::atoi(argv[2]);
  const std::string mode = argv[3];
  const int victim = argc > 4 ? std::atoi(argv[4]) : -1;
  if (auto s = colonnade::InitMpi(&argc, &argv); !s.ok()) return 1;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  colonnade::WatchdogOptions o;
  o.timeout_s = timeout;
  o.exit_code = 5;
  o.program = "watchdog_probe";
  if (auto s = colonnade::StartCollectiveWatchdog(MPI_COMM_WORLD, o); !s.ok()) {
    std::fprintf(stderr, "probe: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  for (int i = 0; i < iterations; ++i) {
    colonnade::WatchdogSetStep(i);
    if (rank == victim && i == 3) {
      if (mode == "stall") {
        while (true) sleep(1000);
      } else if (mode == "stop") {
        raise(SIGSTOP);
      } else if (mode == "exit") {
        MPI_Barrier(MPI_COMM_SELF);
        int x = 0;
        MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD);  // the others are in the all-reduce
      }
    }
    if (mode == "ok" && rank == i % 2) usleep(static_cast<useconds_t>(timeout * 0.5e6));
    colonnade::WatchdogLabel label("the probe's step");
    double v = rank;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  }
  std::printf("probe: rank %d done (%lld blocking calls watched)\n", rank,
              static_cast<long long>(colonnade::WatchdogCallsEntered()));
  colonnade::FinalizeMpi();
  return 0;
}
