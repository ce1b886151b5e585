// Checkpoints of real Nets: collect, write, read, load into a fresh Net bitwise; refuse a
// Net of another shape; cut shards out of full tensors; and continue training after a
// load exactly as without the interruption.
#include <cmath>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "core/philox.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colonnade::checkpoint {
namespace {

using ::testing::HasSubstr;
using namespace ::colonnade::checkpoint::testing;

std::unique_ptr<Net> SmallNet(uint64_t seed, int num_classes = 10, int64_t batch = 2) {
  ModelOptions o;
  o.num_classes = num_classes;
  absl::StatusOr<std::unique_ptr<Net>> net = BuildModel("cifar10-80sec", o);
  EXPECT_TRUE(net.ok()) << net.status();
  EXPECT_TRUE((*net)->Build(batch, Device::kCPU).ok());
  (*net)->InitParams(seed);
  return std::move(*net);
}

TrainState StateFor(const Net& net, int64_t step) {
  TrainState s = SmallState(step);
  s.model = net.model_name();
  s.columns = net.columns();
  s.input_size = 32;
  s.num_classes = 10;
  return s;
}

// Gives every velocity a distinct non-zero value (fresh nets have zero velocities, which
// would hide a velocity that is not restored).
void FillVelocities(Net& net, uint32_t seed) {
  for (const NamedParam& p : net.params()) {
    if (p.param->learnable) p.param->velocity.CopyFromHost(RandomValues(p.param->velocity.size(), ++seed));
  }
}

void ExpectSameParams(const Net& a, const Net& b) {
  std::vector<NamedParam> pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].name, pb[i].name);
    EXPECT_TRUE(SameBits(pa[i].param->value.ToHost(), pb[i].param->value.ToHost())) << pa[i].name;
    if (pa[i].param->learnable) {
      EXPECT_TRUE(SameBits(pa[i].param->velocity.ToHost(), pb[i].param->velocity.ToHost()))
          << pa[i].name << " velocity";
    }
  }
}

TEST(CheckpointNet, CollectWriteReadLoadIsBitwise) {
  TempDir dir;
  std::unique_ptr<Net> a = SmallNet(11);
  FillVelocities(*a, 5);
  absl::StatusOr<std::vector<TensorEntry>> entries = CollectFromNet(*a);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), a->params().size());
  EXPECT_EQ((*entries)[0].name, "conv1/weight");
  EXPECT_EQ((*entries)[0].shape, (std::vector<int64_t>{32, 3, 5, 5})) << "[out][in][kh][kw]";
  std::string path;
  ASSERT_TRUE(Write(dir.path(), StateFor(*a, 50), *entries, 3, &path).ok());

  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<Net> b = SmallNet(999, 10, /*batch=*/7);  // other init, other batch
  ASSERT_TRUE(CheckCompatible(*c, ExpectedFromNet(*b), "cifar10-80sec").ok());
  ASSERT_TRUE(LoadIntoNet(*c, *b).ok());
  ExpectSameParams(*a, *b);
}

TEST(CheckpointNet, RefusesANetOfAnotherShapeAndLeavesItUntouched) {
  TempDir dir;
  std::unique_ptr<Net> a = SmallNet(1, 10);
  absl::StatusOr<std::vector<TensorEntry>> entries = CollectFromNet(*a);
  ASSERT_TRUE(entries.ok());
  std::string path;
  ASSERT_TRUE(Write(dir.path(), StateFor(*a, 100), *entries, 3, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok());

  std::unique_ptr<Net> b = SmallNet(2, 100);
  std::vector<float> before = b->params()[0].param->value.ToHost();
  absl::Status s = LoadIntoNet(*c, *b);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("ckpt-000000100.h5: /params/fc10/weight has shape (10, 64) but model "
                        "cifar10-80sec expects (100, 64)"));
  EXPECT_TRUE(SameBits(before, b->params()[0].param->value.ToHost()));

  absl::StatusOr<std::unique_ptr<Net>> other = BuildModel("cifar10-18pct", ModelOptions{});
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Build(1, Device::kCPU).ok());
  s = LoadIntoNet(*c, **other);
  EXPECT_THAT(std::string(s.message()), HasSubstr("is of model cifar10-80sec, not cifar10-18pct"));
}

TEST(CheckpointNet, LoadIntoParamCutsTheShard) {
  // A full (6 x 2 x 3) parameter and a shard holding rows 2..3 of it, as the column split
  // of a 3-column model would give rank 1.
  TensorEntry full;
  full.name = "conv9/weight";
  full.shape = {6, 2, 3};
  full.value = RandomValues(36, 1);
  full.velocity = RandomValues(36, 2);
  Param shard;
  shard.name = "weight";
  shard.value = Tensor(Shape{2, 2, 3});
  shard.velocity = Tensor(Shape{2, 2, 3});
  shard.shard_offset = 2;
  shard.full_rows = 6;
  EXPECT_EQ(FullShape(shard), (std::vector<int64_t>{6, 2, 3}));
  ASSERT_TRUE(LoadIntoParam(full, shard).ok());
  std::vector<float> want(full.value.begin() + 12, full.value.begin() + 24);
  std::vector<float> want_v(full.velocity.begin() + 12, full.velocity.begin() + 24);
  EXPECT_TRUE(SameBits(shard.value.ToHost(), want));
  EXPECT_TRUE(SameBits(shard.velocity.ToHost(), want_v));

  // Weights-only entry: the velocity is reset to zero.
  full.velocity.clear();
  ASSERT_TRUE(LoadIntoParam(full, shard).ok());
  EXPECT_TRUE(SameBits(shard.velocity.ToHost(), std::vector<float>(12, 0.0f)));

  // A non-learnable parameter never takes a velocity.
  Param stat;
  stat.name = "running_mean";
  stat.learnable = false;
  stat.value = Tensor(Shape{6, 2, 3});
  full.velocity = RandomValues(36, 3);
  ASSERT_TRUE(LoadIntoParam(full, stat).ok());
  EXPECT_TRUE(SameBits(stat.value.ToHost(), full.value));

  // Wrong full shape, or a shard outside the tensor.
  shard.full_rows = 7;
  EXPECT_THAT(std::string(LoadIntoParam(full, shard).message()),
              HasSubstr("conv9/weight: checkpoint shape (6, 2, 3) differs from the parameter's "
                        "full shape (7, 2, 3)"));
  shard.full_rows = 6;
  shard.shard_offset = 5;
  EXPECT_FALSE(LoadIntoParam(full, shard).ok());

  // Collecting refuses shards: they must be gathered first.
  Param whole;
  whole.name = "weight";
  whole.value = Tensor(Shape{2, 2, 3});
  whole.velocity = Tensor(Shape{2, 2, 3});
  whole.full_rows = 2;  // a "shard" that is the whole tensor is fine
  EXPECT_EQ(FullShape(whole), (std::vector<int64_t>{2, 2, 3}));
}

TEST(CheckpointNet, CollectRefusesShardedNets) {
  std::unique_ptr<Net> a = SmallNet(1);
  Param* p = a->params()[0].param;
  p->full_rows = p->value.shape()[0] * 2;
  p->shard_offset = p->value.shape()[0];
  absl::StatusOr<std::vector<TensorEntry>> e = CollectFromNet(*a);
  EXPECT_TRUE(absl::IsFailedPrecondition(e.status()));
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("conv1/weight is a shard (rows 32..64 of 64): gather the shards"));
  ExpectedTensors want = ExpectedFromNet(*a);
  EXPECT_EQ(want[0].second, (std::vector<int64_t>{64, 3, 5, 5})) << "the full shape";
}

// Deterministic inputs of step `step` (CHWN, batch innermost).
void FeedBatch(Net& net, int64_t step) {
  Tensor& x = net.blob("data");
  std::vector<float> v(x.size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = PhiloxNormal(1234, step, i);
  x.CopyFromHost(v);
  Tensor& y = net.blob("label");
  std::vector<float> l(y.size());
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>((step * 7 + i * 3) % 10);
  y.CopyFromHost(l);
}

void TrainSteps(Net& net, int64_t from, int64_t to, uint64_t seed) {
  SgdOptimizer opt(SgdOptions{0.9f, 5e-4f});
  for (int64_t step = from; step < to; ++step) {
    FeedBatch(net, step);
    RunContext ctx;
    ctx.seed = seed;
    ctx.step = step;
    ctx.global_batch = net.batch();
    ctx.loss_scale = 1.0f / net.batch();
    net.Forward(ctx);
    net.Backward(ctx);
    opt.Step(net, 0.01f);
  }
}

// 6 steps straight == 3 steps, checkpoint, load into a differently initialised Net, 3
// more steps: bitwise on the CPU. This is what makes the checkpoint a complete optimizer
// state (values and velocities).
TEST(CheckpointNet, TrainingContinuesBitwiseAfterLoad) {
  const uint64_t seed = 42;
  std::unique_ptr<Net> straight = SmallNet(seed, 10, 4);
  TrainSteps(*straight, 0, 6, seed);

  std::unique_ptr<Net> first = SmallNet(seed, 10, 4);
  TrainSteps(*first, 0, 3, seed);
  TempDir dir;
  absl::StatusOr<std::vector<TensorEntry>> entries = CollectFromNet(*first);
  ASSERT_TRUE(entries.ok());
  std::string path;
  ASSERT_TRUE(Write(dir.path(), StateFor(*first, 3), *entries, 3, &path).ok());
  first.reset();

  std::vector<std::string> warnings;
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir.path(), &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  std::unique_ptr<Net> resumed = SmallNet(seed + 1, 10, 4);
  ASSERT_TRUE(LoadIntoNet(*c, *resumed).ok());
  TrainSteps(*resumed, c->state.step, 6, seed);
  ExpectSameParams(*straight, *resumed);

  // And the velocity matters: without it the trajectories differ.
  std::unique_ptr<Net> no_velocity = SmallNet(seed + 1, 10, 4);
  ASSERT_TRUE(LoadIntoNet(*c, *no_velocity).ok());
  for (const NamedParam& p : no_velocity->params()) p.param->velocity.Fill(0.0f);
  TrainSteps(*no_velocity, 3, 6, seed);
  EXPECT_FALSE(SameBits(straight->params()[0].param->value.ToHost(),
                        no_velocity->params()[0].param->value.ToHost()));
}

}  // namespace
}  // namespace colonnade::checkpoint
