// Compatibility with checkpoints of earlier builds: tests/apps/golden/cifar10_80sec_step10.h5
// was written by the tree before the house redesign (issue 13), with fixed-length string
// attributes. This build must read it. Since issue 31 string attributes are written as
// variable-length UTF-8 under a checksum (docs/CHECKPOINTS.md, "Strings"); the readers of
// every earlier build accept variable-length strings and ignore the extra integer
// attribute, so they read the new files too. The bytes of the rewritten file are pinned:
// any change of the format shows here.
#include <hdf5.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint_test_util.h"
#include "gtest/gtest.h"
#include "hdf5/hdf5.h"

namespace colonnade::checkpoint {
namespace {

using namespace ::colonnade::checkpoint::testing;

const char* const kStringAttrs[] = {"format", "rng", "model", "flags"};

std::string OldPath() {
  return std::string(COLONNADE_SOURCE_DIR) + "/tests/apps/golden/cifar10_80sec_step10.h5";
}

// 1 when root attribute `name` of `path` is a variable-length string, 0 when fixed-length.
int VariableLength(const std::string& path, const char* name) {
  hdf5::Scope scope;
  hdf5::Handle f = hdf5::FileHandle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  hdf5::Handle a = hdf5::AttrHandle(H5Aopen(f.get(), name, H5P_DEFAULT));
  hdf5::Handle t = hdf5::TypeHandle(H5Aget_type(a.get()));
  return t.valid() && H5Tget_class(t.get()) == H5T_STRING ? H5Tis_variable_str(t.get()) : -1;
}

// FNV-1a, 64 bits: a fingerprint of a file's bytes.
uint64_t Fingerprint(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

TEST(CheckpointCompat, OldCheckpointWithFixedLengthStringsStillReads) {
  for (const char* name : kStringAttrs) {
    EXPECT_EQ(VariableLength(OldPath(), name), 0) << name << " is not fixed-length in the old file";
  }
  absl::StatusOr<Checkpoint> old = Read(OldPath());
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->state.model, "cifar10-80sec");
  EXPECT_EQ(old->state.step, 10);
  EXPECT_EQ(old->state.input_size, 32);
  EXPECT_EQ(old->state.num_classes, 10);
  EXPECT_TRUE(old->has_optimizer_state);
  ASSERT_EQ(old->tensors.size(), 10u);
}

TEST(CheckpointCompat, RewrittenInTodaysFormatReadsBackTheSameAndIsPinned) {
  absl::StatusOr<Checkpoint> old = Read(OldPath());
  ASSERT_TRUE(old.ok()) << old.status();
  TempDir dir;
  std::string written, again;
  ASSERT_TRUE(Write(dir / "a", old->state, old->tensors, 0, &written).ok());
  ASSERT_TRUE(Write(dir / "b", old->state, old->tensors, 0, &again).ok());
  for (const char* name : kStringAttrs) {
    EXPECT_EQ(VariableLength(written, name), 1) << name << " is not variable-length";
  }
  absl::StatusOr<Checkpoint> back = Read(written);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->state.model, old->state.model);
  EXPECT_EQ(back->state.flags, old->state.flags);
  EXPECT_EQ(back->state.step, old->state.step);
  EXPECT_EQ(back->state.seed, old->state.seed);
  ASSERT_EQ(back->tensors.size(), old->tensors.size());
  for (size_t i = 0; i < old->tensors.size(); ++i) {
    EXPECT_EQ(back->tensors[i].name, old->tensors[i].name);
    EXPECT_TRUE(SameBits(back->tensors[i].value, old->tensors[i].value));
    EXPECT_TRUE(SameBits(back->tensors[i].velocity, old->tensors[i].velocity));
  }
  const std::string bytes = ReadBytes(written);
  EXPECT_TRUE(bytes == ReadBytes(again)) << "two writes of the same state differ";
  // The bytes depend on the HDF5 library too: pinned with 1.10.8 (Debian 12).
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  if (major != 1 || minor != 10 || release != 8) {
    GTEST_SKIP() << "HDF5 " << major << "." << minor << "." << release
                 << " may lay files out differently from 1.10.8; byte comparison skipped";
  }
  // Update these only with a deliberate change of the format that every earlier reader
  // still reads, and say so in docs/CHECKPOINTS.md.
  EXPECT_EQ(bytes.size(), 1182112u) << written << ": the file format changed";
  EXPECT_EQ(Fingerprint(bytes), 11562384605184924018ull) << written << ": the file format changed";
}

}  // namespace
}  // namespace colonnade::checkpoint
