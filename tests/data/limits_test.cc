// The size limits (docs/LIMITS.md): their environment overrides, the writer's refusal of
// what the reader would refuse, and that the stored-bytes check accepts every legitimate
// storage layout (compressed chunks, partial edge chunks, compact datasets).
#include "data/limits.h"

#include <hdf5.h>
#include <stdlib.h>

#include "data/dataset.h"
#include "data/image.h"
#include "data/shard_format.h"
#include "gtest/gtest.h"
#include "hdf5/hdf5.h"
#include "test_util.h"

namespace colonnade::data {
namespace {

using testing::TempDir;

using testing::ScopedEnv;

Image Flat(int h, int w) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = 3;
  img.pixels.assign(static_cast<size_t>(h) * w * 3, 100);
  return img;
}

// Writes `n` images of height x width into `dir`.
absl::Status WriteFlatDataset(const std::string& dir, int height, int width, int n,
                              const std::string& encoding = "raw",
                              const ImageLimits& limits = ImageLimits()) {
  DatasetWriterOptions o;
  o.dir = dir;
  o.encoding = encoding;
  o.height = height;
  o.width = width;
  o.num_classes = 2;
  o.class_names = {"a", "b"};
  o.limits = limits;
  absl::StatusOr<std::unique_ptr<DatasetWriter>> w = DatasetWriter::Create(o);
  if (!w.ok()) return w.status();
  Image img = Flat(height, width);
  std::string jpg = *EncodeJpeg(img, 90);
  for (int i = 0; i < n; ++i) {
    absl::Status s = (*w)->Add(img.pixels.data(), &jpg, i % 2);
    if (!s.ok()) return s;
  }
  return (*w)->Finish();
}

TEST(LimitsTest, ImageSizeProblemAndOverflowChecks) {
  ImageLimits l;
  EXPECT_EQ(ImageSizeProblem(16384, 8192, l), "");  // exactly 2^27 pixels
  EXPECT_EQ(ImageSizeProblem(16385, 1, l),
            "16385x1 is larger than the limit of 16384 pixels per side (COLONNADE_MAX_IMAGE_SIDE)");
  EXPECT_EQ(ImageSizeProblem(1, 16385, l),
            "1x16385 is larger than the limit of 16384 pixels per side (COLONNADE_MAX_IMAGE_SIDE)");
  EXPECT_EQ(ImageSizeProblem(16384, 8193, l),
            "16384x8193 has more than the limit of 134217728 pixels (COLONNADE_MAX_IMAGE_PIXELS)");
  EXPECT_EQ(ImageSizeProblem(0, 5, l), "0x5 is not a positive size");
  l.max_side = INT64_MAX;
  l.max_pixels = INT64_MAX;
  EXPECT_NE(ImageSizeProblem(int64_t{1} << 40, int64_t{1} << 40, l), "");  // product overflows
  int64_t out = 0;
  EXPECT_FALSE(CheckedMul(int64_t{1} << 32, int64_t{1} << 31, &out));
  EXPECT_TRUE(CheckedMul(int64_t{1} << 31, int64_t{1} << 31, &out));
  EXPECT_FALSE(CheckedAdd(INT64_MAX, 1, &out));
}

TEST(LimitsTest, EnvironmentOverridesAndBadValues) {
  {
    ScopedEnv side(kMaxImageSideEnv, "40000");
    ScopedEnv pixels(kMaxImagePixelsEnv, "2000000000");
    absl::StatusOr<ImageLimits> l = ImageLimitsFromEnvironment();
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->max_side, 40000);
    EXPECT_EQ(l->max_pixels, 2000000000);
  }
  // A set variable is meant: empty or padded values are errors, not "unset" or "5".
  for (const char* bad : {"abc", "0", "-5", "1e9", "99999999999999", "", " 5", "5 ", "+5"}) {
    ScopedEnv side(kMaxImageSideEnv, bad);
    absl::StatusOr<ImageLimits> l = ImageLimitsFromEnvironment();
    ASSERT_FALSE(l.ok()) << "'" << bad << "'";
    EXPECT_EQ(l.status().message(),
              std::string("environment variable COLONNADE_MAX_IMAGE_SIDE='") + bad +
                  "' is not an integer from 1 to 1048576 (largest image side, pixels): unset it "
                  "or give a valid value (docs/OPERATIONS.md §3)");
  }
  ImageLimits d;
  absl::StatusOr<ImageLimits> l = ImageLimitsFromEnvironment();
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->max_side, d.max_side);
  EXPECT_EQ(l->max_pixels, d.max_pixels);
}

TEST(LimitsTest, LoweredLimitsApplyToDecodingWritingAndOpening) {
  TempDir tmp;
  ImageLimits small;
  small.max_side = 8;
  small.max_pixels = 48;
  std::string jpg = *EncodeJpeg(Flat(10, 4), 90);
  Image out;
  absl::Status s =
      DecodeJpeg(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), 3, &out, 0, 0, small);
  EXPECT_EQ(s.message(),
            "JPEG too large: 10x4 is larger than the limit of 8 pixels per side "
            "(COLONNADE_MAX_IMAGE_SIDE)");
  // The writer refuses what the reader would refuse; nothing is left behind.
  s = WriteFlatDataset(tmp / "w", 8, 8, 3, "raw", small);
  EXPECT_EQ(s.message(), tmp / "w" +
                             ": image size 8x8 has more than the limit of 48 pixels "
                             "(COLONNADE_MAX_IMAGE_PIXELS)");
  // A dataset written within the defaults is refused under a lowered limit, accepted again
  // without it: reader and writer read the same variables.
  ASSERT_TRUE(WriteFlatDataset(tmp / "ds", 8, 8, 4, "jpeg").ok());
  {
    ScopedEnv side(kMaxImageSideEnv, "4");
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
    ASSERT_FALSE(ds.ok());
    EXPECT_EQ(ds.status().message(), tmp / "ds/dataset.h5" +
                                         ": attributes 'height'x'width': 8x8 is larger than the "
                                         "limit of 4 pixels per side (COLONNADE_MAX_IMAGE_SIDE)");
  }
  {
    ScopedEnv side(kMaxImageSideEnv, "nope");
    absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
    ASSERT_FALSE(ds.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(ds.status())) << ds.status();  // a usage error
  }
  absl::StatusOr<std::unique_ptr<Dataset>> ds = OpenDataset(tmp / "ds");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::vector<uint8_t> px;
  EXPECT_TRUE((*ds)->Read(3, &px).ok());
}

TEST(LimitsTest, RaisedLimitsLetALargerImageThrough) {
  std::string jpg = testing::JpegClaimingSize(*EncodeJpeg(Flat(16, 16), 90), 16, 20000);
  Image out;
  absl::Status s = DecodeJpeg(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), 3, &out);
  EXPECT_NE(s.message().find("JPEG too large"), std::string::npos) << s;
  ImageLimits wide;
  wide.max_side = 20000;
  s = DecodeJpeg(reinterpret_cast<const uint8_t*>(jpg.data()), jpg.size(), 3, &out, 0, 0, wide);
  // Past the size check: the (crafted) data then runs out, an ordinary decode error.
  EXPECT_EQ(s.message().find("JPEG too large"), std::string::npos) << s;
}

TEST(LimitsTest, WriterDiscardsEverythingUnlessCommitted) {
  TempDir tmp;
  DatasetWriterOptions o;
  o.dir = tmp / "ds";
  o.height = 4;
  o.width = 4;
  o.num_classes = 1;
  o.class_names = {"x"};
  o.shard_size = 2;
  Image img = Flat(4, 4);
  {
    auto w = DatasetWriter::Create(o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*w)->Add(img.pixels.data(), nullptr, 0).ok());
    ASSERT_TRUE((*w)->Prepare().ok());
    EXPECT_TRUE(testing::PathExists(tmp / "ds/shard-00002.h5"));
    EXPECT_TRUE(testing::PathExists(tmp / "ds/dataset.h5.tmp"));
    EXPECT_FALSE(testing::PathExists(tmp / "ds/dataset.h5"));
  }  // destroyed uncommitted
  for (const char* f : {"dataset.h5", "dataset.h5.tmp", "shard-00000.h5", "shard-00002.h5"}) {
    EXPECT_FALSE(testing::PathExists(tmp / "ds/" + f)) << f;
  }
  {
    auto w = DatasetWriter::Create(o);
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*w)->Add(img.pixels.data(), nullptr, 0).ok());
    ASSERT_TRUE((*w)->Prepare().ok());
    ASSERT_TRUE((*w)->Commit().ok());
    EXPECT_EQ((*w)->mean_image(), std::vector<float>(48, 100.f));
  }
  EXPECT_TRUE(OpenDataset(tmp / "ds").ok());
}

// The stored-bytes check (src/hdf5) must accept every complete layout a user's own tool
// might write: compressed chunks, edge chunks, compact and contiguous datasets.
TEST(LimitsTest, StorageCheckAcceptsCompleteLayouts) {
  TempDir tmp;
  const std::string path = tmp / "layouts.h5";
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  std::vector<int32_t> v(20, 3);
  hsize_t n = 20, chunk = 16;
  hid_t space = H5Screate_simple(1, &n, nullptr);
  auto make = [&](const char* name, hid_t dcpl, bool write) {
    hid_t d = H5Dcreate2(f, name, H5T_STD_I32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (write) H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    return d;
  };
  hid_t gz = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(gz, 1, &chunk);  // 2 chunks, the second partial
  H5Pset_deflate(gz, 6);
  hid_t compact = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_layout(compact, H5D_COMPACT);
  hid_t d1 = make("gzip", gz, true);
  hid_t d2 = make("compact", compact, true);
  hid_t d3 = make("contiguous", H5P_DEFAULT, true);
  hid_t d4 = make("unwritten", gz, false);
  EXPECT_EQ(hdf5::MissingStorageReason(d1), "");
  EXPECT_EQ(hdf5::MissingStorageReason(d2), "");
  EXPECT_EQ(hdf5::MissingStorageReason(d3), "");
  EXPECT_EQ(hdf5::MissingStorageReason(d4),
            "was never written (no storage is allocated for its 20 elements, which would "
            "read back as zeros)");
  EXPECT_EQ(hdf5::NonHardLinkReason(f, "gzip"), "");
  for (hid_t d : {d1, d2, d3, d4}) H5Dclose(d);
  H5Pclose(gz);
  H5Pclose(compact);
  H5Sclose(space);
  H5Fclose(f);
}

}  // namespace
}  // namespace colonnade::data
