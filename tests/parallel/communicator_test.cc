// Every Communicator operation, blocking and asynchronous, on odd sizes and odd group
// sizes (the world and sub-groups from splitting it), on host tensors and on tensors of
// a stand-in device that forces the staging path. Run with 3 and 5 ranks.
#include <mpi.h>

#include <numeric>

#include "gtest/gtest.h"
#include "parallel_test_util.h"

namespace colonnade::testing_parallel {
namespace {

const int64_t kSizes[] = {0, 1, 3, 17, 1001, 65537};

// The groups to test: the world, ranks split by parity, and ranks {0, 1} vs the rest.
std::vector<MPI_Comm> Groups() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm parity, low;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &parity);
  MPI_Comm_split(MPI_COMM_WORLD, rank < 2 ? 0 : 1, -rank, &low);  // reversed order
  return {MPI_COMM_WORLD, parity, low};
}

// Host tensors with MPI, and device tensors: on the stand-in device with MPI (staging),
// or with COLONNADE_TEST_CUDA=1 on the GPU with "auto" (NCCL where possible).
std::vector<DeviceCase> Cases() { return {{Device::kCPU, "mpi"}, DeviceUnderTest()}; }

Tensor FromHost(const std::vector<float>& v, Shape s, Device d) {
  Tensor t(std::move(s), d);
  t.CopyFromHost(v);
  return t;
}

class CommTest : public ::testing::TestWithParam<DeviceCase> {
 protected:
  std::unique_ptr<Communicator> Make(MPI_Comm g) {
    auto c = CreateCommunicator(GetParam().comm, g, GetParam().device);
    CHECK(c.ok()) << c.status().message();
    return std::move(*c);
  }
};

TEST_P(CommTest, AllReduceSum) {
  const Device dev = GetParam().device;
  for (MPI_Comm g : Groups()) {
    auto c = Make(g);
    Communicator& comm = *c;
    const int p = comm.size(), r = comm.rank();
    for (int64_t n : kSizes) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = (r + 1) * static_cast<float>(i % 7 + 1) + 0.5f;
      Tensor t = FromHost(v, Shape{n}, dev);
      ASSERT_TRUE(comm.AllReduceSum(t).ok());
      std::vector<float> got = t.ToHost();
      const float ranks = p * (p + 1) / 2.0f;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i], ranks * (i % 7 + 1) + 0.5f * p) << "n " << n << " i " << i;
      }
    }
  }
}

TEST_P(CommTest, AllGatherConcatenatesChannelBlocks) {
  const Device dev = GetParam().device;
  for (MPI_Comm g : Groups()) {
    auto c = Make(g);
    Communicator& comm = *c;
    const int p = comm.size(), r = comm.rank();
    for (int64_t n : kSizes) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = r * 100000.0f + i;
      Tensor in = FromHost(v, Shape{n}, dev), out(Shape{n * p}, dev);
      out.Fill(-1.0f);
      ASSERT_TRUE(comm.AllGather(in, out).ok());
      std::vector<float> got = out.ToHost();
      for (int q = 0; q < p; ++q)
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[q * n + i], q * 100000.0f + i);
    }
    // CHWN: channel block q of the output is rank q's input.
    const int64_t C = 3, H = 2, W = 5, N = 3;
    std::vector<float> v(C * H * W * N);
    std::iota(v.begin(), v.end(), 1000.0f * r);
    Tensor in = FromHost(v, Shape::CHWN(C, H, W, N), dev);
    Tensor out(Shape::CHWN(C * p, H, W, N), dev);
    ASSERT_TRUE(comm.AllGather(in, out).ok());
    for (int q = 0; q < p; ++q) {
      std::vector<float> block = out.Channels(q * C, C).ToHost();
      std::vector<float> want(v.size());
      std::iota(want.begin(), want.end(), 1000.0f * q);
      EXPECT_EQ(block, want) << "block " << q;
    }
    // In place: the input is this rank's block of the output.
    if (dev == Device::kCPU) {
      Tensor whole(Shape::CHWN(C * p, H, W, N));
      whole.Fill(-1.0f);
      Tensor mine = whole.Channels(r * C, C);
      mine.CopyFromHost(v);
      ASSERT_TRUE(comm.AllGather(mine, whole).ok());
      EXPECT_EQ(whole.ToHost(), out.ToHost());
    }
  }
}

TEST_P(CommTest, ReduceScatterSum) {
  const Device dev = GetParam().device;
  for (MPI_Comm g : Groups()) {
    auto c = Make(g);
    Communicator& comm = *c;
    const int p = comm.size(), r = comm.rank();
    for (int64_t n : kSizes) {
      std::vector<float> v(n * p);
      for (int64_t j = 0; j < n * p; ++j) v[j] = (r + 1) * static_cast<float>(j % 11 + 1);
      Tensor in = FromHost(v, Shape{n * p}, dev), out(Shape{n}, dev);
      ASSERT_TRUE(comm.ReduceScatterSum(in, out).ok());
      std::vector<float> got = out.ToHost();
      const float ranks = p * (p + 1) / 2.0f;
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], ranks * ((r * n + i) % 11 + 1));
    }
  }
}

TEST_P(CommTest, BroadcastFromEveryRoot) {
  const Device dev = GetParam().device;
  for (MPI_Comm g : Groups()) {
    auto c = Make(g);
    Communicator& comm = *c;
    for (int root = comm.size() - 1; root >= 0; --root) {
      for (int64_t n : {int64_t{1}, int64_t{33}, int64_t{4097}}) {
        std::vector<float> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = comm.rank() == root ? root * 7.0f + i : -3.0f;
        Tensor t = FromHost(v, Shape{n}, dev);
        ASSERT_TRUE(comm.Broadcast(t, root).ok());
        std::vector<float> got = t.ToHost();
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], root * 7.0f + i);
      }
    }
    EXPECT_TRUE(comm.Barrier().ok());
  }
}

// Several operations in flight at once, completed by polling and out of order.
TEST_P(CommTest, AsynchronousHandles) {
  const Device dev = GetParam().device;
  auto c = Make(MPI_COMM_WORLD);
  Communicator& comm = *c;
  const int p = comm.size(), r = comm.rank();
  const int64_t n = 12347;
  Tensor a = FromHost(std::vector<float>(n, r + 1.0f), Shape{n}, dev);
  Tensor b_in = FromHost(std::vector<float>(5, static_cast<float>(r)), Shape{5}, dev);
  Tensor b_out(Shape{5 * p}, dev);
  Tensor c_in = FromHost(std::vector<float>(3 * p, 2.0f), Shape{3 * p}, dev), c_out(Shape{3}, dev);
  auto ha = comm.StartAllReduceSum(a);
  auto hb = comm.StartAllGather(b_in, b_out);
  auto hc = comm.StartReduceScatterSum(c_in, c_out);
  ASSERT_TRUE(ha.ok() && hb.ok() && hc.ok());
  while (!(*hc)->Test()) {
  }
  EXPECT_TRUE((*hc)->Test());  // stays complete
  ASSERT_TRUE((*ha)->Wait().ok());
  ASSERT_TRUE((*hb)->Wait().ok());
  EXPECT_EQ(a.ToHost(), std::vector<float>(n, p * (p + 1) / 2.0f));
  std::vector<float> gathered = b_out.ToHost();
  for (int q = 0; q < p; ++q)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(gathered[q * 5 + i], q);
  EXPECT_EQ(c_out.ToHost(), std::vector<float>(3, 2.0f * p));
  // A handle destroyed without a wait still completes the operation.
  {
    auto h = comm.StartAllReduceSum(a);
    ASSERT_TRUE(h.ok());
  }
  EXPECT_EQ(a.ToHost(), std::vector<float>(n, p * p * (p + 1) / 2.0f));
}

TEST_P(CommTest, StatsCountRingBytes) {
  auto c = Make(MPI_COMM_WORLD);
  Communicator& comm = *c;
  const int p = comm.size();
  Tensor t(Shape{1000}, GetParam().device);
  t.Fill(1.0f);
  ASSERT_TRUE(comm.AllReduceSum(t).ok());
  EXPECT_EQ(comm.stats().calls, 1);
  EXPECT_EQ(comm.stats().payload_bytes, 4000);
  EXPECT_EQ(comm.stats().wire_bytes, 2 * (4000 * (p - 1) / p));
  Tensor out(Shape{1000 * p}, GetParam().device);
  ASSERT_TRUE(comm.AllGather(t, out).ok());
  EXPECT_EQ(comm.stats().wire_bytes, 2 * (4000 * (p - 1) / p) + int64_t{4000} * (p - 1));
  comm.ResetStats();
  EXPECT_EQ(comm.stats().calls, 0);
}

TEST_P(CommTest, BadShapesAreErrors) {
  auto c = Make(MPI_COMM_WORLD);
  Communicator& comm = *c;
  const int p = comm.size();
  Tensor in(Shape{4}, GetParam().device), wrong(Shape{4 * p + 1}, GetParam().device);
  EXPECT_EQ(comm.StartAllGather(in, wrong).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.StartReduceScatterSum(wrong, in).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.StartBroadcast(in, p).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.StartBroadcast(in, -1).status().code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Devices, CommTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<DeviceCase>& i) {
                           return std::string(i.param.device == Device::kCPU ? "Host" : "Device") +
                                  "_" + i.param.comm;
                         });

TEST(CreateCommunicator, Kinds) {
  auto m = CreateCommunicator("mpi", MPI_COMM_WORLD, Device::kCPU);
  ASSERT_TRUE(m.ok());
  EXPECT_STREQ((*m)->backend(), "mpi");
  auto a = CreateCommunicator("auto", MPI_COMM_WORLD, Device::kCPU);
  ASSERT_TRUE(a.ok());
  EXPECT_STREQ((*a)->backend(), "mpi");
  auto n = CreateCommunicator("nccl", MPI_COMM_WORLD, Device::kCPU);
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.status().message().find("--comm=mpi"), absl::string_view::npos) << n.status();
  auto bad = CreateCommunicator("gloo", MPI_COMM_WORLD, Device::kCPU);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("auto, nccl or mpi"), absl::string_view::npos);
}

// With COLONNADE_TEST_CUDA=1: NCCL where every rank has its own GPU, else the error
// that says to use --comm=mpi, and "auto" choosing accordingly.
TEST(CreateCommunicator, NcclOnRealGpus) {
  if (!RealCudaRequested() || !NcclCompiledIn())
    GTEST_SKIP() << "needs COLONNADE_TEST_CUDA=1 and NCCL";
  int gpus = 0;
#ifdef COLONNADE_WITH_CUDA
  cudaGetDeviceCount(&gpus);
#endif
  absl::StatusOr<Mesh> mesh = Mesh::Create(MPI_COMM_WORLD, 1);
  ASSERT_TRUE(mesh.ok());
  const bool shared = mesh->local_size() > gpus;
  auto n = CreateCommunicator("nccl", MPI_COMM_WORLD, Device::kCUDA);
  if (shared) {
    ASSERT_FALSE(n.ok());
    EXPECT_NE(n.status().message().find("use --comm=mpi"), absl::string_view::npos) << n.status();
  } else {
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_STREQ((*n)->backend(), "nccl");
  }
  auto a = CreateCommunicator("auto", MPI_COMM_WORLD, Device::kCUDA);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_STREQ((*a)->backend(), shared ? "mpi" : "nccl");
}

}  // namespace
}  // namespace colonnade::testing_parallel
