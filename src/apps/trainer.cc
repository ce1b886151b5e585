// trainer: trains, evaluates or predicts with a Colonnade model, on one process or many
// (mpirun / srun). Every flag is explained by --help; docs/OPERATIONS.md has the recipes.
#include <mpi.h>

#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "apps/cli.h"
#include "apps/exit_codes.h"
#include "apps/train_session.h"
#include "core/models.h"
#include "parallel/mesh.h"

namespace {

using colonnade::FlagRange;

// The valid values of every numeric flag, in one place: main() enforces them (exit 2) and
// the flags' --help shows them (RangeHelp). docs/OPERATIONS.md §7 lists the same table.
// The bounds keep a value from crashing or silently changing meaning: thread and batch
// counts that would abort on thread creation or allocation, float flags that must stay
// finite as floats (lr, momentum), step counts that must fit the step counter.
const FlagRange kRanges[] = {
    {"input_size", 0, 8192},
    {"num_classes", 0, 1000000},
    {"columns", 0, 1024},
    {"cpu_threads", 0, 1024},
    {"mp", 1, 65536},
    {"bucket_mb", 0.001, 65536},
    {"collective_timeout", 0, 1e6},
    {"synthetic_size", 1, 16777216},  // its epoch permutation stays within 128 MiB
    {"crop", 0, 8192},
    {"pad", 0, 8192},
    {"lighting", 0, 10},
    {"data_threads", 0, 256},
    {"batch_size", 0, colonnade::kMaxGlobalBatch},
    {"steps", 0, colonnade::kMaxTrainingSteps},
    {"epochs", 0, 1000000},
    {"lr", 0, 1e30, false, true, -1, "the model's recipe"},
    {"momentum", 0, 1, true, true, -1, "the model's recipe"},
    {"weight_decay", 0, 1, false, true, -1, "the model's recipe"},
    {"log_every", 1, 1e9},
    {"profile_steps", 0, colonnade::kMaxTrainingSteps},
    {"eval_every", 0, colonnade::kMaxTrainingSteps},
    {"checkpoint_every", 0, colonnade::kMaxTrainingSteps},
    {"checkpoint_secs", 0, 1e9},
    {"keep_checkpoints", 0, 1000000},
    {"checkpoint_lock_wait_s", 0, 86400},
};

std::string Help(const char* name, const char* text) {
  return colonnade::RangeHelp(kRanges, name, text);
}

}  // namespace

// ---- model ------------------------------------------------------------------------------
ABSL_FLAG(std::string, model, "cifar10-80sec",
          "Model to train (the list is in the usage line above and docs/MODELS.md).");
ABSL_FLAG(int, input_size, 0,
          Help("input_size",
               "Input image side in pixels. 0: the crop (--crop), else the data's image size. "
               "With --data=synthetic it also sets the generated image size (e.g. 67 for a "
               "small AlexNet)."));
ABSL_FLAG(int, num_classes, 0, Help("num_classes", "Number of classes; 0: from the dataset."));
ABSL_FLAG(int, columns, 0,
          Help("columns",
               "Number of columns the split layers are divided into (AlexNet: 2). A different "
               "K is a different model; 0 keeps the model's own."));
ABSL_FLAG(bool, paper_init, false,
          "AlexNet only: the paper's initialisation (biases 1 in conv2/4/5 and fc6/7, fc6/7 "
          "weights N(0, 0.01)). Default: Caffe's replication (biases 0.1, fc6/7 N(0, 0.005)); "
          "at lr 0.01 the paper's blows up and then stays at chance (docs/MODELS.md).");
// ---- placement --------------------------------------------------------------------------
ABSL_FLAG(colonnade::DeviceChoice, device, colonnade::DeviceChoice::kAuto,
          "cpu, cuda, or auto (the GPU of this rank's local index when one is visible).");
ABSL_FLAG(int, cpu_threads, 0,
          Help("cpu_threads", "Threads for CPU ops per rank; 0: cores / ranks on the node."));
ABSL_FLAG(int, mp, 1,
          Help("mp",
               "Model-parallel ranks per group (must divide the world size and the columns); "
               "the rest of the world is data-parallel: dp = world / mp."));
ABSL_FLAG(colonnade::CommChoice, comm, colonnade::CommChoice::kAuto,
          "Collective backend: nccl (GPUs, one rank per GPU), mpi (host memory; required when "
          "several ranks share a GPU), or auto (nccl on GPUs when built with it, else mpi).");
ABSL_FLAG(double, bucket_mb, 25.0,
          Help("bucket_mb",
               "Gradient all-reduce bucket size in MiB; buckets launch during backward as soon "
               "as they are complete."));
ABSL_FLAG(double, collective_timeout, 300,
          Help("collective_timeout",
               "Seconds a rank may wait in one collective (gradient all-reduce, the per-step "
               "agreement, a checkpoint gather, set-up), or stay silent, before the job ends: "
               "then every rank prints one line naming the rank and host that stopped answering "
               "(crashed, stopped, cut off, stuck outside MPI) and exits 5, instead of waiting "
               "forever. 0: off. Must exceed --checkpoint_lock_wait_s (docs/OPERATIONS.md)."));
ABSL_FLAG(colonnade::MemoryPlanMode, memory_plan, colonnade::MemoryPlanMode::kOn,
          "on: activations, gradients and gradient scratch share one arena by the static "
          "plan of the training step (buffers whose lives do not overlap share memory; "
          "docs/MEMORY.md); off: one allocation per buffer. Results are bitwise the same.");
ABSL_FLAG(colonnade::RecomputePolicy, recompute, colonnade::RecomputePolicy::kBatchNormReluAdd,
          "Which activations are not kept from the forward to the backward pass but written "
          "again, just before their first backward reader, from tensors that are live anyway "
          "(docs/MEMORY.md): bn_relu_add: batch-norm outputs with the ReLU after them, and "
          "every other residual block output (ResNet-50 at batch 64: about 1.8 GB less, at "
          "one extra pass over each such tensor); bn_relu: only the batch-norm outputs (about "
          "1 GB); off: everything is kept. Results are bitwise the same.");
ABSL_FLAG(bool, print_memory_plan, false,
          "Print this rank's memory plan (every buffer: bytes, arena offset, live interval, "
          "the buffers it shares memory with) and the predicted peak (arena + inputs + "
          "parameters, gradients, velocities), then exit 0 without training.");
// ---- data -------------------------------------------------------------------------------
ABSL_FLAG(std::string, data, "synthetic",
          "Training data: 'synthetic' (generated, learnable, no files needed) or a shard "
          "directory written by make_shards.");
ABSL_FLAG(std::string, val_data, "",
          "Validation data: a shard directory, or 'synthetic' (the generator's held-out split). "
          "Empty: no evaluation.");
ABSL_FLAG(int64_t, synthetic_size, 8192,
          Help("synthetic_size", "Images in the synthetic training set."));
ABSL_FLAG(int, crop, 0,
          Help("crop",
               "Random crop side for training (centre crop for evaluation); 0: the whole "
               "image. AlexNet: 224 from 256."));
ABSL_FLAG(int, pad, 0,
          Help("pad",
               "Training: pad every side by P mean-valued pixels before the random crop "
               "(CIFAR: --pad=4 with 32x32 crops); evaluation is not padded."));
ABSL_FLAG(bool, mirror, false, "Random horizontal mirroring in training.");
ABSL_FLAG(colonnade::data::MeanMode, mean, colonnade::data::MeanMode::kImage,
          "Mean subtraction: image (the dataset's mean image), channel (per-channel mean), none.");
ABSL_FLAG(double, lighting, 0.0,
          Help("lighting", "AlexNet's PCA lighting noise sigma (the paper: 0.1); 0: off."));
ABSL_FLAG(int, data_threads, 0,
          Help("data_threads",
               "Reader/augmentation threads per rank; 0: automatic (CPU runs: min(4, cores "
               "per rank), the rest compute the step; GPU runs: every core of the rank's "
               "share)."));
ABSL_FLAG(colonnade::GpuAugment, gpu_augment, colonnade::GpuAugment::kAuto,
          "Where a CUDA run's training batches are cropped, mirrored, lit and normalised: on "
          "(the host sends uint8 images, a quarter of the bytes, and the GPU augments them; "
          "--data=synthetic is then generated on the GPU too), off (the host writes the float "
          "batch), or auto (on for CUDA runs). The batches are the same bit for bit; CPU runs "
          "and evaluation use the host path, except the views of --eval_views=10, cut on the "
          "GPU unless this is off (docs/DATA.md, 'The GPU feed').");
ABSL_FLAG(colonnade::JpegDecoderChoice, jpeg_decoder, colonnade::JpegDecoderChoice::kAuto,
          "Who decodes JPEG training shards of a CUDA run whose GPU augments: host (the data "
          "threads, libjpeg: the batches are bitwise the CPU pipeline's), nvjpeg (the GPU, "
          "with nvJPEG's hardware decoder where the GPU has one: the host only reads the "
          "compressed bytes; pixels may differ from libjpeg's by a few levels, so results "
          "are not bitwise the host decoder's; needs a build with nvJPEG), or auto (nvjpeg when "
          "the build has it and --data_threads resolves to 4 or fewer, else host: the faster "
          "of the two in each case on the measured H200, docs/DATA.md). Evaluation decodes "
          "on the host.");
ABSL_FLAG(colonnade::EvalViews, eval_views, colonnade::EvalViews::kOne,
          "How evaluation (--val_data during training, --mode=eval, --mode=predict) scores "
          "each image: 1 (the centre crop) or 10 (AlexNet's test: the centre and four corner "
          "crops of the full image and their mirrors, the ten softmax outputs averaged; "
          "top-1/top-5 rank the average, the loss is the cross-entropy of the average, "
          "--predictions holds its log). The views' side is the model's input side (--crop, "
          "else the image size) and must fit the validation images. On a CUDA run the views "
          "are cut on the GPU (docs/DATA.md, 'Ten crops').");
ABSL_FLAG(colonnade::CudaGraphs, cuda_graphs, colonnade::CudaGraphs::kAuto,
          "Whether a CUDA run's training step (forward, backward, optimizer) is captured once "
          "as a CUDA graph and replayed every step: the same results bit for bit, one launch "
          "per step instead of hundreds (small nets on a fast GPU are bound by the host's "
          "launch rate). auto: on for a CUDA run of one rank; on: the same, and an error "
          "with more ranks (their gradient sync waits on the host inside the step); off: "
          "never. CPU runs ignore it; the banner says whether graphs are used "
          "(docs/OPERATIONS.md, 'CUDA graphs').");
// ---- optimisation -----------------------------------------------------------------------
ABSL_FLAG(int64_t, batch_size, 0,
          Help("batch_size",
               "GLOBAL batch size, split evenly over the data-parallel replicas; 0: the "
               "model's recipe (128)."));
ABSL_FLAG(int64_t, steps, 0, Help("steps", "Training steps; 0: use --epochs."));
ABSL_FLAG(double, epochs, 0,
          Help("epochs",
               "Training epochs when --steps is 0 (0: one epoch). The run must come to at most "
               "1e12 steps."));
ABSL_FLAG(double, lr, -1, Help("lr", "Base learning rate."));
ABSL_FLAG(std::string, lr_schedule, "",
          "constant | step:E | multistep:E1,E2,... | cosine, optionally +warmup:W (epochs; "
          "the lr rises linearly from 0, so the first step's lr is 0). Empty: the model's "
          "recipe.");
ABSL_FLAG(double, momentum, -1, Help("momentum", "SGD momentum (the recipes: 0.9)."));
ABSL_FLAG(double, weight_decay, -1, Help("weight_decay", "L2 weight decay."));
ABSL_FLAG(std::string, weight_decay_on, "",
          "Which parameters weight decay applies to: 'weights' (conv and fc weights only, not "
          "biases or batch-norm gamma/beta: the cuda-convnet/Caffe rule, every recipe's) or "
          "'all' (every learnable parameter, as PyTorch's SGD(model.parameters(), "
          "weight_decay=...)). Empty: the model's recipe.");
ABSL_FLAG(std::string, precision, "auto",
          "Arithmetic of convolutions and fully connected products (docs/PRECISION.md): "
          "'fp32' (strict FP32, bitwise reproducible), 'tf32' or 'bf16' (tensor cores, FP32 "
          "accumulation; --device=cuda only), or 'auto' (the default): bf16 on a CUDA "
          "device, where it trains to FP32's accuracy 2.3-5.9x faster (H200), fp32 on the CPU. "
          "Use --precision=fp32 to reproduce FP32 results bit for bit. Weights, momentum "
          "and checkpoints stay FP32 in every mode (activations: --bf16_activations), so a "
          "run may resume in another precision.");
ABSL_FLAG(bool, bf16_activations, true,
          "In bf16 precision (--precision=bf16, or auto on a GPU): store the activations and "
          "activation gradients of every layer but the classifier's (fully connected, and the "
          "dropout between them) and the within-map LRN in bf16, halving their memory and "
          "traffic; the inputs, logits, loss, weights, momentum and checkpoints stay FP32 "
          "(docs/PRECISION.md, 'bf16 activation storage'). On by default: it met every "
          "training-quality bar and trains ResNet-50 1.35x faster on an H200. "
          "--nobf16_activations keeps them FP32; no effect in fp32 or tf32, where giving "
          "--bf16_activations is an error.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of every random draw (init, data order, augmentation, dropout). The same seed "
          "and global batch give the same run for any (dp, mp) layout.");
// ---- output -----------------------------------------------------------------------------
ABSL_FLAG(int, log_every, 10,
          Help("log_every",
               "Print a progress line every N steps. The loss and accuracy stay on the device "
               "between lines (one small read per line); a loss that turns non-finite is "
               "named at its own step and the run stops at the next line."));
ABSL_FLAG(int64_t, profile_steps, 0,
          Help("profile_steps",
               "Time N training steps after two warm-up steps, phase by phase (batch wait, "
               "batch to device, forward, backward, gradient sync wait, optimizer, results; "
               "a graphed step is one row; device time from CUDA events), and print the "
               "table once they ran. The "
               "profiled steps wait for the device at their end; results are unchanged. "
               "0: off."));
ABSL_FLAG(int64_t, eval_every, 0,
          Help("eval_every", "Evaluate on --val_data every N steps; 0: only at the end."));
ABSL_FLAG(std::string, metrics_file, "",
          "Append JSON lines (train and eval records) to this file; plot with "
          "scripts/plot_metrics.py. An HDF5 file is refused; a failed write stops the trainer "
          "(exit 1).");

ABSL_FLAG(std::string, rank_log_dir, "",
          "Directory (must exist) where every rank appends its own progress lines to "
          "rank-NNNNN.log: local img/s, data-wait and comm-wait, to find a slow rank.");
// ---- checkpoints and modes ---------------------------------------------------------------
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Directory of HDF5 checkpoints (ckpt-<step>.h5, docs/CHECKPOINTS.md). Written at the "
          "end, every --checkpoint_every steps / --checkpoint_secs seconds, and on SIGTERM, "
          "SIGUSR1 or SIGINT (then the trainer exits 75; before training has started such a "
          "signal ends it at once, also with 75). Empty: no checkpoints.");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          Help("checkpoint_every", "Checkpoint every N steps; 0: off."));
ABSL_FLAG(double, checkpoint_secs, 0,
          Help("checkpoint_secs", "Checkpoint every T seconds of training; 0: off."));
ABSL_FLAG(int, keep_checkpoints, 3,
          Help("keep_checkpoints", "Keep the newest K checkpoints; 0 keeps all."));
ABSL_FLAG(double, checkpoint_lock_wait_s, 120,
          Help("checkpoint_lock_wait_s",
               "One job at a time writes to a --checkpoint_dir (a lock file, ckpt.lock). When "
               "another job holds it (a requeued job started while the old one finishes), wait "
               "up to this many seconds, then exit 4 naming the holder."));
ABSL_FLAG(std::string, resume, "auto",
          "auto: continue from the newest valid checkpoint in --checkpoint_dir (skipping "
          "partial or corrupt ones), or start fresh if there is none; none: start fresh; or the "
          "path of a checkpoint. Resuming under another (dp, mp) layout works.");
ABSL_FLAG(colonnade::RunMode, mode, colonnade::RunMode::kTrain,
          "train; eval (top-1/top-5 error of a checkpoint on --val_data); predict (also write "
          "the logits to --predictions).");
ABSL_FLAG(std::string, predictions, "",
          "With --mode=predict: HDF5 file to write, /logits [N][classes] and /labels [N] "
          "(with --eval_views=10, /logits holds the log of the ten views' mean probabilities). "
          "An existing file is refused unless --overwrite.");
ABSL_FLAG(bool, overwrite, false,
          "With --mode=predict: replace an existing --predictions file. Even then a "
          "checkpoint, a dataset or shard file (any HDF5 file but an earlier predictions "
          "file), a symbolic link or a non-regular file is never replaced.");

int main(int argc, char** argv) {
  if (absl::Status s = colonnade::InitMpi(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
    return colonnade::kExitError;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  const colonnade::Cli cli = {
      "trainer", "src/apps/trainer",
      absl::StrCat(
          "trains a convolutional network.\n\n"
          "  trainer --model=cifar10-80sec --data=synthetic --device=cpu --steps=200\n"
          "  mpirun -np 8 trainer --model=alexnet --mp=2 --data=/scratch/imagenet-shards\n\n"
          "Known models: ",
          colonnade::KnownModels(),
          ".\nExit codes: 0 done, 1 runtime error, 2 usage error, 3 loss became NaN/Inf, "
          "4 --checkpoint_dir locked by another job, 5 a rank stopped answering "
          "(--collective_timeout), 75 stopped by a signal (SIGTERM, "
          "SIGUSR1, SIGINT): after a checkpoint once training has started, at once before "
          "that; requeue and resume."),
      kRanges};
  // Every rank reads the same command line; rank 0 alone explains it.
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli, rank == 0)) {
    colonnade::FinalizeMpi();
    return *code;
  }

  colonnade::TrainConfig c;
  c.model = absl::GetFlag(FLAGS_model);
  c.input_size = absl::GetFlag(FLAGS_input_size);
  c.num_classes = absl::GetFlag(FLAGS_num_classes);
  c.columns = absl::GetFlag(FLAGS_columns);
  c.paper_init = absl::GetFlag(FLAGS_paper_init);
  c.device = absl::GetFlag(FLAGS_device);
  c.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  c.mp = absl::GetFlag(FLAGS_mp);
  c.comm = absl::GetFlag(FLAGS_comm);
  c.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  c.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  c.memory_plan = absl::GetFlag(FLAGS_memory_plan);
  c.recompute = absl::GetFlag(FLAGS_recompute);
  c.print_memory_plan = absl::GetFlag(FLAGS_print_memory_plan);
  c.data = absl::GetFlag(FLAGS_data);
  c.val_data = absl::GetFlag(FLAGS_val_data);
  c.synthetic_size = absl::GetFlag(FLAGS_synthetic_size);
  c.crop = absl::GetFlag(FLAGS_crop);
  c.pad = absl::GetFlag(FLAGS_pad);
  c.mirror = absl::GetFlag(FLAGS_mirror);
  c.mean = absl::GetFlag(FLAGS_mean);
  c.lighting = static_cast<float>(absl::GetFlag(FLAGS_lighting));
  c.data_threads = absl::GetFlag(FLAGS_data_threads);
  c.gpu_augment = absl::GetFlag(FLAGS_gpu_augment);
  c.jpeg_decoder = absl::GetFlag(FLAGS_jpeg_decoder);
  c.eval_views = absl::GetFlag(FLAGS_eval_views);
  c.cuda_graphs = absl::GetFlag(FLAGS_cuda_graphs);
  c.batch_size = absl::GetFlag(FLAGS_batch_size);
  c.steps = absl::GetFlag(FLAGS_steps);
  c.epochs = absl::GetFlag(FLAGS_epochs);
  c.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  c.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  c.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  c.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  c.weight_decay_on = absl::GetFlag(FLAGS_weight_decay_on);
  c.precision = absl::GetFlag(FLAGS_precision);
  c.bf16_activations = absl::GetFlag(FLAGS_bf16_activations);
  c.bf16_activations_given = colonnade::FlagGiven(argc, argv, "bf16_activations");
  c.seed = absl::GetFlag(FLAGS_seed);
  c.log_every = absl::GetFlag(FLAGS_log_every);
  c.profile_steps = absl::GetFlag(FLAGS_profile_steps);
  c.eval_every = absl::GetFlag(FLAGS_eval_every);
  c.metrics_file = absl::GetFlag(FLAGS_metrics_file);
  c.rank_log_dir = absl::GetFlag(FLAGS_rank_log_dir);

  c.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  c.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  c.checkpoint_secs = absl::GetFlag(FLAGS_checkpoint_secs);
  c.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  c.checkpoint_lock_wait_s = absl::GetFlag(FLAGS_checkpoint_lock_wait_s);
  c.resume = absl::GetFlag(FLAGS_resume);
  c.mode = absl::GetFlag(FLAGS_mode);
  c.predictions = absl::GetFlag(FLAGS_predictions);
  c.overwrite = absl::GetFlag(FLAGS_overwrite);
  for (int i = 1; i < argc; ++i) absl::StrAppend(&c.flags_text, argv[i], "\n");

  // Numeric flags were checked against kRanges and the closed sets of words (--mode,
  // --device, --comm, --mean) parsed into enums with the command line; --resume is open.
  if (c.resume.empty()) {
    if (rank == 0) colonnade::UsageError(cli, "--resume must be auto, none or a checkpoint path");
    colonnade::FinalizeMpi();
    return colonnade::kExitUsage;
  }

  int code = colonnade::RunTrainer(c);
  colonnade::FinalizeMpi();
  return code;
}
