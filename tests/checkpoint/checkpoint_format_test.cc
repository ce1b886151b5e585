// The checkpoint file format on hand-made tensors: bitwise round trips, refusals, the
// newest-valid search past truncated, bit-flipped and partial files, the keep policy,
// compatibility messages, and a SIGKILL in the middle of a write.
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hdf5/hdf5.h"

namespace colonnade::checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::colonnade::checkpoint::testing;

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  std::string cmd = "ls -1 '" + dir + "'";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[512];
  while (p && fgets(buf, sizeof(buf), p)) {
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    out.push_back(s);
  }
  if (p) pclose(p);
  std::sort(out.begin(), out.end());
  return out;
}

void ExpectSameCheckpoint(const Checkpoint& c, const TrainState& s,
                          const std::vector<TensorEntry>& entries) {
  EXPECT_EQ(c.format_version, kFormatVersion);
  EXPECT_EQ(c.state.step, s.step);
  EXPECT_EQ(c.state.epoch, s.epoch);
  EXPECT_EQ(c.state.cursor_epoch, s.cursor_epoch);
  EXPECT_EQ(c.state.cursor_position, s.cursor_position);
  EXPECT_EQ(c.state.seed, s.seed);
  EXPECT_EQ(c.state.model, s.model);
  EXPECT_EQ(c.state.columns, s.columns);
  EXPECT_EQ(c.state.input_size, s.input_size);
  EXPECT_EQ(c.state.num_classes, s.num_classes);
  EXPECT_EQ(c.state.input_channels, s.input_channels);
  EXPECT_EQ(c.state.flags, s.flags);
  ASSERT_EQ(c.tensors.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorEntry& a = c.tensors[i];
    const TensorEntry& b = entries[i];
    EXPECT_EQ(a.name, b.name) << "tensors come back in the order written";
    EXPECT_EQ(a.shape, b.shape) << b.name;
    EXPECT_EQ(a.learnable, b.learnable) << b.name;
    EXPECT_TRUE(SameBits(a.value, b.value)) << b.name << " values differ";
    EXPECT_TRUE(SameBits(a.velocity, b.velocity)) << b.name << " velocities differ";
  }
}

TEST(CheckpointName, FormatAndParse) {
  EXPECT_EQ(CheckpointFileName(0), "ckpt-000000000.h5");
  EXPECT_EQ(CheckpointFileName(100), "ckpt-000000100.h5");
  EXPECT_EQ(CheckpointFileName(1234567890), "ckpt-1234567890.h5");
  EXPECT_EQ(ParseCheckpointStep("ckpt-000000100.h5"), 100);
  EXPECT_EQ(ParseCheckpointStep("ckpt-1234567890.h5"), 1234567890);
  EXPECT_EQ(ParseCheckpointStep("ckpt-0000000100.h5"), -1) << "non-canonical spelling";
  EXPECT_EQ(ParseCheckpointStep("ckpt-100.h5"), -1);
  EXPECT_EQ(ParseCheckpointStep("ckpt-000000100.h5.123.tmp"), -1);
  EXPECT_EQ(ParseCheckpointStep("ckpt-00000010x.h5"), -1);
  EXPECT_EQ(ParseCheckpointStep("model-000000100.h5"), -1);
}

TEST(CheckpointWrite, RoundTripIsBitwise) {
  TempDir dir;
  const TrainState s = SmallState(120);
  const std::vector<TensorEntry> entries = SmallEntries(1);
  std::string path;
  ASSERT_TRUE(Write(dir.path(), s, entries, 3, &path).ok());
  EXPECT_EQ(path, dir / "ckpt-000000120.h5");
  EXPECT_THAT(Files(dir.path()), ElementsAre("ckpt-000000120.h5")) << "no temporary file is left";
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->path, path);
  EXPECT_TRUE(c->has_optimizer_state);
  ExpectSameCheckpoint(*c, s, entries);
  ASSERT_NE(c->Find("fc/weight"), nullptr);
  EXPECT_EQ(c->Find("fc/weight")->shape, (std::vector<int64_t>{5, 36}));
  EXPECT_EQ(c->Find("nope/weight"), nullptr);
}

// The weights' moving average (--ema_decay): /ema round-trips bit for bit with has_ema = 1;
// a file without it reads has_ema false and empty averages; all or none on write.
TEST(CheckpointWrite, EmaRoundTrip) {
  TempDir dir;
  std::vector<TensorEntry> entries = SmallEntries(7);
  for (size_t i = 0; i < entries.size(); ++i) {
    entries[i].ema = RandomValues(entries[i].value.size(), 100 + static_cast<uint32_t>(i));
  }
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), entries, 3, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->has_ema);
  ASSERT_EQ(c->tensors.size(), entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_TRUE(SameBits(c->tensors[i].ema, entries[i].ema)) << entries[i].name;
  }
  absl::StatusOr<Checkpoint> plain = Read([&] {
    std::string p2;
    EXPECT_TRUE(Write(dir.path(), SmallState(6), SmallEntries(7), 3, &p2).ok());
    return p2;
  }());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->has_ema);
  for (const TensorEntry& e : plain->tensors) EXPECT_TRUE(e.ema.empty()) << e.name;
  entries[0].ema.clear();
  absl::Status partial = Write(dir.path(), SmallState(7), entries, 3, &path);
  EXPECT_FALSE(partial.ok());
  EXPECT_THAT(std::string(partial.message()), HasSubstr("have a moving average: give all or none"));
  entries = SmallEntries(7);
  for (TensorEntry& e : entries) e.ema = e.value;
  entries[1].ema[0] = NAN;
  EXPECT_FALSE(Write(dir.path(), SmallState(8), entries, 3, &path).ok()) << "non-finite average";
}

TEST(CheckpointWrite, WeightsOnlyRoundTrip) {
  TempDir dir;
  const TrainState s = SmallState(7);
  const std::vector<TensorEntry> entries = SmallEntries(2, /*velocity=*/false);
  std::string path;
  ASSERT_TRUE(Write(dir.path(), s, entries, 3, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->has_optimizer_state);
  ExpectSameCheckpoint(*c, s, entries);
}

TEST(CheckpointWrite, EmptyFlagsAndLargeStateRoundTrip) {
  TempDir dir;
  TrainState s = SmallState(0);
  s.flags = "";
  s.seed = 0;
  s.cursor_position = (int64_t{1} << 40) + 3;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), s, SmallEntries(3), 1, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state.flags, "");
  EXPECT_EQ(c->state.seed, 0u);
  EXPECT_EQ(c->state.cursor_position, (int64_t{1} << 40) + 3);
}

TEST(CheckpointWrite, SameInputGivesIdenticalBytes) {
  TempDir a, b;
  std::string pa, pb;
  ASSERT_TRUE(Write(a.path(), SmallState(5), SmallEntries(4), 3, &pa).ok());
  ASSERT_TRUE(Write(b.path(), SmallState(5), SmallEntries(4), 3, &pb).ok());
  const std::string ba = ReadBytes(pa), bb = ReadBytes(pb);
  EXPECT_GT(ba.size(), 0u);
  EXPECT_TRUE(ba == bb) << "no timestamps or other run-dependent bytes in the file";
}

TEST(CheckpointWrite, LargeTensorSpansSeveralChunks) {
  // 9000 x 600 floats = 21.6 MB > the 16 MiB chunk size: several chunks, each checksummed.
  TempDir dir;
  std::vector<TensorEntry> entries(1);
  entries[0].name = "fc6/weight";
  entries[0].shape = {9000, 600};
  entries[0].value = RandomValues(9000 * 600, 77);
  entries[0].velocity = RandomValues(9000 * 600, 78);
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(1), entries, 3, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectSameCheckpoint(*c, SmallState(1), entries);
}

TEST(CheckpointWrite, RefusesNonFiniteValues) {
  TempDir dir;
  for (int which = 0; which < 4; ++which) {
    std::vector<TensorEntry> entries = SmallEntries(5);
    const float bad = which % 2 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                     : -std::numeric_limits<float>::infinity();
    if (which < 2) {
      entries[6].value[17] = bad;  // fc/weight
    } else {
      entries[0].velocity[3] = bad;  // conv1/weight's velocity
    }
    std::string path = "unchanged";
    absl::Status s = Write(dir.path(), SmallState(10), entries, 3, &path);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
    EXPECT_THAT(std::string(s.message()),
                AllOf(HasSubstr(which < 2 ? "fc/weight" : "conv1/weight"),
                      HasSubstr(which < 2 ? "index 17" : "index 3"),
                      HasSubstr(which < 2 ? "non-finite value" : "non-finite velocity")));
    EXPECT_EQ(path, "unchanged");
  }
  EXPECT_TRUE(Files(dir.path()).empty()) << "nothing is written for a refused checkpoint";
}

TEST(CheckpointWrite, RefusesMalformedEntries) {
  TempDir dir;
  std::string path;
  auto refuse = [&](std::vector<TensorEntry> e, TrainState s, const std::string& why) {
    absl::Status st = Write(dir.path(), s, e, 3, &path);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << why << ": " << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(why));
  };
  {
    auto e = SmallEntries(6);
    e[1].name = "conv1bias";
    refuse(e, SmallState(1), "not of the form <layer>/<param>");
    e[1].name = "a/b/c";
    refuse(e, SmallState(1), "not of the form <layer>/<param>");
    e[1].name = "conv1/weight";
    refuse(e, SmallState(1), "appears twice");
  }
  {
    auto e = SmallEntries(6);
    e[6].shape = {5, 35};
    refuse(e, SmallState(1), "fc/weight has shape (5, 35) (175 elements) but 180 values");
  }
  {
    auto e = SmallEntries(6);
    e[7].velocity.pop_back();
    refuse(e, SmallState(1), "fc/bias has 5 values but 4 velocity values");
  }
  {
    auto e = SmallEntries(6);
    e[7].velocity.clear();
    refuse(e, SmallState(1), "5 of 6 learnable tensors have a velocity");
  }
  {
    auto e = SmallEntries(6);
    e[4].velocity = e[4].value;
    refuse(e, SmallState(1), "bn1/running_mean is not learnable but has a velocity");
  }
  {
    TrainState s = SmallState(1);
    s.model = "";
    refuse(SmallEntries(6), s, "model name is empty");
    s = SmallState(-1);
    refuse(SmallEntries(6), s, "step -1 is negative");
    // What Read refuses is never written: a trainer could not resume from it.
    s = SmallState(1);
    s.num_classes = 0;
    refuse(SmallEntries(6), s, "num_classes = 0 is out of range [1, 1000000]");
    s = SmallState(1);
    s.columns = 0;
    refuse(SmallEntries(6), s, "columns = 0 is out of range [1, ");
    s = SmallState(1);
    s.model = "tiny model";
    refuse(SmallEntries(6), s, "model name 'tiny model' is not a model zoo name");
  }
  refuse({}, SmallState(1), "no tensors");
  EXPECT_TRUE(Files(dir.path()).empty());
}

TEST(CheckpointWrite, CreatesMissingDirectories) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir / "a/b/c", SmallState(3), SmallEntries(7), 3, &path).ok());
  EXPECT_EQ(path, dir / "a/b/c/ckpt-000000003.h5");
  EXPECT_TRUE(Read(path).ok());
}

TEST(CheckpointWrite, KeepLastDeletesOnlyOlderOnes) {
  TempDir dir;
  std::string path;
  for (int64_t step : {10, 20, 30, 40, 50}) {
    ASSERT_TRUE(Write(dir.path(), SmallState(step), SmallEntries(8), 2, &path).ok());
  }
  EXPECT_THAT(Files(dir.path()), ElementsAre("ckpt-000000040.h5", "ckpt-000000050.h5"));
  // A checkpoint of a larger step (an abandoned run in the same directory) is not ours to
  // delete, and does not count against keep_last; an unrelated file is left alone.
  ASSERT_TRUE(Write(dir.path(), SmallState(900), SmallEntries(8), 0, &path).ok());
  WriteBytes(dir / "notes.txt", "hello");
  ASSERT_TRUE(Write(dir.path(), SmallState(60), SmallEntries(8), 2, &path).ok());
  EXPECT_THAT(Files(dir.path()), ElementsAre("ckpt-000000050.h5", "ckpt-000000060.h5",
                                             "ckpt-000000900.h5", "notes.txt"));
  // keep_last = 1 keeps only the new one; the new one is never deleted.
  ASSERT_TRUE(Write(dir.path(), SmallState(70), SmallEntries(8), 1, &path).ok());
  EXPECT_THAT(Files(dir.path()),
              ElementsAre("ckpt-000000070.h5", "ckpt-000000900.h5", "notes.txt"));
  // keep_last <= 0 keeps everything.
  ASSERT_TRUE(Write(dir.path(), SmallState(80), SmallEntries(8), 0, &path).ok());
  ASSERT_TRUE(Write(dir.path(), SmallState(85), SmallEntries(8), -1, &path).ok());
  EXPECT_THAT(Files(dir.path()),
              ElementsAre("ckpt-000000070.h5", "ckpt-000000080.h5", "ckpt-000000085.h5",
                          "ckpt-000000900.h5", "notes.txt"));
  // Rewriting the same step replaces the file atomically.
  ASSERT_TRUE(Write(dir.path(), SmallState(85), SmallEntries(9), 0, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(SameBits(c->tensors[0].value, SmallEntries(9)[0].value));
}

TEST(CheckpointWrite, RemovesLeftoverPartialFiles) {
  // Another process's temporary is removed only by a writer that holds the directory's
  // lock (no other writer can be active then); its own leftovers always.
  TempDir dir;
  std::string path;
  WriteBytes(dir / "ckpt-000000020.h5.4242.tmp", std::string(1000, 'x'));
  WriteBytes(dir / ("ckpt-000000025.h5." + ProcessTag() + ".tmp"), std::string(1000, 'y'));
  std::vector<std::string> warnings;
  ASSERT_TRUE(Write(dir.path(), SmallState(30), SmallEntries(10), 3, &path, &warnings).ok());
  EXPECT_THAT(Files(dir.path()), ElementsAre("ckpt-000000020.h5.4242.tmp", "ckpt-000000030.h5"))
      << "without the lock, another process's temporary may be its write in progress";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("ckpt-000000025.h5." + ProcessTag() + ".tmp"));

  absl::StatusOr<std::unique_ptr<DirectoryLock>> lock =
      DirectoryLock::Acquire(dir.path(), 0, nullptr);
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_TRUE((*lock)->held());
  warnings.clear();
  ASSERT_TRUE(
      Write(dir.path(), SmallState(31), SmallEntries(10), 3, &path, &warnings, lock->get()).ok());
  EXPECT_THAT(Files(dir.path()),
              ElementsAre("ckpt-000000030.h5", "ckpt-000000031.h5", "ckpt.lock"));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("ckpt-000000020.h5.4242.tmp"));
}

// ---- reading back bad files ----------------------------------------------------------------

TEST(CheckpointRead, MissingFileIsNotFound) {
  TempDir dir;
  absl::StatusOr<Checkpoint> c = Read(dir / "ckpt-000000001.h5");
  EXPECT_TRUE(absl::IsNotFound(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("ckpt-000000001.h5"));
}

TEST(CheckpointRead, TruncatedFileIsDataLoss) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(11), 3, &path).ok());
  std::string b = ReadBytes(path);
  WriteBytes(path, b.substr(0, b.size() / 2));
  absl::StatusOr<Checkpoint> c = Read(path);
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
}

TEST(CheckpointRead, NotHdf5IsDataLoss) {
  TempDir dir;
  WriteBytes(dir / "ckpt-000000005.h5", "this is not an HDF5 file");
  absl::StatusOr<Checkpoint> c = Read(dir / "ckpt-000000005.h5");
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
}

TEST(CheckpointRead, FlippedDataByteFailsItsChecksum) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(12), 3, &path).ok());
  int64_t addr = 0, size = 0;
  FirstChunk(path, "/params/fc/weight", &addr, &size);
  ASSERT_GT(addr, 0);
  ASSERT_EQ(size, 5 * 36 * 4 + 4) << "the data and a 4-byte Fletcher-32 checksum";
  FlipByte(path, addr + size / 2);
  absl::StatusOr<Checkpoint> c = Read(path);
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr(path), HasSubstr("/params/fc/weight"), HasSubstr("Fletcher32")));
}

TEST(CheckpointRead, FlippedVelocityByteFailsItsChecksum) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(13), 3, &path).ok());
  int64_t addr = 0, size = 0;
  FirstChunk(path, "/optimizer/conv1/weight/velocity", &addr, &size);
  ASSERT_GT(addr, 0);
  FlipByte(path, addr + 1);
  absl::StatusOr<Checkpoint> c = Read(path);
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("/optimizer/conv1/weight/velocity"));
}

// Every single-byte corruption anywhere in the file is either detected or harmless (the
// content read back is unchanged): data has Fletcher-32, the 1.10 format checksums the
// metadata (superblock, object headers with the attributes, chunk indexes).
TEST(CheckpointRead, NoSingleByteCorruptionGoesUnnoticed) {
  TempDir dir;
  std::string path;
  const TrainState s = SmallState(5);
  const std::vector<TensorEntry> entries = SmallEntries(14);
  ASSERT_TRUE(Write(dir.path(), s, entries, 3, &path).ok());
  const std::string good = ReadBytes(path);
  int detected = 0, harmless = 0;
  const int fd = open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  for (size_t off = 0; off < good.size(); ++off) {
    const char bad = static_cast<char>(good[off] ^ 0x10);
    ASSERT_EQ(pwrite(fd, &bad, 1, static_cast<off_t>(off)), 1);
    absl::StatusOr<Checkpoint> c = Read(path);
    ASSERT_EQ(pwrite(fd, &good[off], 1, static_cast<off_t>(off)), 1);
    if (!c.ok()) {
      ++detected;
      continue;
    }
    ++harmless;
    SCOPED_TRACE(::testing::Message()
                 << "byte " << off << " of " << good.size() << " changed silently");
    ExpectSameCheckpoint(*c, s, entries);
    if (::testing::Test::HasFailure()) break;
  }
  close(fd);
  EXPECT_GT(detected, static_cast<int>(good.size() / 2));
  EXPECT_TRUE(Read(path).ok()) << "the file is restored";
  std::printf("%zu bytes: %d flips detected, %d in unused bytes (content unchanged)\n", good.size(),
              detected, harmless);
}

TEST(CheckpointRead, RefusesOtherFormatVersionsAndMissingAttributes) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(15), 3, &path).ok());
  const std::string good = ReadBytes(path);
  {
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    int64_t v = 2;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &v), 0);
    H5Aclose(a);
    H5Fclose(f);
    absl::StatusOr<Checkpoint> c = Read(path);
    EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
    EXPECT_THAT(std::string(c.status().message()),
                AllOf(HasSubstr(path), HasSubstr("format_version 2"), HasSubstr("newer")));
  }
  for (const char* attr : {"seed", "step", "flags", "cursor_position"}) {
    WriteBytes(path, good);
    hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    ASSERT_GE(H5Adelete(f, attr), 0);
    H5Fclose(f);
    absl::StatusOr<Checkpoint> c = Read(path);
    EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
    EXPECT_THAT(
        std::string(c.status().message()),
        AllOf(HasSubstr(path), HasSubstr(std::string("attribute /") + attr + " is missing")));
  }
}

// Sets root attribute `name` of a checkpoint to `value` (an int64, as written), with HDF5
// directly, as h5py or a corrupted disk could.
void SetIntAttr(const std::string& path, const char* name, int64_t value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  ASSERT_GE(a, 0) << name;
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT64, &value), 0);
  H5Aclose(a);
  ASSERT_GE(H5Fclose(f), 0);
}

// Replaces string attribute `name` by one holding `value`, written as the writer writes
// strings (so that only the value is wrong, not the encoding or its checksum).
void SetStringAttr(const std::string& path, const char* name, const std::string& value) {
  hdf5::Scope scope;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Adelete(f, name), 0);
  ASSERT_TRUE(hdf5::WriteStringAttr(f, name, value).ok());
  ASSERT_GE(H5Fclose(f), 0);
}

// docs/CHECKPOINTS.md promises every attribute present with the right type *and range*.
// A checkpoint with num_classes = 0 once resumed (exit 0) and checkpoint_diff called it
// "same" as the original.
TEST(CheckpointRead, RefusesEveryRootAttributeOutOfRange) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(18), 3, &path).ok());
  const std::string good = ReadBytes(path);
  const struct {
    const char* name;
    int64_t value;
    const char* range;
  } bad[] = {
      {"step", -1, "[0, "},
      {"epoch", -1, "[0, "},
      {"cursor_epoch", -1, "[0, "},
      {"cursor_position", -5, "[0, "},
      {"columns", 0, "[1, "},
      {"input_size", 0, "[1, "},
      {"input_size", int64_t{1} << 40, "[1, "},
      {"num_classes", 0, "[1, 1000000]"},
      {"num_classes", 1000001, "[1, 1000000]"},
      {"input_channels", 0, "[1, "},
      {"num_params", 0, "[1, "},
      {"has_optimizer_state", 2, "[0, 1]"},
  };
  for (const auto& b : bad) {
    WriteBytes(path, good);
    SetIntAttr(path, b.name, b.value);
    absl::StatusOr<Checkpoint> c = Read(path);
    EXPECT_TRUE(absl::IsDataLoss(c.status())) << b.name << " = " << b.value << ": " << c.status();
    EXPECT_THAT(std::string(c.status().message()),
                AllOf(HasSubstr(path), HasSubstr(absl::StrCat("attribute /", b.name, " = ", b.value,
                                                              " is out of range ", b.range))));
  }
  for (const char* model : {"", "tiny model", "../alexnet", "tiny\n--lr=1"}) {
    WriteBytes(path, good);
    SetStringAttr(path, "model", model);
    absl::StatusOr<Checkpoint> c = Read(path);
    EXPECT_TRUE(absl::IsDataLoss(c.status())) << "model '" << model << "': " << c.status();
    EXPECT_THAT(std::string(c.status().message()),
                AllOf(HasSubstr(path), HasSubstr("attribute /model")));
  }
  WriteBytes(path, good);
  EXPECT_TRUE(Read(path).ok());
}

// An input size that differs from the model being built is a model mismatch (the tensors
// of a net with global pooling do not show it): named with its flag, and not skipped by
// --resume=auto.
TEST(CheckpointRead, RefusesAnotherInputSizeThanTheModels) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(19), 3, &path).ok());
  ExpectedModel model{"tiny", {}};
  for (const TensorEntry& e : SmallEntries(19)) model.tensors.push_back({e.name, e.shape});
  model.input_size = 6;  // SmallState's
  EXPECT_TRUE(Read(path, &model).ok());
  model.input_size = 8;
  absl::StatusOr<Checkpoint> c = Read(path, &model);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              AllOf(HasSubstr(path), HasSubstr("attribute /input_size is 6"), HasSubstr("8"),
                    HasSubstr("--input_size")));
  std::vector<std::string> warnings;
  c = LoadLatestValid(dir.path(), &warnings, &model);
  EXPECT_TRUE(absl::IsFailedPrecondition(c.status())) << c.status();
  EXPECT_TRUE(warnings.empty());
}

TEST(CheckpointRead, RefusesDatasetsWithoutChecksums) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(16), 3, &path).ok());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "/params/conv1/bias", H5P_DEFAULT), 0);
  hsize_t dims[1] = {4};
  hid_t sp = H5Screate_simple(1, dims, nullptr);
  hid_t d = H5Dcreate2(f, "/params/conv1/bias", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT,
                       H5P_DEFAULT);  // contiguous: no checksum possible
  float v[4] = {1, 2, 3, 4};
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
  hid_t asp = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(d, "learnable", H5T_STD_I64LE, asp, H5P_DEFAULT, H5P_DEFAULT);
  int64_t one = 1;
  H5Awrite(a, H5T_NATIVE_INT64, &one);
  H5Aclose(a);
  H5Sclose(asp);
  H5Dclose(d);
  H5Sclose(sp);
  H5Fclose(f);
  absl::StatusOr<Checkpoint> c = Read(path);
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("/params/conv1/bias is not chunked, so it has no Fletcher-32 checksum"));
}

TEST(CheckpointRead, FileNameMustMatchStoredStep) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(5), SmallEntries(17), 3, &path).ok());
  ASSERT_EQ(rename(path.c_str(), (dir / "ckpt-000000006.h5").c_str()), 0);
  absl::StatusOr<Checkpoint> c = Read(dir / "ckpt-000000006.h5");
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("the file name says step 6 but attribute /step is 5"));
  // Any other name is fine: a checkpoint copied elsewhere keeps working.
  ASSERT_EQ(rename((dir / "ckpt-000000006.h5").c_str(), (dir / "best.h5").c_str()), 0);
  EXPECT_TRUE(Read(dir / "best.h5").ok());
}

// ---- finding the newest valid checkpoint ----------------------------------------------------

// The data cursor is checked against the training data when a checkpoint is chosen: a
// cursor_position of 2^62 in the newest file once stopped every restart of a requeued job
// ("start cursor ... outside the dataset", exit 2) although an older file was sound.
TEST(FindLatestValid, SkipsACursorBeyondTheTrainingData) {
  TempDir dir;
  std::string path;
  ExpectedModel model{"tiny", {}};
  for (const TensorEntry& e : SmallEntries(1)) model.tensors.push_back({e.name, e.shape});
  for (int64_t step : {12, 14}) {  // SmallState: cursor positions 256 and 512
    ASSERT_TRUE(Write(dir.path(), SmallState(step), SmallEntries(step), 0, &path).ok());
  }
  model.dataset_size = 512;  // the end of an epoch is a valid cursor
  std::vector<std::string> warnings;
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir.path(), &warnings, &model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state.step, 14);
  EXPECT_TRUE(warnings.empty());

  model.dataset_size = 300;
  c = LoadLatestValid(dir.path(), &warnings, &model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state.step, 12);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0],
              AllOf(HasSubstr("skipped: "), HasSubstr(dir / "ckpt-000000014.h5"),
                    HasSubstr("attribute /cursor_position = 512"), HasSubstr("300 images")));
  // The same file named on its own is an error (DataLoss: a runtime failure, not usage).
  absl::StatusOr<Checkpoint> one = Read(dir / "ckpt-000000014.h5", &model);
  EXPECT_TRUE(absl::IsDataLoss(one.status())) << one.status();

  SetIntAttr(dir / "ckpt-000000014.h5", "cursor_position", int64_t{1} << 62);
  model.dataset_size = 512;
  warnings.clear();
  c = LoadLatestValid(dir.path(), &warnings, &model);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->state.step, 12);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("attribute /cursor_position = 4611686018427387904"));
}

TEST(FindLatestValid, EmptyOrMissingDirectoryIsNotFound) {
  TempDir dir;
  std::vector<std::string> warnings;
  EXPECT_TRUE(absl::IsNotFound(FindLatestValid(dir.path(), &warnings).status()));
  EXPECT_TRUE(absl::IsNotFound(FindLatestValid(dir / "missing", &warnings).status()));
  WriteBytes(dir / "other.h5", "x");
  EXPECT_TRUE(absl::IsNotFound(FindLatestValid(dir.path(), &warnings).status()));
  EXPECT_TRUE(warnings.empty());
}

TEST(FindLatestValid, SkipsTruncatedBitFlippedAndPartialFiles) {
  TempDir dir;
  std::string path;
  for (int64_t step : {100, 200, 300, 400}) {
    ASSERT_TRUE(Write(dir.path(), SmallState(step), SmallEntries(step), 0, &path).ok());
  }
  std::vector<std::string> warnings;
  absl::StatusOr<std::string> latest = FindLatestValid(dir.path(), &warnings);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir / "ckpt-000000400.h5");
  EXPECT_TRUE(warnings.empty());

  // 400: truncated; 300: a flipped data byte; a partial write of 500 left behind.
  std::string b = ReadBytes(dir / "ckpt-000000400.h5");
  WriteBytes(dir / "ckpt-000000400.h5", b.substr(0, b.size() * 3 / 4));
  int64_t addr = 0, size = 0;
  FirstChunk(dir / "ckpt-000000300.h5", "/params/conv1/weight", &addr, &size);
  ASSERT_GT(addr, 0);
  FlipByte(dir / "ckpt-000000300.h5", addr + 10);
  WriteBytes(dir / "ckpt-000000500.h5.999.tmp", b.substr(0, b.size() / 3));

  warnings.clear();
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir.path(), &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->path, dir / "ckpt-000000200.h5");
  ExpectSameCheckpoint(*c, SmallState(200), SmallEntries(200));
  ASSERT_EQ(warnings.size(), 3u) << ::testing::PrintToString(warnings);
  std::sort(warnings.begin(), warnings.end());
  EXPECT_THAT(warnings[0], HasSubstr("ckpt-000000500.h5.999.tmp: partial checkpoint"));
  EXPECT_THAT(warnings[1], AllOf(HasSubstr("skipped: "), HasSubstr("ckpt-000000300.h5"),
                                 HasSubstr("/params/conv1/weight")));
  EXPECT_THAT(warnings[2], AllOf(HasSubstr("skipped: "), HasSubstr("ckpt-000000400.h5")));

  warnings.clear();
  latest = FindLatestValid(dir.path(), &warnings);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir / "ckpt-000000200.h5");
  EXPECT_EQ(warnings.size(), 3u);
}

TEST(FindLatestValid, AllCorruptIsDataLossNotAFreshStart) {
  TempDir dir;
  WriteBytes(dir / "ckpt-000000100.h5", "garbage");
  WriteBytes(dir / "ckpt-000000200.h5", "");
  std::vector<std::string> warnings;
  absl::StatusOr<std::string> latest = FindLatestValid(dir.path(), &warnings);
  EXPECT_TRUE(absl::IsDataLoss(latest.status())) << latest.status();
  EXPECT_THAT(std::string(latest.status().message()), HasSubstr("none is valid"));
  EXPECT_EQ(warnings.size(), 2u);
}

// ---- compatibility -----------------------------------------------------------------------------

TEST(CheckCompatible, NamesTheMismatchedTensor) {
  TempDir dir;
  std::vector<TensorEntry> entries(2);
  entries[0].name = "fc8/weight";
  entries[0].shape = {10, 4096};
  entries[0].value.assign(10 * 4096, 0.5f);
  entries[1].name = "fc8/bias";
  entries[1].shape = {10};
  entries[1].value.assign(10, 0.0f);
  TrainState s = SmallState(100);
  s.model = "alexnet";
  std::string path;
  ASSERT_TRUE(Write(dir.path(), s, entries, 3, &path).ok());
  absl::StatusOr<Checkpoint> c = Read(path);
  ASSERT_TRUE(c.ok()) << c.status();

  ExpectedTensors want = {{"fc8/weight", {1000, 4096}}, {"fc8/bias", {1000}}};
  absl::Status st = CheckCompatible(*c, want, "alexnet");
  EXPECT_TRUE(absl::IsFailedPrecondition(st));
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("ckpt-000000100.h5: /params/fc8/weight has shape (10, 4096) but model "
                        "alexnet expects (1000, 4096)"));
  EXPECT_TRUE(
      CheckCompatible(*c, {{"fc8/weight", {10, 4096}}, {"fc8/bias", {10}}}, "alexnet").ok());

  st = CheckCompatible(*c, {{"fc8/weight", {10, 4096}}, {"fc8/bias", {10}}}, "cifar10-80sec");
  EXPECT_THAT(std::string(st.message()), HasSubstr("is of model alexnet, not cifar10-80sec"));
  st = CheckCompatible(*c, {{"fc8/weight", {10, 4096}}, {"fc8/bias", {10}}, {"fc9/bias", {3}}},
                       "alexnet");
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("/params/fc9/bias is missing but model alexnet has it with shape (3,)"));
  st = CheckCompatible(*c, {{"fc8/weight", {10, 4096}}}, "alexnet");
  EXPECT_THAT(std::string(st.message()),
              HasSubstr("/params/fc8/bias (10,) is not a parameter of model alexnet"));
}

// ---- crash safety ------------------------------------------------------------------------------

// Content of the large test checkpoint of `step`: cheap to generate, different per step.
std::vector<TensorEntry> BigEntries(int64_t step) {
  std::vector<TensorEntry> e(2);
  e[0].name = "big/weight";
  e[0].shape = {4096, 4096};  // 64 MiB of values + 64 MiB of velocity
  e[0].value.resize(4096 * 4096);
  e[0].velocity.resize(4096 * 4096);
  for (size_t i = 0; i < e[0].value.size(); ++i) {
    const uint32_t h =
        static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(step) * 40503u;
    e[0].value[i] = static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f;
    e[0].velocity[i] = static_cast<float>(step);
  }
  e[1].name = "big/bias";
  e[1].shape = {4096};
  e[1].value.assign(4096, static_cast<float>(step));
  e[1].velocity.assign(4096, 0.25f);
  return e;
}

bool HasPartialFile(const std::string& dir) {
  for (const std::string& n : Files(dir)) {
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0) return true;
  }
  return false;
}

TEST(CrashSafety, SigkillDuringWriteLeavesPreviousCheckpointValid) {
  TempDir dir;
  std::string path;
  ASSERT_TRUE(Write(dir.path(), SmallState(1), BigEntries(1), 0, &path).ok());
  bool killed_mid_write = false;
  for (int attempt = 0; attempt < 20 && !killed_mid_write; ++attempt) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Keep writing newer checkpoints until killed.
      for (int64_t step = 2 + attempt * 1000;; ++step) {
        if (!Write(dir.path(), SmallState(step), BigEntries(step), 0, nullptr).ok()) _exit(3);
      }
    }
    // Wait until a write is in flight, then a little longer so the file is partly
    // written, and kill -9.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!HasPartialFile(dir.path()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt % 5 * 3));
    kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the writer exited by itself: status " << status;
    killed_mid_write = HasPartialFile(dir.path());
  }
  ASSERT_TRUE(killed_mid_write) << "could not kill the writer in the middle of a write";

  std::vector<std::string> warnings;
  absl::StatusOr<Checkpoint> c = LoadLatestValid(dir.path(), &warnings);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GE(c->state.step, 1);
  ExpectSameCheckpoint(*c, SmallState(c->state.step), BigEntries(c->state.step));
  bool warned = false;
  for (const std::string& w : warnings)
    warned |= w.find(".tmp: partial checkpoint") != std::string::npos;
  EXPECT_TRUE(warned) << ::testing::PrintToString(warnings);
  // Every complete checkpoint the killed writers left is valid and holds its own step.
  for (const std::string& n : Files(dir.path())) {
    if (ParseCheckpointStep(n) < 0) continue;
    absl::StatusOr<Checkpoint> k = Read(dir / n);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_TRUE(SameBits(k->tensors[1].value, BigEntries(k->state.step)[1].value)) << n;
  }
  // The next successful write by the directory's lock holder removes the partial files
  // (the killed writers are dead; without the lock they could be writes in progress).
  absl::StatusOr<std::unique_ptr<DirectoryLock>> lock =
      DirectoryLock::Acquire(dir.path(), 0, nullptr);
  ASSERT_TRUE(lock.ok()) << lock.status();
  ASSERT_TRUE(
      Write(dir.path(), SmallState(99999), SmallEntries(1), 2, &path, nullptr, lock->get()).ok());
  EXPECT_FALSE(HasPartialFile(dir.path()));
}

}  // namespace
}  // namespace colonnade::checkpoint
