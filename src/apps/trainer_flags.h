// Every flag of `trainer`, defined once: its group in --help, type, name, default, valid
// range and help text. From this one table come
//   * the Abseil flag (trainer.cc expands COLONNADE_TRAINER_FLAGS into ABSL_FLAG),
//   * the TrainConfig field of the same name and type (train_config.h),
//   * the copy of the parsed flags into TrainConfig (ConfigFromFlags, trainer.cc),
//   * the numeric range check (TrainerFlagRanges) and the "Valid: ..." text of --help,
//   * the grouped --help itself (PrintTrainerHelp),
//   * and the check of docs/OPERATIONS.md §7 against the ranges (tests/apps/trainer_flags_test.cc).
// A new flag is one line here (and its use); nothing else needs to list it.
//
// X(group, type, name, default, range, help) -- types and defaults fully qualified: Abseil's
// flags are defined at global scope (ABSL_FLAG refuses a namespace).
//   range: NoRange(), Range(min, max), RangeOpen(min, max) (max excluded), or
//          RangeOrRecipe(min, max) (also -1: "the model's recipe").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "apps/cli.h"

namespace colonnade {

// The --help sections, in the order printed.
enum class FlagGroup { kModel, kData, kOptimisation, kCheckpoints, kParallel, kGpu, kOutput };
const char* FlagGroupTitle(FlagGroup g);

// What a table entry says about a flag's range (FlagRange without the name).
struct FlagRangeSpec {
  bool has_range = false;
  double min = 0, max = 0;
  bool max_open = false;
  bool recipe_sentinel = false;  // -1 means the model's recipe
};
constexpr FlagRangeSpec NoRange() { return {}; }
constexpr FlagRangeSpec Range(double min, double max) { return {true, min, max, false, false}; }
constexpr FlagRangeSpec RangeOpen(double min, double max) { return {true, min, max, true, false}; }
constexpr FlagRangeSpec RangeOrRecipe(double min, double max) {
  return {true, min, max, false, true};
}
constexpr FlagRangeSpec RangeOpenOrRecipe(double min, double max) {
  return {true, min, max, true, true};
}

// Limits of a run (the flag ranges below, docs/OPERATIONS.md): a step count must fit the
// step counter and the data cursor with room to spare (steps x batch < 2^63), and the
// global batch stays below sizes whose buffers alone would exhaust a node.
constexpr int64_t kMaxTrainingSteps = 1000000000000;  // 1e12
constexpr int64_t kMaxGlobalBatch = 65536;

// clang-format off
#define COLONNADE_TRAINER_FLAGS(X)                                                          \
  /* ---- model ---- */                                                                     \
  X(kModel, std::string, model, "cifar10-80sec", NoRange(),                                 \
    "Model to train (the list is in the usage line above and docs/MODELS.md). With "        \
    "--mode=eval|predict the checkpoint's model is used when the flag is not given.")       \
  X(kModel, int, input_size, 0, Range(0, 8192),                                             \
    "Input image side in pixels. 0: the crop (--crop), else the data's image size (eval "   \
    "and predict: the checkpoint's). With --data=synthetic it also sets the generated "     \
    "image size (e.g. 67 for a small AlexNet).")                                            \
  X(kModel, int, num_classes, 0, Range(0, 1000000),                                         \
    "Number of classes; 0: from the dataset (eval and predict: the checkpoint's). Must be " \
    "at least the dataset's.")                                                              \
  X(kModel, int, columns, 0, Range(0, 1024),                                                \
    "Number of columns the split layers are divided into (AlexNet: 2). A different K is a " \
    "different model; 0 keeps the model's own (eval and predict: the checkpoint's).")       \
  X(kModel, bool, paper_init, false, NoRange(),                                             \
    "AlexNet only: the paper's initialisation (biases 1 in conv2/4/5 and fc6/7, fc6/7 "     \
    "weights N(0, 0.01)). Default: Caffe's replication (biases 0.1, fc6/7 N(0, 0.005)); at " \
    "lr 0.01 the paper's blows up and then stays at chance (docs/MODELS.md).")              \
  /* ---- data ---- */                                                                      \
  X(kData, std::string, data, "synthetic", NoRange(),                                       \
    "Training data: 'synthetic' (generated, learnable, no files needed) or a shard "        \
    "directory written by make_shards. Every node of a job must see it at this path "       \
    "(docs/OPERATIONS.md, 'Data on a cluster').")                                           \
  X(kData, std::string, val_data, "", NoRange(),                                            \
    "Validation data: a shard directory, or 'synthetic' (the generator's held-out split). " \
    "Empty: no evaluation.")                                                                \
  X(kData, int64_t, synthetic_size, 8192, Range(1, 16777216),                               \
    "Images in the synthetic training set (its epoch permutation stays within 128 MiB).")  \
  X(kData, int, crop, 0, Range(0, 8192),                                                    \
    "Random crop side for training (centre crop for evaluation); 0: the whole image. "      \
    "AlexNet: 224 from 256.")                                                               \
  X(kData, int, pad, 0, Range(0, 8192),                                                     \
    "Training: pad every side by P mean-valued pixels before the random crop (CIFAR: "      \
    "--pad=4 with 32x32 crops); evaluation is not padded.")                                 \
  X(kData, bool, mirror, false, NoRange(), "Random horizontal mirroring in training.")      \
  X(kData, bool, random_resized_crop, false, NoRange(),                                     \
    "Training: Inception's random-resized crop (torchvision's RandomResizedCrop) instead "  \
    "of --crop's crop at a random offset: a box of random area (--rrc_scale) and aspect "   \
    "ratio (--rrc_ratio) resized bilinearly to the input side. Excludes --pad. Evaluation " \
    "then resizes the centre square (--eval_crop_fraction, default 0.875; docs/DATA.md).")  \
  X(kData, colonnade::RrcScale, rrc_scale, colonnade::RrcScale(), NoRange(),               \
    "--random_resized_crop's range of the box's area as a fraction of the image, MIN,MAX "  \
    "with 0 < MIN <= MAX <= 1 (numbers or fractions like 1/2).")                            \
  X(kData, colonnade::RrcRatio, rrc_ratio, colonnade::RrcRatio(), NoRange(),               \
    "--random_resized_crop's range of the box's aspect ratio (width / height), MIN,MAX "    \
    "with 0 < MIN <= MAX; drawn uniformly in log.")                                         \
  X(kData, int, cutout, 0, Range(0, 8192),                                                  \
    "Training: one S x S square of mean-valued pixels (zeros after normalisation) at a "    \
    "random centre of every image, after crop and mirror, clipped at the border (DeVries "  \
    "& Taylor 2017; the DAWNBench ResNet-9 recipe: 8). At most the input side; 0: off.")    \
  X(kData, double, eval_crop_fraction, 0, Range(0, 1),                                      \
    "Evaluation: the centre square of this fraction of the image's side, resized to the "   \
    "input side (torchvision's Resize(input / f) + CenterCrop(input); ImageNet recipes: "   \
    "0.875). 0: with --random_resized_crop 0.875, else the plain centre crop of the input " \
    "side. Pass it (or --random_resized_crop) again with --mode=eval|predict.")            \
  X(kData, colonnade::data::MeanMode, mean, colonnade::data::MeanMode::kImage, NoRange(),                         \
    "Mean subtraction: image (the dataset's mean image), channel (per-channel mean), "      \
    "none.")                                                                                \
  X(kData, double, lighting, 0.0, Range(0, 10),                                             \
    "AlexNet's PCA lighting noise sigma (the paper: 0.1); 0: off.")                         \
  X(kData, int, data_threads, 0, Range(0, 256),                                             \
    "Reader/augmentation threads per rank; 0: automatic (CPU runs: min(4, cores per "       \
    "rank), the rest compute the step; GPU runs: every core of the rank's share).")        \
  X(kData, colonnade::EvalViews, eval_views, colonnade::EvalViews::kOne, NoRange(),                               \
    "How evaluation (--val_data during training, --mode=eval, --mode=predict) scores each " \
    "image: 1 (the centre crop), 2 (the centre crop and its mirror) or 10 (AlexNet's "     \
    "test: the centre and four corner crops of the full image and their mirrors); with "    \
    "several views their softmax outputs are averaged: top-1/top-5 rank the average, the "  \
    "loss is the cross-entropy of the average, --predictions holds its log. The views' "    \
    "side is the model's input side (--crop, else the image size) and must fit the "        \
    "validation images; 10 views cannot be resized (--eval_crop_fraction). On a CUDA run "  \
    "the views are cut on the GPU (docs/DATA.md, 'Ten crops').")                            \
  /* ---- optimisation ---- */                                                              \
  X(kOptimisation, int64_t, batch_size, 0, Range(0, kMaxGlobalBatch),                       \
    "GLOBAL batch size, split evenly over the data-parallel replicas; 0: the model's "      \
    "recipe.")                                                                              \
  X(kOptimisation, int64_t, steps, 0, Range(0, kMaxTrainingSteps),                          \
    "Training steps; 0: use --epochs.")                                                     \
  X(kOptimisation, double, epochs, 0, Range(0, 1000000),                                    \
    "Training epochs when --steps is 0 (0: one epoch). The run must come to at most 1e12 "  \
    "steps.")                                                                               \
  X(kOptimisation, double, lr, -1, RangeOrRecipe(0, 1e30), "Base learning rate.")           \
  X(kOptimisation, std::string, lr_schedule, "", NoRange(),                                 \
    "constant | step:E | multistep:E1,E2,... | cosine, optionally +warmup:W (E and W in "   \
    "epochs; the lr rises linearly from 0, so the first step's lr is 0). Empty: the "       \
    "model's recipe.")                                                                      \
  X(kOptimisation, double, momentum, -1, RangeOpenOrRecipe(0, 1),                           \
    "SGD momentum (the recipes: 0.9).")                                                     \
  X(kOptimisation, double, weight_decay, -1, RangeOrRecipe(0, 1), "L2 weight decay.")       \
  X(kOptimisation, std::string, weight_decay_on, "", NoRange(),                             \
    "Which parameters weight decay applies to: 'weights' (conv and fc weights only, not "   \
    "biases or batch-norm gamma/beta: the cuda-convnet/Caffe rule, every recipe's) or "     \
    "'all' (every learnable parameter, as PyTorch's SGD(model.parameters(), "               \
    "weight_decay=...)). Empty: the model's recipe.")                                       \
  X(kOptimisation, colonnade::OptimizerChoice, optimizer, colonnade::OptimizerChoice::kSgd,  \
    NoRange(),                                                                              \
    "sgd (momentum SGD) or lars (You et al. 2017, MLPerf's LARS: every conv/fc weight "     \
    "tensor takes lr x eta ||w|| / (||g|| + wd ||w||), --lars_eta; biases and batch-norm "  \
    "gamma/beta are excluded from the adaptation and from weight decay). lars needs "       \
    "--weight_decay_on=weights and --mp=1 (docs/MODELS.md, 'Optimisation options').")       \
  X(kOptimisation, double, lars_eta, 0.001, Range(1e-6, 1000),                              \
    "With --optimizer=lars: the trust coefficient eta.")                                    \
  X(kOptimisation, bool, nesterov, false, NoRange(),                                        \
    "Nesterov momentum: the weights take the look-ahead step w += momentum v - lr (g + wd " \
    "w), as torch.optim.SGD(nesterov=True). Needs a momentum above 0.")                     \
  X(kOptimisation, double, label_smoothing, 0, Range(0, 1),                                 \
    "Training loss with label smoothing eps: target eps/K on each of the K classes plus "   \
    "1 - eps on the label (PyTorch's CrossEntropyLoss(label_smoothing=eps)). Evaluation "   \
    "reports the plain cross-entropy. 0: off.")                                             \
  X(kOptimisation, double, ema_decay, 0, RangeOpen(0, 1),                                   \
    "Keep an exponential moving average of the weights and batch-norm statistics, "         \
    "ema = d ema + (1 - d) w after every --ema_every steps (torchvision's "                 \
    "ExponentialMovingAverage); checkpoints hold it and evaluation uses it "                \
    "(--eval_weights). 0: off.")                                                            \
  X(kOptimisation, int64_t, ema_every, 1, Range(1, kMaxTrainingSteps),                      \
    "With --ema_decay: update the average after every N optimizer steps.")                  \
  X(kOptimisation, colonnade::EvalWeights, eval_weights, colonnade::EvalWeights::kAuto,     \
    NoRange(),                                                                              \
    "Which weights evaluation (--val_data during training, --mode=eval|predict) uses: ema " \
    "(the moving average; an error without one), raw (the trained weights), or auto (ema "  \
    "when the run or checkpoint has one, else raw). Usually the average scores better "     \
    "late in training; compare both with --mode=eval.")                                     \
  X(kOptimisation, colonnade::LrScaling, lr_scaling, colonnade::LrScaling::kNone,           \
    NoRange(),                                                                              \
    "none, or linear: the base lr (--lr or the recipe's) is multiplied by global batch / "  \
    "--lr_reference_batch (Goyal et al. 2017), before the schedule and its warm-up.")       \
  X(kOptimisation, int64_t, lr_reference_batch, 256, Range(1, kMaxGlobalBatch),             \
    "With --lr_scaling=linear: the batch the base lr is meant for.")                        \
  X(kOptimisation, uint64_t, seed, 1, NoRange(),                                            \
    "Seed of every random draw (init, data order, augmentation, dropout). The same seed "   \
    "and global batch give the same run for any (dp, mp) layout.")                          \
  /* ---- checkpoints and modes ---- */                                                     \
  X(kCheckpoints, std::string, checkpoint_dir, "", NoRange(),                               \
    "Directory of HDF5 checkpoints (ckpt-<step>.h5, docs/CHECKPOINTS.md). Written at the "  \
    "end, every --checkpoint_every steps / --checkpoint_secs seconds, and on SIGTERM, "     \
    "SIGUSR1 or SIGINT (then the trainer exits 75; before training has started such a "     \
    "signal ends it at once, also with 75). Empty: no checkpoints.")                        \
  X(kCheckpoints, int64_t, checkpoint_every, 0, Range(0, kMaxTrainingSteps),                \
    "Checkpoint every N steps; 0: off.")                                                    \
  X(kCheckpoints, double, checkpoint_secs, 0, Range(0, 1e9),                                \
    "Checkpoint every T seconds of training; 0: off.")                                      \
  X(kCheckpoints, int, keep_checkpoints, 3, Range(0, 1000000),                              \
    "Keep the newest K checkpoints; 0 keeps all.")                                          \
  X(kCheckpoints, double, checkpoint_lock_wait_s, 120, Range(0, 86400),                     \
    "One job at a time writes to a --checkpoint_dir (a lock file, ckpt.lock). When another " \
    "job holds it (a requeued job started while the old one finishes), wait up to this "    \
    "many seconds, then exit 4 naming the holder.")                                         \
  X(kCheckpoints, std::string, resume, "auto", NoRange(),                                   \
    "auto: continue from the newest valid checkpoint in --checkpoint_dir (skipping "        \
    "partial or corrupt ones), or start fresh if there is none; none: start fresh; or the " \
    "path of a checkpoint. Resuming under another (dp, mp) layout works.")                  \
  X(kCheckpoints, colonnade::RunMode, mode, colonnade::RunMode::kTrain, NoRange(),                                \
    "train; eval (top-1/top-5 error of a checkpoint on --val_data); predict (also write "   \
    "the logits to --predictions). Eval and predict take the model, input size, classes "   \
    "and columns from the checkpoint.")                                                     \
  X(kCheckpoints, std::string, predictions, "", NoRange(),                                  \
    "With --mode=predict: HDF5 file to write, /logits [N][classes] and /labels [N] (with "  \
    "--eval_views=10, /logits holds the log of the ten views' mean probabilities). An "     \
    "existing file is refused unless --overwrite.")                                         \
  X(kCheckpoints, bool, overwrite, false, NoRange(),                                        \
    "With --mode=predict: replace an existing --predictions file. Even then a checkpoint, " \
    "a dataset or shard file (any HDF5 file but an earlier predictions file), a symbolic "  \
    "link or a non-regular file is never replaced.")                                        \
  /* ---- parallel ---- */                                                                  \
  X(kParallel, int, mp, 1, Range(1, 65536),                                                 \
    "Model-parallel ranks per group (must divide the world size and the columns); the "     \
    "rest of the world is data-parallel: dp = world / mp.")                                 \
  X(kParallel, colonnade::CommChoice, comm, colonnade::CommChoice::kAuto, NoRange(),                              \
    "Collective backend: nccl (GPUs, one rank per GPU), mpi (host memory; required when "   \
    "several ranks share a GPU), or auto (nccl on GPUs when built with it, else mpi).")    \
  X(kParallel, double, bucket_mb, 25.0, Range(0.001, 65536),                                \
    "Gradient all-reduce bucket size in MiB; buckets launch during backward as soon as "    \
    "they are complete.")                                                                   \
  X(kParallel, double, collective_timeout, 300, Range(0, 1e6),                              \
    "Seconds a rank may wait in one collective (gradient all-reduce, the per-step "         \
    "agreement, a checkpoint gather, set-up), or stay silent, before the job ends: then "   \
    "every rank prints one line naming the rank and host that stopped answering "           \
    "(crashed, stopped, cut off, stuck outside MPI) and exits 5, instead of waiting "       \
    "forever. 0: off. With several ranks it must exceed --checkpoint_lock_wait_s "         \
    "(docs/OPERATIONS.md).")                                                                 \
  X(kParallel, int, cpu_threads, 0, Range(0, 1024),                                         \
    "Threads for CPU ops per rank; 0: cores / ranks on the node.")                          \
  /* ---- device and memory ---- */                                                         \
  X(kGpu, colonnade::DeviceChoice, device, colonnade::DeviceChoice::kAuto, NoRange(),                             \
    "cpu, cuda, or auto (the GPU of this rank's local index when one is visible).")         \
  X(kGpu, std::string, precision, "auto", NoRange(),                                        \
    "Arithmetic of convolutions and fully connected products (docs/PRECISION.md): 'fp32' "  \
    "(strict FP32, bitwise reproducible), 'tf32' or 'bf16' (tensor cores, FP32 "            \
    "accumulation; --device=cuda only), or 'auto': bf16 on a CUDA device, fp32 on the "     \
    "CPU. Weights, momentum and checkpoints stay FP32 in every mode, so a run may resume "  \
    "in another precision.")                                                                \
  X(kGpu, bool, bf16_activations, true, NoRange(),                                          \
    "In bf16 precision: store the activations and activation gradients of every layer but " \
    "the classifier's in bf16, halving their memory and traffic; inputs, logits, loss, "    \
    "weights, momentum and checkpoints stay FP32 (docs/PRECISION.md). --nobf16_activations " \
    "keeps them FP32; giving --bf16_activations in fp32 or tf32 is an error.")              \
  X(kGpu, colonnade::GpuAugment, gpu_augment, colonnade::GpuAugment::kAuto, NoRange(),                            \
    "Where a CUDA run's training batches are cropped, mirrored, lit and normalised: on "    \
    "(the host sends uint8 images and the GPU augments them; --data=synthetic is then "     \
    "generated on the GPU too), off (the host writes the float batch), or auto (on for "    \
    "CUDA runs). The batches are the same bit for bit (docs/DATA.md, 'The GPU feed').")     \
  X(kGpu, colonnade::JpegDecoderChoice, jpeg_decoder, colonnade::JpegDecoderChoice::kAuto, NoRange(),             \
    "Who decodes JPEG training shards of a CUDA run whose GPU augments: host (libjpeg: "    \
    "bitwise the CPU pipeline's batches), nvjpeg (the GPU; pixels may differ from "         \
    "libjpeg's by a few levels; needs a build with nvJPEG), or auto (nvjpeg when the build " \
    "has it and --data_threads resolves to 4 or fewer, else host; docs/DATA.md).")          \
  X(kGpu, colonnade::CudaGraphs, cuda_graphs, colonnade::CudaGraphs::kAuto, NoRange(),                            \
    "Whether a CUDA run's training step is captured once as a CUDA graph and replayed "     \
    "(the same results bit for bit, one launch per step). auto: on for a CUDA run of one "  \
    "rank; on: the same, and an error with more ranks; off: never (docs/OPERATIONS.md, "    \
    "'CUDA graphs').")                                                                      \
  X(kGpu, colonnade::MemoryPlanMode, memory_plan, colonnade::MemoryPlanMode::kOn, NoRange(),                      \
    "on: activations, gradients and gradient scratch share one arena by the static plan "   \
    "of the training step (docs/MEMORY.md); off: one allocation per buffer. Results are "   \
    "bitwise the same.")                                                                    \
  X(kGpu, colonnade::RecomputePolicy, recompute, colonnade::RecomputePolicy::kBatchNormRelu, NoRange(),           \
    "Which activations are written again just before their first backward reader instead " \
    "of kept (docs/MEMORY.md): bn_relu (the batch-norm outputs with their ReLU; the "       \
    "default), bn_relu_add (also every other residual block output: least memory, about "   \
    "5% slower on ResNet-50) or off (fastest, most memory). Results are bitwise the same.") \
  X(kGpu, bool, print_memory_plan, false, NoRange(),                                        \
    "Print this rank's memory plan (every buffer: bytes, arena offset, live interval) and " \
    "the predicted peak, then exit 0 without training.")                                    \
  /* ---- output ---- */                                                                    \
  X(kOutput, int, log_every, 10, Range(1, 1e9),                                             \
    "Print a progress line every N steps. The loss and accuracy stay on the device "        \
    "between lines; a loss that turns non-finite is named at its own step and the run "     \
    "stops at the next line.")                                                              \
  X(kOutput, double, progress_secs, 10, Range(0, 86400),                                    \
    "Seconds between the progress lines (images done, img/s, ETA) of an evaluation or "     \
    "prediction pass; 0: after every batch.")                                               \
  X(kOutput, int64_t, profile_steps, 0, Range(0, kMaxTrainingSteps),                        \
    "Time N training steps after two warm-up steps, phase by phase (batch wait, copy, "     \
    "forward, backward, gradient sync wait, optimizer, results; device time from CUDA "     \
    "events), and print the table. Results are unchanged. 0: off.")                        \
  X(kOutput, int64_t, eval_every, 0, Range(0, kMaxTrainingSteps),                           \
    "Evaluate on --val_data every N steps; 0: only at the end.")                            \
  X(kOutput, std::string, metrics_file, "", NoRange(),                                      \
    "Append JSON lines (train and eval records) to this file; plot with "                   \
    "scripts/plot_metrics.py. An HDF5 file is refused; a failed write stops the trainer "   \
    "(exit 1).")                                                                            \
  X(kOutput, std::string, rank_log_dir, "", NoRange(),                                      \
    "Directory (must exist) where every rank appends its own progress lines to "            \
    "rank-NNNNN.log: local img/s, data-wait and comm-wait, to find a slow rank. A rank "    \
    "log that is a symbolic link is refused.")
// clang-format on

// One flag of the table, for the checks and --help (the Abseil flag holds its value).
struct TrainerFlagSpec {
  FlagGroup group;
  const char* name;
  FlagRangeSpec range;
  const char* help;
};
const std::vector<TrainerFlagSpec>& TrainerFlagSpecs();

// The ranges of the numeric flags, for ParseCommandLine (the check) and the help text.
absl::Span<const FlagRange> TrainerFlagRanges();

// `help` followed by the flag's "Valid: ..." text (for ABSL_FLAG's help argument).
std::string TrainerFlagHelp(const char* name, const char* help);

// trainer --help: `usage`, then the flags group by group, each with its default and, where
// the default means "the model's", what it is for `model` (the --model on the command
// line, else the default model).
void PrintTrainerHelp(std::ostream& out, const std::string& usage, const std::string& model);

}  // namespace colonnade
