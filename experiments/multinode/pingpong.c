/* Point-to-point latency and bandwidth between world ranks 0 and 1 (run with one rank on
 * each of two hosts): the link constants the cost model is given (experiments/multinode).
 *   mpirun -np 2 pingpong   ->  one line per message size: bytes, half round trip us, MB/s
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const long sizes[] = {8, 1024, 65536, 1048576, 4194304, 16777216};
  char* buf = calloc(16777216, 1);
  for (int s = 0; s < 6; ++s) {
    const long n = sizes[s];
    const int reps = n <= 65536 ? 200 : (n <= 1048576 ? 20 : 5);
    double best = 1e30;
    for (int trial = 0; trial < 3; ++trial) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < reps; ++i) {
        if (rank == 0) {
          MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
          MPI_Recv(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
          MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
          MPI_Send(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
      }
      double half = (MPI_Wtime() - t0) / reps / 2;
      if (half < best) best = half;
    }
    if (rank == 0) printf("%ld %.2f %.1f\n", n, best * 1e6, n / best / 1e6);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
