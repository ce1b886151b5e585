// The trainer's parts without the binary (src/apps/train_setup.h, train_loop.h,
// evaluation.h): the ten views' average and its loss against a direct computation, and the
// step loop driven in-process through the set-up phases -- a run of 4 steps ends where 2
// steps, a stop and a resume for 2 more end, bit for bit (CPU, one rank).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/evaluation.h"
#include "apps/train_config.h"
#include "apps/train_loop.h"
#include "apps/train_setup.h"
#include "checkpoint/checkpoint.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

TEST(ViewAverageTest, MeanOfTheViewsAndTheLossOfTheMean) {
  // Two classes, two images, three views: probs are K x n (class-major).
  ViewAverage avg;
  avg.Start(2, 2);
  const std::vector<std::vector<float>> probs = {
      {0.9f, 0.2f, 0.1f, 0.8f}, {0.6f, 0.4f, 0.4f, 0.6f}, {0.3f, 0.5f, 0.7f, 0.5f}};
  // Labels: image 0 is class 0, image 1 is class 1; each view's loss is -ln p(label).
  for (const auto& p : probs) avg.Add(p, {-std::log(p[0]), -std::log(p[3])});
  const std::vector<double> mean = avg.MeanProbs();
  ASSERT_EQ(mean.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const double want = (static_cast<double>(probs[0][i]) + probs[1][i] + probs[2][i]) / 3.0;
    EXPECT_DOUBLE_EQ(mean[i], want) << i;
  }
  EXPECT_NEAR(avg.Loss(0), -std::log(mean[0]), 1e-7);
  EXPECT_NEAR(avg.Loss(1), -std::log(mean[3]), 1e-7);
  // Every view's probability of the label underflowed in float: the loss of the average
  // is still finite (log-sum-exp of the views' own losses), ln 3 + 1000 - ln(1 + e^-1 + e^-2).
  ViewAverage tiny;
  tiny.Start(2, 1);
  tiny.Add({0.0f, 1.0f}, {1000.0f});
  tiny.Add({0.0f, 1.0f}, {1001.0f});
  tiny.Add({0.0f, 1.0f}, {1002.0f});
  EXPECT_NEAR(tiny.Loss(0), std::log(3.0) + 1000.0 - std::log(1 + std::exp(-1.0) + std::exp(-2.0)),
              1e-9);
}

// A small CPU run of cifar10-80sec on synthetic data, checkpointing into `dir`.
TrainConfig SmallRun(const std::string& dir, int64_t steps) {
  TrainConfig c;
  c.model = "cifar10-80sec";
  c.data = "synthetic";
  c.device = DeviceChoice::kCpu;
  c.batch_size = 16;
  c.synthetic_size = 128;
  c.steps = steps;
  c.log_every = 1;
  c.cpu_threads = 2;
  c.checkpoint_dir = dir;
  return c;
}

// The phases RunTrainer runs, with the Trainer reached directly.
int TrainInProcess(const TrainConfig& cfg) {
  Job job(cfg);
  MPI_Comm_rank(MPI_COMM_WORLD, &job.l.world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &job.l.world_size);
  job.lead = job.l.world_rank == 0;
  for (auto phase : {SetUpLayout, SetUpOptimizer, SetUpDevice, OpenData, BuildShard}) {
    if (EndCode end = phase(job)) return *end;
  }
  ResumePoint at;
  if (EndCode end = Resume(job, at)) return *end;
  Trainer trainer(job, at);
  if (EndCode end = trainer.Start()) return *end;
  return trainer.Run();
}

TEST(TrainLoopTest, FourStepsEqualTwoStepsAndAResume) {
  const std::string root =
      (std::filesystem::temp_directory_path() / ("train_loop_test_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(root);
  ASSERT_EQ(TrainInProcess(SmallRun(root + "/straight", 4)), 0);
  ASSERT_EQ(TrainInProcess(SmallRun(root + "/resumed", 2)), 0);
  ASSERT_EQ(TrainInProcess(SmallRun(root + "/resumed", 4)), 0);  // resumes at step 2
  absl::StatusOr<checkpoint::Checkpoint> a = checkpoint::Read(root + "/straight/ckpt-000000004.h5");
  absl::StatusOr<checkpoint::Checkpoint> b = checkpoint::Read(root + "/resumed/ckpt-000000004.h5");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    EXPECT_EQ(a->tensors[i].value, b->tensors[i].value) << a->tensors[i].name;
    EXPECT_EQ(a->tensors[i].velocity, b->tensors[i].velocity) << a->tensors[i].name;
  }
  EXPECT_EQ(a->state.cursor_position, b->state.cursor_position);
  std::filesystem::remove_all(root);
}

// The same with issue 35's options on: Nesterov, LARS, label smoothing and the weight EMA
// (every 3 steps, so the resumed run's updates fall at other offsets than its start); the
// shadow weights are in the checkpoint and resume bit for bit. Then the same steps with the
// options off differ (the options do something) and keep no shadow.
TEST(TrainLoopTest, OptionsResumeBitwise) {
  const std::string root =
      (std::filesystem::temp_directory_path() / ("train_loop_opt_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(root);
  auto with_options = [](TrainConfig c) {
    c.nesterov = true;
    c.optimizer = OptimizerChoice::kLars;
    c.lars_eta = 0.02;
    c.label_smoothing = 0.1;
    c.ema_decay = 0.7;
    c.ema_every = 3;
    return c;
  };
  ASSERT_EQ(TrainInProcess(with_options(SmallRun(root + "/straight", 5))), 0);
  ASSERT_EQ(TrainInProcess(with_options(SmallRun(root + "/resumed", 2))), 0);
  ASSERT_EQ(TrainInProcess(with_options(SmallRun(root + "/resumed", 5))), 0);
  ASSERT_EQ(TrainInProcess(SmallRun(root + "/plain", 5)), 0);
  absl::StatusOr<checkpoint::Checkpoint> a = checkpoint::Read(root + "/straight/ckpt-000000005.h5");
  absl::StatusOr<checkpoint::Checkpoint> b = checkpoint::Read(root + "/resumed/ckpt-000000005.h5");
  absl::StatusOr<checkpoint::Checkpoint> p = checkpoint::Read(root + "/plain/ckpt-000000005.h5");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(a->has_ema);
  EXPECT_FALSE(p->has_ema);
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  bool options_matter = false, shadow_differs = false;
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    const checkpoint::TensorEntry &x = a->tensors[i], &y = b->tensors[i];
    EXPECT_EQ(x.value, y.value) << x.name;
    EXPECT_EQ(x.velocity, y.velocity) << x.name;
    ASSERT_EQ(x.ema.size(), x.value.size()) << x.name;
    EXPECT_EQ(x.ema, y.ema) << x.name;
    options_matter |= x.value != p->tensors[i].value;
    shadow_differs |= x.learnable && x.ema != x.value;
  }
  EXPECT_TRUE(options_matter);
  EXPECT_TRUE(shadow_differs);
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
