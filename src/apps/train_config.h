// The trainer's configuration (TrainConfig, filled from the flags by trainer.cc) and the
// closed sets of words its flags take, as enums parsed once from the command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "apps/trainer_flags.h"
#include "core/memory_plan.h"
#include "data/augment.h"

namespace colonnade {

// --mode: what the job does with the model.
enum class RunMode { kTrain, kEval, kPredict };
// --device: cpu, cuda, or auto (the GPU of this rank's local index when one is visible).
enum class DeviceChoice { kAuto, kCpu, kCuda };
// --comm: the collective backend; auto chooses NCCL on GPUs when built with it, else MPI.
enum class CommChoice { kAuto, kMpi, kNccl };
// --gpu_augment: where a CUDA run's training batches are augmented. on: the host pipeline
// hands uint8 images (or, for synthetic data, only indices) and the GPU feed crops,
// mirrors, normalises (and generates) them on the device; off: the host writes the float
// batch; auto: on for CUDA runs. Both give the same batches bit for bit (docs/DATA.md).
enum class GpuAugment { kAuto, kOn, kOff };
// --jpeg_decoder: who decodes a CUDA run's JPEG training shards when the GPU augments
// them. host: the pipeline's threads (libjpeg; bitwise the CPU pipeline's batches);
// nvjpeg: the GPU feed (nvJPEG's hardware engines where present, cuda/jpeg_decoder.h;
// pixels differ from libjpeg's by a few levels on some pixels); auto: nvjpeg when the build
// has it and the rank decodes with at most 4 threads, else host (the faster of the two in
// each case on the measured H200, docs/DATA.md).
enum class JpegDecoderChoice { kAuto, kHost, kNvjpeg };
// --cuda_graphs (trainer, bench_train): whether a CUDA run's training step (forward,
// backward, optimizer) is captured once as a CUDA graph and replayed (cuda/step_graph.h;
// bitwise the same results, fewer kernel launches from the host). auto: on where it is
// legal, a CUDA run of one rank; on: the same, and an error where it is not; off: never.
// CPU runs ignore it.
enum class CudaGraphs { kAuto, kOn, kOff };
// --memory_plan (trainer, bench_train): on shares activation and gradient memory by the
// static plan of the step (docs/MEMORY.md); off gives every buffer its own allocation.
enum class MemoryPlanMode { kOn, kOff };
// --eval_views: the views evaluation scores each image by (held-out evaluation during
// training, --mode=eval, --mode=predict). 1: the centre crop; 10: AlexNet's ten crops
// (data::TenCrops: centre, four corners, their mirrors), the softmax probabilities of the
// ten averaged (docs/DATA.md, "Ten crops"). The value is the number of views.
enum class EvalViews { kOne = 1, kTwo = 2, kTen = 10 };
// --optimizer: momentum SGD, or LARS on top of it (core/optimizer.h, SgdOptions::lars).
enum class OptimizerChoice { kSgd, kLars };
// --eval_weights: the weights evaluation uses when the run keeps a moving average (auto: it
// when there is one).
enum class EvalWeights { kAuto, kEma, kRaw };
// --lr_scaling: none, or linear (base lr x global batch / --lr_reference_batch).
enum class LrScaling { kNone, kLinear };
// --rrc_scale and --rrc_ratio: a range MIN,MAX of the random-resized crop (data::AugmentConfig::
// ResizedCrop), each number a decimal or a fraction p/q. Scale: the box's area fraction,
// 0 < MIN <= MAX <= 1 (torchvision's default 0.08,1); ratio: its width / height,
// 0 < MIN <= MAX, finite (3/4,4/3). A range outside that is a bad flag value (exit 2).
struct RrcScale {
  double min = 0.08, max = 1.0;
};
struct RrcRatio {
  double min = 3.0 / 4.0, max = 4.0 / 3.0;
};
// --recompute (trainer, bench_train) takes core's RecomputePolicy (core/memory_plan.h):
// off, bn_relu (batch-norm outputs with their ReLU are written again just before their
// first backward reader instead of kept from the forward pass) or bn_relu_add (also
// residual sums); bitwise the same results (docs/MEMORY.md).

// Abseil's flag hooks (found by argument-dependent lookup): the flag's words, and for a
// word outside the set an error that lists them ("must be train, eval or predict"), which
// the command line reports in one line with exit 2.
bool AbslParseFlag(absl::string_view text, RunMode* mode, std::string* error);
std::string AbslUnparseFlag(RunMode mode);
bool AbslParseFlag(absl::string_view text, DeviceChoice* device, std::string* error);
std::string AbslUnparseFlag(DeviceChoice device);
bool AbslParseFlag(absl::string_view text, CommChoice* comm, std::string* error);
std::string AbslUnparseFlag(CommChoice comm);
bool AbslParseFlag(absl::string_view text, GpuAugment* mode, std::string* error);
std::string AbslUnparseFlag(GpuAugment mode);
bool AbslParseFlag(absl::string_view text, JpegDecoderChoice* mode, std::string* error);
std::string AbslUnparseFlag(JpegDecoderChoice mode);
bool AbslParseFlag(absl::string_view text, CudaGraphs* mode, std::string* error);
std::string AbslUnparseFlag(CudaGraphs mode);
bool AbslParseFlag(absl::string_view text, MemoryPlanMode* plan, std::string* error);
std::string AbslUnparseFlag(MemoryPlanMode plan);
bool AbslParseFlag(absl::string_view text, EvalViews* views, std::string* error);
std::string AbslUnparseFlag(EvalViews views);
bool AbslParseFlag(absl::string_view text, RrcScale* range, std::string* error);
std::string AbslUnparseFlag(RrcScale range);
bool AbslParseFlag(absl::string_view text, RrcRatio* range, std::string* error);
std::string AbslUnparseFlag(RrcRatio range);
bool AbslParseFlag(absl::string_view text, OptimizerChoice* choice, std::string* error);
std::string AbslUnparseFlag(OptimizerChoice choice);
bool AbslParseFlag(absl::string_view text, EvalWeights* weights, std::string* error);
std::string AbslUnparseFlag(EvalWeights weights);
bool AbslParseFlag(absl::string_view text, LrScaling* scaling, std::string* error);
std::string AbslUnparseFlag(LrScaling scaling);
bool AbslParseFlag(absl::string_view text, RecomputePolicy* policy, std::string* error);
std::string AbslUnparseFlag(RecomputePolicy policy);

}  // namespace colonnade

// --mean takes the data library's MeanMode; its flag hooks must live in the type's own
// namespace for Abseil to find them. The data library itself parses no flags.
namespace colonnade::data {
bool AbslParseFlag(absl::string_view text, MeanMode* mean, std::string* error);
std::string AbslUnparseFlag(MeanMode mean);
}  // namespace colonnade::data

namespace colonnade {

// The trainer's configuration: one field per flag of the table (trainer_flags.h), of the
// flag's name, type and default, filled from the parsed flags by trainer.cc; and what the
// command line says beyond the values.
struct TrainConfig {
#define COLONNADE_FIELD(group, type, name, def, range, help) type name = def;
  COLONNADE_TRAINER_FLAGS(COLONNADE_FIELD)
#undef COLONNADE_FIELD
  // The flags given on the command line, in any spelling (--x, --x=v, --x v, --nox): for
  // flags whose default depends on something else (a checkpoint's model, the precision).
  std::vector<std::string> given;
  bool Given(const std::string& name) const;
  // The command line as "--flag=value" lines, stored in checkpoints.
  std::string flags_text;
};

// The evaluation crop fraction in force (data::PipelineOptions::eval_crop_fraction):
// --eval_crop_fraction, or when it is 0, 0.875 with --random_resized_crop (the ImageNet
// recipes' Resize(256) + CenterCrop(224)) and 0 (the plain centre crop) without.
inline double EvalCropFraction(const TrainConfig& c) {
  return c.eval_crop_fraction > 0 ? c.eval_crop_fraction : c.random_resized_crop ? 0.875 : 0.0;
}

}  // namespace colonnade
