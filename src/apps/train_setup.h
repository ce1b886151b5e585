// The training job's state and its set-up phases (the first half of `trainer`'s work; the
// step loop is train_loop.h, evaluation evaluation.h, prediction prediction.h, and
// train_session.cc runs them in order):
//   SetUpLayout     configuration every rank checks alike, the mesh
//   SetUpOptimizer  the recipe's optimiser settings unless the flags say otherwise
//   SetUpDevice     CPU threads, the device, the precision
//   OpenData        the training and validation datasets, the model's input and classes
//   BuildShard      communicators, this rank's model shard, gradient sync
//   Resume          the checkpoint directory's lock and the checkpoint to continue from
// A phase that ends the job returns its exit code (EndCode) after the error was printed;
// every rank returns the same code (errors are agreed, or end the job through MPI_Abort).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "apps/output_file.h"
#include "apps/train_config.h"
#include "checkpoint/checkpoint.h"
#include "core/models.h"
#include "core/net.h"
#include "core/optimizer.h"
#include "core/precision.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "parallel/communicator.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/model_split.h"

namespace colonnade {

using Clock = std::chrono::steady_clock;

// nullopt while the job goes on; otherwise the exit code it ends with, its error already
// printed.
using EndCode = std::optional<int>;

double Seconds(Clock::time_point a, Clock::time_point b);
// 75 s -> "1m15s", "2h05m"; "?" for a negative or non-finite time.
std::string FormatDuration(double s);
// 60965224 -> "60,965,224".
std::string WithCommas(int64_t v);

// Where this rank sits: the mesh plus shortcuts used everywhere.
struct Layout {
  int world_rank = 0, world_size = 1;
  int dp_rank = 0, dp_size = 1;
  int mp_rank = 0, mp_size = 1;
  int local_rank = 0, local_size = 1;
  MPI_Comm dp_comm = MPI_COMM_NULL;
};

// Sums `n` doubles over the data-parallel group (loss sums, correct counts); the mp ranks
// of a group hold identical copies of these.
void SumOverDp(const Layout& l, double* v, int n);
// An error every rank has detected identically (bad flags, impossible layout): rank 0
// prints it and every rank returns `code` without a collective. The outcome is decided:
// when the launcher then stops the ranks still finishing (mpirun does once the first
// exits), they end with this code and no "stopped by SIGTERM ... exit 75" note.
int AgreedError(const Layout& l, const absl::Status& s, int code);
// An error one rank may meet alone (unreadable shard, device failure): print it with the
// rank and abort the whole job so no rank waits forever in a collective.
[[noreturn]] void RankError(const Layout& l, const absl::Status& s);
// An error only world rank 0 can see (its own output files): every rank gets rank 0's
// status, so that the error is then agreed. Collective over the world.
absl::Status FromLead(const Layout& l, const absl::Status& lead_status);
// An error any rank may see alone before training (its own rank log): every rank gets the
// status of the lowest failing rank ("on rank R: ..."). Collective over the world.
absl::Status FromFirstFailing(const Layout& l, const absl::Status& mine);
// The rule for an existing --predictions file: refused, or with --overwrite replaced when
// it is an earlier predictions file or not HDF5 (output_file.h).
ExistingOutput PredictionsRule(const TrainConfig& cfg);

// What the set-up phases decide; every later phase reads it. Members are declared in the
// order they are made, so they are destroyed in reverse (the gradient sync and the shard
// before their communicators, those before the mesh).
struct Job {
  explicit Job(const TrainConfig& config) : cfg(config) {}
  Net& net() { return *shard->net; }
  const Net& net() const { return *shard->net; }

  const TrainConfig& cfg;
  Layout l;
  bool lead = false;     // world rank 0: prints, writes metrics and predictions
  bool training = true;  // --mode=train
  // SetUp.
  const ModelInfo* info = nullptr;
  int64_t global_batch = 0, local_batch = 0;
  int columns = 0;
  std::optional<Mesh> mesh;
  std::optional<LrSchedule> schedule;
  float base_lr = 0;    // after --lr_scaling
  std::string lr_rule;  // the base lr's rule for the banner: "0.1 x 1024/256 = 0.4"
  SgdOptions sgd;
  float label_smoothing = 0;  // --label_smoothing (training steps only)
  EmaOptions ema;             // --ema_decay, --ema_every
  Precision precision = Precision::kFP32;
  bool bf16_storage = false;  // --bf16_activations resolved against the precision
  int cores = 1;              // this process may use (a Slurm allocation or taskset may give fewer)
  Device device = Device::kCPU;
  // OpenData: the training data, or in eval and predict modes the validation set.
  std::unique_ptr<data::Dataset> data;
  std::unique_ptr<data::Dataset> val_data;  // --val_data while training
  ModelOptions mo;
  // BuildShard.
  std::unique_ptr<Communicator> mp_comm, dp_comm;
  std::optional<ModelShard> shard;
  std::unique_ptr<GradientSync> sync;
};

// What Resume found: where the run continues.
struct ResumePoint {
  std::unique_ptr<checkpoint::DirectoryLock> dir_lock;  // rank 0, while training
  int64_t start_step = 0;
  data::Cursor start_cursor;
  std::string from;  // the checkpoint's path; empty for a fresh start
  bool weights_only = false;
  // Training with --ema_decay from a checkpoint without a moving average: it restarts from
  // the loaded weights (banner note).
  bool ema_restarted = false;
  // --mode=eval|predict: the net holds the checkpoint's moving average (--eval_weights).
  bool eval_ema = false;
  std::vector<std::string> changed_flags;  // since the checkpoint, printed with the banner
};

// --mode=eval|predict, before the other phases: the model, input size, classes and
// columns of the checkpoint the run reads (--resume=PATH, or the newest valid one in
// --checkpoint_dir) become `cfg`'s; a flag given with another value is a usage error
// naming the flag. Leaves `cfg` as it is when there is no checkpoint to read (Resume then
// says so). Collective over the world.
EndCode ModelFromCheckpoint(const Layout& l, TrainConfig& cfg);

// The set-up phases, in the order train_session.cc runs them (see the top of this file).
EndCode SetUpLayout(Job& job);
EndCode SetUpOptimizer(Job& job);
// The part of SetUpOptimizer for Nesterov, LARS, label smoothing, the moving average and the
// lr scaling, with their usage errors.
EndCode SetUpOptimizerOptions(Job& job);
EndCode SetUpDevice(Job& job);
EndCode OpenData(Job& job);
EndCode BuildShard(Job& job);
// --print_memory_plan: this rank's plan and the predicted peak; returns the exit code (0).
int PrintMemoryPlan(Job& job);
// "activations+gradients ... predicted peak ..." for the banner.
std::string MemoryLine(const Net& net);
// Takes the checkpoint directory's lock (one job at a time per directory; rank 0 holds it
// until the job ends) and loads the checkpoint to continue from, if any.
EndCode Resume(Job& job, ResumePoint& at);

}  // namespace colonnade
