/* The all-reduce of the gradient buckets on its own, between one rank on each of two hosts
 * (experiments/multinode, run.sh algorithms): 93.4 MB of floats (AlexNet-67's gradients)
 * summed with the blocking MPI_Allreduce and with MPI_Iallreduce + MPI_Wait (what
 * GradientSync does), and 16 MB sent both ways at once with MPI_Sendrecv.
 *   mpirun -np 2 allreduce_probe  ->  "blocking MS", "nonblocking MS", "bidirectional MB/s"
 * (the best of three each).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const int n = 23354762; /* floats */
  float* a = calloc(n, sizeof(float));
  for (int mode = 0; mode < 2; ++mode) {
    double best = 1e30;
    for (int t = 0; t < 3; ++t) {
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (mode == 0) {
        MPI_Allreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      } else {
        MPI_Request q;
        MPI_Iallreduce(MPI_IN_PLACE, a, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &q);
        MPI_Wait(&q, MPI_STATUS_IGNORE);
      }
      double dt = MPI_Wtime() - t0;
      if (dt < best) best = dt;
    }
    if (rank == 0) printf("%s %.1f\n", mode == 0 ? "blocking" : "nonblocking", best * 1e3);
  }
  const long m = 16777216;
  char* s = calloc(m, 1);
  char* r = calloc(m, 1);
  double best = 1e30;
  for (int t = 0; t < 3; ++t) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPI_Sendrecv(s, (int)m, MPI_BYTE, 1 - rank, 0, r, (int)m, MPI_BYTE, 1 - rank, 0,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double dt = MPI_Wtime() - t0;
    if (dt < best) best = dt;
  }
  if (rank == 0) printf("bidirectional %.1f\n", m / best / 1e6);
  free(a);
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}
