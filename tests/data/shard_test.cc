// Shard format: round trips, determinism, overwrite protection, and validation errors
// that name the file and the field.
#include <hdf5.h>

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
}

TEST(ShardTest, MissingDirectoryIndexAndShard) {
  TempDir tmp;
  std::string m = OpenError(tmp / "nope");
  EXPECT_EQ(m, tmp / "nope" + ": dataset directory not found");
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
  EXPECT_EQ(OpenError(tmp / "ds"), index + ": attribute 'version' is 7; this build reads version 1");
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
  EXPECT_EQ(OpenError(tmp / "ds"),
            shard + ": /labels: label 12 at index 40 is >= num_classes 10");
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

// The Python/h5py example of docs/DATA.md, run as written against a dataset.
TEST(ShardTest, DocumentedH5pyExampleReadsAShard) {
  std::string out;
  if (testing::RunCommand("/usr/bin/python3 -c 'import h5py, numpy'", &out) != 0) {
    SKIP_OR_FAIL_WITHOUT("python3-h5py for /usr/bin/python3 (apt-get install python3-h5py)");
  }
  const std::string doc = testing::ReadFileBytes(std::string(COLONNADE_SOURCE_DIR) + "/docs/DATA.md");
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

}  // namespace
}  // namespace colonnade::data
