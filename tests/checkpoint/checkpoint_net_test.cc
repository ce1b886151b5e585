// Checkpoints of real Nets: collect, write, read, load into a fresh Net bitwise; refuse a
// Net of another shape; cut shards out of full tensors; and continue training after a
// load exactly as without the interruption.
#include <cmath>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "collect_whole.h"
#include "core/backend.h"
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
    if (p.param->learnable)
      p.param->velocity.CopyFromHost(RandomValues(p.param->velocity.size(), ++seed));
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
  EXPECT_EQ(shard.full_shape().dims(), (std::vector<int64_t>{6, 2, 3}));
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
  EXPECT_EQ(whole.full_shape().dims(), (std::vector<int64_t>{2, 2, 3}));
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

// docs/CHECKPOINTS.md, section 8: the stored velocity is -lr x PyTorch's momentum buffer
// (v = m v - lr (g + wd w), w += v; PyTorch: b = m b + g + wd w, w -= lr b). Checks the
// conversion both ways, and what an lr change does: the velocity is not rescaled, so
// Colonnade differs from PyTorch after a change unless v is scaled by lr_new / lr_old.
TEST(CheckpointVelocity, IsMinusLrTimesTorchMomentumBuffer) {
  const int64_t n = 64;
  const float m = 0.9f, wd = 5e-4f;
  Ops& ops = OpsFor(Device::kCPU);
  auto bounded = [n](uint32_t seed) {  // RandomValues without its FLT_MAX specials
    std::vector<float> x = RandomValues(n, seed);
    for (float& e : x) e = std::max(-3.0f, std::min(3.0f, e));
    return x;
  };
  auto grad = [&](int step) { return bounded(100 + step); };  // independent of the weights
  Tensor w(Shape{n}), g(Shape{n}), v(Shape{n});
  const std::vector<float> w0 = bounded(1);
  w.CopyFromHost(w0);
  v.Fill(0.0f);
  std::vector<double> tw(w0.begin(), w0.end()), tb(n, 0.0);  // PyTorch's weights and buffer
  auto colonnade_step = [&](Tensor& wt, Tensor& vt, int step, float lr) {
    g.CopyFromHost(grad(step));
    ops.SgdUpdate(wt, g, vt, SgdParams{lr, m, wd});
  };
  auto torch_step = [&](std::vector<double>& x, std::vector<double>& b, int step, double lr) {
    const std::vector<float> gs = grad(step);
    for (int64_t i = 0; i < n; ++i) {
      b[i] = m * b[i] + (gs[i] + wd * x[i]);
      x[i] -= lr * b[i];
    }
  };
  auto rel = [](const std::vector<float>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      num += (a[i] - b[i]) * (a[i] - b[i]);
      den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  };
  auto scaled = [](std::vector<double> b, double k) {
    for (double& e : b) e *= k;
    return b;
  };
  // Constant lr: the same weights, and v = -lr b.
  const float lr_old = 0.1f, lr_new = 0.01f;
  for (int step = 0; step < 5; ++step) {
    colonnade_step(w, v, step, lr_old);
    torch_step(tw, tb, step, lr_old);
  }
  EXPECT_LT(rel(w.ToHost(), tw), 1e-6);
  EXPECT_LT(rel(v.ToHost(), scaled(tb, -lr_old)), 1e-5);

  // The lr drops to lr_new. Converting with the next step's lr, b = -v / lr_new (or
  // v = -lr_new b the other way), gives the same steps from then on.
  Tensor w2 = w.To(Device::kCPU), v2 = v.To(Device::kCPU);
  std::vector<double> tw2 = tw, tb_converted(n);
  std::vector<float> vh = v.ToHost();
  for (int64_t i = 0; i < n; ++i) tb_converted[i] = -vh[i] / lr_new;
  for (int step = 5; step < 10; ++step) {
    colonnade_step(w2, v2, step, lr_new);
    torch_step(tw2, tb_converted, step, lr_new);
  }
  EXPECT_LT(rel(w2.ToHost(), tw2), 1e-6);

  // PyTorch carried its own buffer (no lr inside) through the drop; Colonnade's velocity
  // keeps the old lr's scale, so the two now differ ...
  std::vector<double> tw3 = tw, tb3 = tb;
  for (int step = 5; step < 10; ++step) torch_step(tw3, tb3, step, lr_new);
  EXPECT_GT(rel(w2.ToHost(), tw3), 1e-4);
  // ... unless the velocity is scaled by lr_new / lr_old at the change.
  Tensor w4 = w.To(Device::kCPU), v4 = v.To(Device::kCPU);
  for (float& e : vh) e *= lr_new / lr_old;
  v4.CopyFromHost(vh);
  for (int step = 5; step < 10; ++step) colonnade_step(w4, v4, step, lr_new);
  EXPECT_LT(rel(w4.ToHost(), tw3), 1e-6);
}

}  // namespace
}  // namespace colonnade::checkpoint
