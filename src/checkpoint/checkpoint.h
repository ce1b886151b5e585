// HDF5 checkpoints: the whole training state in one file that h5py and every framework can
// read, written atomically, with a checksum on every byte that matters, and found again
// after a crash or preemption. The layout, the guarantees and the resume rules are in
// docs/CHECKPOINTS.md; DESIGN.md ("Checkpoint layout") is the contract.
//
//   /                         attributes: format, format_version, step, epoch, cursor_epoch,
//                             cursor_position, seed, rng, model, columns, input_size,
//                             num_classes, input_channels, flags, num_params,
//                             has_optimizer_state
//   /params/<layer>/<param>   float32, full (unsharded) canonical shape; attribute learnable
//   /optimizer/<layer>/<param>/velocity   float32, same shape (learnable params only)
//   /ema/<layer>/<param>      float32, same shape, every param (only with the root attribute
//                             has_ema = 1: the weights' moving average, --ema_decay)
//
// Parameters are stored unsharded, so a checkpoint written under one (dp, mp) layout
// resumes under any other. One rank writes; ranks that hold shards gather them first (the
// parallel module's helpers), and LoadIntoParam/LoadIntoNet cut each rank's shard back out
// of the full tensor on resume.
//
// Randomness needs no saved generator state: every random stream in Colonnade is a pure
// function of (seed, purpose, step, index) (core/philox.h), so `seed` and `step` ARE the
// complete RNG state, and the data order is (seed, cursor).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/layer.h"
#include "core/net.h"

namespace colonnade::checkpoint {

// Version of the layout above. Read() refuses other versions with a message.
inline constexpr int64_t kFormatVersion = 1;
// Value of the root attribute "format".
inline constexpr char kFormatName[] = "colonnade.checkpoint";

// Everything besides the tensors that an exact resume needs.
struct TrainState {
  int64_t step = 0;          // optimizer steps completed; the file is ckpt-<step>.h5
  int64_t epoch = 0;         // epochs completed (for humans and schedules)
  int64_t cursor_epoch = 0;  // data::Cursor of the next batch to draw
  int64_t cursor_position = 0;
  uint64_t seed = 0;  // with `step`, the whole RNG state (see above)
  std::string model;  // model zoo name, e.g. "alexnet"
  int columns = 0;
  int input_size = 0;
  int num_classes = 0;
  int input_channels = 3;
  std::string flags;  // the training flags, one "--flag=value" per line (free text)
};

// One parameter as a full, canonical host tensor: name "<layer>/<param>" ("conv1/weight"),
// dims outermost first, values row-major. `velocity` is the optimizer's velocity of the
// same size, or empty (a weights-only checkpoint; then it must be empty for every entry).
// The velocity has the learning rate inside (CpuOps::SgdUpdate, AlexNet's convention:
// v = momentum * v - lr * (grad + wd * w), w += v), so PyTorch's SGD momentum buffer is
// -v / lr; the conversion both ways and what a changed lr does on resume are in
// docs/CHECKPOINTS.md, section 8.
struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value;
  std::vector<float> velocity;
  // The exponential moving average of the value (Param::ema), or empty; all entries have it
  // or none (has_ema).
  std::vector<float> ema;
  bool learnable = true;
};

// A checkpoint read back and fully validated.
struct Checkpoint {
  std::string path;
  int64_t format_version = 0;
  TrainState state;
  // True when every learnable entry carries its velocity (what an exact resume needs).
  bool has_optimizer_state = false;
  // True when every entry carries its moving average (/ema; files without the attribute
  // has_ema, written before it existed, have none).
  bool has_ema = false;
  std::vector<TensorEntry> tensors;  // in the order they were written (the Net's order)

  // The entry named `name` ("conv1/weight"), or nullptr.
  const TensorEntry* Find(const std::string& name) const;
};

// "ckpt-000000100.h5" (at least 9 digits; more once step >= 10^9).
std::string CheckpointFileName(int64_t step);
// The step of a file name "ckpt-<digits>.h5" (no directory), or -1 for any other name.
int64_t ParseCheckpointStep(const std::string& file_name);

// "<host>-<pid>" of this process (characters other than letters, digits, '.', '_' and
// '-' replaced by '_'): names this process's temporary files, and tells a lock's holder.
std::string ProcessTag();

// The exclusive lock of a checkpoint directory: flock(2) on <dir>/ckpt.lock, held for the
// life of this object by the one process of a job that writes checkpoints there (the
// trainer's rank 0, from before it chooses a checkpoint to resume until it exits). A
// second job on the same directory (a requeued job started while the old one still
// runs, or two jobs given one --checkpoint_dir by mistake) waits for it, or gives up.
// The lock file records its holder ("host H pid P [slurm job J] since T") for the
// message; it is never deleted (deleting lock files races with their users). The kernel
// drops the lock when the holder exits, however it exits. The holder line is written
// over the file's old contents, so only a file that is certainly a lock file is opened
// for writing: never through a symbolic link (O_NOFOLLOW), and only a regular file with
// one link whose contents are empty or a holder line (a symlinked ckpt.lock once
// truncated the checkpoint it pointed to).
class DirectoryLock {
 public:
  static constexpr char kFileName[] = "ckpt.lock";

  // Creates `dir` if needed and takes its lock, retrying for up to `wait_secs` seconds
  // (0: one try). Errors: Unavailable when another process still holds it after the
  // wait, naming the directory and the holder; Cancelled when a stop signal
  // (signals.h) arrives while waiting; PermissionDenied when the directory or the lock
  // file cannot be created; FailedPrecondition when `dir` is not a directory, or
  // <dir>/ckpt.lock is not a lock file (a symbolic link, not a regular file, a file with
  // other hard links, or other contents), naming it, why, and the fix (remove it): nothing
  // is written to it. On a file system without locks
  // (flock fails with ENOLCK, ENOSYS, EOPNOTSUPP or EINVAL) it returns a lock that is not
  // held() and adds a warning: the directory then has no protection against a second job.
  static absl::StatusOr<std::unique_ptr<DirectoryLock>> Acquire(const std::string& dir,
                                                                double wait_secs,
                                                                std::vector<std::string>* warnings);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& dir() const { return dir_; }
  // This process's ProcessTag(), which names its temporary files.
  const std::string& owner() const { return owner_; }
  bool held() const { return fd_ >= 0; }

 private:
  DirectoryLock() = default;
  std::string dir_, owner_;
  int fd_ = -1;
};

// Writes `entries` and `state` to <dir>/ckpt-<state.step>.h5: first to a temporary file
// in `dir` (ckpt-<step>.h5.<host>-<pid>.tmp, see ProcessTag), then an HDF5 flush + close,
// fsync of the file, rename over the final name, fsync of the directory. A crash at any
// point leaves either the old set of checkpoints or the old set plus the complete new one.
// Creates `dir` if needed.
//
// Refuses (InvalidArgument, nothing written) a state that Read would refuse (an attribute
// out of its range, a model name that is not a zoo name), entries that are malformed (bad
// or duplicate names, a shape that does not match the value count, velocities on some but
// not all learnable entries) or hold a NaN or Inf in a value or velocity: a checkpoint
// never stores a diverged model.
//
// After the rename, deletes the oldest checkpoints so that `keep_last` remain among those
// with step <= state.step (the new one always counts and is never deleted; checkpoints
// with a larger step, from an abandoned run in the same directory, are never touched).
// keep_last <= 0 keeps all. Then removes leftover temporary files (ckpt-*.tmp): always
// this process's own (same ProcessTag), and those of other processes only when `lock`
// is the held lock of `dir` -- the lock proves that no other writer is active there, so
// their temporaries are leftovers of a dead holder; without it they may be another
// job's write in progress and are left alone. Failures to delete old files are
// reported in `warnings` (if not null), not as errors. Call from one rank only.
absl::Status Write(const std::string& dir, const TrainState& state,
                   const std::vector<TensorEntry>& entries, int keep_last,
                   std::string* written_path, std::vector<std::string>* warnings = nullptr,
                   const DirectoryLock* lock = nullptr);

// Expected full tensors of a model: (name, full canonical shape).
using ExpectedTensors = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// The model a checkpoint is read for (ExpectedModelOf(net)): its zoo name and tensors,
// and what the trainer adds: the model's input size and the size of the training data.
struct ExpectedModel {
  std::string model;
  ExpectedTensors tensors;
  // The side of the model's input; the attribute input_size must equal it (a model
  // mismatch: a net with global pooling has the same tensors at any input size). 0: not
  // checked.
  int input_size = 0;
  // Images in the training data. The data cursor (cursor_position) may point at any of
  // them or at the end (an epoch just finished); beyond it the file is corrupt, skipped
  // by LoadLatestValid like any corrupt file. -1: unknown, not checked (evaluation).
  int64_t dataset_size = -1;
};

// Reads and validates a whole checkpoint: the format name and version, every attribute
// (present, of the right type, in its range: docs/CHECKPOINTS.md, section 2; the string
// attributes against their checksum), every dataset (float32, chunked with a Fletcher-32
// filter and no other filter, every chunk present, readable with its checksum verified,
// finite), the optimizer group's structure, and the file name's step against the stored
// step. Errors name the file and the field: NotFound for a missing file, DataLoss for a
// corrupt or truncated one, FailedPrecondition for another format version.
//
// Sizes are checked before any memory is allocated for a tensor (docs/CHECKPOINTS.md,
// "Limits"): a dataset's element count is computed with overflow checks, and since
// tensors are stored uncompressed, the tensors of a file together can claim no more
// bytes than the file has (DataLoss otherwise), which bounds the memory a crafted file
// can make the reader take by the file's size. With `expected`, the model name, the
// input size and every tensor's name and shape must also be the model's (CheckCompatible's
// rules and messages, FailedPrecondition) before that tensor's data is read, and the data
// cursor must lie within expected->dataset_size (DataLoss otherwise).
absl::StatusOr<Checkpoint> Read(const std::string& path, const ExpectedModel* expected = nullptr);

// The validated root attributes of the checkpoint at `path` (its format, version and every
// attribute present, of the right type and in range, as Read checks them) without reading
// a tensor: the model, input size, classes and columns it was trained with, for a run
// that builds its model from the checkpoint (trainer --mode=eval|predict). Same errors as
// Read.
absl::StatusOr<TrainState> ReadState(const std::string& path);

// The newest valid checkpoint in `dir`: candidates are ckpt-<step>.h5 files, newest step
// first; each is read and validated in full (Read), and the first that passes wins.
// Every skipped corrupt file and every leftover partial file (*.tmp, an interrupted
// write) adds a warning naming it. NotFound when `dir` has no checkpoint file at all
// (start from scratch); DataLoss when it has some but none is valid (do not silently
// start over: the operator decides). With `expected`, a file that is sound but of
// another model or shape is not skipped: its error (FailedPrecondition) is returned, as
// every checkpoint of the directory would be refused alike.
absl::StatusOr<Checkpoint> LoadLatestValid(const std::string& dir,
                                           std::vector<std::string>* warnings,
                                           const ExpectedModel* expected = nullptr);
// The same, returning only the path (the file is still read in full to validate it).
absl::StatusOr<std::string> FindLatestValid(const std::string& dir,
                                            std::vector<std::string>* warnings,
                                            const ExpectedModel* expected = nullptr);

// Refuses a checkpoint of another model, or whose tensors differ from `expected` in name
// or shape, naming the first mismatch, e.g.
//   "ckpt-000000100.h5: /params/fc8/weight has shape (10, 4096) but model alexnet expects
//    (1000, 4096)".
absl::Status CheckCompatible(const Checkpoint& ckpt, const ExpectedTensors& expected,
                             const std::string& model);

// ---- Net helpers (host copies; any device through Tensor::ToHost/CopyFromHost) ----------

// (name, full shape) of every parameter of `net`, sharded or not: what CheckCompatible
// expects.
ExpectedTensors ExpectedFromNet(const Net& net);
// The model name and ExpectedFromNet of `net`: what Read and LoadLatestValid check
// before they allocate a tensor (input_size and dataset_size are left unchecked: the
// caller knows them).
ExpectedModel ExpectedModelOf(const Net& net);
// The full host copy of `shard` (p.value or p.velocity) of parameter `p`.
using GatherFn =
    std::function<absl::StatusOr<std::vector<float>>(const Param& p, const Tensor& shard)>;
// An entry for every parameter of `net`, in the Net's order: full shape (Param::full_shape), the
// value and, for learnable parameters, the velocity, each made whole by `gather` (for a
// column-split Net the parallel module's GatherFullParam, a collective over the mp group:
// every rank of the group calls CollectFromNet alike). With `out` null the entries are
// gathered and dropped one by one (a rank that takes part in the gathers but does not
// write). FailedPrecondition for a Net not built, or a velocity of another size.
absl::Status CollectFromNet(const Net& net, const GatherFn& gather, std::vector<TensorEntry>* out);
// Copies a full tensor into `p`; when `p` is a shard (full_rows > 0) only its rows
// [shard_offset, shard_offset + dim 0) are copied, which is the whole resharding on
// resume (the column split shards along dim 0, and dim 0 is outermost). The velocity is
// loaded when the entry has one and `p` is learnable, else set to zero.
absl::Status LoadIntoParam(const TensorEntry& entry, Param& p);
// CheckCompatible against `net` (model name and every full shape), then LoadIntoParam
// for every parameter. Nothing is modified when the check fails.
absl::Status LoadIntoNet(const Checkpoint& ckpt, Net& net);

}  // namespace colonnade::checkpoint
