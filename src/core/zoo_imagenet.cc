// The ImageNet-era models after AlexNet: ZFNet, VGG, GoogLeNet (Inception v1), ResNet.
// Each derives its shapes from the input size and number of classes; parameter counts at
// 224x224 and 1000 classes match the published / torchvision figures (tests/core).
#include "core/zoo_imagenet.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/layers.h"
#include "core/zoo_builders.h"

namespace colonnade {
namespace {

using zoo::AddLoss;
using zoo::Conv;
using zoo::NewNet;
using zoo::Pool;

// conv (+ bias) + ReLU in place; returns the output blob. Weights He-normal, or
// N(0, weight_std^2) when weight_std > 0.
std::string ConvRelu(Net& net, const std::string& name, const std::string& in, int filters,
                     ConvParams p, ColumnInfo cols, float weight_std = 0.0f) {
  auto* l = net.Emplace<ConvLayer>({in}, {name}, name, filters, p, true, cols);
  if (weight_std > 0.0f) l->set_weight_std(weight_std);
  net.Emplace<ReluLayer>({name}, {name}, name + "_relu");
  return name;
}

// conv (no bias) + batch norm (+ ReLU in place): torchvision's BasicConv2d / ResNet unit.
std::string ConvBn(Net& net, const std::string& name, const std::string& in, int filters,
                   ConvParams p, bool relu, float bn_eps = 1e-5f) {
  net.Emplace<ConvLayer>({in}, {name}, name, filters, p, false);
  BatchNormParams bp;
  bp.eps = bn_eps;
  const std::string bn = name + "_bn";
  net.Emplace<BatchNormLayer>({name}, {bn}, bn, bp);
  if (relu) net.Emplace<ReluLayer>({bn}, {bn}, bn + "_relu");
  return bn;
}

// Two hidden fc layers of `width` with ReLU and dropout 0.5, then the classifier; all
// cross-column; the classifier writes kLogitsBlob. Weights as in ConvRelu.
void Classifier(Net& net, const std::string& in, int width, int classes, int columns,
                float weight_std = 0.0f) {
  ColumnInfo cross{ColumnInfo::kCross, columns};
  auto fc = [&](const std::string& name, const std::string& input, const std::string& out,
                int outputs) {
    auto* l = net.Emplace<FullyConnectedLayer>({input}, {out}, name, outputs, cross);
    if (weight_std > 0.0f) l->set_weight_std(weight_std);
  };
  fc("fc6", in, "fc6", width);
  net.Emplace<ReluLayer>({"fc6"}, {"fc6"}, "fc6_relu");
  net.Emplace<DropoutLayer>({"fc6"}, {"drop6"}, "drop6", 0.5f);
  fc("fc7", "drop6", "fc7", width);
  net.Emplace<ReluLayer>({"fc7"}, {"fc7"}, "fc7_relu");
  net.Emplace<DropoutLayer>({"fc7"}, {"drop7"}, "drop7", 0.5f);
  fc("fc8", "drop7", kLogitsBlob, classes);
}

}  // namespace

// Zeiler & Fergus (2013), figure 3: conv1 96 7x7/2, 3x3/2 max-pool, contrast norm; conv2
// 256 5x5/2, pool, norm; conv3 384, conv4 384, conv5 256 (3x3); pool; fc 4096, 4096.
// 224 -> 110 -> 55 -> 26 -> 13 -> 6. With K columns conv1 is split by filters (it sees the
// whole image), conv2/4/5 read their own column, conv3 and the fc layers read all columns,
// as in AlexNet.
std::unique_ptr<Net> BuildZfNet(const ModelOptions& o) {
  auto net = NewNet("zfnet", o);
  const int k = o.columns;
  net->set_columns(k);
  // The paper's N(0, 0.01) weights and zero biases. He-normal weights would be wrong
  // here: the recipe feeds raw 0..255 pixels minus the mean (as AlexNet), and at that
  // scale they start with logits in the hundreds (the loss was 9.5e4, then NaN, at step
  // 3 on Imagenette).
  constexpr float kStd = 0.01f;
  ColumnInfo cross{ColumnInfo::kCross, k}, iso{ColumnInfo::kIsolated, k};
  LrnCrossParams lrn;
  lrn.groups = k;
  ConvRelu(*net, "conv1", "data", 96, Conv(7, 2, 1), cross, kStd);
  net->Emplace<PoolLayer>({"conv1"}, {"pool1"}, "pool1", Pool(PoolParams::kMax, 3, 2));
  net->Emplace<LrnCrossLayer>({"pool1"}, {"norm1"}, "norm1", lrn);
  ConvRelu(*net, "conv2", "norm1", 256, Conv(5, 2, 0, k), iso, kStd);
  net->Emplace<PoolLayer>({"conv2"}, {"pool2"}, "pool2", Pool(PoolParams::kMax, 3, 2));
  net->Emplace<LrnCrossLayer>({"pool2"}, {"norm2"}, "norm2", lrn);
  ConvRelu(*net, "conv3", "norm2", 384, Conv(3, 1, 1), cross, kStd);
  ConvRelu(*net, "conv4", "conv3", 384, Conv(3, 1, 1, k), iso, kStd);
  ConvRelu(*net, "conv5", "conv4", 256, Conv(3, 1, 1, k), iso, kStd);
  net->Emplace<PoolLayer>({"conv5"}, {"pool5"}, "pool5", Pool(PoolParams::kMax, 3, 2));
  Classifier(*net, "pool5", 4096, o.num_classes, k, kStd);
  AddLoss(*net);
  return net;
}

// Simonyan & Zisserman (2014), configurations D (16) and E (19): 3x3 convolutions with
// padding 1 in five stages of 64, 128, 256, 512, 512 filters, each ending in a 2x2/2
// max-pool; fc 4096, 4096. With K columns, the first conv is split by filters and every
// later conv reads its own column (groups = K); the fc layers read all columns.
static std::unique_ptr<Net> BuildVgg(const ModelOptions& o, const std::string& name,
                                     const int (&per_stage)[5]) {
  auto net = NewNet(name, o);
  const int k = o.columns;
  net->set_columns(k);
  const int widths[5] = {64, 128, 256, 512, 512};
  std::string x = "data";
  bool first = true;
  for (int s = 0; s < 5; ++s) {
    for (int i = 0; i < per_stage[s]; ++i) {
      const std::string n = absl::StrCat("conv", s + 1, "_", i + 1);
      if (first) {
        x = ConvRelu(*net, n, x, widths[s], Conv(3, 1, 1), {ColumnInfo::kCross, k});
        first = false;
      } else {
        x = ConvRelu(*net, n, x, widths[s], Conv(3, 1, 1, k), {ColumnInfo::kIsolated, k});
      }
    }
    const std::string p = absl::StrCat("pool", s + 1);
    net->Emplace<PoolLayer>({x}, {p}, p, Pool(PoolParams::kMax, 2, 2));
    x = p;
  }
  Classifier(*net, x, 4096, o.num_classes, k);
  AddLoss(*net);
  return net;
}

std::unique_ptr<Net> BuildVgg16(const ModelOptions& o) {
  static const int kStages[5] = {2, 2, 3, 3, 3};
  return BuildVgg(o, "vgg16", kStages);
}

std::unique_ptr<Net> BuildVgg19(const ModelOptions& o) {
  static const int kStages[5] = {2, 2, 4, 4, 4};
  return BuildVgg(o, "vgg19", kStages);
}

// Szegedy et al. (2014), Inception v1, as torchvision builds it (so that the parameter
// count, 6,624,904, can be checked): every conv is conv (no bias) + batch norm (eps 1e-3)
// + ReLU, and the "5x5" branch uses a 3x3 kernel (torchvision keeps that for weight
// compatibility). Max-pools cover the border (ceil mode). Auxiliary heads are omitted.
std::unique_ptr<Net> BuildGoogLeNet(const ModelOptions& o) {
  auto net = NewNet("googlenet", o);
  const float eps = 1e-3f;
  auto conv = [&](const std::string& n, const std::string& in, int f, ConvParams p) {
    return ConvBn(*net, n, in, f, p, true, eps);
  };
  auto inception = [&](const std::string& n, const std::string& in, int c1, int c3r, int c3,
                       int c5r, int c5, int pp) {
    std::string b1 = conv(n + "_1x1", in, c1, Conv(1, 1, 0));
    std::string b2 =
        conv(n + "_3x3", conv(n + "_3x3_reduce", in, c3r, Conv(1, 1, 0)), c3, Conv(3, 1, 1));
    std::string b3 =
        conv(n + "_5x5", conv(n + "_5x5_reduce", in, c5r, Conv(1, 1, 0)), c5, Conv(3, 1, 1));
    net->Emplace<PoolLayer>({in}, {n + "_pool"}, n + "_pool", Pool(PoolParams::kMax, 3, 1, 1));
    std::string b4 = conv(n + "_pool_proj", n + "_pool", pp, Conv(1, 1, 0));
    net->Emplace<ConcatLayer>({b1, b2, b3, b4}, {n}, n);
    return n;
  };
  std::string x = conv("conv1", "data", 64, Conv(7, 2, 3));
  net->Emplace<PoolLayer>({x}, {"pool1"}, "pool1", Pool(PoolParams::kMax, 3, 2));
  x = conv("conv2", "pool1", 64, Conv(1, 1, 0));
  x = conv("conv3", x, 192, Conv(3, 1, 1));
  net->Emplace<PoolLayer>({x}, {"pool2"}, "pool2", Pool(PoolParams::kMax, 3, 2));
  x = inception("inception3a", "pool2", 64, 96, 128, 16, 32, 32);
  x = inception("inception3b", x, 128, 128, 192, 32, 96, 64);
  net->Emplace<PoolLayer>({x}, {"pool3"}, "pool3", Pool(PoolParams::kMax, 3, 2));
  x = inception("inception4a", "pool3", 192, 96, 208, 16, 48, 64);
  x = inception("inception4b", x, 160, 112, 224, 24, 64, 64);
  x = inception("inception4c", x, 128, 128, 256, 24, 64, 64);
  x = inception("inception4d", x, 112, 144, 288, 32, 64, 64);
  x = inception("inception4e", x, 256, 160, 320, 32, 128, 128);
  net->Emplace<PoolLayer>({x}, {"pool4"}, "pool4", Pool(PoolParams::kMax, 2, 2));
  x = inception("inception5a", "pool4", 256, 160, 320, 32, 128, 128);
  x = inception("inception5b", x, 384, 192, 384, 48, 128, 128);
  net->Emplace<GlobalAvgPoolLayer>({x}, {"avgpool"}, "avgpool");
  net->Emplace<DropoutLayer>({"avgpool"}, {"dropout"}, "dropout", 0.2f);
  net->Emplace<FullyConnectedLayer>({"dropout"}, {kLogitsBlob}, "fc", o.num_classes);
  AddLoss(*net);
  return net;
}

// He et al. (2015), ResNet v1.5 as torchvision builds it: the stride of a downsampling
// bottleneck sits on its 3x3 conv. `cifar_stem` replaces the 7x7/2 conv and max-pool by
// one 3x3/1 conv, the usual stem for 32x32 images. `d_variant`: ResNet-D of He et al.
// (2019), "Bag of Tricks", as timm's resnet18d/resnet50d: the 7x7/2 stem conv becomes three
// 3x3 convs (32/2, 32, 64; ResNet-C), and a downsampling shortcut averages 2x2/2 (ceil mode,
// dividing by the pixels inside the image: count_include_pad=False) before a 1x1/1 conv
// instead of a 1x1/2 conv that skips three quarters of its input.
static std::unique_ptr<Net> BuildResNet(const ModelOptions& o, const std::string& name,
                                        const int (&blocks)[4], bool bottleneck, bool cifar_stem,
                                        bool d_variant = false) {
  auto net = NewNet(name, o);
  std::string x;
  if (cifar_stem) {
    x = ConvBn(*net, "conv1", "data", 64, Conv(3, 1, 1), true);
  } else if (d_variant) {
    x = ConvBn(*net, "conv1_1", "data", 32, Conv(3, 2, 1), true);
    x = ConvBn(*net, "conv1_2", x, 32, Conv(3, 1, 1), true);
    x = ConvBn(*net, "conv1_3", x, 64, Conv(3, 1, 1), true);
    PoolParams stem = Pool(PoolParams::kMax, 3, 2, 1);
    stem.ceil_mode = false;  // as torchvision's: padding 1, floor mode, 112 -> 56
    net->Emplace<PoolLayer>({x}, {"pool1"}, "pool1", stem);
    x = "pool1";
  } else {
    x = ConvBn(*net, "conv1", "data", 64, Conv(7, 2, 3), true);
    PoolParams stem = Pool(PoolParams::kMax, 3, 2, 1);
    stem.ceil_mode = false;  // torchvision: padding 1, floor mode, 112 -> 56
    net->Emplace<PoolLayer>({x}, {"pool1"}, "pool1", stem);
    x = "pool1";
  }
  int in_channels = 64;
  const int expansion = bottleneck ? 4 : 1;
  for (int stage = 0; stage < 4; ++stage) {
    const int width = 64 << stage;
    for (int b = 0; b < blocks[stage]; ++b) {
      const std::string n = absl::StrCat("layer", stage + 1, "_", b);
      const int stride = (b == 0 && stage > 0) ? 2 : 1;
      const int out_channels = width * expansion;
      std::string y;
      if (bottleneck) {
        y = ConvBn(*net, n + "_conv1", x, width, Conv(1, 1, 0), true);
        y = ConvBn(*net, n + "_conv2", y, width, Conv(3, stride, 1), true);
        y = ConvBn(*net, n + "_conv3", y, out_channels, Conv(1, 1, 0), false);
      } else {
        y = ConvBn(*net, n + "_conv1", x, width, Conv(3, stride, 1), true);
        y = ConvBn(*net, n + "_conv2", y, width, Conv(3, 1, 1), false);
      }
      std::string shortcut = x;
      if (stride != 1 || in_channels != out_channels) {
        if (d_variant) {
          std::string pooled = x;
          if (stride != 1) {  // ceil mode, the in-image divisor: PoolParams' defaults
            pooled = n + "_downsample_pool";
            net->Emplace<PoolLayer>({x}, {pooled}, pooled, Pool(PoolParams::kAvg, 2, 2));
          }
          shortcut = ConvBn(*net, n + "_downsample", pooled, out_channels, Conv(1, 1, 0), false);
        } else {
          shortcut = ConvBn(*net, n + "_downsample", x, out_channels, Conv(1, stride, 0), false);
        }
      }
      net->Emplace<AddLayer>({y, shortcut}, {n}, n);
      net->Emplace<ReluLayer>({n}, {n}, n + "_relu");
      x = n;
      in_channels = out_channels;
    }
  }
  net->Emplace<GlobalAvgPoolLayer>({x}, {"avgpool"}, "avgpool");
  net->Emplace<FullyConnectedLayer>({"avgpool"}, {kLogitsBlob}, "fc", o.num_classes);
  AddLoss(*net);
  return net;
}

std::unique_ptr<Net> BuildResNet18(const ModelOptions& o) {
  static const int kBlocks[4] = {2, 2, 2, 2};
  return BuildResNet(o, "resnet18", kBlocks, false, false);
}
std::unique_ptr<Net> BuildResNet18Cifar(const ModelOptions& o) {
  static const int kBlocks[4] = {2, 2, 2, 2};
  return BuildResNet(o, "resnet18-cifar", kBlocks, false, true);
}
std::unique_ptr<Net> BuildResNet34(const ModelOptions& o) {
  static const int kBlocks[4] = {3, 4, 6, 3};
  return BuildResNet(o, "resnet34", kBlocks, false, false);
}
std::unique_ptr<Net> BuildResNet50(const ModelOptions& o) {
  static const int kBlocks[4] = {3, 4, 6, 3};
  return BuildResNet(o, "resnet50", kBlocks, true, false);
}
std::unique_ptr<Net> BuildResNet18D(const ModelOptions& o) {
  static const int kBlocks[4] = {2, 2, 2, 2};
  return BuildResNet(o, "resnet18d", kBlocks, false, false, true);
}
std::unique_ptr<Net> BuildResNet50D(const ModelOptions& o) {
  static const int kBlocks[4] = {3, 4, 6, 3};
  return BuildResNet(o, "resnet50d", kBlocks, true, false, true);
}

// David Page's CIFAR-10 ResNet-9 ("How to train your ResNet", the DAWNBench submission):
// conv_bn = 3x3/1 p1 conv (no bias) + batch norm + ReLU; prep 64; layer1 conv_bn 128, max
// 2x2/2, + residual (two conv_bn 128, added to the pooled map, no ReLU after the sum);
// layer2 conv_bn 256, max 2x2/2; layer3 conv_bn 512, max 2x2/2, + residual (512); a max pool
// over the whole map (Page's MaxPool2d(4) at 32x32); fc classes without a bias (ours: a bias
// frozen at 0, not learnable), its output multiplied by 0.125 (FullyConnectedLayer's output
// scale). Max pools in floor mode, as PyTorch's. Weights start as PyTorch's defaults do in
// spread: N(0, 1 / (3 fan_in)), the variance of kaiming_uniform(a = sqrt 5); batch-norm
// gamma 1, beta 0, eps 1e-5, momentum 0.1.
std::unique_ptr<Net> BuildResNet9(const ModelOptions& o) {
  auto net = NewNet("resnet9", o);
  int channels = o.input_channels;
  auto conv_bn = [&](const std::string& name, const std::string& in, int filters) {
    auto* conv = net->Emplace<ConvLayer>({in}, {name}, name, filters, Conv(3, 1, 1), false);
    conv->set_weight_std(static_cast<float>(1.0 / std::sqrt(3.0 * channels * 9)));
    channels = filters;
    const std::string bn = name + "_bn";
    net->Emplace<BatchNormLayer>({name}, {bn}, bn, BatchNormParams{});
    net->Emplace<ReluLayer>({bn}, {bn}, bn + "_relu");
    return bn;
  };
  PoolParams half = Pool(PoolParams::kMax, 2, 2);
  half.ceil_mode = false;
  int side = o.input_size;
  auto pool = [&](const std::string& name, const std::string& in) {
    net->Emplace<PoolLayer>({in}, {name}, name, half);
    side = static_cast<int>(PoolOutSize(side, 2, 2, 0, false));
    return name;
  };
  auto residual = [&](const std::string& name, const std::string& in) {
    const std::string r1 = conv_bn(name + "_res1", in, channels);
    const std::string r2 = conv_bn(name + "_res2", r1, channels);
    net->Emplace<AddLayer>({r2, in}, {name}, name);
    return name;
  };
  std::string x = conv_bn("prep", "data", 64);
  x = residual("layer1", pool("layer1_pool", conv_bn("layer1_conv", x, 128)));
  x = pool("layer2", conv_bn("layer2_conv", x, 256));
  x = residual("layer3", pool("layer3_pool", conv_bn("layer3_conv", x, 512)));
  net->Emplace<PoolLayer>({x}, {"pool"}, "pool", Pool(PoolParams::kMax, side, side));
  auto* fc = net->Emplace<FullyConnectedLayer>({"pool"}, {kLogitsBlob}, "fc", o.num_classes);
  fc->set_weight_std(static_cast<float>(1.0 / std::sqrt(3.0 * channels)));
  fc->set_output_scale(0.125f);
  fc->bias().learnable = false;  // Page's Linear has no bias: ours stays at its initial 0
  AddLoss(*net);
  return net;
}

std::unique_ptr<Net> BuildResNet152(const ModelOptions& o) {
  static const int kBlocks[4] = {3, 8, 36, 3};
  return BuildResNet(o, "resnet152", kBlocks, true, false);
}

}  // namespace colonnade
