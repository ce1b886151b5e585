// main() for GoogleTest suites that run under mpirun: initialises MPI, lets rank 0 print
// the usual report while the other ranks print only failures (tagged with their rank),
// and makes every rank exit with the worst result of any rank.
#include <mpi.h>

#include <cstdio>

#include "gtest/gtest.h"
#include "parallel/mesh.h"
#include "parallel_test_util.h"

namespace {

class FailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (auto s = colonnade::InitMpi(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  if (colonnade::testing_parallel::RealCudaRequested()) {
    if (auto s = colonnade::testing_parallel::RegisterRealCuda(); !s.ok()) {
      std::fprintf(stderr, "[rank %d] %s\n", rank, std::string(s.message()).c_str());
      colonnade::FinalizeMpi();
      return 1;
    }
  }
  int result = RUN_ALL_TESTS();
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != result) std::fprintf(stderr, "a test failed on another rank\n");
  colonnade::FinalizeMpi();
  return worst;
}
