// bf16 activation storage in training (Net::set_bf16_storage, docs/PRECISION.md): in bf16
// precision, a net whose convolution and pooling blobs are stored in bf16 trains like the
// same net with float32 blobs, within what one more rounding per stored tensor explains, and
// the poisoned memory plan with bf16 views in its arena trains as the unplanned run (the
// kernels read only what the layers declare, whatever the storage type).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/layers.h"
#include "core/models.h"
#include "core/net.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "core/zoo_builders.h"
#include "gpu_test.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

class Bf16StorageGpu : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(OpsFor(Device::kCUDA).SetPrecision(Precision::kBF16).ok());
  }
  void TearDown() override {
    if (GetBackend(Device::kCUDA) != nullptr)
      ASSERT_TRUE(OpsFor(Device::kCUDA).SetPrecision(Precision::kFP32).ok());
  }
};

// AlexNet's pattern, small: conv + ReLU (fused), cross-channel LRN + max pool (fused),
// conv + ReLU, average pool, conv, max pool of a bf16 input, then fully connected layers.
// 23x23 images, so that pool3 still leaves 2x2 pixels: at 15x15 it pooled each map to one
// pixel, so one argmax carried a channel's whole gradient, and the argmax flips that
// rounding a stored map to bf16 causes among near-ties (harmless in training, and present
// in plain bf16 too, fewer) decided conv1-conv3's updates: 1.4x-6.3x plain bf16's distance
// from FP32 over batches 8-64, erratically, on the emulator and on an H200 (2.19x at 32).
// At 23x23 the same net stays within 0.96x-1.53x at every batch from 8 to 128 (emulator).
std::unique_ptr<Net> TinyAlexNet() {
  auto net = std::make_unique<Net>("tiny-alexnet");
  net->AddInput("data", Shape{3, 23, 23});
  net->AddInput("label", Shape{1, 1, 1});
  const ConvParams c1 = zoo::Conv(3, 1, 1), c2 = zoo::Conv(3, 1, 1, 2);
  const PoolParams max3 = zoo::Pool(PoolParams::kMax, 3, 2),
                   avg = zoo::Pool(PoolParams::kAvg, 3, 2);
  LrnCrossParams lrn;
  lrn.size = 5;
  lrn.groups = 2;
  net->Emplace<ConvLayer>({"data"}, {"conv1"}, "conv1", 16, c1);
  net->Emplace<ReluLayer>({"conv1"}, {"conv1"}, "relu1");
  net->Emplace<LrnCrossLayer>({"conv1"}, {"norm1"}, "norm1", lrn);
  net->Emplace<PoolLayer>({"norm1"}, {"pool1"}, "pool1", max3);  // 11x11
  net->Emplace<ConvLayer>({"pool1"}, {"conv2"}, "conv2", 16, c2);
  net->Emplace<ReluLayer>({"conv2"}, {"conv2"}, "relu2");
  net->Emplace<PoolLayer>({"conv2"}, {"pool2"}, "pool2", avg);  // 5x5
  net->Emplace<ConvLayer>({"pool2"}, {"conv3"}, "conv3", 8, c1);
  net->Emplace<PoolLayer>({"conv3"}, {"pool3"}, "pool3", max3);  // 2x2, read by fc: float32
  net->Emplace<FullyConnectedLayer>({"pool3"}, {"fc1"}, "fc1", 12);
  net->Emplace<ReluLayer>({"fc1"}, {"fc1"}, "fc1_relu");
  net->Emplace<FullyConnectedLayer>({"fc1"}, {kLogitsBlob}, "fc2", 5);
  net->Emplace<SoftmaxLossLayer>({kLogitsBlob, "label"}, {"loss", "probs"}, "loss");
  return net;
}

// GoogLeNet's order and the rest: conv + ReLU, max pool, an unfused cross-channel LRN,
// conv + ReLU, dropout on a feature map, conv, global average pooling into the classifier.
std::unique_ptr<Net> TinyLrnDropoutNet() {
  auto net = std::make_unique<Net>("tiny-lrn-dropout");
  net->AddInput("data", Shape{3, 12, 12});
  net->AddInput("label", Shape{1, 1, 1});
  const ConvParams c = zoo::Conv(3, 1, 1);
  const PoolParams max = zoo::Pool(PoolParams::kMax, 3, 2);
  LrnCrossParams lrn;
  lrn.size = 5;
  net->Emplace<ConvLayer>({"data"}, {"conv1"}, "conv1", 12, c);
  net->Emplace<ReluLayer>({"conv1"}, {"conv1"}, "relu1");
  net->Emplace<PoolLayer>({"conv1"}, {"pool1"}, "pool1", max);      // 5x5
  net->Emplace<LrnCrossLayer>({"pool1"}, {"norm1"}, "norm1", lrn);  // not before a pool: unfused
  net->Emplace<ConvLayer>({"norm1"}, {"conv2"}, "conv2", 12, c);
  net->Emplace<ReluLayer>({"conv2"}, {"conv2"}, "relu2");
  net->Emplace<DropoutLayer>({"conv2"}, {"drop2"}, "drop2", 0.5f);
  net->Emplace<ConvLayer>({"drop2"}, {"conv3"}, "conv3", 8, c);
  net->Emplace<GlobalAvgPoolLayer>({"conv3"}, {"avgpool"}, "avgpool");
  net->Emplace<FullyConnectedLayer>({"avgpool"}, {kLogitsBlob}, "fc", 5);
  net->Emplace<SoftmaxLossLayer>({kLogitsBlob, "label"}, {"loss", "probs"}, "loss");
  return net;
}

std::unique_ptr<Net> Zoo(const std::string& name, int input = 32) {
  ModelOptions o;
  o.input_size = input;
  o.num_classes = 5;
  auto built = BuildModel(name, o);
  EXPECT_TRUE(built.ok()) << built.status();
  return built.ok() ? std::move(*built) : nullptr;
}

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<float>> updates;  // each parameter's value minus its initial value
  std::vector<std::string> float_blobs;     // the blobs the plan keeps in float32
};

Run Train(std::unique_ptr<Net> net, bool bf16_storage, bool plan, int batch, int steps) {
  Run r;
  net->set_bf16_storage(bf16_storage);
  net->set_memory_plan(plan);
  net->set_poison_for_testing(plan);
  net->set_fusions({true, true, true});  // every fusion: the fused kernels too
  const absl::Status s = net->Build(batch, Device::kCUDA);
  EXPECT_TRUE(s.ok()) << s;
  if (!s.ok()) return r;
  for (const auto& [blob, id] : net->memory_plan().activation)
    if (net->memory_plan().buffers[id].dtype == DType::kFloat32) r.float_blobs.push_back(blob);
  net->InitParams(3);
  std::vector<std::vector<float>> init;
  for (const NamedParam& p : net->params()) init.push_back(p.param->value.ToHost());
  SgdOptimizer opt({0.9f, 5e-4f});
  for (int step = 0; step < steps; ++step)
    r.losses.push_back(TrainStepOnRandomData(*net, opt, step, 5, 5, 0.02f));
  size_t k = 0;
  for (const NamedParam& p : net->params()) {
    std::vector<float> v = p.param->value.ToHost();
    for (size_t i = 0; i < v.size(); ++i) v[i] -= init[k][i];
    r.updates.push_back(std::move(v));
    ++k;
  }
  return r;
}

double RelL2(const std::vector<float>& got, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Against float32 storage in the same precision and against FP32. Each stored tensor is
// rounded once more (relative 2^-9 per element, round to nearest even), forward and
// backward, independently. A parameter update of a few steps on random data is a sum of
// cancelling terms, and bf16 math alone already moves it from FP32's by 1-15% (measured on
// the emulator: cifar10-80sec conv1 13.6%); with batch norm over 2 images (ResNet on the
// emulator) even the loss of step 2 moves by 4.5%. The bar: bf16 storage keeps every
// update and every loss within twice bf16 math's distance from FP32 (or 5% of an update,
// 1% of a loss, where that distance is tiny). A kernel that misreads bf16 bits, writes
// the wrong storage type or reads memory the plan let die (NaN-poisoned) is off by order 1.
// The kernels' exact roundings are checked bit for bit in ops/<family>_test.cc and
// conv_tc_test.cc; this is the whole step.
void ExpectTrainsAsFloatStorage(const std::string& what, std::unique_ptr<Net> (*make)(), int batch,
                                std::vector<std::string> want_float, int steps = 3) {
  const int kSteps = steps;
  const Run f = Train(make(), false, true, batch, kSteps);
  const Run b = Train(make(), true, true, batch, kSteps);
  const Run b_unplanned = Train(make(), true, false, batch, kSteps);
  ASSERT_TRUE(OpsFor(Device::kCUDA).SetPrecision(Precision::kFP32).ok());
  const Run fp32 = Train(make(), false, true, batch, kSteps);
  ASSERT_TRUE(OpsFor(Device::kCUDA).SetPrecision(Precision::kBF16).ok());
  EXPECT_EQ(f.float_blobs.size(), fp32.float_blobs.size()) << what;  // all of them
  for (const char* always : {"data", "label", "loss", "probs", kLogitsBlob})
    want_float.push_back(always);
  std::sort(want_float.begin(), want_float.end());
  EXPECT_EQ(b.float_blobs, want_float) << what;
  EXPECT_LT(b.float_blobs.size(), f.float_blobs.size()) << what;
  ASSERT_EQ(b.losses.size(), static_cast<size_t>(kSteps)) << what;
  ASSERT_EQ(f.losses.size(), b.losses.size()) << what;
  ASSERT_EQ(fp32.losses.size(), b.losses.size()) << what;
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_TRUE(std::isfinite(b.losses[i])) << what << " step " << i;
    const double math = std::abs(f.losses[i] - fp32.losses[i]);
    EXPECT_LE(std::abs(b.losses[i] - fp32.losses[i]),
              std::max(2 * math, 1e-2 * std::abs(fp32.losses[i])))
        << what << " step " << i << ": bf16 math alone is " << math << " from FP32";
    // The poisoned plan and separate buffers: the same kernels on the same values.
    EXPECT_NEAR(b.losses[i], b_unplanned.losses[i], 1e-6 * std::abs(b.losses[i]))
        << what << " step " << i;
  }
  ASSERT_EQ(b.updates.size(), f.updates.size());
  double worst = 0;
  for (size_t p = 0; p < f.updates.size(); ++p) {
    const double storage = RelL2(b.updates[p], fp32.updates[p]);
    const double math = RelL2(f.updates[p], fp32.updates[p]);
    worst = std::max(worst, storage / std::max(math, 0.025));
    EXPECT_LE(storage, std::max(2 * math, 0.05))
        << what << " parameter " << p << ": bf16 math alone is " << math << " from FP32";
    EXPECT_LT(RelL2(b.updates[p], b_unplanned.updates[p]), 1e-6) << what << " parameter " << p;
  }
  std::printf(
      "%s: losses after %d steps fp32 %.5f, bf16 %.5f, bf16 storage %.5f; updates at "
      "most %.2fx bf16 math's distance from FP32 (or from 2.5%%)\n",
      what.c_str(), kSteps, fp32.losses.back(), f.losses.back(), b.losses.back(), worst);
}

TEST_F(Bf16StorageGpu, TinyAlexNetTrainsAsFloatStorage) {
  ExpectTrainsAsFloatStorage("tiny alexnet", TinyAlexNet, kEmulated ? 8 : 32, {"pool3", "fc1"});
}

TEST_F(Bf16StorageGpu, LrnAndDropoutTrainAsFloatStorage) {
  ExpectTrainsAsFloatStorage("tiny lrn + dropout", TinyLrnDropoutNet, kEmulated ? 8 : 32,
                             {"avgpool"});
}

// cuda-convnet's fast CIFAR-10 net: a max pool with an unfused ReLU after it, average pools
// of bf16 inputs to bf16 (pool2) and to float32 (pool3, read by fc64).
TEST_F(Bf16StorageGpu, Cifar10FastNetTrainsAsFloatStorage) {
  ExpectTrainsAsFloatStorage("cifar10-80sec", [] { return Zoo("cifar10-80sec"); },
                             kEmulated ? 4 : 32, {"pool3", "fc64"});
}

// ResNet-18 for CIFAR: batch norm with fused ReLUs, residual sums with fused ReLUs, block
// inputs read twice (their gradients added in bf16), global average pooling into the
// classifier (its output float32).
TEST_F(Bf16StorageGpu, ResNet18CifarTrainsAsFloatStorage) {
  // The emulator: 16x16 images, two steps (about a minute of CPU time).
  ExpectTrainsAsFloatStorage(
      "resnet18-cifar", [] { return Zoo("resnet18-cifar", kEmulated ? 16 : 32); },
      kEmulated ? 2 : 32, {"avgpool"}, kEmulated ? 2 : 3);
}

}  // namespace
}  // namespace colonnade
