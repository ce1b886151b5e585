// The cost model against hand-computed cases on AlexNet-67.
#include <cmath>

#include "gtest/gtest.h"
#include "parallel/cost_model.h"
#include "parallel_test_util.h"

namespace colonnade::testing_parallel {
namespace {

ModelOptions Small() {
  ModelOptions o;
  o.input_size = 67;
  o.num_classes = 8;
  return o;
}

ClusterModel Cluster() {
  ClusterModel c;
  c.gpus_per_node = 8;
  c.nvlink_gbs = 100;  // 1e8 bytes per ms
  c.ib_gbs = 10;       // 1e7 bytes per ms
  c.alpha_intra_us = 10;
  c.alpha_inter_us = 5;
  return c;
}

ComputeModel Compute(double bucket_mb) {
  ComputeModel m;
  m.compute_ms = 10;
  m.per_gpu_batch = 4;
  m.bwd_fraction = 2.0 / 3;
  m.bucket_mb = bucket_mb;
  return m;
}

struct Full {
  int64_t params = 0;
  std::map<std::string, int64_t> per_image;  // blob elements per image
};
Full FullModel() {
  auto net = BuildModel("alexnet", Small());
  CHECK(net.ok());
  CHECK((*net)->Build(1, Device::kCPU).ok());
  Full f;
  f.params = (*net)->num_learnable();
  for (const char* b : {"pool2", "pool5", "fc6", "fc7", kLogitsBlob}) {
    f.per_image[b] = (*net)->blob(b).size();
  }
  return f;
}

// One bucket holding every gradient, ready when conv1 finishes: all of it is exposed.
TEST(CostModel, DataParallelOneNodeOneBucket) {
  const Full f = FullModel();
  auto p = PredictStep("alexnet", Small(), 1, 1, Cluster(), Compute(1e6));
  ASSERT_TRUE(p.ok()) << p.status();
  const double S = 4.0 * f.params;
  const double ar = 0.010 + 2.0 * 7 / 8 * S / 1e8;
  EXPECT_EQ(p->dp, 8);
  EXPECT_EQ(p->global_batch, 32);
  EXPECT_EQ(p->buckets, 1);
  EXPECT_NEAR(p->fwd_ms, 10.0 / 3, 1e-9);
  EXPECT_NEAR(p->bwd_ms, 20.0 / 3, 1e-9);
  EXPECT_EQ(p->mp_comm_ms, 0);
  EXPECT_NEAR(p->dp_comm_ms, ar, 1e-9);
  EXPECT_NEAR(p->exposed_ms, ar, 1e-9);
  EXPECT_NEAR(p->step_ms, 10 + ar, 1e-9);
  EXPECT_NEAR(p->efficiency, 10 / (10 + ar), 1e-12);
  EXPECT_NEAR(p->dp_mb, 2.0 * 7 / 8 * S / 1e6, 1e-9);
  // Two nodes add the inter-node tree and InfiniBand terms.
  auto two = PredictStep("alexnet", Small(), 2, 1, Cluster(), Compute(1e6));
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR(two->dp_comm_ms, ar + 2 * 1 * 0.005 + 2.0 * 1 / 2 * (S / 8) / 1e7, 1e-9);
}

// mp = 2 on one node: the activations each rank sends, and the same compute per GPU.
TEST(CostModel, ColumnSplitTraffic) {
  const Full f = FullModel();
  auto p = PredictStep("alexnet", Small(), 1, 2, Cluster(), Compute(25));
  ASSERT_TRUE(p.ok()) << p.status();
  const auto& a = f.per_image;
  // Forward all-gathers: conv3, fc6, fc7, fc8 inputs and the logits; backward
  // reduce-scatters of the four inputs. Replica batch 2 x 4 images; each rank sends half.
  const double floats =
      2 * (a.at("pool2") + a.at("pool5") + a.at("fc6") + a.at("fc7")) + a.at(kLogitsBlob);
  const double wire = 0.5 * 8 * 4 * floats;
  EXPECT_NEAR(p->mp_mb, wire / 1e6, 1e-9);
  EXPECT_NEAR(p->mp_comm_ms, 9 * 0.010 + wire / 1e8, 1e-9);
  EXPECT_NEAR(p->fwd_ms + p->bwd_ms, 10 + p->mp_comm_ms, 1e-9);
  EXPECT_EQ(p->dp, 4);
  // Half the gradient per rank.
  EXPECT_NEAR(p->dp_mb, 2.0 * 3 / 4 * 4.0 * f.params / 2 / 1e6, 0.01);
}

// Overlap never hurts, faster links never slow a step, efficiency stays in (0, 1].
TEST(CostModel, Monotone) {
  for (int nodes : {1, 4, 64}) {
    for (int mp : {1, 2}) {
      auto slow = PredictStep("alexnet", Small(), nodes, mp, Cluster(), Compute(4));
      ClusterModel fast_c = Cluster();
      fast_c.ib_gbs *= 4;
      fast_c.nvlink_gbs *= 4;
      auto fast = PredictStep("alexnet", Small(), nodes, mp, fast_c, Compute(4));
      ASSERT_TRUE(slow.ok() && fast.ok());
      EXPECT_LE(fast->step_ms, slow->step_ms + 1e-12);
      EXPECT_GT(slow->efficiency, 0);
      EXPECT_LE(slow->efficiency, 1);
      EXPECT_LE(slow->efficiency_no_overlap, slow->efficiency + 1e-12);
      EXPECT_LE(slow->exposed_ms, slow->dp_comm_ms + 1e-12);
    }
  }
  EXPECT_FALSE(PredictStep("alexnet", Small(), 1, 3, Cluster(), Compute(4)).ok());
}

// The overlap rate: 1 is the model as before, 0 puts every all-reduce after backward (the
// no-overlap figure), values between lie between and never beat 1.
TEST(CostModel, OverlapRate) {
  for (double bucket : {1.0, 4.0}) {
    ClusterModel c = Cluster();
    auto full = PredictStep("alexnet", Small(), 2, 1, c, Compute(bucket));
    c.overlap = 0;
    auto none = PredictStep("alexnet", Small(), 2, 1, c, Compute(bucket));
    c.overlap = 0.3;
    auto some = PredictStep("alexnet", Small(), 2, 1, c, Compute(bucket));
    ASSERT_TRUE(full.ok() && none.ok() && some.ok());
    EXPECT_GT(full->buckets, 1);
    EXPECT_NEAR(none->step_ms, none->fwd_ms + none->bwd_ms + none->dp_comm_ms, 1e-9);
    EXPECT_NEAR(none->efficiency, full->efficiency_no_overlap, 1e-12);
    EXPECT_LE(full->step_ms, some->step_ms + 1e-12);
    EXPECT_LE(some->step_ms, none->step_ms + 1e-12);
    EXPECT_LT(full->step_ms, none->step_ms);  // something was hidden
    EXPECT_EQ(full->dp_comm_ms, some->dp_comm_ms);
  }
}

}  // namespace
}  // namespace colonnade::testing_parallel
