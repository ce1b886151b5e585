// trainer: trains, evaluates or predicts with a Colonnade model, on one process or many
// (mpirun / srun). Every flag is explained by --help; docs/OPERATIONS.md has the recipes.
#include <mpi.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "apps/exit_codes.h"
#include "apps/flag_check.h"
#include "apps/train_session.h"
#include "core/models.h"
#include "parallel/mesh.h"

// ---- model ------------------------------------------------------------------------------
ABSL_FLAG(std::string, model, "cifar10-80sec",
          "Model to train (the list is in the usage line above and docs/MODELS.md).");
ABSL_FLAG(int, input_size, 0,
          "Input image side in pixels. 0: the crop (--crop), else the data's image size. With "
          "--data=synthetic it also sets the generated image size (e.g. 67 for a small AlexNet).");
ABSL_FLAG(int, num_classes, 0, "Number of classes; 0: from the dataset.");
ABSL_FLAG(int, columns, 0,
          "Number of columns the split layers are divided into (AlexNet: 2). A different K is a "
          "different model; 0 keeps the model's own.");
ABSL_FLAG(bool, paper_init, false,
          "AlexNet only: the paper's initialisation (biases 1 in conv2/4/5 and fc6/7, fc6/7 "
          "weights N(0, 0.01)). Default: Caffe's replication (biases 0.1, fc6/7 N(0, 0.005)); "
          "at lr 0.01 the paper's blows up and then stays at chance (docs/MODELS.md).");
// ---- placement --------------------------------------------------------------------------
ABSL_FLAG(std::string, device, "auto",
          "cpu, cuda, or auto (the GPU of this rank's local index when one is visible).");
ABSL_FLAG(int, cpu_threads, 0, "Threads for CPU ops per rank; 0: cores / ranks on the node.");
ABSL_FLAG(int, mp, 1,
          "Model-parallel ranks per group (must divide the world size and the columns); the "
          "rest of the world is data-parallel: dp = world / mp.");
ABSL_FLAG(std::string, comm, "auto",
          "Collective backend: nccl (GPUs, one rank per GPU), mpi (host memory; required when "
          "several ranks share a GPU), or auto (nccl on GPUs when built with it, else mpi).");
ABSL_FLAG(double, bucket_mb, 25.0,
          "Gradient all-reduce bucket size in MiB; buckets launch during backward as soon as "
          "they are complete.");
// ---- data -------------------------------------------------------------------------------
ABSL_FLAG(std::string, data, "synthetic",
          "Training data: 'synthetic' (generated, learnable, no files needed) or a shard "
          "directory written by make_shards.");
ABSL_FLAG(std::string, val_data, "",
          "Validation data: a shard directory, or 'synthetic' (the generator's held-out split). "
          "Empty: no evaluation.");
ABSL_FLAG(int64_t, synthetic_size, 8192, "Images in the synthetic training set.");
ABSL_FLAG(int, crop, 0,
          "Random crop side for training (centre crop for evaluation); 0: the whole image. "
          "AlexNet: 224 from 256.");
ABSL_FLAG(int, pad, 0,
          "Training: pad every side by P mean-valued pixels before the random crop (CIFAR: "
          "--pad=4 with 32x32 crops); evaluation is not padded.");
ABSL_FLAG(bool, mirror, false, "Random horizontal mirroring in training.");
ABSL_FLAG(std::string, mean, "image",
          "Mean subtraction: image (the dataset's mean image), channel (per-channel mean), none.");
ABSL_FLAG(double, lighting, 0.0, "AlexNet's PCA lighting noise sigma (the paper: 0.1); 0: off.");
ABSL_FLAG(int, data_threads, 0, "Reader/augmentation threads per rank; 0: automatic.");
// ---- optimisation -----------------------------------------------------------------------
ABSL_FLAG(int64_t, batch_size, 0,
          "GLOBAL batch size, split evenly over the data-parallel replicas; 0: the model's "
          "recipe (128).");
ABSL_FLAG(int64_t, steps, 0, "Training steps; 0: use --epochs.");
ABSL_FLAG(double, epochs, 0, "Training epochs when --steps is 0 (default 1).");
ABSL_FLAG(double, lr, -1, "Base learning rate; negative: the model's recipe.");
ABSL_FLAG(std::string, lr_schedule, "",
          "constant | step:E | multistep:E1,E2,... | cosine, optionally +warmup:W (epochs). "
          "Empty: the model's recipe.");
ABSL_FLAG(double, momentum, -1, "SGD momentum; negative: the recipe's (0.9).");
ABSL_FLAG(double, weight_decay, -1, "L2 weight decay; negative: the recipe's.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed of every random draw (init, data order, augmentation, dropout). The same seed "
          "and global batch give the same run for any (dp, mp) layout.");
// ---- output -----------------------------------------------------------------------------
ABSL_FLAG(int, log_every, 10, "Print a progress line every N steps.");
ABSL_FLAG(int64_t, eval_every, 0, "Evaluate on --val_data every N steps; 0: only at the end.");
ABSL_FLAG(std::string, metrics_file, "",
          "Append JSON lines (train and eval records) to this file; plot with "
          "scripts/plot_metrics.py.");

ABSL_FLAG(std::string, rank_log_dir, "",
          "Directory (must exist) where every rank appends its own progress lines to "
          "rank-NNNNN.log: local img/s, data-wait and comm-wait, to find a slow rank.");
// ---- checkpoints and modes ---------------------------------------------------------------
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Directory of HDF5 checkpoints (ckpt-<step>.h5, docs/CHECKPOINTS.md). Written at the "
          "end, every --checkpoint_every steps / --checkpoint_secs seconds, and on SIGTERM, "
          "SIGUSR1 or SIGINT (then the trainer exits 75). Empty: no checkpoints.");
ABSL_FLAG(int64_t, checkpoint_every, 0, "Checkpoint every N steps; 0: off.");
ABSL_FLAG(double, checkpoint_secs, 0, "Checkpoint every T seconds of training; 0: off.");
ABSL_FLAG(int, keep_checkpoints, 3, "Keep the newest K checkpoints; 0 keeps all.");
ABSL_FLAG(double, checkpoint_lock_wait_s, 120,
          "One job at a time writes to a --checkpoint_dir (a lock file, ckpt.lock). When another "
          "job holds it (a requeued job started while the old one finishes), wait up to this "
          "many seconds, then exit 4 naming the holder.");
ABSL_FLAG(std::string, resume, "auto",
          "auto: continue from the newest valid checkpoint in --checkpoint_dir (skipping "
          "partial or corrupt ones), or start fresh if there is none; none: start fresh; or the "
          "path of a checkpoint. Resuming under another (dp, mp) layout works.");
ABSL_FLAG(std::string, mode, "train",
          "train; eval (top-1/top-5 error of a checkpoint on --val_data); predict (also write "
          "the logits to --predictions).");
ABSL_FLAG(std::string, predictions, "",
          "With --mode=predict: HDF5 file to write, /logits [N][classes] and /labels [N].");

int main(int argc, char** argv) {
  if (absl::Status s = colonnade::InitMpi(&argc, &argv); !s.ok()) {
    std::fprintf(stderr, "trainer: error: %s\n", std::string(s.message()).c_str());
    return colonnade::kExitError;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);

  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "apps/trainer.cc");
  };
  // Show "src/apps/trainer.cc", not the build machine's absolute path.
  usage.normalize_filename = [](absl::string_view f) {
    size_t at = f.rfind("src/apps/");
    return std::string(at == absl::string_view::npos ? f : f.substr(at));
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(absl::StrCat(
      "trains a convolutional network.\n\n"
      "  trainer --model=cifar10-80sec --data=synthetic --device=cpu --steps=200\n"
      "  mpirun -np 8 trainer --model=alexnet --mp=2 --data=/scratch/imagenet-shards\n\n"
      "Known models: ",
      colonnade::KnownModels(),
      ".\nExit codes: 0 done, 1 runtime error, 2 usage error, 3 loss became NaN/Inf, "
      "4 --checkpoint_dir locked by another job, 75 stopped by a signal after a checkpoint "
      "(requeue)."));

  if (colonnade::WantsHelp(argc, argv, "src/apps/trainer", rank == 0)) {
    colonnade::FinalizeMpi();
    return colonnade::kExitOk;
  }
  if (!colonnade::ParseFlagsOrExplain(argc, argv, "trainer", rank == 0)) {
    colonnade::FinalizeMpi();
    return colonnade::kExitUsage;
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
  c.data = absl::GetFlag(FLAGS_data);
  c.val_data = absl::GetFlag(FLAGS_val_data);
  c.synthetic_size = absl::GetFlag(FLAGS_synthetic_size);
  c.crop = absl::GetFlag(FLAGS_crop);
  c.pad = absl::GetFlag(FLAGS_pad);
  c.mirror = absl::GetFlag(FLAGS_mirror);
  c.mean = absl::GetFlag(FLAGS_mean);
  c.lighting = static_cast<float>(absl::GetFlag(FLAGS_lighting));
  c.data_threads = absl::GetFlag(FLAGS_data_threads);
  c.batch_size = absl::GetFlag(FLAGS_batch_size);
  c.steps = absl::GetFlag(FLAGS_steps);
  c.epochs = absl::GetFlag(FLAGS_epochs);
  c.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  c.lr_schedule = absl::GetFlag(FLAGS_lr_schedule);
  c.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
  c.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  c.seed = absl::GetFlag(FLAGS_seed);
  c.log_every = absl::GetFlag(FLAGS_log_every);
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
  for (int i = 1; i < argc; ++i) absl::StrAppend(&c.flags_text, argv[i], "\n");

  std::string bad;
  if (c.mode != "train" && c.mode != "eval" && c.mode != "predict")
    bad = "--mode must be train, eval or predict";
  if (c.checkpoint_every < 0 || c.checkpoint_secs < 0 || c.keep_checkpoints < 0)
    bad = "--checkpoint_every, --checkpoint_secs and --keep_checkpoints must not be negative";
  if (c.resume.empty()) bad = "--resume must be auto, none or a checkpoint path";
  if (!(c.checkpoint_lock_wait_s >= 0 && c.checkpoint_lock_wait_s <= 86400))
    bad = "--checkpoint_lock_wait_s must be a number of seconds from 0 to 86400";
  if (c.batch_size < 0) bad = "--batch_size must be positive";
  if (c.steps < 0) bad = "--steps must not be negative";
  if (c.epochs < 0) bad = "--epochs must not be negative";
  if (c.mp < 1) bad = "--mp must be at least 1";
  if (c.log_every < 1) bad = "--log_every must be at least 1";
  if (c.input_size < 0 || c.num_classes < 0 || c.columns < 0 || c.crop < 0 || c.pad < 0)
    bad = "--input_size, --num_classes, --columns, --crop and --pad must not be negative";
  if (c.bucket_mb <= 0) bad = "--bucket_mb must be positive";
  if (c.synthetic_size < 1) bad = "--synthetic_size must be positive";
  if (c.mean != "image" && c.mean != "channel" && c.mean != "none")
    bad = "--mean must be image, channel or none";
  if (c.comm != "auto" && c.comm != "mpi" && c.comm != "nccl") bad = "--comm must be auto, nccl or mpi";
  if (!bad.empty()) {
    if (rank == 0) std::fprintf(stderr, "trainer: error: %s\n", bad.c_str());
    colonnade::FinalizeMpi();
    return colonnade::kExitUsage;
  }

  int code = colonnade::RunTrainer(c);
  colonnade::FinalizeMpi();
  return code;
}
