// Model zoo: each builder derives every shape from the input size and number of classes,
// and records the model's columns (AlexNet: 2) for the parallel split.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/net.h"
#include "core/optimizer.h"

namespace colonnade {

struct ModelOptions {
  int input_size = 0;   // 0: the model's default (AlexNet 224, CIFAR-10 nets 32)
  int num_classes = 0;  // 0: the model's default (1000 or 10)
  int columns = 0;      // 0: the model's default (AlexNet 2); others re-split the filters
  int input_channels = 3;
  // AlexNet only. false: Caffe's bvlc_alexnet replication init (non-zero biases 0.1,
  // fc6/fc7 weights N(0, 0.005)), which trains at the paper's lr 0.01. true: the paper's
  // section 5 (biases 1, every weight N(0, 0.01)); outside cuda-convnet that loss blows
  // up and then stays flat at chance (Caffe's finding, and ours: experiments/alexnet_init).
  bool paper_init = false;
  // AlexNet only: the width of the hidden fully connected layers fc6 and fc7; 0 the paper's
  // 4096. Tests that check the layer sequence rather than the size use a narrower one (at
  // 4096, fc7's 16.8 M weights made eight CPU ranks' initialisation, updates and gradient
  // sums most of the parallel equivalence test's time).
  int hidden_width = 0;
};

// The training recipe a model was published with; the trainer's flags default to it.
struct Recipe {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 5e-4f;
  // Which parameters the decay applies to. Every recipe: conv and fc weights only, the
  // cuda-convnet/Caffe rule (for the CIFAR nets and AlexNet the published one; for VGG,
  // GoogLeNet and the ResNets a choice: PyTorch's reference scripts decay every parameter).
  DecayOn weight_decay_on = DecayOn::kWeights;
  int batch_size = 128;
  std::string schedule = "step";  // see optimizer.h
  // Input pixels are fed as (pixel - mean) * input_scale. cuda-convnet and the AlexNet
  // paper fed raw 0..255 values minus the mean (scale 1), and their initial weights assume
  // it; later models are usually trained on 0..1 (scale 1/255).
  float input_scale = 1.0f / 255.0f;
  std::string note;  // where the numbers come from
};

// The blob every zoo model writes its classifier's outputs to (K x 1 x 1 x N, before the
// softmax): the trainer reads it for predictions, and the column split keeps it
// replicated under this name. Parameter names stay the layer's ("fc8/weight").
inline constexpr char kLogitsBlob[] = "logits";

struct ModelInfo {
  std::string name;
  std::string description;
  int default_input_size;
  int default_classes;
  int default_columns;
  Recipe recipe;
  // Builds the Net. Blobs: inputs "data" (C x S x S) and "label" (1 x 1 x 1); outputs
  // kLogitsBlob, "loss" (per image) and "probs".
  std::unique_ptr<Net> (*build)(const ModelOptions& resolved);
  // Whether --columns may differ from 1 (the split layers use groups = columns).
  bool splittable = false;
};

const std::vector<ModelInfo>& ModelZoo();
// Comma-separated list of the known model names, for error messages and --help.
std::string KnownModels();
absl::StatusOr<const ModelInfo*> FindModel(const std::string& name);
// Resolves defaults, validates the options and builds the model (shapes not yet derived:
// call Net::Build). Errors name the model and the bad option.
absl::StatusOr<std::unique_ptr<Net>> BuildModel(const std::string& name, ModelOptions options);

}  // namespace colonnade
