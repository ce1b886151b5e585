// The trainer's configuration (TrainConfig, filled from the flags by trainer.cc) and the
// closed sets of words its flags take, as enums parsed once from the command line.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
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
enum class EvalViews { kOne = 1, kTen = 10 };
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

// Limits of a run (trainer.cc's flag ranges, docs/OPERATIONS.md): a step count must fit
// the step counter and the data cursor with room to spare (steps x batch < 2^63), and the
// global batch stays below sizes whose buffers alone would exhaust a node.
constexpr int64_t kMaxTrainingSteps = 1000000000000;  // 1e12
constexpr int64_t kMaxGlobalBatch = 65536;

struct TrainConfig {
  // What to train.
  std::string model = "cifar10-80sec";
  int input_size = 0;       // 0: from the data (crop or image size) or the model's default
  int num_classes = 0;      // 0: from the data
  int columns = 0;          // 0: the model's own
  bool paper_init = false;  // AlexNet: the paper's biases of 1 (ModelOptions::paper_init)
  // Where.
  DeviceChoice device = DeviceChoice::kAuto;
  int cpu_threads = 0;  // 0: cores / ranks on this node
  int mp = 1;
  CommChoice comm = CommChoice::kAuto;
  double bucket_mb = 25.0;
  // --collective_timeout: seconds a rank may wait in one collective (or stay silent) before
  // the collective watchdog ends the job with exit 5 (parallel/watchdog.h); 0: off.
  double collective_timeout = 300;
  MemoryPlanMode memory_plan = MemoryPlanMode::kOn;
  RecomputePolicy recompute = RecomputePolicy::kBatchNormReluAdd;
  bool print_memory_plan = false;  // print the plan and the predicted peak, then exit 0
  // Data.
  std::string data = "synthetic";
  std::string val_data;  // empty: no evaluation
  int64_t synthetic_size = 8192;
  int crop = 0;
  int pad = 0;  // training only: data::PipelineOptions::pad
  bool mirror = false;
  data::MeanMode mean = data::MeanMode::kImage;
  float lighting = 0.0f;
  int data_threads = 0;  // 0: automatic
  GpuAugment gpu_augment = GpuAugment::kAuto;
  JpegDecoderChoice jpeg_decoder = JpegDecoderChoice::kAuto;
  EvalViews eval_views = EvalViews::kOne;
  CudaGraphs cuda_graphs = CudaGraphs::kAuto;
  // Optimisation.
  int64_t batch_size = 0;   // global; 0: the model recipe's
  int64_t steps = 0;        // 0: from epochs
  double epochs = 0;        // 0 with steps 0: one epoch
  float lr = -1;            // <0: the recipe's
  std::string lr_schedule;  // empty: the recipe's
  float momentum = -1;
  float weight_decay = -1;
  std::string weight_decay_on;          // weights | all; empty: the recipe's
  std::string precision = "auto";       // auto | fp32 | tf32 | bf16 (core/precision.h)
  bool bf16_activations = true;         // --bf16_activations: Net::set_bf16_storage in bf16
  bool bf16_activations_given = false;  // on the command line (an error outside bf16)
  uint64_t seed = 1;
  // Output.
  int log_every = 10;
  int64_t profile_steps = 0;  // --profile_steps: time N steps phase by phase, 0 = off
  int64_t eval_every = 0;     // steps; 0: only at the end
  std::string metrics_file;
  std::string rank_log_dir;  // each rank appends its own progress to rank-NNNNN.log here
  // Mode.
  RunMode mode = RunMode::kTrain;
  std::string predictions;
  bool overwrite = false;  // --predictions may replace an earlier predictions file
  // Checkpoints.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  double checkpoint_secs = 0;
  int keep_checkpoints = 3;
  double checkpoint_lock_wait_s = 120;  // wait for another job's lock of checkpoint_dir
  std::string resume = "auto";          // auto | none | PATH
  // The command line as "--flag=value" lines, stored in checkpoints.
  std::string flags_text;
};

}  // namespace colonnade
