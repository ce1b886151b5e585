// A tiny MPI program for layout_errors_test: validates --mp, --columns and --batch_size
// the way the trainer does (ValidateLayout on every rank, then Mesh::Create), prints a
// one-line error from rank 0 and exits 2 on every rank without a collective. After a good
// layout it meets the other ranks in a barrier, so a rank that went on alone would hang
// (and the test's timeout would catch it). With PROBE_MARKER_DIR set, each rank leaves a
// file "rank<R>.exit<code>" on its way out, so the test can see that every rank exited
// by itself.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "parallel/mesh.h"

namespace {

int Exit(int rank, int code) {
  if (const char* dir = std::getenv("PROBE_MARKER_DIR")) {
    std::string path =
        std::string(dir) + "/rank" + std::to_string(rank) + ".exit" + std::to_string(code);
    if (FILE* f = std::fopen(path.c_str(), "w")) std::fclose(f);
  }
  colonnade::FinalizeMpi();
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  int mp = 1, columns = 1;
  long long batch = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mp=", 5) == 0) mp = std::atoi(argv[i] + 5);
    if (std::strncmp(argv[i], "--columns=", 10) == 0) columns = std::atoi(argv[i] + 10);
    if (std::strncmp(argv[i], "--batch_size=", 13) == 0) batch = std::atoll(argv[i] + 13);
  }
  if (auto s = colonnade::InitMpi(&argc, &argv); !s.ok()) return 1;
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  absl::Status s = colonnade::ValidateLayout(world, mp, columns, batch);
  if (s.ok()) {
    absl::StatusOr<colonnade::Mesh> mesh = colonnade::Mesh::Create(MPI_COMM_WORLD, mp);
    if (!mesh.ok()) s = mesh.status();
  }
  if (!s.ok()) {
    if (rank == 0)
      std::fprintf(stderr, "layout_probe: error: %s\n", std::string(s.message()).c_str());
    return Exit(rank, 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::printf("layout_probe: world %d, mp %d: ok\n", world, mp);
  return Exit(rank, 0);
}
