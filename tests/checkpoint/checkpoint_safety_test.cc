// What no input or second job may do to a checkpoint directory or its reader: the
// directory lock (one writer per directory, waits, holder named, released on death),
// concurrent writers that keep each other's temporaries, crafted shapes that once
// overflowed, aborted or took gigabytes before any check (each now a one-line DataLoss,
// or a model mismatch found before the data is read), and HDF5's own error printing.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint/signals.h"
#include "checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hdf5/hdf5.h"

namespace colonnade::checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace ::colonnade::checkpoint::testing;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ---- the directory lock --------------------------------------------------------------------

TEST(DirectoryLock, SecondHolderWaitsThenGivesUpNamingTheHolder) {
  TempDir dir;
  std::vector<std::string> warnings;
  absl::StatusOr<std::unique_ptr<DirectoryLock>> first =
      DirectoryLock::Acquire(dir / "ckpt", 0, &warnings);  // creates the directory
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE((*first)->held());
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ((*first)->owner(), ProcessTag());
  EXPECT_THAT(ReadBytes(dir / "ckpt/ckpt.lock"),
              AllOf(HasSubstr(absl::StrCat(" pid ", getpid(), " ")), HasSubstr(" since ")));

  // flock conflicts between two open files even in one process: the second is "another job".
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<DirectoryLock>> second =
      DirectoryLock::Acquire(dir / "ckpt", 0.5, &warnings);
  const double waited = SecondsSince(start);
  ASSERT_TRUE(absl::IsUnavailable(second.status())) << second.status();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 5.0);
  EXPECT_THAT(std::string(second.status().message()),
              AllOf(HasSubstr(dir / "ckpt/ckpt.lock"), HasSubstr("in use by another job"),
                    HasSubstr(absl::StrCat("pid ", getpid())), HasSubstr("after 0.5 s")));

  first->reset();  // released with the object
  second = DirectoryLock::Acquire(dir / "ckpt", 0, &warnings);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE((*second)->held());
}

TEST(DirectoryLock, WaitEndsWhenTheHolderReleases) {
  TempDir dir;
  auto first = DirectoryLock::Acquire(dir.path(), 0, nullptr);
  ASSERT_TRUE(first.ok());
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    first->reset();
  });
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<DirectoryLock>> second =
      DirectoryLock::Acquire(dir.path(), 30, nullptr);
  release.join();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_LT(SecondsSince(start), 10.0) << "waited for the whole timeout";
}

TEST(DirectoryLock, ReleasedWhenTheHolderIsKilled) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = DirectoryLock::Acquire(dir.path(), 0, nullptr);
    char c = lock.ok() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  auto busy = DirectoryLock::Acquire(dir.path(), 0, nullptr);
  ASSERT_TRUE(absl::IsUnavailable(busy.status())) << busy.status();
  EXPECT_THAT(std::string(busy.status().message()), HasSubstr(absl::StrCat("pid ", child)));
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto ours = DirectoryLock::Acquire(dir.path(), 5, nullptr);
  EXPECT_TRUE(ours.ok()) << ours.status();
  close(ready[0]);
  close(ready[1]);
}

TEST(DirectoryLock, StopSignalEndsTheWait) {
  TempDir dir;
  ASSERT_TRUE(InstallStopSignalHandlers().ok());
  ClearStopRequest();
  auto first = DirectoryLock::Acquire(dir.path(), 0, nullptr);
  ASSERT_TRUE(first.ok());
  std::thread signal([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(getpid(), SIGTERM);
  });
  const auto start = Clock::now();
  absl::StatusOr<std::unique_ptr<DirectoryLock>> second =
      DirectoryLock::Acquire(dir.path(), 60, nullptr);
  signal.join();
  EXPECT_TRUE(absl::IsCancelled(second.status())) << second.status();
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("stopped by SIGTERM"));
  EXPECT_LT(SecondsSince(start), 10.0);
  RestoreSignalHandlers();
  ClearStopRequest();
}

// The lock file is opened for writing and truncated: that must never happen to a file
// that is not a lock file this trainer made. Through a symbolic link `ckpt.lock` the
// trainer once truncated the link's target (a 1.17 MB checkpoint became 44 bytes; exit 0).
class ForeignLockFile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir(ckpt_dir().c_str(), 0755), 0);
    // A checkpoint elsewhere: what a link may point at.
    ASSERT_TRUE(Write(dir_ / "other", SmallState(5), SmallEntries(31), 0, &victim_).ok());
    victim_bytes_ = ReadBytes(victim_);
  }
  std::string ckpt_dir() const { return dir_ / "ckpt"; }
  std::string lock_path() const { return dir_ / "ckpt/ckpt.lock"; }
  // Acquire must refuse (FailedPrecondition: a path the user controls, exit 2 in the
  // trainer) naming the lock file, why, and the fix.
  void ExpectRefused(const std::string& why) {
    std::vector<std::string> warnings;
    absl::StatusOr<std::unique_ptr<DirectoryLock>> lock =
        DirectoryLock::Acquire(ckpt_dir(), 0, &warnings);
    EXPECT_FALSE(lock.ok()) << "took a lock through a file that " << why;
    EXPECT_TRUE(ReadBytes(victim_) == victim_bytes_) << "the file behind the lock changed";
    if (lock.ok()) return;
    EXPECT_TRUE(absl::IsFailedPrecondition(lock.status())) << lock.status();
    EXPECT_THAT(std::string(lock.status().message()),
                AllOf(HasSubstr(lock_path()), HasSubstr(why), HasSubstr("remove it")));
  }
  TempDir dir_;
  std::string victim_, victim_bytes_;
};

TEST_F(ForeignLockFile, ASymbolicLinkIsNotFollowed) {
  ASSERT_EQ(symlink(victim_.c_str(), lock_path().c_str()), 0);
  ExpectRefused("is a symbolic link");
  struct stat st;
  ASSERT_EQ(lstat(lock_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself is left for the user to inspect";
}

TEST_F(ForeignLockFile, ADanglingSymbolicLinkCreatesNothing) {
  const std::string target = dir_ / "elsewhere/new-file";
  ASSERT_EQ(mkdir((dir_ / "elsewhere").c_str(), 0755), 0);
  ASSERT_EQ(symlink(target.c_str(), lock_path().c_str()), 0);
  ExpectRefused("is a symbolic link");
  EXPECT_NE(access(target.c_str(), F_OK), 0) << "a file was created through the link";
}

TEST_F(ForeignLockFile, AHardLinkToAnotherFileIsNotTruncated) {
  ASSERT_EQ(link(victim_.c_str(), lock_path().c_str()), 0);
  ExpectRefused("has 2 hard links");
}

TEST_F(ForeignLockFile, ARegularFileThatIsNotALockFileIsNotTruncated) {
  // A copy of a checkpoint, and a text file: neither is a holder line we wrote.
  WriteBytes(lock_path(), victim_bytes_);
  ExpectRefused("is not a lock file");
  EXPECT_EQ(ReadBytes(lock_path()), victim_bytes_);
  WriteBytes(lock_path(), "my notes about this run\n");
  ExpectRefused("is not a lock file");
  EXPECT_EQ(ReadBytes(lock_path()), "my notes about this run\n");
}

TEST_F(ForeignLockFile, ADirectoryOrAFifoIsRefused) {
  ASSERT_EQ(mkdir(lock_path().c_str(), 0755), 0);
  ExpectRefused("is not a regular file");
  ASSERT_EQ(rmdir(lock_path().c_str()), 0);
  ASSERT_EQ(mkfifo(lock_path().c_str(), 0644), 0);
  ExpectRefused("is not a regular file");
}

TEST_F(ForeignLockFile, OurOwnLockFilesAreTaken) {
  // Empty (created, holder line not yet written), and the line of an earlier holder.
  WriteBytes(lock_path(), "");
  auto lock = DirectoryLock::Acquire(ckpt_dir(), 0, nullptr);
  ASSERT_TRUE(lock.ok()) << lock.status();
  lock->reset();
  WriteBytes(lock_path(), "host node07 pid 81234 slurm job 5678 since 2025-01-31T12:00:00Z\n");
  lock = DirectoryLock::Acquire(ckpt_dir(), 0, nullptr);
  ASSERT_TRUE(lock.ok()) << lock.status();
  EXPECT_THAT(ReadBytes(lock_path()), HasSubstr(absl::StrCat(" pid ", getpid(), " ")));
}

// Two processes writing checkpoints into one directory, neither holding the lock: each
// removes only its own temporaries, so neither loses a write in progress. (Before
// temporaries were told apart, each write's clean-up unlinked every ckpt-*.tmp, and the
// other writer's rename failed.)
TEST(CheckpointWrite, ConcurrentWritersKeepEachOthersTemporaries) {
  TempDir dir;
  std::vector<TensorEntry> big(1);
  big[0].name = "big/weight";
  big[0].shape = {2048, 2048};  // 16 MiB: a write lasts long enough to be overlapped
  big[0].value = RandomValues(2048 * 2048, 5);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    for (int64_t step = 1000; step < 1020; ++step) {
      if (!Write(dir.path(), SmallState(step), big, 0, nullptr).ok()) _exit(3);
    }
    _exit(0);
  }
  int failures = 0, writes = 0, status = 0;
  for (int64_t step = 1;; ++step) {
    std::string path;
    if (!Write(dir.path(), SmallState(step), SmallEntries(1), 0, &path).ok()) ++failures;
    ++writes;
    if (waitpid(child, &status, WNOHANG) == child) break;
  }
  EXPECT_EQ(failures, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the other writer lost a write in progress";
  EXPECT_GT(writes, 1);
}

// ---- crafted shapes ----------------------------------------------------------------------

// Replaces dataset `name` of a checkpoint by a float32 dataset of shape `dims`, chunked as
// `chunk` with Fletcher-32 (and deflate when asked), a learnable attribute, and data
// written into the first `write_chunks` chunks along dim 0 only.
void ReplaceDataset(const std::string& path, const std::string& name,
                    const std::vector<hsize_t>& dims, const std::vector<hsize_t>& chunk,
                    hsize_t write_rows, bool deflate = false) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, name.c_str(), H5P_DEFAULT), 0);
  hid_t sp = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  ASSERT_GE(H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()), 0);
  if (deflate) H5Pset_deflate(dcpl, 6);
  H5Pset_fletcher32(dcpl);
  hid_t d = H5Dcreate2(f, name.c_str(), H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  ASSERT_GE(d, 0);
  if (write_rows > 0) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    count[0] = write_rows;
    hsize_t n = 1;
    for (hsize_t x : count) n *= x;
    std::vector<float> v(n, 0.5f);
    hid_t mem = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, sp, H5P_DEFAULT, v.data()), 0);
    H5Sclose(mem);
  }
  hid_t asp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(d, "learnable", H5T_STD_I64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
  int64_t one = 1;
  H5Awrite(a, H5T_NATIVE_INT64, &one);
  H5Aclose(a);
  H5Sclose(asp);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);
}

class CraftedShape : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Write(dir_.path(), SmallState(5), SmallEntries(21), 3, &path_).ok());
  }
  // Read() of the file: must fail with DataLoss naming the file and `tensor`.
  std::string ExpectDataLoss(const std::string& tensor) {
    absl::StatusOr<Checkpoint> c = Read(path_);
    EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
    const std::string m(c.status().message());
    EXPECT_THAT(m, AllOf(HasSubstr(path_), HasSubstr(tensor)));
    return m;
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(CraftedShape, ElementCountThatOverflowsToZero) {
  // (2^32, 2^32): 2^64 elements, 0 in 64-bit arithmetic; once a segfault in H5Dread.
  ReplaceDataset(path_, "/params/fc/weight", {1ull << 32, 1ull << 32}, {1, 1024}, 0);
  EXPECT_THAT(ExpectDataLoss("/params/fc/weight"),
              HasSubstr("has shape (4294967296, 4294967296): its size overflows 64 bits"));
}

TEST_F(CraftedShape, HugeShapesClaimMoreThanTheFileHolds) {
  // 2^31 + 16 and 2^40 elements: once std::bad_alloc (abort); 2^28: 1 GiB taken before
  // any check. None is stored; the file is a few KiB.
  for (hsize_t n : {(1ull << 31) + 16, 1ull << 40, 1ull << 28}) {
    ReplaceDataset(path_, "/params/conv1/bias", {n}, {1 << 20}, 0);
    EXPECT_THAT(ExpectDataLoss("/params/conv1/bias"),
                AllOf(HasSubstr(absl::StrCat("has shape (", n, ",), ", n * 4, " bytes of float32")),
                      HasSubstr("but the file is")));
  }
}

TEST_F(CraftedShape, CheckedOnTheVelocityToo) {
  ReplaceDataset(path_, "/optimizer/fc/weight/velocity", {1ull << 32, 1ull << 32}, {1, 1024}, 0);
  EXPECT_THAT(ExpectDataLoss("/optimizer/fc/weight/velocity"), HasSubstr("overflows 64 bits"));
}

TEST_F(CraftedShape, ChunksNeverWrittenAreMissingData) {
  // The right shape, but only the first of its five chunks written: the rest would read
  // back as zeros without an error.
  ReplaceDataset(path_, "/params/fc/weight", {5, 36}, {1, 36}, 1);
  EXPECT_THAT(ExpectDataLoss("/params/fc/weight"), HasSubstr("stores 1 of its 5 chunks"));
}

TEST_F(CraftedShape, CompressionIsNotPartOfTheFormat) {
  // Compressed data could decompress to any size: the byte bound needs it uncompressed.
  ReplaceDataset(path_, "/params/fc/weight", {5, 36}, {5, 36}, 5, /*deflate=*/true);
  EXPECT_THAT(ExpectDataLoss("/params/fc/weight"), HasSubstr("filters besides Fletcher-32"));
}

TEST_F(CraftedShape, ModelShapesAreCheckedBeforeTheDataIsRead) {
  // A plausible, fully stored tensor of another shape whose data is also corrupt: read for
  // the model, the shape is refused first -- its data (and memory for it) never touched.
  ReplaceDataset(path_, "/params/fc/weight", {50, 36}, {50, 36}, 50);
  int64_t addr = 0, size = 0;
  FirstChunk(path_, "/params/fc/weight", &addr, &size);
  ASSERT_GT(addr, 0);
  FlipByte(path_, addr + 100);
  EXPECT_THAT(ExpectDataLoss("/params/fc/weight"), HasSubstr("Fletcher32"));

  ExpectedModel model{"tiny", {}};
  for (const TensorEntry& e : SmallEntries(21)) model.tensors.push_back({e.name, e.shape});
  absl::StatusOr<Checkpoint> c = Read(path_, &model);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("/params/fc/weight has shape (50, 36) but model tiny expects (5, 36)"));

  ExpectedModel other{"alexnet", model.tensors};
  c = Read(path_, &other);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("is of model tiny, not alexnet"));
}

TEST(CraftedShapeResume, AutoSkipsACraftedFileAndStopsAtAForeignModel) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(100), SmallEntries(100), 0, &path).ok());
  ASSERT_TRUE(Write(dir.path(), SmallState(200), SmallEntries(200), 0, &path).ok());
  ReplaceDataset(path, "/params/fc/weight", {1ull << 32, 1ull << 32}, {1, 1024}, 0);
  ExpectedModel model{"tiny", {}};
  for (const TensorEntry& e : SmallEntries(1)) model.tensors.push_back({e.name, e.shape});

  // Crafted = corrupt: skipped with a warning, the previous checkpoint is taken.
  std::vector<std::string> warnings;
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir.path(), &warnings, &model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state.step, 100);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("skipped: "), HasSubstr("ckpt-000000200.h5"),
                                 HasSubstr("overflows")));

  // Of another model (its first tensor, conv1/weight, has another shape): every file of
  // the directory would be refused alike, so the search stops with that error, as
  // CheckCompatible reports it, instead of skipping to older files and ending in "none is
  // valid".
  model.tensors[0].second = {8, 3, 3, 3};
  warnings.clear();
  c = LoadLatestValid(dir.path(), &warnings, &model);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr("ckpt-000000200.h5"),
                    HasSubstr("/params/conv1/weight has shape (4, 3, 3, 3) but model tiny "
                              "expects (8, 3, 3, 3)")));
  EXPECT_TRUE(warnings.empty()) << ::testing::PrintToString(warnings);
}

// ---- HDF5's own error printing -------------------------------------------------------------

// What `body` writes to stderr (fd 2).
template <typename F>
std::string CaptureStderr(F body) {
  TempDir dir;
  const std::string file = dir / "stderr.txt";
  std::fflush(stderr);
  const int saved = dup(2);
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  dup2(fd, 2);
  close(fd);
  body();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return ReadBytes(file);
}

hid_t OpenMissingFile() {
  return H5Fopen("/nonexistent/colonnade.h5", H5F_ACC_RDONLY, H5P_DEFAULT);
}

TEST(Hdf5Errors, NothingIsPrintedOutsideAScope) {
  // On the main thread, before and after a Scope (which once restored HDF5's printing).
  EXPECT_EQ(CaptureStderr([] { EXPECT_LT(OpenMissingFile(), 0); }), "");
  { hdf5::Scope scope; }
  EXPECT_EQ(CaptureStderr([] { EXPECT_LT(OpenMissingFile(), 0); }), "");
}

TEST(Hdf5Errors, NothingIsPrintedByAThreadAfterItsFirstScope) {
  // HDF5 keeps the setting per thread: a thread that entered a Scope stays silent.
  std::string printed = CaptureStderr([] {
    std::thread t([] {
      { hdf5::Scope scope; }
      EXPECT_LT(OpenMissingFile(), 0);
    });
    t.join();
  });
  EXPECT_EQ(printed, "");
}

TEST(Hdf5Errors, ACorruptCheckpointIsOneStatusNotAStack) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(22), 3, &path).ok());
  std::string b = ReadBytes(path);
  WriteBytes(path, b.substr(0, b.size() / 2));
  absl::Status status;
  EXPECT_EQ(CaptureStderr([&] { status = Read(path).status(); }), "");
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr("\n")));
}

}  // namespace
}  // namespace colonnade::checkpoint
