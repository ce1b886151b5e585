// CUDA graphs of the training step (src/cuda/step_graph.h): N steps of a small net with
// dropout, batch norm and a learning rate that changes every step, once as plain steps and
// once through StepGraph (a plain warm-up, a capture, then replays), must give bitwise the
// same losses and parameters (values, velocities, running statistics); likewise across a
// change of batch size in the middle (the graph is dropped, warmed up and captured again).
// Runs on the GPU and on the emulator, whose graphs record the captured launches as
// closures and replay them (src/cuda/emu).
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/layers.h"
#include "core/net.h"
#include "core/optimizer.h"
#include "core/philox.h"
#include "core/zoo_builders.h"
#include "cuda/caching_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/step_graph.h"
#include "gpu_test.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

class StepGraphGpu : public GpuTest {};

constexpr int kClasses = 10;

// conv (no bias) -> batch norm -> relu -> max pool -> fc (bias lr_mult 2) -> relu ->
// dropout -> fc -> softmax loss: every kernel family whose arguments could change per step.
std::unique_ptr<Net> SmallNet(int input, int channels) {
  ModelOptions o;
  o.input_size = input;
  o.num_classes = kClasses;
  auto net = zoo::NewNet("graph-test", o);
  net->Emplace<ConvLayer>({"data"}, {"conv"}, "conv", channels, zoo::Conv(3, 1, 1), false);
  net->Emplace<BatchNormLayer>({"conv"}, {"bn"}, "bn");
  net->Emplace<ReluLayer>({"bn"}, {"bn"}, "bn_relu");
  net->Emplace<PoolLayer>({"bn"}, {"pool"}, "pool", zoo::Pool(PoolParams::kMax, 3, 2));
  auto* fc1 = net->Emplace<FullyConnectedLayer>({"pool"}, {"fc1"}, "fc1", 2 * channels);
  fc1->bias().lr_mult = 2.0f;
  net->Emplace<ReluLayer>({"fc1"}, {"fc1"}, "fc1_relu");
  net->Emplace<DropoutLayer>({"fc1"}, {"drop"}, "drop", 0.5f);
  net->Emplace<FullyConnectedLayer>({"drop"}, {kLogitsBlob}, "fc2", kClasses);
  zoo::AddLoss(*net);
  return net;
}

// Random images and labels keyed by the step, written before the step (outside a graph,
// as the trainer's batch copy is).
void WriteInputs(Net& net, int step) {
  Tensor& data = net.blob("data");
  Tensor& label = net.blob("label");
  const uint64_t key = MixKey(11, static_cast<uint64_t>(RandomPurpose::kSynthetic));
  std::vector<float> img(data.size()), lab(label.size());
  for (size_t i = 0; i < img.size(); ++i) img[i] = PhiloxNormal(key, 2 * step, i);
  for (size_t i = 0; i < lab.size(); ++i)
    lab[i] = static_cast<float>(static_cast<int>(PhiloxUniform(key, 2 * step + 1, i) * kClasses) %
                                kClasses);
  data.CopyFromHost(img);
  label.CopyFromHost(lab);
}

// A different rate every step (warm-up then cosine), as the trainer's schedules give.
float LrAt(int step, int steps) {
  static const LrSchedule schedule = *LrSchedule::Parse("cosine+warmup:0.3");
  return schedule.At(0.05f, static_cast<double>(step + 1) / steps, 1.0);
}

struct Trajectory {
  std::vector<std::vector<float>> losses;  // per step, per image
  std::vector<std::vector<float>> state;   // every parameter's value and velocity
  std::vector<cuda::StepRun> runs;
  std::string error;
};

// `batches[i]`: the batch of step i (a change rebuilds the net).
Trajectory Train(const std::vector<int>& batches, bool graphs, int input, int channels) {
  Trajectory t;
  auto net = SmallNet(input, channels);
  absl::Status s = net->Build(batches[0], Device::kCUDA);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return t;
  net->InitParams(5);
  SgdOptimizer opt({0.9f, 5e-4f});
  std::unique_ptr<cuda::StepGraph> graph;
  if (graphs) graph = std::make_unique<cuda::StepGraph>();
  const int steps = static_cast<int>(batches.size());
  for (int step = 0; step < steps; ++step) {
    if (net->batch() != batches[step]) {
      s = net->Build(batches[step], Device::kCUDA);
      EXPECT_TRUE(s.ok()) << s;
    }
    WriteInputs(*net, step);
    const float lr = LrAt(step, steps);
    auto enqueue = [&](const StepScalars* dev) {
      RunContext ctx;
      ctx.phase = Phase::kTrain;
      ctx.seed = 3;
      ctx.step = step;
      ctx.global_batch = net->batch();
      ctx.loss_scale = 1.0f / static_cast<float>(net->batch());
      ctx.device_scalars = dev;
      net->Forward(ctx);
      net->Backward(ctx);
      opt.Step(*net, lr, dev != nullptr ? &dev->lr : nullptr);
    };
    if (graph) {
      StepScalars v;
      v.step = step;
      v.lr = lr;
      t.runs.push_back(graph->Step(net->builds(), v, enqueue));
    } else {
      enqueue(nullptr);
    }
    t.losses.push_back(net->blob("loss").ToHost());
  }
  for (const NamedParam& p : net->params()) {
    t.state.push_back(p.param->value.ToHost());
    if (!p.param->velocity.empty()) t.state.push_back(p.param->velocity.ToHost());
  }
  if (graph) t.error = graph->error();
  return t;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void ExpectBitwiseEqual(const Trajectory& plain, const Trajectory& graphed) {
  EXPECT_EQ(graphed.error, "");
  ASSERT_EQ(plain.losses.size(), graphed.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i)
    EXPECT_TRUE(SameBits(plain.losses[i], graphed.losses[i])) << "losses of step " << i;
  ASSERT_EQ(plain.state.size(), graphed.state.size());
  for (size_t i = 0; i < plain.state.size(); ++i)
    EXPECT_TRUE(SameBits(plain.state[i], graphed.state[i])) << "parameter state " << i;
}

int Input() { return kEmulated ? 6 : 32; }
int Channels() { return kEmulated ? 4 : 32; }
int Batch() { return kEmulated ? 4 : 128; }

TEST_F(StepGraphGpu, ReplayedStepsEqualPlainSteps) {
  const std::vector<int> batches(kEmulated ? 6 : 20, Batch());
  const Trajectory plain = Train(batches, false, Input(), Channels());
  const Trajectory graphed = Train(batches, true, Input(), Channels());
  ExpectBitwiseEqual(plain, graphed);
  ASSERT_EQ(graphed.runs.size(), batches.size());
  EXPECT_EQ(graphed.runs[0], cuda::StepRun::kPlain);  // the warm-up
  EXPECT_EQ(graphed.runs[1], cuda::StepRun::kCaptured);
  for (size_t i = 2; i < graphed.runs.size(); ++i)
    EXPECT_EQ(graphed.runs[i], cuda::StepRun::kReplayed) << "step " << i;
}

// A partial batch in the middle (the trainer's evaluation rebuilds too): each new shape is
// warmed up and captured again, and the results still equal plain steps.
TEST_F(StepGraphGpu, RecapturesWhenTheNetIsRebuilt) {
  const int b = Batch();
  const std::vector<int> batches = {b, b, b, b / 2, b / 2, b / 2, b, b, b};
  const Trajectory plain = Train(batches, false, Input(), Channels());
  const Trajectory graphed = Train(batches, true, Input(), Channels());
  ExpectBitwiseEqual(plain, graphed);
  using R = cuda::StepRun;
  const std::vector<R> want = {R::kPlain,    R::kCaptured, R::kReplayed, R::kPlain,   R::kCaptured,
                               R::kReplayed, R::kPlain,    R::kCaptured, R::kReplayed};
  EXPECT_EQ(graphed.runs, want);
}

// Blocks freed inside a capture (an Ops call's scratch) belong to the graph until it is
// destroyed: nothing outside the graph may be given them meanwhile.
TEST_F(StepGraphGpu, CapturePoolKeepsFreedBlocksFromOthers) {
  cuda::CachingAllocator& a = *cuda::BackendAllocator();
  a.ReleaseCached();  // blocks cached by earlier tests of this process would be served first
  void* warm = a.Allocate(3 << 20);
  a.Free(warm);  // cached
  a.BeginCapturePool();
  void* in_capture = a.Allocate(3 << 20);
  EXPECT_EQ(in_capture, warm);  // served from the cache: no cudaMalloc in a capture
  a.Free(in_capture);
  void* again = a.Allocate(3 << 20);  // reuse inside the capture: stream-ordered
  EXPECT_EQ(again, warm);
  a.Free(again);
  const auto pool = a.EndCapturePool();
  ASSERT_EQ(pool.size(), 1u);
  void* outside = a.Allocate(3 << 20);
  EXPECT_NE(outside, warm);  // the graph's block is not handed out
  a.Free(outside);
  a.ReleaseCapturePool(pool);
  void* after = a.Allocate(3 << 20);
  EXPECT_TRUE(after == warm || after == outside);  // back in the cache
  a.Free(after);
}

}  // namespace
}  // namespace colonnade
