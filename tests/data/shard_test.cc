// Shard format: round trips, determinism, overwrite protection, and validation errors
// that name the file and the field.
#include <hdf5.h>

#include <fstream>

#include <cstdio>

#include "data/dataset.h"
#include "data/image.h"
#include "data/shard_format.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace colonnade::data {
namespace {

using testing::TempDir;

constexpr int kH = 8, kW = 8, kC = 3, kClasses = 10;

uint8_t PixelOf(int64_t image, int64_t e) {
  return static_cast<uint8_t>((image * 7 + e * 13 + (e % 3) * 50) % 256);
}
int LabelOf(int64_t image) { return static_cast<int>((image * 3) % kClasses); }

std::vector<uint8_t> ImagePixels(int64_t i) {
  std::vector<uint8_t> px(kH * kW * kC);
  for (size_t e = 0; e < px.size(); ++e) px[e] = PixelOf(i, e);
  return px;
}

// Writes `n` images into `dir`.
void WriteDataset(const std::string& dir, int64_t n, const std::string& encoding,
                  int64_t shard_size, bool force = false) {
  DatasetWriterOptions o;
  o.dir = dir;
  o.encoding = encoding;
  o.height = kH;
  o.width = kW;
  o.channels = kC;
  o.num_classes = kClasses;
  for (int k = 0; k < kClasses; ++k) o.class_names.push_back("c" + std::to_string(k));
  o.shard_size = shard_size;
  o.force = force;
  absl::StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < n; ++i) {
    std::vector<uint8_t> px = ImagePixels(i);
    std::string jpg;
    if (encoding == "jpeg") {
      Image img;
      img.height = kH;
      img.width = kW;
      img.channels = kC;
      img.pixels = px;
      jpg = *EncodeJpeg(img, 95);
    }
    ASSERT_TRUE((*w)->Add(px.data(), &jpg, LabelOf(i)).ok());
  }
  absl::Status s = (*w)->Finish();
  ASSERT_TRUE(s.ok()) << s;
}

// Opens `path` read-write and runs `fn` on the file id.
template <typename Fn>
void EditHdf5(const std::string& path, Fn fn) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0) << path;
  fn(f);
  H5Fclose(f);
}

void ReplaceDataset(hid_t f, const char* name, hid_t type, std::vector<hsize_t> dims) {
  H5Ldelete(f, name, H5P_DEFAULT);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t d = H5Dcreate2(f, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(d);
  H5Sclose(space);
}

void SetIntAttr(hid_t f, const char* name, int64_t v) {
  hid_t a = H5Aopen(f, name, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &v);
  H5Aclose(a);
}

std::string OpenError(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(spec);
  EXPECT_FALSE(ds.ok()) << "expected an error opening " << spec;
  return ds.ok() ? "" : std::string(ds.status().message());
}

TEST(ShardTest, RawRoundTripAcrossShards) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 50, "raw", 16);
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const DatasetInfo& info = (*ds)->info();
  EXPECT_EQ(info.size, 50);
  EXPECT_EQ(info.height, kH);
  EXPECT_EQ(info.width, kW);
  EXPECT_EQ(info.channels, kC);
  EXPECT_EQ(info.num_classes, kClasses);
  EXPECT_EQ(info.encoding, "raw");
  EXPECT_EQ(info.class_names[3], "c3");
  ASSERT_EQ(info.class_counts.size(), static_cast<size_t>(kClasses));
  EXPECT_EQ(info.class_counts[0], 5);
  EXPECT_TRUE(testing::PathExists(dir + "/shard-00003.h5"));
  EXPECT_FALSE(testing::PathExists(dir + "/shard-00004.h5"));
  std::vector<double> mean(kH * kW * kC, 0.0);
  for (int64_t i = 0; i < 50; ++i) {
    std::vector<uint8_t> px;
    absl::StatusOr<int> label = (*ds)->Read(i, &px);
    ASSERT_TRUE(label.ok()) << label.status();
    EXPECT_EQ(*label, LabelOf(i));
    EXPECT_EQ((*ds)->Label(i), LabelOf(i));
    ASSERT_EQ(px, ImagePixels(i)) << "image " << i;
    for (size_t e = 0; e < px.size(); ++e) mean[e] += px[e] / 50.0;
  }
  for (size_t e = 0; e < mean.size(); ++e) {
    EXPECT_NEAR((*ds)->mean_image()[e], mean[e], 1e-3);
  }
  std::vector<uint8_t> px;
  EXPECT_FALSE((*ds)->Read(50, &px).ok());
  // The index file can be given instead of the directory.
  EXPECT_TRUE(OpenDataset(dir + "/dataset.h5").ok());
}

TEST(ShardTest, JpegRoundTrip) {
  TempDir tmp;
  const std::string dir = tmp / "ds";
  WriteDataset(dir, 20, "jpeg", 8);
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(dir);
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->info().encoding, "jpeg");
  for (int64_t i = 0; i < 20; ++i) {
    std::vector<uint8_t> px;
    absl::StatusOr<int> label = (*ds)->Read(i, &px);
    ASSERT_TRUE(label.ok()) << label.status();
    EXPECT_EQ(*label, LabelOf(i));
    ASSERT_EQ(px.size(), static_cast<size_t>(kH * kW * kC));
  }
}

TEST(ShardTest, OutputIsDeterministicAndOverwriteNeedsForce) {
  TempDir tmp;
  WriteDataset(tmp / "a", 30, "raw", 8);
  WriteDataset(tmp / "b", 30, "raw", 8);
  for (const char* f : {"dataset.h5", "shard-00000.h5", "shard-00003.h5"}) {
    EXPECT_EQ(testing::ReadFileBytes(tmp / "a/" + f), testing::ReadFileBytes(tmp / "b/" + f)) << f;
  }
  DatasetWriterOptions o;
  o.dir = tmp / "a";
  o.height = kH;
  o.width = kW;
  o.num_classes = 1;
  o.class_names = {"x"};
  absl::StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Create(o);
  ASSERT_FALSE(w.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(w.status()));
  EXPECT_NE(w.status().message().find("--force"), std::string::npos) << w.status();
  EXPECT_NE(w.status().message().find(tmp / "a"), std::string::npos) << w.status();
  // With force the old files are replaced (a smaller dataset leaves no stale shards).
  WriteDataset(tmp / "a", 5, "raw", 8, /*force=*/true);
  EXPECT_FALSE(testing::PathExists(tmp / "a/shard-00001.h5"));
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "a");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->info().size, 5);
}

TEST(ShardTest, EmptyDatasetIsRefused) {
  TempDir tmp;
  DatasetWriterOptions o;
  o.dir = tmp / "empty";
  o.height = kH;
  o.width = kW;
  o.num_classes = 1;
  o.class_names = {"x"};
  absl::StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Create(o);
  ASSERT_TRUE(w.ok());
  absl::Status s = (*w)->Finish();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("empty dataset"), std::string::npos) << s;
  // An index that claims 0 images.
  WriteDataset(tmp / "ds", 4, "raw", 8);
  EditHdf5(tmp / "ds/dataset.h5", [](hid_t f) { SetIntAttr(f, "size", 0); });
  std::string m = OpenError(tmp / "ds");
  EXPECT_EQ(m, tmp / "ds/dataset.h5" + ": attribute 'size' is 0: the dataset is empty");
  // A negative count is no "empty dataset": it is a wrong value, said as such.
  EditHdf5(tmp / "ds/dataset.h5", [](hid_t f) { SetIntAttr(f, "size", -1); });
  EXPECT_EQ(OpenError(tmp / "ds"),
            tmp / "ds/dataset.h5" + ": attribute 'size' is -1, must be a positive image count");
  // An unsigned 2^64 - 1 is reported as it is, not as HDF5's clamped 9223372036854775807.
  EditHdf5(tmp / "ds/dataset.h5", [](hid_t f) {
    H5Adelete(f, "size");
    hid_t space = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(f, "size", H5T_STD_U64LE, space, H5P_DEFAULT, H5P_DEFAULT);
    const uint64_t v = UINT64_MAX;
    H5Awrite(a, H5T_NATIVE_UINT64, &v);
    H5Aclose(a);
    H5Sclose(space);
  });
  m = OpenError(tmp / "ds");
  EXPECT_NE(m.find("attribute 'size' is 18446744073709551615"), std::string::npos) << m;
  EXPECT_EQ(m.find("9223372036854775807"), std::string::npos) << m;
}

TEST(ShardTest, MissingDirectoryIndexAndShard) {
  TempDir tmp;
  std::string m = OpenError(tmp / "nope");
  EXPECT_EQ(m, tmp / "nope" + ": dataset directory not found");
  // A file where a directory belongs is named as such, not "not found".
  testing::MakeDir(tmp / "d");
  { std::ofstream(tmp / "d/file.txt") << "x"; }
  EXPECT_EQ(OpenError(tmp / "d/file.txt"),
            tmp / "d/file.txt" +
                ": is a file, not a dataset directory (give the directory make_shards wrote, "
                "which holds dataset.h5 and its shards)");
  testing::MakeDir(tmp / "emptydir");
  m = OpenError(tmp / "emptydir");
  EXPECT_NE(m.find(tmp / "emptydir/dataset.h5" + ": file not found"), std::string::npos) << m;
  WriteDataset(tmp / "ds", 20, "raw", 8);
  unlink((tmp / "ds/shard-00001.h5").c_str());
  m = OpenError(tmp / "ds");
  EXPECT_EQ(m, tmp / "ds/shard-00001.h5" + ": file not found");
}

TEST(ShardTest, TruncatedAndCorruptShards) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 8);
  const std::string shard = tmp / "ds/shard-00001.h5";
  const std::string bytes = testing::ReadFileBytes(shard);
  // Truncated.
  testing::WriteFileBytes(shard, bytes.substr(0, bytes.size() / 2));
  std::string m = OpenError(tmp / "ds");
  EXPECT_EQ(m.rfind(shard + ": ", 0), 0u) << m;
  EXPECT_NE(m.find("truncated or corrupt"), std::string::npos) << m;
  // Garbage instead of HDF5.
  testing::WriteFileBytes(shard, std::string(bytes.size(), 'x'));
  m = OpenError(tmp / "ds");
  EXPECT_EQ(m, shard + ": not an HDF5 file (no HDF5 signature; corrupt or not a shard)");
  // Signature intact, metadata destroyed.
  std::string smashed = bytes;
  for (size_t i = 96; i < std::min<size_t>(smashed.size(), 4096); ++i) smashed[i] = '\x5a';
  testing::WriteFileBytes(shard, smashed);
  m = OpenError(tmp / "ds");
  EXPECT_EQ(m.rfind(shard + ": ", 0), 0u) << m;
}

TEST(ShardTest, WrongDtypeShapeAndMissingFields) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 100);
  const std::string shard = tmp / "ds/shard-00000.h5";
  const std::string pristine = testing::ReadFileBytes(shard);

  EditHdf5(shard, [](hid_t f) { ReplaceDataset(f, "/labels", H5T_IEEE_F32LE, {20}); });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": /labels: dtype is float32, expected int32");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { ReplaceDataset(f, "/labels", H5T_STD_I32LE, {19}); });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": /labels: shape is [19], expected [20]");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { ReplaceDataset(f, "/images", H5T_STD_U8LE, {20, 8, 9, 3}); });
  EXPECT_EQ(OpenError(tmp / "ds"),
            shard + ": /images: shape is [20, 8, 9, 3], expected [20, 8, 8, 3]");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { ReplaceDataset(f, "/images", H5T_STD_I16LE, {20, 8, 8, 3}); });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": /images: dtype is int16, expected uint8");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { H5Ldelete(f, "/labels", H5P_DEFAULT); });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": /labels: dataset is missing");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { SetIntAttr(f, "height", 9); });
  EXPECT_EQ(OpenError(tmp / "ds"),
            shard + ": attribute 'height' is 9, expected 8 (from dataset.h5)");

  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) { H5Adelete(f, "num_classes"); });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": attribute 'num_classes' is missing");

  // Index fields.
  testing::WriteFileBytes(shard, pristine);
  const std::string index = tmp / "ds/dataset.h5";
  const std::string index_pristine = testing::ReadFileBytes(index);
  EditHdf5(index, [](hid_t f) { ReplaceDataset(f, "/mean_image", H5T_IEEE_F64LE, {8, 8, 3}); });
  EXPECT_EQ(OpenError(tmp / "ds"), index + ": /mean_image: dtype is float64, expected float32");
  testing::WriteFileBytes(index, index_pristine);
  EditHdf5(index, [](hid_t f) { SetIntAttr(f, "channels", 4); });
  EXPECT_EQ(OpenError(tmp / "ds"), index + ": attribute 'channels' is 4, must be 1 or 3");
  testing::WriteFileBytes(index, index_pristine);
  EditHdf5(index, [](hid_t f) { SetIntAttr(f, "version", 7); });
  EXPECT_EQ(OpenError(tmp / "ds"),
            index + ": attribute 'version' is 7; this build reads version 1");
  testing::WriteFileBytes(index, index_pristine);
  EXPECT_TRUE(OpenDataset(tmp / "ds").ok());
}

TEST(ShardTest, LabelOutOfRangeNamesFileFieldAndIndex) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 50, "raw", 100);
  const std::string shard = tmp / "ds/shard-00000.h5";
  EditHdf5(shard, [](hid_t f) {
    hid_t d = H5Dopen2(f, "/labels", H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hsize_t start = 40, count = 1;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    hid_t mem = H5Screate_simple(1, &count, nullptr);
    int32_t v = 12;
    H5Dwrite(d, H5T_NATIVE_INT32, mem, space, H5P_DEFAULT, &v);
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(d);
  });
  EXPECT_EQ(OpenError(tmp / "ds"), shard + ": /labels: label 12 at index 40 is >= num_classes 10");
}

TEST(ShardTest, BadJpegOffsetsAndUndecodableImage) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 10, "jpeg", 100);
  const std::string shard = tmp / "ds/shard-00000.h5";
  const std::string pristine = testing::ReadFileBytes(shard);
  EditHdf5(shard, [](hid_t f) {
    hid_t d = H5Dopen2(f, "/offsets", H5P_DEFAULT);
    std::vector<int64_t> off(11);
    H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data());
    std::swap(off[3], off[4]);
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data());
    H5Dclose(d);
  });
  std::string m = OpenError(tmp / "ds");
  EXPECT_EQ(m.rfind(shard + ": /offsets: image ", 0), 0u) << m;

  // Image 4's bytes replaced by garbage: opening succeeds (pixel data is not decoded on
  // open), reading that image fails with file, field and index.
  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [](hid_t f) {
    hid_t od = H5Dopen2(f, "/offsets", H5P_DEFAULT);
    std::vector<int64_t> off(11);
    H5Dread(od, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data());
    H5Dclose(od);
    hid_t d = H5Dopen2(f, "/images", H5P_DEFAULT);
    hid_t space = H5Dget_space(d);
    hsize_t start = off[4], count = off[5] - off[4];
    H5Sselect_hyperslab(space, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    hid_t mem = H5Screate_simple(1, &count, nullptr);
    std::vector<uint8_t> junk(count, 0x11);
    H5Dwrite(d, H5T_NATIVE_UINT8, mem, space, H5P_DEFAULT, junk.data());
    H5Sclose(mem);
    H5Sclose(space);
    H5Dclose(d);
  });
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint8_t> px;
  EXPECT_TRUE((*ds)->Read(3, &px).ok());
  absl::StatusOr<int> r = (*ds)->Read(4, &px);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(std::string(r.status().message()).rfind(shard + ": /images: image 4: undecodable", 0),
            0u)
      << r.status();
}

// ---- crafted files: every claimed size is checked against the bytes present ---------------
//
// Each case below is a file an attacker or a broken tool could produce. Opening (and
// reading) runs in a guarded child: before the fixes these aborted on allocation failure,
// blocked forever, or succeeded and delivered zeros.

// Replaces dataset `name` by a chunked one of `dims` of which nothing (or only the first
// `written` rows along dimension 0) was ever written: HDF5 stores no bytes for the rest
// and reads them back as zeros without an error.
void ReplaceWithUnwritten(hid_t f, const char* name, hid_t type, std::vector<hsize_t> dims,
                          std::vector<hsize_t> chunk, hsize_t written = 0) {
  H5Ldelete(f, name, H5P_DEFAULT);
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  hid_t d = H5Dcreate2(f, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (written > 0) {
    std::vector<hsize_t> start(dims.size(), 0), count = dims;
    count[0] = written;
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    hid_t mem = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
    size_t n = H5Tget_size(type);
    for (hsize_t c : count) n *= c;
    std::vector<uint8_t> bytes(n, 7);
    H5Dwrite(d, type, mem, space, H5P_DEFAULT, bytes.data());
    H5Sclose(mem);
  }
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Sclose(space);
}

void WriteInt64s(hid_t f, const char* name, const std::vector<int64_t>& v) {
  H5Ldelete(f, name, H5P_DEFAULT);
  hsize_t n = v.size();
  hid_t space = H5Screate_simple(1, &n, nullptr);
  hid_t d = H5Dcreate2(f, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Dclose(d);
  H5Sclose(space);
}

// Opens `dir` (and reads image `read_index` when >= 0) in a guarded child: the error
// message, "opened" / "read ok", or how the child died.
std::string GuardedOpen(const std::string& dir, int64_t read_index = -1) {
  testing::Guarded g = testing::RunGuarded([&]() -> std::string {
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(dir);
    if (!ds.ok()) return std::string(ds.status().message());
    if (read_index < 0) return "opened";
    std::vector<uint8_t> px;
    absl::StatusOr<int> r = (*ds)->Read(read_index, &px);
    return r.ok() ? "read ok" : std::string(r.status().message());
  });
  return g.text;
}

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

TEST(CraftedShardTest, HugeImageSizeInTheIndexIsRefusedBeforeAllocating) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 100);
  const std::string index = tmp / "ds/dataset.h5";
  const std::string pristine = testing::ReadFileBytes(index);
  // 60000 x 60000: consistent attributes and /mean_image shape, no bytes behind them.
  // Before: mean_image.resize(60000*60000*3) aborted the process.
  EditHdf5(index, [](hid_t f) {
    SetIntAttr(f, "height", 60000);
    SetIntAttr(f, "width", 60000);
    ReplaceWithUnwritten(f, "/mean_image", H5T_IEEE_F32LE, {60000, 60000, 3}, {1, 60000, 3});
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            index +
                ": attributes 'height'x'width': 60000x60000 is larger than the limit of "
                "16384 pixels per side (COLONNADE_MAX_IMAGE_SIDE)");
  // Within the side limit, beyond the pixel limit.
  testing::WriteFileBytes(index, pristine);
  EditHdf5(index, [](hid_t f) {
    SetIntAttr(f, "height", 12000);
    SetIntAttr(f, "width", 12000);
    ReplaceWithUnwritten(f, "/mean_image", H5T_IEEE_F32LE, {12000, 12000, 3}, {1, 12000, 3});
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            index +
                ": attributes 'height'x'width': 12000x12000 has more than the limit of "
                "134217728 pixels (COLONNADE_MAX_IMAGE_PIXELS)");
  // The right size, never written: it read back as an all-zero mean image.
  testing::WriteFileBytes(index, pristine);
  EditHdf5(index, [](hid_t f) {
    ReplaceWithUnwritten(f, "/mean_image", H5T_IEEE_F32LE, {kH, kW, kC}, {1, kW, kC});
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            index +
                ": /mean_image: was never written (no storage is allocated for its 192 "
                "elements, which would read back as zeros)");
}

TEST(CraftedShardTest, HugeClassCountIsRefusedBeforeAllocating) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 100);
  const std::string index = tmp / "ds/dataset.h5";
  const std::string pristine = testing::ReadFileBytes(index);
  EditHdf5(index, [](hid_t f) {
    SetIntAttr(f, "num_classes", int64_t{1} << 30);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    ReplaceWithUnwritten(f, "/class_names", str, {hsize_t{1} << 30}, {1 << 16});
    H5Tclose(str);
    ReplaceWithUnwritten(f, "/class_counts", H5T_STD_I64LE, {hsize_t{1} << 30}, {1 << 16});
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            index + ": attribute 'num_classes' is 1073741824, must be in 1..16777216");
  // Within the limit, but no bytes behind the class names.
  testing::WriteFileBytes(index, pristine);
  EditHdf5(index, [](hid_t f) {
    SetIntAttr(f, "num_classes", 1000000);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    ReplaceWithUnwritten(f, "/class_names", str, {1000000}, {1 << 16});
    H5Tclose(str);
    ReplaceWithUnwritten(f, "/class_counts", H5T_STD_I64LE, {1000000}, {1 << 16});
  });
  std::string m = GuardedOpen(tmp / "ds");
  EXPECT_TRUE(StartsWith(m, index + ": /class_names: was never written")) << m;
  // Counts that sum to 'size' only by wrapping around 2^64.
  testing::WriteFileBytes(index, pristine);
  EditHdf5(index, [](hid_t f) {
    const int64_t q = int64_t{1} << 62;
    WriteInt64s(f, "/class_counts", {q, q, q, q, 20, 0, 0, 0, 0, 0});
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"), index + ": /class_counts: counts overflow a 64-bit sum");
}

TEST(CraftedShardTest, ImagesClaimedWithoutBytesAreRefused) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 100);
  const std::string index = tmp / "ds/dataset.h5";
  const std::string shard = tmp / "ds/shard-00000.h5";
  const std::string pristine = testing::ReadFileBytes(shard);
  // A small dataset claiming 2^27 images: every attribute and shape agrees, the labels
  // and pixels were never written. Before: accepted, and trained on zeros.
  const int64_t n = int64_t{1} << 27;
  EditHdf5(index, [&](hid_t f) {
    SetIntAttr(f, "size", n);
    std::vector<int64_t> counts(kClasses, 0);
    counts[0] = n;
    WriteInt64s(f, "/class_counts", counts);
    WriteInt64s(f, "/shard_sizes", {n});
  });
  EditHdf5(shard, [&](hid_t f) {
    SetIntAttr(f, "count", n);
    ReplaceWithUnwritten(f, "/labels", H5T_STD_I32LE, {hsize_t(n)}, {1 << 20});
    ReplaceWithUnwritten(f, "/images", H5T_STD_U8LE, {hsize_t(n), kH, kW, kC}, {1, kH, kW, kC});
  });
  std::string m = GuardedOpen(tmp / "ds", 12345);
  EXPECT_TRUE(StartsWith(m, shard + ": /images: was never written")) << m;

  // Half of the image chunks never written: those images read back as zeros.
  WriteDataset(tmp / "half", 20, "raw", 100);
  const std::string half = tmp / "half/shard-00000.h5";
  EditHdf5(half, [](hid_t f) {
    ReplaceWithUnwritten(f, "/images", H5T_STD_U8LE, {20, kH, kW, kC}, {1, kH, kW, kC}, 10);
  });
  EXPECT_EQ(GuardedOpen(tmp / "half", 15),
            half +
                ": /images: has only 10 of its 20 chunks written (the others would read "
                "back as zeros)");
  // Labels never written (they would all be class 0).
  testing::WriteFileBytes(shard, pristine);
  WriteDataset(tmp / "labels", 20, "raw", 100);
  const std::string lshard = tmp / "labels/shard-00000.h5";
  EditHdf5(lshard, [](hid_t f) { ReplaceWithUnwritten(f, "/labels", H5T_STD_I32LE, {20}, {4}); });
  m = GuardedOpen(tmp / "labels");
  EXPECT_TRUE(StartsWith(m, lshard + ": /labels: was never written")) << m;
}

TEST(CraftedShardTest, JpegOffsetsClaimingATerabyteAreRefused) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 10, "jpeg", 100);
  const std::string shard = tmp / "ds/shard-00000.h5";
  // /images claims 2^40 bytes (never written) and the last offset agrees. Before: reading
  // image 9 allocated ~2^40 bytes and aborted.
  EditHdf5(shard, [](hid_t f) {
    hid_t od = H5Dopen2(f, "/offsets", H5P_DEFAULT);
    std::vector<int64_t> off(11);
    H5Dread(od, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, off.data());
    H5Dclose(od);
    off[10] = int64_t{1} << 40;
    WriteInt64s(f, "/offsets", off);
    H5Ldelete(f, "/images", H5P_DEFAULT);
    hsize_t n = hsize_t{1} << 40;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(f, "/images", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(d);
    H5Sclose(space);
  });
  std::string m = GuardedOpen(tmp / "ds", 9);
  EXPECT_TRUE(StartsWith(m, shard + ": /images: was never written")) << m;
}

// Writes a one-shard JPEG dataset of kH x kW images whose stored stream for image 3 is
// `stream` (any bytes).
void WriteJpegDatasetWithStream(const std::string& dir, const std::string& stream) {
  DatasetWriterOptions o;
  o.dir = dir;
  o.encoding = "jpeg";
  o.height = kH;
  o.width = kW;
  o.channels = kC;
  o.num_classes = kClasses;
  for (int k = 0; k < kClasses; ++k) o.class_names.push_back("c" + std::to_string(k));
  absl::StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Create(o);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int64_t i = 0; i < 6; ++i) {
    Image img;
    img.height = kH;
    img.width = kW;
    img.channels = kC;
    img.pixels = ImagePixels(i);
    std::string jpg = i == 3 ? stream : *EncodeJpeg(img, 95);
    ASSERT_TRUE((*w)->Add(img.pixels.data(), &jpg, LabelOf(i)).ok());
  }
  ASSERT_TRUE((*w)->Finish().ok());
}

TEST(CraftedShardTest, JpegOfAnotherSizeThanDeclaredIsAnError) {
  TempDir tmp;
  Image big;
  big.height = 2 * kH;
  big.width = 2 * kW;
  big.channels = kC;
  big.pixels.assign(big.height * big.width * kC, 90);
  // A real 16x16 JPEG in a dataset of 8x8 images. Before: silently resized to 8x8.
  WriteJpegDatasetWithStream(tmp / "ds", *EncodeJpeg(big, 90));
  const std::string shard = tmp / "ds/shard-00000.h5";
  EXPECT_EQ(GuardedOpen(tmp / "ds", 3),
            shard +
                ": /images: image 3: JPEG is 16x16, but the dataset's images are 8x8 "
                "(height x width)");
  EXPECT_EQ(GuardedOpen(tmp / "ds", 2), "read ok");
  // A header claiming 60000 x 60000. Before: the decoder allocated 10.8 GB and training
  // aborted (on every rank, under mpirun too).
  WriteJpegDatasetWithStream(tmp / "huge",
                             testing::JpegClaimingSize(*EncodeJpeg(big, 90), 60000, 60000));
  EXPECT_EQ(GuardedOpen(tmp / "huge", 3), tmp / "huge/shard-00000.h5" +
                                              ": /images: image 3: JPEG is 60000x60000, but the "
                                              "dataset's images are 8x8 (height x width)");
}

TEST(CraftedShardTest, LinksToOtherFilesAndExternalStorageAreRefused) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 100);
  const std::string shard = tmp / "ds/shard-00000.h5";
  const std::string index = tmp / "ds/dataset.h5";
  const std::string pristine = testing::ReadFileBytes(shard);
  const std::string index_pristine = testing::ReadFileBytes(index);
  // The real labels moved to another file, reached by an external link (HDF5 would follow
  // it to any path: a FIFO there blocks, a device reads forever). Before: followed.
  const std::string other = tmp / "other.h5";
  {
    hid_t src = H5Fopen(shard.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t dst = H5Fcreate(other.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Ocopy(src, "/labels", dst, "/labels", H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(dst);
    H5Fclose(src);
  }
  EditHdf5(shard, [&](hid_t f) {
    H5Ldelete(f, "/labels", H5P_DEFAULT);
    H5Lcreate_external(other.c_str(), "/labels", f, "/labels", H5P_DEFAULT, H5P_DEFAULT);
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            shard + ": /labels: is an external link to '" + other +
                ":/labels', not data stored in this file (links are refused)");
  // A soft link inside the index.
  EditHdf5(index, [](hid_t f) {
    H5Lmove(f, "/mean_image", f, "/mean_data", H5P_DEFAULT, H5P_DEFAULT);
    H5Lcreate_soft("/mean_data", f, "/mean_image", H5P_DEFAULT, H5P_DEFAULT);
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            index +
                ": /mean_image: is a soft link to '/mean_data', not data stored in this "
                "file (links are refused)");
  testing::WriteFileBytes(index, index_pristine);
  // A virtual dataset whose data is the other file's labels.
  testing::WriteFileBytes(shard, pristine);
  EditHdf5(shard, [&](hid_t f) {
    H5Ldelete(f, "/labels", H5P_DEFAULT);
    hsize_t n = 20;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_virtual(dcpl, space, other.c_str(), "/labels", space);
    hid_t d = H5Dcreate2(f, "/labels", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            shard + ": /labels: is a virtual dataset: its data lives in other files (refused)");
  // Raw data in an external flat file (any path, e.g. /dev/zero).
  testing::WriteFileBytes(shard, pristine);
  testing::WriteFileBytes(tmp / "labels.raw", std::string(80, '\0'));
  EditHdf5(shard, [&](hid_t f) {
    H5Ldelete(f, "/labels", H5P_DEFAULT);
    hsize_t n = 20;
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_external(dcpl, (tmp / "labels.raw").c_str(), 0, 80);
    hid_t d = H5Dcreate2(f, "/labels", H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
  });
  EXPECT_EQ(GuardedOpen(tmp / "ds"),
            shard + ": /labels: keeps its data in external raw files (refused)");
}

TEST(CraftedShardTest, FifosAreNeverOpened) {
  TempDir tmp;
  WriteDataset(tmp / "ds", 20, "raw", 8);
  const std::string shard = tmp / "ds/shard-00001.h5";
  unlink(shard.c_str());
  ASSERT_TRUE(testing::MakeFifo(shard));
  // Before: open() blocked forever (the guard kills the child after 10 s).
  testing::Guarded g = testing::RunGuarded(
      [&] {
        absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
        return ds.ok() ? std::string("opened") : std::string(ds.status().message());
      },
      10);
  EXPECT_EQ(g.text, shard + ": is a FIFO, not a regular file");
  // The index as a FIFO.
  const std::string index = tmp / "ds/dataset.h5";
  unlink(index.c_str());
  ASSERT_TRUE(testing::MakeFifo(index));
  g = testing::RunGuarded(
      [&] {
        absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
        return ds.ok() ? std::string("opened") : std::string(ds.status().message());
      },
      10);
  EXPECT_EQ(g.text, index + ": is a FIFO, not a regular file");
}

// Unreadable or invalid files are DataLoss (the trainer's exit 1, "unreadable data" in
// docs/OPERATIONS.md); a path that is no dataset is NotFound (exit 2, a usage error).
TEST(CraftedShardTest, ErrorCodesSeparateUnreadableDataFromAWrongPath) {
  TempDir tmp;
  EXPECT_TRUE(absl::IsNotFound(OpenDataset(tmp / "nope").status()));
  testing::MakeDir(tmp / "empty");
  EXPECT_TRUE(absl::IsNotFound(OpenDataset(tmp / "empty").status()));
  WriteDataset(tmp / "ds", 20, "raw", 8);
  const std::string shard = tmp / "ds/shard-00001.h5";
  const std::string bytes = testing::ReadFileBytes(shard);
  testing::WriteFileBytes(shard, bytes.substr(0, bytes.size() / 2));
  absl::Status s = OpenDataset(tmp / "ds").status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  unlink(shard.c_str());
  s = OpenDataset(tmp / "ds").status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;  // a dataset with a shard missing is broken data
  EditHdf5(tmp / "ds/dataset.h5", [](hid_t f) { SetIntAttr(f, "channels", 4); });
  s = OpenDataset(tmp / "ds").status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
}

// The Python/h5py example of docs/DATA.md, run as written against a dataset.
TEST(ShardTest, DocumentedH5pyExampleReadsAShard) {
  std::string out;
  if (testing::RunCommand("/usr/bin/python3 -c 'import h5py, numpy'", &out) != 0) {
    SKIP_OR_FAIL_WITHOUT("python3-h5py for /usr/bin/python3 (apt-get install python3-h5py)");
  }
  const std::string doc =
      testing::ReadFileBytes(std::string(COLONNADE_SOURCE_DIR) + "/docs/DATA.md");
  const size_t begin = doc.find("```python\n");
  ASSERT_NE(begin, std::string::npos) << "docs/DATA.md has no ```python block";
  const size_t end = doc.find("```", begin + 10);
  ASSERT_NE(end, std::string::npos);
  TempDir tmp;
  testing::WriteFileBytes(tmp / "example.py", doc.substr(begin + 10, end - begin - 10));
  const bool have_pil = testing::RunCommand("/usr/bin/python3 -c 'import PIL'", &out) == 0;
  for (const char* enc : {"raw", "jpeg"}) {
    if (std::string(enc) == "jpeg" && !have_pil) {
      const char* no_skip = getenv("COLONNADE_NO_SKIP");
      ASSERT_FALSE(no_skip && std::string(no_skip) == "1")
          << "Pillow is missing for /usr/bin/python3 (COLONNADE_NO_SKIP=1; python3-pil)";
      std::printf("Pillow missing for /usr/bin/python3: checking the raw example only\n");
      continue;
    }
    const std::string dir = tmp / enc;
    WriteDataset(dir, 12, enc, 5);
    int rc = testing::RunCommand("/usr/bin/python3 " + tmp / "example.py " + dir, &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("12 images of 8x8x3, 10 classes"), std::string::npos) << out;
    // Image 7 lives in shard 1 at index 2; its label is (7*3) % 10 = 1 = "c1".
    EXPECT_NE(out.find("image 7: label 1 (c1), shape (8, 8, 3)"), std::string::npos) << out;
    if (std::string(enc) == "raw") {
      // First pixel of image 7 = PixelOf(7, 0..2) (numpy pads the first value).
      const std::string px = std::to_string(PixelOf(7, 0)) + " " + std::to_string(PixelOf(7, 1)) +
                             " " + std::to_string(PixelOf(7, 2)) + "]";
      EXPECT_NE(out.find(px), std::string::npos) << out;
    }
  }
}

// h5py returns the string attributes of a dataset index and of a shard as str, so that
// `f.attrs["format"] == "colonnade-dataset"` holds in a user's script (fixed-length strings
// came back as bytes and compared False).
TEST(ShardTest, H5pyReadsStringAttributesAsStr) {
  std::string out;
  if (testing::RunCommand("/usr/bin/python3 -c 'import h5py, numpy'", &out) != 0) {
    SKIP_OR_FAIL_WITHOUT("python3-h5py for /usr/bin/python3 (apt-get install python3-h5py)");
  }
  TempDir tmp;
  WriteDataset(tmp / "ds", 12, "raw", 5);
  testing::WriteFileBytes(tmp / "check.py", R"(import sys, h5py
root = sys.argv[1]
with h5py.File(f"{root}/dataset.h5", "r") as f:
    a = f.attrs
    for k in ("format", "encoding", "mean_source"):
        assert isinstance(a[k], str), f"dataset.h5: {k} is {type(a[k]).__name__}, not str"
    assert a["format"] == "colonnade-dataset", a["format"]
    assert a["encoding"] == "raw", a["encoding"]
    shard = f["shard_files"].asstr()[0]
with h5py.File(f"{root}/{shard}", "r") as f:
    a = f.attrs
    for k in ("format", "encoding"):
        assert isinstance(a[k], str), f"{shard}: {k} is {type(a[k]).__name__}, not str"
    assert a["format"] == "colonnade-shard", a["format"]
print("str attributes ok")
)");
  const int rc = testing::RunCommand("/usr/bin/python3 " + tmp / "check.py " + tmp / "ds", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("str attributes ok"), std::string::npos) << out;
}

}  // namespace
}  // namespace colonnade::data
