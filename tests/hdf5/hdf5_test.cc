// The HDF5 layer (src/hdf5/hdf5.h): files written by older builds (variable-length strings)
// still read, new files use the one string encoding (fixed-length UTF-8), errors follow the
// one mapping, datasets round-trip.
#include "hdf5/hdf5.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace colonnade::hdf5 {
namespace {

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

TEST(Hdf5Strings, WritesFixedLengthNullPaddedUtf8AndReadsItBack) {
  TempDir dir;
  const std::string path = dir / "new.h5";
  const std::vector<std::string> names = {"cat", "", "a longer name", "\xc3\xa9t\xc3\xa9"};
  {
    Scope scope;
    absl::StatusOr<Handle> f = CreateFile(path);
    ASSERT_TRUE(f.ok()) << f.status();
    ASSERT_TRUE(WriteStringAttr(f->get(), "format", "colonnade-dataset").ok());
    ASSERT_TRUE(WriteStringAttr(f->get(), "empty", "").ok());
    ASSERT_TRUE(WriteStrings(f->get(), "/names", names).ok());
    ASSERT_TRUE(WriteStrings(f->get(), "/none", {}).ok());
    WriteNullTermAsciiAttr(f->get(), "nullterm", "jpeg");
  }
  Scope scope;
  absl::StatusOr<Handle> f = OpenFileReadOnly(path);
  ASSERT_TRUE(f.ok()) << f.status();
  // The encoding on disk: fixed-length, null-padded, UTF-8, for attributes and datasets.
  for (const char* attr : {"format", "empty"}) {
    Handle a = AttrHandle(H5Aopen(f->get(), attr, H5P_DEFAULT));
    Handle t = TypeHandle(H5Aget_type(a.get()));
    EXPECT_EQ(H5Tis_variable_str(t.get()), 0) << attr;
    EXPECT_EQ(H5Tget_strpad(t.get()), H5T_STR_NULLPAD) << attr;
    EXPECT_EQ(H5Tget_cset(t.get()), H5T_CSET_UTF8) << attr;
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
  EXPECT_EQ(*ReadStringAttr(f->get(), "nullterm", path, "'nullterm'"), "jpeg");
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
