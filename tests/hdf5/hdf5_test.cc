// The HDF5 layer (src/hdf5/hdf5.h): files written by older builds (fixed-length or
// unchecksummed variable-length strings) still read, new files use the one string encoding
// (variable-length UTF-8 attributes under a CRC-32, fixed-length UTF-8 string datasets),
// errors follow the one mapping, datasets round-trip.
#include "hdf5/hdf5.h"

#include <hdf5.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace colonnade::hdf5 {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A fresh directory under $TMPDIR (or /tmp), removed with its files at the end.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/colonnade-hdf5-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const char* p = mkdtemp(buf.data());
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Raw HDF5 calls, as an older build (variable-length strings) or another tool wrote them.
void WriteVariableStringAttr(hid_t loc, const char* name, const char* value, H5T_cset_t cset) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), cset);
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(a.valid());
  ASSERT_GE(H5Awrite(a.get(), type.get(), &value), 0);
}

void WriteVariableStrings(hid_t loc, const char* name, const std::vector<const char*>& values) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  hsize_t n = values.size();
  Handle space = SpaceHandle(H5Screate_simple(1, &n, nullptr));
  Handle d = DatasetHandle(
      H5Dcreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(d.valid());
  ASSERT_GE(H5Dwrite(d.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
}

// A fixed-length, null-terminated ASCII string (not our null-padded UTF-8): still read.
void WriteNullTermAsciiAttr(hid_t loc, const char* name, const std::string& value) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), value.size() + 1);
  H5Tset_strpad(type.get(), H5T_STR_NULLTERM);
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(a.valid());
  ASSERT_GE(H5Awrite(a.get(), type.get(), value.c_str()), 0);
}

TEST(Hdf5Strings, VariableLengthStringsOfOlderFilesStillRead) {
  TempDir dir;
  const std::string path = dir / "old.h5";
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    WriteVariableStringAttr(f->get(), "utf8", "colonnade-shard", H5T_CSET_UTF8);
    WriteVariableStringAttr(f->get(), "ascii", "raw", H5T_CSET_ASCII);
    WriteVariableStringAttr(f->get(), "empty", "", H5T_CSET_UTF8);
    WriteVariableStrings(f->get(), "/names", {"cat", "", "\xc3\xa9t\xc3\xa9"});
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*ReadStringAttr(f->get(), "utf8", path, "'utf8'"), "colonnade-shard");
  EXPECT_EQ(*ReadStringAttr(f->get(), "ascii", path, "'ascii'"), "raw");
  EXPECT_EQ(*ReadStringAttr(f->get(), "empty", path, "'empty'"), "");
  std::vector<int64_t> dims;
  absl::StatusOr<Handle> d = OpenChecked(f->get(), path, "/names", Dtype::kString, {3}, &dims);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<std::vector<std::string>> names = ReadStrings(d->get(), path, "/names", 3);
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, (std::vector<std::string>{"cat", "", "\xc3\xa9t\xc3\xa9"}));
}

// A fixed-length, null-padded UTF-8 attribute: what builds before variable-length
// attributes wrote into every checkpoint, shard and dataset index.
void WriteFixedUtf8Attr(hid_t loc, const char* name, const std::string& value) {
  Handle type = TypeHandle(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space = SpaceHandle(H5Screate(H5S_SCALAR));
  Handle a = AttrHandle(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(a.valid());
  std::string buf = value;
  buf.resize(std::max<size_t>(1, value.size()), '\0');
  ASSERT_GE(H5Awrite(a.get(), type.get(), buf.data()), 0);
}

TEST(Hdf5Strings, FixedLengthAttributesOfOlderFilesStillRead) {
  TempDir dir;
  const std::string path = dir / "fixed.h5";
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    WriteFixedUtf8Attr(f->get(), "format", "colonnade-dataset");
    WriteFixedUtf8Attr(f->get(), "empty", "");
    WriteFixedUtf8Attr(f->get(), "name", "\xc3\xa9t\xc3\xa9");
    WriteNullTermAsciiAttr(f->get(), "nullterm", "jpeg");
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(H5Aexists(f->get(), kStringChecksumAttr), 0) << "no checksum in an older file";
  EXPECT_EQ(*ReadStringAttr(f->get(), "format", path, "'format'"), "colonnade-dataset");
  EXPECT_EQ(*ReadStringAttr(f->get(), "empty", path, "'empty'"), "");
  EXPECT_EQ(*ReadStringAttr(f->get(), "name", path, "'name'"), "\xc3\xa9t\xc3\xa9");
  EXPECT_EQ(*ReadStringAttr(f->get(), "nullterm", path, "'nullterm'"), "jpeg");
}

// Attributes are variable-length UTF-8, which h5py returns as str (fixed-length ones come
// back as bytes, and `f.attrs["format"] == "colonnade-dataset"` was False in user scripts).
// Their bytes live in HDF5's global heap, which has no checksum, so the object carries the
// CRC-32 of its string attributes in an integer attribute of its (checksummed) header.
// String datasets stay fixed-length (h5py returns bytes for either kind).
TEST(Hdf5Strings, WritesVariableLengthUtf8AttributesWithAChecksum) {
  TempDir dir;
  const std::string path = dir / "new.h5";
  const std::vector<std::string> names = {"cat", "", "a longer name", "\xc3\xa9t\xc3\xa9"};
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteStringAttr(f->get(), "format", "colonnade-dataset").ok());
    ASSERT_TRUE(WriteStringAttr(f->get(), "empty", "").ok());
    ASSERT_TRUE(WriteStringAttr(f->get(), "utf8", "\xc3\xa9t\xc3\xa9").ok());
    ASSERT_TRUE(WriteStrings(f->get(), "/names", names).ok());
    ASSERT_TRUE(WriteStrings(f->get(), "/none", {}).ok());
    // The checksum's own name is not a string attribute anyone may write.
    EXPECT_TRUE(absl::IsInvalidArgument(WriteStringAttr(f->get(), kStringChecksumAttr, "x")));
    // A NUL would end the string early on read: refused, not truncated silently.
    EXPECT_TRUE(absl::IsInvalidArgument(WriteStringAttr(f->get(), "nul", std::string("a\0b", 3))));
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  for (const char* attr : {"format", "empty", "utf8"}) {
    Handle a = AttrHandle(H5Aopen(f->get(), attr, H5P_DEFAULT));
    Handle t = TypeHandle(H5Aget_type(a.get()));
    EXPECT_GT(H5Tis_variable_str(t.get()), 0) << attr;
    EXPECT_EQ(H5Tget_cset(t.get()), H5T_CSET_UTF8) << attr;
  }
  EXPECT_EQ(H5Aexists(f->get(), "nul"), 0);
  {
    Handle a = AttrHandle(H5Aopen(f->get(), kStringChecksumAttr, H5P_DEFAULT));
    ASSERT_TRUE(a.valid()) << "no " << kStringChecksumAttr;
    Handle t = TypeHandle(H5Aget_type(a.get()));
    EXPECT_EQ(H5Tget_class(t.get()), H5T_INTEGER);
  }
  {
    Handle d = DatasetHandle(H5Dopen2(f->get(), "/names", H5P_DEFAULT));
    Handle t = TypeHandle(H5Dget_type(d.get()));
    EXPECT_EQ(H5Tis_variable_str(t.get()), 0);
    EXPECT_EQ(H5Tget_size(t.get()), std::string("a longer name").size());
    EXPECT_EQ(H5Tget_cset(t.get()), H5T_CSET_UTF8);
  }
  EXPECT_EQ(*ReadStringAttr(f->get(), "format", path, "'format'"), "colonnade-dataset");
  EXPECT_EQ(*ReadStringAttr(f->get(), "empty", path, "'empty'"), "");
  EXPECT_EQ(*ReadStringAttr(f->get(), "utf8", path, "'utf8'"), "\xc3\xa9t\xc3\xa9");
  std::vector<int64_t> dims;
  absl::StatusOr<Handle> d = OpenChecked(f->get(), path, "/names", Dtype::kString, {-1}, &dims);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(dims, std::vector<int64_t>{4});
  absl::StatusOr<std::vector<std::string>> got = ReadStrings(d->get(), path, "/names", 4);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, names);
  d = OpenChecked(f->get(), path, "/none", Dtype::kString, {0}, &dims);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(ReadStrings(d->get(), path, "/none", 0)->empty());
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A changed byte of a string attribute's value (in the global heap, outside every HDF5
// checksum) is caught by the object's string checksum; so is a string attribute that
// another program added or replaced.
TEST(Hdf5Strings, TheChecksumCatchesAChangedString) {
  TempDir dir;
  const std::string path = dir / "flip.h5";
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteStringAttr(f->get(), "format", "colonnade-dataset").ok());
    ASSERT_TRUE(WriteStringAttr(f->get(), "encoding", "raw").ok());
    ASSERT_TRUE(WriteIntAttr(f->get(), "height", 32).ok());
  }
  const std::string good = FileBytes(path);
  const size_t at = good.find("colonnade-dataset");
  ASSERT_NE(at, std::string::npos);
  std::string bad = good;
  bad[at + 3] = 'X';  // "colXnnade-dataset"
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bad.data(), bad.size());
  {
    Scope scope;
    absl::StatusOr<Handle> f = OpenFileReadOnly(path);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<std::string> v = ReadStringAttr(f->get(), "format", path, "'format'");
    EXPECT_TRUE(absl::IsDataLoss(v.status())) << (v.ok() ? *v : v.status().ToString());
    // Caught by the heap's checksum, before HDF5 parses the heap (a changed size there
    // made HDF5 1.10 crash).
    EXPECT_THAT(std::string(v.status().message()),
                AllOf(HasSubstr(path), HasSubstr("attribute 'format'"),
                      HasSubstr("does not match its checksum"), HasSubstr(kStringHeapsAttr)));
    EXPECT_EQ(*ReadIntAttr(f->get(), "height", path, "'height'"), 32)
        << "integers are not affected";
  }
  // Another program's string attribute (h5py writes variable-length strings too).
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(good.data(), good.size());
  {
    Scope scope;
    Handle f = FileHandle(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(f.valid());
    WriteVariableStringAttr(f.get(), "note", "added later", H5T_CSET_UTF8);
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::string> v = ReadStringAttr(f->get(), "encoding", path, "'encoding'");
  EXPECT_TRUE(absl::IsDataLoss(v.status())) << (v.ok() ? *v : v.status().ToString());
  EXPECT_THAT(std::string(v.status().message()),
              AllOf(HasSubstr("attribute 'encoding'"), HasSubstr(kStringChecksumAttr),
                    HasSubstr("another program changed or added a string attribute")));
}

// HDF5 1.10 trusts the sizes inside a global heap collection: with a byte of a string's
// size field flipped it crashed (SIGSEGV, SIGABRT) or looped for ever in H5Aread. The
// collection's CRC-32 is checked with plain reads before HDF5 parses it.
TEST(Hdf5Strings, ACorruptHeapIsRefusedBeforeHdf5ParsesIt) {
  TempDir dir;
  const std::string path = dir / "heap.h5";
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteStringAttr(f->get(), "format", "colonnade-dataset").ok());
  }
  const std::string good = FileBytes(path);
  const size_t heap = good.find("GCOL");
  ASSERT_NE(heap, std::string::npos);
  // The collection's 16-byte header, then object 1: index, references, reserved (8 bytes)
  // and its size (8 bytes, little-endian); flip the size's high bytes.
  for (size_t byte : {2, 5, 7}) {
    std::string bad = good;
    bad[heap + 16 + 8 + byte] ^= 0x10;
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bad.data(), bad.size());
    Scope scope;
    absl::StatusOr<Handle> f = OpenFileReadOnly(path);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<std::string> v = ReadStringAttr(f->get(), "format", path, "'format'");
    EXPECT_TRUE(absl::IsDataLoss(v.status())) << (v.ok() ? *v : v.status().ToString());
    EXPECT_THAT(std::string(v.status().message()),
                AllOf(HasSubstr("the string heap at byte"), HasSubstr("does not match")));
  }
}

TEST(Hdf5Datasets, RoundTripAndChecksummedChunks) {
  TempDir dir;
  const std::string path = dir / "d.h5";
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const std::vector<int64_t> labels = {7, -8};
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteDataset(f->get(), "/plain", "/plain", Dtype::kInt64, {2}, labels.data()).ok());
    WriteOptions o;
    o.checksummed_chunk_bytes = 8;  // one row (2 floats) per chunk
    o.int_attrs = {{"learnable", 1}};
    ASSERT_TRUE(
        WriteDataset(f->get(), "/chunked", "/chunked", Dtype::kFloat32, {3, 2}, values.data(), o)
            .ok());
    ASSERT_TRUE(WriteIntAttr(f->get(), "count", -3).ok());
    ASSERT_TRUE(WriteUintAttr(f->get(), "seed", UINT64_MAX).ok());
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*ReadIntAttr(f->get(), "count", path, "'count'"), -3);
  EXPECT_EQ(*ReadUintAttr(f->get(), "seed", path, "/seed"), UINT64_MAX);
  std::vector<int64_t> dims;
  absl::StatusOr<Handle> d = OpenChecked(f->get(), path, "/plain", Dtype::kInt64, {2}, &dims);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<int64_t> got_labels(2);
  ASSERT_TRUE(ReadAll(d->get(), path, "/plain", Dtype::kInt64, got_labels.data()).ok());
  EXPECT_EQ(got_labels, labels);
  d = OpenChecked(f->get(), path, "/chunked", Dtype::kFloat32, {3, 2}, &dims);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*ReadIntAttr(d->get(), "learnable", path, "/chunked@learnable"), 1);
  Handle dcpl = PlistHandle(H5Dget_create_plist(d->get()));
  EXPECT_EQ(H5Pget_layout(dcpl.get()), H5D_CHUNKED);
  hsize_t chunk[2] = {0, 0};
  ASSERT_EQ(H5Pget_chunk(dcpl.get(), 2, chunk), 2);
  EXPECT_EQ(chunk[0], 1u);
  EXPECT_EQ(chunk[1], 2u);
  EXPECT_EQ(H5Pget_nfilters(dcpl.get()), 1);
  std::vector<float> got(6);
  ASSERT_TRUE(ReadAll(d->get(), path, "/chunked", Dtype::kFloat32, got.data()).ok());
  EXPECT_EQ(got, values);
}

// Blocks of rows (shards' raw /images): a growable dataset written row by row, cut to the
// rows written, read back whole and block by block; a block outside it is DataLoss.
TEST(Hdf5Datasets, BlocksOfRowsRoundTrip) {
  TempDir dir;
  const std::string path = dir / "rows.h5";
  const std::vector<uint8_t> rows = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};  // 3 rows of 2x2
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    absl::StatusOr<Handle> d = CreateGrowableDataset(f->get(), "/rows", Dtype::kUint8, {5, 2, 2});
    ASSERT_TRUE(d.ok()) << d.status();
    for (int64_t r = 0; r < 3; ++r) {
      ASSERT_TRUE(WriteBlock(d->get(), {r, 0, 0}, {1, 2, 2}, Dtype::kUint8, &rows[4 * r]).ok());
    }
    ASSERT_TRUE(SetExtent(d->get(), {3, 2, 2}).ok());
    Handle dcpl = PlistHandle(H5Dget_create_plist(d->get()));
    hsize_t chunk[3] = {0, 0, 0};
    ASSERT_EQ(H5Pget_chunk(dcpl.get(), 3, chunk), 3);
    EXPECT_EQ(chunk[0], 1u) << "one row per chunk";
    EXPECT_EQ(H5Pget_nfilters(dcpl.get()), 0) << "uncompressed";
    ASSERT_TRUE(Flush(f->get()).ok());
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<DatasetReader> r = DatasetReader::Open(f->get(), "/rows");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->Elements(), 12);
  std::vector<uint8_t> all(12);
  ASSERT_TRUE(r->ReadAll(Dtype::kUint8, all.data()).ok());
  EXPECT_EQ(all, rows);
  std::vector<uint8_t> row(4);
  ASSERT_TRUE(r->ReadBlock({2, 0, 0}, {1, 2, 2}, Dtype::kUint8, row.data()).ok());
  EXPECT_EQ(row, std::vector<uint8_t>({9, 10, 11, 12}));
  absl::Status outside = r->ReadBlock({3, 0, 0}, {1, 2, 2}, Dtype::kUint8, row.data());
  EXPECT_TRUE(absl::IsDataLoss(outside)) << outside;
  EXPECT_TRUE(absl::IsDataLoss(DatasetReader::Open(f->get(), "/none").status()));
}

// Files with the checkpoints' properties and the walk of their groups: links listed in
// creation order, a soft link refused, objects opened as the kind asked for.
TEST(Hdf5Groups, CreationOrderHardLinksAndObjectKinds) {
  TempDir dir;
  const std::string path = dir / "groups.h5";
  FileOptions o;
  o.exclusive = true;
  o.format_v110 = true;
  o.link_creation_order = true;
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path, o);
    ASSERT_TRUE(f.ok()) << f.status();
    for (const char* name : {"zeta", "alpha", "mid"}) {
      ASSERT_TRUE(OpenOrCreateGroup(f->get(), name).ok());
    }
    absl::StatusOr<Handle> again = OpenOrCreateGroup(f->get(), "alpha");  // opened, not made
    ASSERT_TRUE(again.ok()) << again.status();
    const std::vector<float> v = {1, 2};
    ASSERT_TRUE(WriteDataset(again->get(), "v", "/alpha/v", Dtype::kFloat32, {2}, v.data()).ok());
    EXPECT_EQ(AttrExists(f->get(), "nothing"), 0);
    ASSERT_TRUE(WriteIntAttr(f->get(), "n", 1).ok());
    EXPECT_EQ(AttrExists(f->get(), "n"), 1);
  }
  Scope scope;
  EXPECT_TRUE(IsHdf5File(path));
  // Exclusive creation refuses a file that exists.
  EXPECT_TRUE(absl::IsPermissionDenied(CreateFile(path, o).status()));
  absl::StatusOr<Handle> f = OpenFileReadOnlyStrongClose(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(LinkCount(f->get()), 3);
  EXPECT_TRUE(LinkExists(f->get(), "mid"));
  EXPECT_FALSE(LinkExists(f->get(), "gone"));
  absl::StatusOr<std::vector<std::string>> names = ListHardLinks(f->get(), path, "/");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(*names, std::vector<std::string>({"alpha", "mid", "zeta"})) << "a file: name order";
  {
    absl::StatusOr<Handle> root = OpenObject(f->get(), "/", ObjectType::kGroup, path, "/");
    ASSERT_TRUE(root.ok()) << root.status();
    names = ListHardLinks(root->get(), path, "/");
    ASSERT_TRUE(names.ok()) << names.status();
    EXPECT_EQ(*names, std::vector<std::string>({"zeta", "alpha", "mid"})) << "creation order";
  }
  absl::StatusOr<Handle> alpha = OpenObject(f->get(), "alpha", ObjectType::kGroup, path, "/alpha");
  ASSERT_TRUE(alpha.ok()) << alpha.status();
  absl::StatusOr<std::vector<uint64_t>> dims;
  {
    absl::StatusOr<Handle> v =
        OpenObject(alpha->get(), "v", ObjectType::kDataset, path, "/alpha/v");
    ASSERT_TRUE(v.ok()) << v.status();
    dims = ArrayExtents(v->get(), Dtype::kFloat32, path, "/alpha/v");
    ASSERT_TRUE(dims.ok()) << dims.status();
    EXPECT_EQ(*dims, std::vector<uint64_t>({2}));
    EXPECT_EQ(ArrayExtents(v->get(), Dtype::kInt32, path, "/alpha/v").status().message(),
              path + ": /alpha/v is not int32");
    EXPECT_THAT(CheckChecksummedChunks(v->get(), *dims, path, "/alpha/v").message(),
                HasSubstr("/alpha/v is not chunked, so it has no Fletcher-32 checksum"));
  }
  EXPECT_EQ(OpenObject(f->get(), "alpha", ObjectType::kDataset, path, "/alpha").status().message(),
            path + ": /alpha is not a dataset");
  // A soft link is not stored data.
  f->Reset();
  Handle rw = FileHandle(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  ASSERT_GE(H5Lcreate_soft("/alpha", rw.get(), "link", H5P_DEFAULT, H5P_DEFAULT), 0);
  names = ListHardLinks(rw.get(), path, "/");
  EXPECT_TRUE(absl::IsDataLoss(names.status()));
  EXPECT_EQ(names.status().message(), path + ": /link is a soft or external link, not stored data");
}

// hdf5.h's error mapping: a malformed file is DataLoss, a wrong argument InvalidArgument,
// nothing at the path NotFound, a FIFO or directory FailedPrecondition.
TEST(Hdf5Errors, OneMapping) {
  TempDir dir;
  const std::string path = dir / "f.h5";
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteStringAttr(f->get(), "name", "x").ok());
    int32_t v[2] = {1, 2};
    ASSERT_TRUE(WriteDataset(f->get(), "/labels", "/labels", Dtype::kInt32, {2}, v).ok());
    absl::Status bad = WriteDataset(f->get(), "/neg", "/neg", Dtype::kInt32, {-1}, v);
    EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<int64_t> missing = ReadIntAttr(f->get(), "height", path, "'height'");
  EXPECT_TRUE(absl::IsDataLoss(missing.status())) << missing.status();
  EXPECT_EQ(missing.status().message(), path + ": attribute 'height' is missing");
  absl::StatusOr<int64_t> wrong = ReadIntAttr(f->get(), "name", path, "/name");
  EXPECT_TRUE(absl::IsDataLoss(wrong.status())) << wrong.status();
  EXPECT_EQ(wrong.status().message(),
            path + ": attribute /name has type string, expected an integer");
  std::vector<int64_t> dims;
  absl::StatusOr<Handle> d = OpenChecked(f->get(), path, "/labels", Dtype::kFloat32, {2}, &dims);
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  EXPECT_EQ(d.status().message(), path + ": /labels: dtype is int32, expected float32");
  d = OpenChecked(f->get(), path, "/labels", Dtype::kInt32, {3}, &dims);
  EXPECT_EQ(d.status().message(), path + ": /labels: shape is [2], expected [3]");
  d = OpenChecked(f->get(), path, "/images", Dtype::kUint8, {-1}, &dims);
  EXPECT_TRUE(absl::IsDataLoss(d.status())) << d.status();
  EXPECT_EQ(d.status().message(), path + ": /images: dataset is missing");

  EXPECT_TRUE(absl::IsNotFound(OpenFileReadOnly(dir / "absent.h5").status()));
  absl::StatusOr<Handle> directory = OpenFileReadOnly(dir / "");
  EXPECT_TRUE(absl::IsFailedPrecondition(directory.status())) << directory.status();
  const std::string fifo = dir / "fifo.h5";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<Handle> from_fifo = OpenFileReadOnly(fifo);  // refused, never opened
  EXPECT_TRUE(absl::IsFailedPrecondition(from_fifo.status())) << from_fifo.status();
  const std::string text = dir / "text.h5";
  std::ofstream(text) << "not hdf5";
  absl::StatusOr<Handle> not_hdf5 = OpenFileReadOnly(text);
  EXPECT_TRUE(absl::IsDataLoss(not_hdf5.status())) << not_hdf5.status();
}

TEST(Hdf5Sizes, CheckedByteCountRefusesOverflow) {
  int64_t bytes = 0;
  EXPECT_TRUE(CheckedByteCount({3, 4}, 4, &bytes));
  EXPECT_EQ(bytes, 48);
  EXPECT_TRUE(CheckedByteCount({}, 4, &bytes));  // a scalar
  EXPECT_EQ(bytes, 4);
  EXPECT_FALSE(CheckedByteCount({1ull << 32, 1ull << 32}, 1, &bytes));
  EXPECT_FALSE(CheckedByteCount({1ull << 62}, 4, &bytes));
  EXPECT_FALSE(CheckedByteCount({~0ull}, 1, &bytes));
}

}  // namespace
}  // namespace colonnade::hdf5
