// Mesh layout, the node check, and ValidateLayout.
#include <mpi.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "parallel/mesh.h"

namespace colonnade {
namespace {

std::vector<int> WorldRanksOf(MPI_Comm comm) {
  int size = 0, me = 0;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::vector<int> ranks(size);
  MPI_Allgather(&me, 1, MPI_INT, ranks.data(), 1, MPI_INT, comm);
  return ranks;
}

TEST(Mesh, GroupsAreConsecutiveMpRanksAndStridedDpRanks) {
  int world = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  for (int mp = 1; mp <= world; ++mp) {
    if (world % mp != 0) continue;
    absl::StatusOr<Mesh> m = Mesh::Create(MPI_COMM_WORLD, mp);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->world_size(), world);
    EXPECT_EQ(m->world_rank(), me);
    EXPECT_EQ(m->mp(), mp);
    EXPECT_EQ(m->dp(), world / mp);
    EXPECT_EQ(m->dp_rank(), me / mp);
    EXPECT_EQ(m->mp_rank(), me % mp);
    std::vector<int> mp_ranks = WorldRanksOf(m->mp_comm()), dp_ranks = WorldRanksOf(m->dp_comm());
    ASSERT_EQ(static_cast<int>(mp_ranks.size()), mp);
    for (int i = 0; i < mp; ++i) EXPECT_EQ(mp_ranks[i], m->dp_rank() * mp + i);
    ASSERT_EQ(static_cast<int>(dp_ranks.size()), world / mp);
    for (int j = 0; j < world / mp; ++j) EXPECT_EQ(dp_ranks[j], j * mp + m->mp_rank());
    EXPECT_EQ(m->num_nodes(), 1);
    EXPECT_EQ(m->local_size(), world);
    EXPECT_EQ(m->local_rank(), me);
    EXPECT_EQ(m->GpuIndex(8), me % 8);
    EXPECT_EQ(m->GpuIndex(1), 0);
    RunContext ctx = m->MakeRunContext(Phase::kTrain, 5, 3, 24 * world);
    EXPECT_EQ(ctx.global_batch, 24 * world);
    EXPECT_EQ(ctx.image_offset, m->dp_rank() * 24 * mp);
    EXPECT_FLOAT_EQ(ctx.loss_scale, 1.0f / (24 * world));
    EXPECT_EQ(ctx.seed, 5u);
    EXPECT_EQ(ctx.step, 3);
  }
}

TEST(Mesh, MpNotDividingTheWorldFailsAlikeWithoutCollectives) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  absl::StatusOr<Mesh> m = Mesh::Create(MPI_COMM_WORLD, world + 1);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("does not divide the world size"), absl::string_view::npos);
  EXPECT_FALSE(Mesh::Create(MPI_COMM_WORLD, 0).ok());
}

// COLONNADE_TEST_RANKS_PER_NODE fakes nodes of n consecutive ranks.
TEST(Mesh, GroupSpanningNodesIsAnErrorOnEveryRank) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != 4) GTEST_SKIP() << "needs 4 ranks";
  setenv("COLONNADE_TEST_RANKS_PER_NODE", "3", 1);  // nodes {0,1,2} {3}
  absl::StatusOr<Mesh> bad = Mesh::Create(MPI_COMM_WORLD, 2);
  setenv("COLONNADE_TEST_RANKS_PER_NODE", "2", 1);  // nodes {0,1} {2,3}
  absl::StatusOr<Mesh> good = Mesh::Create(MPI_COMM_WORLD, 2);
  unsetenv("COLONNADE_TEST_RANKS_PER_NODE");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("ranks 2-3 spans two nodes"), absl::string_view::npos)
      << bad.status();
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->num_nodes(), 2);
  EXPECT_EQ(good->local_size(), 2);
  EXPECT_EQ(good->local_rank(), good->world_rank() % 2);
}

TEST(Mesh, LocalRankFromTheLauncherMatches) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  absl::StatusOr<Mesh> m = Mesh::Create(MPI_COMM_WORLD, 1);
  ASSERT_TRUE(m.ok());
  const int env = LocalRankFromEnvironment();
  if (env < 0) GTEST_SKIP() << "the launcher announces no local rank";
  EXPECT_EQ(env, m->local_rank());
}

TEST(Mesh, HostSums) {
  int world = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  double v[2] = {1.0, static_cast<double>(me)};
  ASSERT_TRUE(AllReduceSumHost(MPI_COMM_WORLD, v, 2).ok());
  EXPECT_EQ(v[0], world);
  EXPECT_EQ(v[1], world * (world - 1) / 2.0);
}

TEST(ValidateLayout, AcceptsAndRejects) {
  EXPECT_TRUE(ValidateLayout(8, 2, 2, 256).ok());
  EXPECT_TRUE(ValidateLayout(8, 1, 1, 8).ok());
  EXPECT_TRUE(ValidateLayout(8, 4, 4, 2).ok());
  EXPECT_TRUE(ValidateLayout(1, 1, 2, 1).ok());

  absl::Status s = ValidateLayout(8, 3, 3, 256);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--mp=3 does not divide the world size 8"), absl::string_view::npos)
      << s;

  s = ValidateLayout(8, 4, 2, 256);
  EXPECT_NE(s.message().find("2 column(s) are not divisible by --mp=4"), absl::string_view::npos)
      << s;

  s = ValidateLayout(6, 2, 2, 100);
  EXPECT_NE(s.message().find("--batch_size=100"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("3 data-parallel replicas"), absl::string_view::npos) << s;

  EXPECT_FALSE(ValidateLayout(8, 0, 2, 256).ok());
  EXPECT_FALSE(ValidateLayout(8, 1, 0, 256).ok());
  EXPECT_FALSE(ValidateLayout(8, 1, 1, 0).ok());
  EXPECT_FALSE(ValidateLayout(8, 1, 1, 4).ok());  // fewer images than replicas
  // One line, as main prints it.
  EXPECT_EQ(ValidateLayout(8, 3, 3, 256).message().find('\n'), absl::string_view::npos);
}

}  // namespace
}  // namespace colonnade
