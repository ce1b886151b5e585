// GradientSync: buckets, views, the sum over the group, overlap vs. no overlap.
#include <mpi.h>

#include <set>

#include "gtest/gtest.h"
#include "parallel_test_util.h"

namespace colonnade::testing_parallel {
namespace {

std::unique_ptr<Net> BuiltNet(int64_t batch = 2) {
  auto net = BuildColumnTestNet();
  CHECK(net->Build(batch, Device::kCPU).ok());
  net->InitParams(3);
  return net;
}

int LayerIndex(const Net& net, const std::string& param) {
  const std::string layer = param.substr(0, param.find('/'));
  for (size_t i = 0; i < net.layers().size(); ++i)
    if (net.layers()[i].layer->name() == layer) return static_cast<int>(i);
  return -1;
}

TEST(GradientSync, BucketsFollowBackwardOrderAndCoverEveryParameterOnce) {
  auto c = CreateMpiCommunicator(MPI_COMM_WORLD);
  ASSERT_TRUE(c.ok());
  if ((*c)->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto net = BuiltNet();
  auto sync = GradientSync::Create(*net, c->get(), 0.0002);  // 52 floats
  ASSERT_TRUE(sync.ok()) << sync.status();
  const auto& buckets = (*sync)->buckets();
  ASSERT_GE(buckets.size(), 8u);
  std::set<std::string> seen;
  int64_t elements = 0;
  int last_layer = static_cast<int>(net->layers().size());
  for (const auto& b : buckets) {
    EXPECT_LE(b.ready_layer, last_layer);
    for (const std::string& p : b.params) {
      int layer = LayerIndex(*net, p);
      EXPECT_LE(layer, last_layer) << p << " comes after a later layer's bucket";
      EXPECT_GE(layer, b.ready_layer) << p << " is not final when its bucket starts";
      last_layer = std::min(last_layer, layer);
      EXPECT_TRUE(seen.insert(p).second) << p << " is in two buckets";
    }
    elements += b.elements;
  }
  EXPECT_EQ(elements, net->num_learnable());
  EXPECT_EQ(seen.size(), net->params().size());
  // One bucket when it is large; the gradients stay in place.
  auto net2 = BuiltNet();
  auto big = GradientSync::Create(*net2, c->get(), 1000.0);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ((*big)->buckets().size(), 1u);
  EXPECT_EQ((*big)->stats().bytes_per_step, net2->num_learnable() * 4);
}

TEST(GradientSync, SumsEveryGradientOverTheGroup) {
  auto c = CreateMpiCommunicator(MPI_COMM_WORLD);
  ASSERT_TRUE(c.ok());
  const int p = (*c)->size(), r = (*c)->rank();
  auto net = BuiltNet();
  auto sync = GradientSync::Create(*net, c->get(), 0.001);
  ASSERT_TRUE(sync.ok());
  for (int step = 0; step < 2; ++step) {  // buckets are reusable across steps
    for (const NamedParam& np : net->params()) {
      std::vector<float> g(np.param->grad.size());
      for (size_t i = 0; i < g.size(); ++i) g[i] = (r + 1) * 0.5f + i % 5 + step;
      np.param->grad.CopyFromHost(g);
    }
    ASSERT_TRUE((*sync)->Finish().ok());
    for (const NamedParam& np : net->params()) {
      std::vector<float> g = np.param->grad.ToHost();
      for (size_t i = 0; i < g.size(); ++i) {
        ASSERT_EQ(g[i], 0.5f * p * (p + 1) / 2 + p * (i % 5 + step)) << np.name << "[" << i << "]";
      }
    }
  }
  EXPECT_EQ((*sync)->stats().steps, 2);
}

// The buckets started during backward give exactly what one all-reduce after backward
// gives, and they do start during backward.
TEST(GradientSync, OverlappedEqualsAfterBackward) {
  auto c = CreateMpiCommunicator(MPI_COMM_WORLD);
  ASSERT_TRUE(c.ok());
  if ((*c)->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto absl_mesh = Mesh::Create(MPI_COMM_WORLD, 1);
  ASSERT_TRUE(absl_mesh.ok());
  std::vector<std::vector<float>> grads[2];
  for (int overlap = 0; overlap < 2; ++overlap) {
    auto net = BuiltNet(3);
    auto sync = GradientSync::Create(*net, c->get(), 0.001);
    ASSERT_TRUE(sync.ok());
    RunContext ctx = absl_mesh->MakeRunContext(Phase::kTrain, 3, 0, 3 * (*c)->size());
    FillBatch(*net, 3, 0, 3 * (*c)->size(), ctx.image_offset, 8);
    net->Forward(ctx);
    net->Backward(ctx, overlap ? (*sync)->AfterLayerHook() : nullptr);
    ASSERT_TRUE((*sync)->Finish().ok());
    EXPECT_EQ((*sync)->stats().launched_in_backward,
              overlap ? static_cast<int>((*sync)->buckets().size()) : 0);
    for (const NamedParam& np : net->params()) grads[overlap].push_back(np.param->grad.ToHost());
  }
  EXPECT_EQ(grads[0], grads[1]);
}

TEST(GradientSync, OneRankOrNoCommunicatorIsANoOp) {
  auto self = CreateMpiCommunicator(MPI_COMM_SELF);
  ASSERT_TRUE(self.ok());
  auto net = BuiltNet();
  float* before = net->params()[0].param->grad.data();
  auto sync = GradientSync::Create(*net, self->get(), 25);
  ASSERT_TRUE(sync.ok());
  EXPECT_FALSE((*sync)->enabled());
  EXPECT_FALSE((*sync)->AfterLayerHook());
  EXPECT_TRUE((*sync)->buckets().empty());
  EXPECT_EQ(net->params()[0].param->grad.data(), before);
  EXPECT_TRUE((*sync)->Finish().ok());
  auto none = GradientSync::Create(*net, nullptr, 25);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE((*none)->enabled());
}

TEST(GradientSync, RejectsBadBucketSizesAndUnbuiltNets) {
  auto c = CreateMpiCommunicator(MPI_COMM_WORLD);
  ASSERT_TRUE(c.ok());
  auto net = BuiltNet();
  EXPECT_EQ(GradientSync::Create(*net, c->get(), 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(GradientSync::Create(*net, c->get(), -1).status().code(),
            absl::StatusCode::kInvalidArgument);
  if ((*c)->size() > 1) {
    auto unbuilt = BuildColumnTestNet();
    EXPECT_EQ(GradientSync::Create(*unbuilt, c->get(), 25).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace colonnade::testing_parallel
