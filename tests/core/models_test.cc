// Model zoo: published parameter counts, derived shapes, column variants, and a forward /
// backward pass of AlexNet at a small batch.
#include <algorithm>
#include <cmath>
#include <random>

#include "core/layers.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

int64_t CountParams(const std::string& model, ModelOptions o = {}) {
  auto net = BuildModel(model, o);
  EXPECT_TRUE(net.ok()) << net.status();
  if (!net.ok()) return -1;
  absl::Status s = (*net)->Build(1, Device::kCPU);
  EXPECT_TRUE(s.ok()) << s;
  return (*net)->num_learnable();
}

TEST(Models, AlexNetHasThePapersParameterCount) { EXPECT_EQ(CountParams("alexnet"), 60965224); }

TEST(Models, PublishedParameterCounts) {
  // torchvision's figures (GoogLeNet without its auxiliary heads).
  EXPECT_EQ(CountParams("vgg16"), 138357544);
  EXPECT_EQ(CountParams("vgg19"), 143667240);
  EXPECT_EQ(CountParams("googlenet"), 6624904);
  EXPECT_EQ(CountParams("resnet18"), 11689512);
  EXPECT_EQ(CountParams("resnet34"), 21797672);
  EXPECT_EQ(CountParams("resnet50"), 25557032);
  EXPECT_EQ(CountParams("resnet152"), 60192808);
  // timm's resnet18d / resnet50d (deep stem 3x3 32, 32, 64 + BN: 19,232 more than the 7x7 stem).
  EXPECT_EQ(CountParams("resnet18d"), 11708744);
  EXPECT_EQ(CountParams("resnet50d"), 25576264);
  // David Page's ResNet-9 (his fc has no bias; ours is frozen at 0 and not counted).
  EXPECT_EQ(CountParams("resnet9"), 6573120);
  // Zeiler & Fergus: conv1 96x3x7x7, conv2 256x96x5x5, 384, 384, 256 3x3, fc 9216-4096-4096-1000.
  const int64_t zf = (96 * 3 * 49 + 96) + (256 * 96 * 25 + 256) + (384 * 256 * 9 + 384) +
                     (384 * 384 * 9 + 384) + (256 * 384 * 9 + 256) + (9216LL * 4096 + 4096) +
                     (4096LL * 4096 + 4096) + (4096LL * 1000 + 1000);
  EXPECT_EQ(CountParams("zfnet"), zf);
}

TEST(Models, AlexNetShapesFollowThePaper) {
  auto net = BuildModel("alexnet", {});
  ASSERT_TRUE(net.ok());
  ASSERT_TRUE((*net)->Build(2, Device::kCPU).ok());
  EXPECT_EQ((*net)->blob("conv1").shape(), Shape::CHWN(96, 55, 55, 2));
  EXPECT_EQ((*net)->blob("pool1").shape(), Shape::CHWN(96, 27, 27, 2));
  EXPECT_EQ((*net)->blob("pool2").shape(), Shape::CHWN(256, 13, 13, 2));
  EXPECT_EQ((*net)->blob("conv5").shape(), Shape::CHWN(256, 13, 13, 2));
  EXPECT_EQ((*net)->blob("pool5").shape(), Shape::CHWN(256, 6, 6, 2));
  EXPECT_EQ((*net)->blob(kLogitsBlob).shape(), Shape::CHWN(1000, 1, 1, 2));
  EXPECT_EQ((*net)->columns(), 2);
}

// AlexNet's initialisation, measured on the initialised values: by default Caffe's
// replication (non-zero biases 0.1, fc6/fc7 weights N(0, 0.005)); with paper_init the
// paper's section 5 (biases 1, every weight N(0, 0.01)). Other models refuse paper_init.
TEST(Models, AlexNetInitialisation) {
  for (bool paper : {false, true}) {
    ModelOptions o;
    o.input_size = 67;
    o.paper_init = paper;
    auto net = BuildModel("alexnet", o);
    ASSERT_TRUE(net.ok()) << net.status();
    ASSERT_TRUE((*net)->Build(1, Device::kCPU).ok());
    (*net)->InitParams(7);
    const float one = paper ? 1.0f : 0.1f, hidden_std = paper ? 0.01f : 0.005f;
    int seen = 0;
    for (const NamedParam& p : (*net)->params()) {
      const Tensor& v = p.param->value;
      const float* d = v.data();
      const std::string& layer = p.layer;
      if (p.param->name == "bias") {
        const bool nonzero = layer == "conv2" || layer == "conv4" || layer == "conv5" ||
                             layer == "fc6" || layer == "fc7";
        for (int64_t i = 0; i < v.size(); ++i) {
          ASSERT_EQ(d[i], nonzero ? one : 0.0f) << layer << " bias " << i << " paper " << paper;
        }
      } else {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < v.size(); ++i) sum += d[i], sq += double(d[i]) * d[i];
        const double n = static_cast<double>(v.size());
        const double std = std::sqrt(sq / n - (sum / n) * (sum / n));
        const double want = (layer == "fc6" || layer == "fc7") ? hidden_std : 0.01;
        // Every weight tensor has >= 34,848 values: the sample std is within 2% of sigma.
        EXPECT_NEAR(std, want, 0.02 * want) << layer << " paper " << paper;
        EXPECT_NEAR(sum / n, 0.0, 0.05 * want) << layer;
      }
      ++seen;
    }
    EXPECT_EQ(seen, 16);  // 8 layers x (weight, bias)
  }
  ModelOptions o;
  o.paper_init = true;
  auto vgg = BuildModel("vgg16", o);
  ASSERT_FALSE(vgg.ok());
  EXPECT_NE(vgg.status().message().find("alexnet only"), std::string::npos) << vgg.status();
}

// models.h promises kLogitsBlob: the classifier's outputs, K x 1 x 1 x N, read by the loss.
// Parameter names stay the layer's (checkpoints written before the blob was renamed).
TEST(Models, EveryModelWritesLogits) {
  for (const ModelInfo& m : ModelZoo()) {
    ModelOptions o;
    o.num_classes = 7;
    auto net = BuildModel(m.name, o);
    ASSERT_TRUE(net.ok()) << net.status();
    auto shapes = (*net)->InferShapes(2);  // no allocation: VGG's 138M parameters stay unbuilt
    ASSERT_TRUE(shapes.ok()) << m.name << ": " << shapes.status();
    ASSERT_TRUE(shapes->count(kLogitsBlob)) << m.name;
    EXPECT_EQ(shapes->at(kLogitsBlob), Shape::CHWN(7, 1, 1, 2)) << m.name;
    const LayerEntry& loss = (*net)->layers().back();
    EXPECT_STREQ(loss.layer->type(), "softmax_loss") << m.name;
    EXPECT_EQ(loss.inputs[0], kLogitsBlob) << m.name;
  }
  auto alexnet = BuildModel("alexnet", {});
  ASSERT_TRUE(alexnet.ok());
  std::vector<std::string> names;
  for (const NamedParam& p : (*alexnet)->params()) names.push_back(p.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "fc8/weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "fc8/bias"), names.end());
}

// ResNet-9 at 32x32: 32 -> 16 -> 8 -> 4 -> a max over the whole 4x4 map; the classifier's
// output scale 0.125 and its bias frozen at 0; weights N(0, 1 / (3 fan_in)).
TEST(Models, ResNet9ShapesScaleAndInit) {
  auto net = BuildModel("resnet9", {});
  ASSERT_TRUE(net.ok()) << net.status();
  ASSERT_TRUE((*net)->Build(2, Device::kCPU).ok());
  Net& m = **net;
  EXPECT_EQ(m.blob("prep_bn").shape(), Shape::CHWN(64, 32, 32, 2));
  EXPECT_EQ(m.blob("layer1").shape(), Shape::CHWN(128, 16, 16, 2));
  EXPECT_EQ(m.blob("layer2").shape(), Shape::CHWN(256, 8, 8, 2));
  EXPECT_EQ(m.blob("layer3").shape(), Shape::CHWN(512, 4, 4, 2));
  EXPECT_EQ(m.blob("pool").shape(), Shape::CHWN(512, 1, 1, 2));
  EXPECT_EQ(m.blob(kLogitsBlob).shape(), Shape::CHWN(10, 1, 1, 2));
  m.InitParams(3);
  int fc = 0;
  for (const LayerEntry& e : m.layers()) {
    auto* l = dynamic_cast<FullyConnectedLayer*>(e.layer.get());
    if (l == nullptr) continue;
    ++fc;
    EXPECT_EQ(l->output_scale(), 0.125f);
    EXPECT_FALSE(l->bias().learnable);
    for (float b : l->bias().value.ToHost()) EXPECT_EQ(b, 0.0f);
  }
  EXPECT_EQ(fc, 1);
  for (const NamedParam& p : m.params()) {
    if (p.name != "layer3_res1/weight") continue;
    const std::vector<float> w = p.param->value.ToHost();
    double sq = 0;
    for (float v : w) sq += static_cast<double>(v) * v;
    const double want = 1.0 / std::sqrt(3.0 * 512 * 9);
    EXPECT_NEAR(std::sqrt(sq / w.size()), want, 0.01 * want);  // 2.4M values
  }
  // At 64x64 the last pool still covers the whole (8x8) map.
  ModelOptions o;
  o.input_size = 64;
  auto big = BuildModel("resnet9", o);
  ASSERT_TRUE(big.ok());
  auto shapes = (*big)->InferShapes(1);
  ASSERT_TRUE(shapes.ok());
  EXPECT_EQ(shapes->at("layer3"), Shape::CHWN(512, 8, 8, 1));
  EXPECT_EQ(shapes->at("pool"), Shape::CHWN(512, 1, 1, 1));
}

// ResNet-D: the deep stem (3x3/2 32, 3x3 32, 3x3 64, max 3x3/2) and a 2x2/2 average before
// the 1x1/1 shortcut conv of every downsampling block; stride-1 projections stay 1x1.
TEST(Models, ResNetDStemAndShortcuts) {
  auto net = BuildModel("resnet50d", {});
  ASSERT_TRUE(net.ok()) << net.status();
  auto shapes = (*net)->InferShapes(1);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(shapes->at("conv1_1_bn"), Shape::CHWN(32, 112, 112, 1));
  EXPECT_EQ(shapes->at("conv1_3_bn"), Shape::CHWN(64, 112, 112, 1));
  EXPECT_EQ(shapes->at("pool1"), Shape::CHWN(64, 56, 56, 1));
  EXPECT_EQ(shapes->count("layer1_0_downsample_pool"), 0u);  // stride 1: no pool
  EXPECT_EQ(shapes->at("layer1_0_downsample_bn"), Shape::CHWN(256, 56, 56, 1));
  EXPECT_EQ(shapes->at("layer2_0_downsample_pool"), Shape::CHWN(256, 28, 28, 1));
  EXPECT_EQ(shapes->at("layer4_0_downsample_bn"), Shape::CHWN(2048, 7, 7, 1));
  for (const LayerEntry& e : (*net)->layers()) {
    if (e.layer->name() == "layer2_0_downsample") {
      auto* conv = dynamic_cast<ConvLayer*>(e.layer.get());
      ASSERT_NE(conv, nullptr);
      EXPECT_EQ(conv->conv_params().stride, 1);
      EXPECT_EQ(conv->conv_params().kernel_h, 1);
    }
    if (e.layer->name() == "layer2_0_downsample_pool") {
      auto* pool = dynamic_cast<PoolLayer*>(e.layer.get());
      ASSERT_NE(pool, nullptr);
      EXPECT_EQ(pool->pool_params().kind, PoolParams::kAvg);
      EXPECT_TRUE(pool->pool_params().ceil_mode);
    }
  }
}

TEST(Models, CifarNetsPoolCoverTheBorder) {
  for (const char* name : {"cifar10-18pct", "cifar10-80sec"}) {
    auto net = BuildModel(name, {});
    ASSERT_TRUE(net.ok());
    ASSERT_TRUE((*net)->Build(3, Device::kCPU).ok());
    EXPECT_EQ((*net)->blob("pool1").shape(), Shape::CHWN(32, 16, 16, 3)) << name;
    EXPECT_EQ((*net)->blob("pool2").shape(), Shape::CHWN(32, 8, 8, 3)) << name;
    EXPECT_EQ((*net)->blob("pool3").shape(), Shape::CHWN(64, 4, 4, 3)) << name;
    EXPECT_EQ((*net)->blob(kLogitsBlob).shape(), Shape::CHWN(10, 1, 1, 3)) << name;
  }
}

TEST(Models, ShapesFollowInputSizeAndClasses) {
  ModelOptions o;
  o.input_size = 67;
  o.num_classes = 7;
  auto net = BuildModel("alexnet", o);
  ASSERT_TRUE(net.ok());
  ASSERT_TRUE((*net)->Build(1, Device::kCPU).ok());
  // 67 -> conv1 (67+4-11)/4+1 = 16 -> pool (ceil mode) 8 -> 8 -> pool 4 -> 4 -> pool 2.
  EXPECT_EQ((*net)->blob("conv1").shape(), Shape::CHWN(96, 16, 16, 1));
  EXPECT_EQ((*net)->blob("pool1").shape(), Shape::CHWN(96, 8, 8, 1));
  EXPECT_EQ((*net)->blob("pool5").shape(), Shape::CHWN(256, 2, 2, 1));
  EXPECT_EQ((*net)->blob(kLogitsBlob).shape(), Shape::CHWN(7, 1, 1, 1));
}

TEST(Models, ColumnsResplitTheFilters) {
  ModelOptions o;
  o.columns = 4;
  auto net = BuildModel("alexnet", o);
  ASSERT_TRUE(net.ok());
  ASSERT_TRUE((*net)->Build(1, Device::kCPU).ok());
  for (auto& e : (*net)->layers()) {
    if (e.layer->name() == "conv2") {
      auto* conv = dynamic_cast<ConvLayer*>(e.layer.get());
      ASSERT_NE(conv, nullptr);
      EXPECT_EQ(conv->conv_params().groups, 4);
      // 96 conv1 filters in 4 columns of 24: conv2 sees 24 input channels per filter.
      EXPECT_EQ(conv->weight().value.shape(), Shape({256, 24, 5, 5}));
    }
  }
  // Columns that do not divide the channels are refused, naming the layer (norm1 is the
  // first split layer whose 96 channels do not divide into 5 groups).
  o.columns = 5;
  auto bad = BuildModel("alexnet", o);
  ASSERT_TRUE(bad.ok());
  absl::Status s = (*bad)->Build(1, Device::kCPU);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("norm1"), std::string::npos) << s;
  EXPECT_NE(s.message().find("divide"), std::string::npos) << s;
}

TEST(Models, UnsplittableModelsRefuseColumns) {
  ModelOptions o;
  o.columns = 2;
  auto net = BuildModel("resnet18", o);
  EXPECT_FALSE(net.ok());
  EXPECT_NE(net.status().message().find("cannot be split"), std::string::npos);
  auto vgg = BuildModel("vgg16", o);
  EXPECT_TRUE(vgg.ok());
}

TEST(Models, UnknownModelListsTheKnownOnes) {
  auto net = BuildModel("nope", {});
  ASSERT_FALSE(net.ok());
  EXPECT_NE(net.status().message().find("alexnet"), std::string::npos);
  EXPECT_NE(net.status().message().find("cifar10-80sec"), std::string::npos);
}

// Forward and backward through the whole AlexNet at a small batch and input: finite loss
// near log(classes) at initialisation, and every parameter receives a gradient.
TEST(Models, AlexNetForwardBackwardSmallBatch) {
  ModelOptions o;
  o.input_size = 67;
  o.num_classes = 10;
  auto built = BuildModel("alexnet", o);
  ASSERT_TRUE(built.ok());
  Net& net = **built;
  const int n = 3;
  ASSERT_TRUE(net.Build(n, Device::kCPU).ok());
  net.InitParams(7);
  std::vector<float> x(net.blob("data").size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * 50.0f;
  net.blob("data").CopyFromHost(x);
  net.blob("label").CopyFromHost(std::vector<float>{1, 4, 9});
  RunContext ctx;
  ctx.global_batch = n;
  ctx.loss_scale = 1.0f / n;
  net.Forward(ctx);
  const double loss = net.ops().Sum(net.blob("loss")) / n;
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, std::log(10.0), 0.5);
  net.Backward(ctx);
  for (const NamedParam& p : net.params()) {
    std::vector<float> g = p.param->grad.ToHost();
    double norm = 0;
    for (float v : g) norm += static_cast<double>(v) * v;
    EXPECT_TRUE(std::isfinite(norm)) << p.name;
    EXPECT_GT(norm, 0.0) << p.name << " received no gradient";
  }
}

TEST(Optimizer, SgdStepMatchesTheFormula) {
  auto built = BuildModel("cifar10-80sec", {});
  ASSERT_TRUE(built.ok());
  Net& net = **built;
  ASSERT_TRUE(net.Build(1, Device::kCPU).ok());
  net.InitParams(3);
  Param* w = nullptr;
  for (const NamedParam& p : net.params())
    if (p.name == "fc10/weight") w = p.param;
  ASSERT_NE(w, nullptr);
  std::vector<float> before = w->value.ToHost();
  std::vector<float> g(before.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.001f * static_cast<float>(i % 13) - 0.005f;
  for (const NamedParam& p : net.params()) p.param->grad.Fill(0.0f);
  w->grad.CopyFromHost(g);
  SgdOptimizer opt({0.9f, 0.004f});
  opt.Step(net, 0.1f);
  opt.Step(net, 0.1f);
  std::vector<float> after = w->value.ToHost();
  for (size_t i = 0; i < before.size(); i += 97) {
    // Two steps of v = m v - lr (g + wd * wd_mult * w); w += v, in double.
    const double wd = 0.004 * w->wd_mult;
    double v = 0, x = before[i];
    for (int k = 0; k < 2; ++k) {
      v = 0.9 * v - 0.1 * (g[i] + wd * x);
      x += v;
    }
    EXPECT_NEAR(after[i], x, 1e-5 * (1 + std::abs(x))) << i;
  }
}

TEST(Optimizer, Schedules) {
  auto step = LrSchedule::Parse("step:30");
  ASSERT_TRUE(step.ok());
  EXPECT_FLOAT_EQ(step->At(0.1f, 0, 90), 0.1f);
  EXPECT_FLOAT_EQ(step->At(0.1f, 31, 90), 0.01f);
  auto multi = LrSchedule::Parse("multistep:120,130");
  ASSERT_TRUE(multi.ok());
  EXPECT_FLOAT_EQ(multi->At(0.001f, 119.9, 140), 0.001f);
  EXPECT_FLOAT_EQ(multi->At(0.001f, 125, 140), 0.0001f);
  EXPECT_NEAR(multi->At(0.001f, 135, 140), 0.00001f, 1e-12);
  auto cosine = LrSchedule::Parse("cosine+warmup:2");
  ASSERT_TRUE(cosine.ok());
  EXPECT_NEAR(cosine->At(1.0f, 1, 10), 0.5 * 0.5 * (1 + std::cos(M_PI * 0.1)), 1e-6);
  EXPECT_NEAR(cosine->At(1.0f, 5, 10), 0.5, 1e-6);
  EXPECT_NEAR(cosine->At(1.0f, 10, 10), 0.0, 1e-6);
  EXPECT_FALSE(LrSchedule::Parse("exponential").ok());
  EXPECT_FALSE(LrSchedule::Parse("multistep:5,3").ok());
  EXPECT_FALSE(LrSchedule::Parse("step:-1").ok());
}

}  // namespace
}  // namespace colonnade

namespace colonnade {
namespace {

// Every model of the zoo trains a few steps on the CPU at a tiny batch and input size:
// the loss stays finite and every learnable parameter moves.
class ZooTrainsTest : public ::testing::TestWithParam<std::string> {
 protected:
  bool IsCifarNet() const {
    return GetParam().rfind("cifar", 0) == 0 || GetParam() == "resnet18-cifar" ||
           GetParam() == "resnet9";
  }
  // The parameter's model for `classes` classes at `input_size`, built for `batch` images
  // on the CPU and initialised from `seed`; check HasFatalFailure() after the call.
  std::unique_ptr<Net> BuildSmall(int classes, int input_size, int batch, uint64_t seed) {
    ModelOptions o;
    o.num_classes = classes;
    o.input_size = input_size;
    auto built = BuildModel(GetParam(), o);
    EXPECT_TRUE(built.ok()) << built.status();
    if (!built.ok()) return nullptr;
    absl::Status s = (*built)->Build(batch, Device::kCPU);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return nullptr;
    (*built)->InitParams(seed);
    return std::move(*built);
  }
};

TEST_P(ZooTrainsTest, FewStepsOnTheCpu) {
  const int n = 2;
  const bool alexnet_like = GetParam() == "alexnet" || GetParam() == "zfnet";
  std::unique_ptr<Net> built = BuildSmall(5, IsCifarNet() ? 32 : alexnet_like ? 67 : 64, n, 11);
  ASSERT_NE(built, nullptr);
  Net& net = *built;
  std::vector<std::vector<float>> before;
  for (const NamedParam& p : net.params()) before.push_back(p.param->value.ToHost());
  SgdOptimizer opt({0.9f, 1e-4f});
  std::vector<float> x(net.blob("data").size());
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.01f * i + step);
    net.blob("data").CopyFromHost(x);
    net.blob("label").CopyFromHost(std::vector<float>{static_cast<float>(step % 5), 3.0f});
    RunContext ctx;
    ctx.step = step;
    ctx.global_batch = n;
    ctx.loss_scale = 1.0f / n;
    net.Forward(ctx);
    const double loss = net.ops().Sum(net.blob("loss")) / n;
    ASSERT_TRUE(std::isfinite(loss)) << GetParam() << " step " << step;
    net.Backward(ctx);
    opt.Step(net, 1e-3f);
  }
  size_t i = 0;
  for (const NamedParam& p : net.params()) {
    std::vector<float> after = p.param->value.ToHost();
    if (p.param->learnable)
      EXPECT_NE(after, before[i]) << GetParam() << " " << p.name << " did not move";
    ++i;
  }
}

// A freshly initialised model, fed images at its recipe's input scale, starts near
// chance: loss within ln(K) + 1.5. Pixels minus the mean are drawn N(0, 64^2) in 0..255
// units (natural images' spread) and multiplied by the recipe's scale. A model whose
// initialisation does not fit its input scale fails here; ZFNet with He-normal weights on
// raw pixels started at a loss of 9.5e4 and reached NaN at its third step.
TEST_P(ZooTrainsTest, StartsNearChanceAtTheRecipesInputScale) {
  absl::StatusOr<const ModelInfo*> info = FindModel(GetParam());
  ASSERT_TRUE(info.ok());
  const int n = 8;
  std::unique_ptr<Net> built = BuildSmall(10, IsCifarNet() ? 32 : 99, n, 5);
  ASSERT_NE(built, nullptr);
  Net& net = *built;
  std::vector<float> x(net.blob("data").size()), labels(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> pixel(0.0f, 64.0f);
  for (float& v : x) v = pixel(rng) * (*info)->recipe.input_scale;
  for (int i = 0; i < n; ++i) labels[i] = static_cast<float>(i % 10);
  net.blob("data").CopyFromHost(x);
  net.blob("label").CopyFromHost(labels);
  RunContext ctx;
  ctx.global_batch = n;
  ctx.loss_scale = 1.0f / n;
  net.Forward(ctx);
  const double loss = net.ops().Sum(net.blob("loss")) / n;
  EXPECT_LT(loss, std::log(10.0) + 1.5) << GetParam() << " starts at loss " << loss;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooTrainsTest,
                         ::testing::Values("alexnet", "cifar10-18pct", "cifar10-80sec", "zfnet",
                                           "vgg16", "vgg19", "googlenet", "resnet18",
                                           "resnet18-cifar", "resnet34", "resnet50", "resnet152",
                                           "resnet18d", "resnet50d", "resnet9"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
}  // namespace colonnade
