// Converters (library) and the make_shards tool.
#include "data/converters.h"

#include <hdf5.h>

#include "data/image.h"
#include "data/shard_format.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace colonnade::data {
namespace {

using testing::TempDir;

// ---- CIFAR-10 binary ------------------------------------------------------------------

uint8_t CifarByte(int file, int rec, int plane, int p) {
  return static_cast<uint8_t>((file * 31 + rec * 7 + plane * 60 + p) % 256);
}

void WriteCifarFile(const std::string& path, int file, int records, int bad_label_at = -1) {
  std::string data;
  for (int r = 0; r < records; ++r) {
    data.push_back(static_cast<char>(r == bad_label_at ? 12 : (file + r) % 10));
    for (int plane = 0; plane < 3; ++plane)
      for (int p = 0; p < 1024; ++p)
        data.push_back(static_cast<char>(CifarByte(file, r, plane, p)));
  }
  testing::WriteFileBytes(path, data);
}

void WriteFakeCifar(const std::string& dir, int per_file) {
  testing::MakeDir(dir);
  for (int f = 1; f <= 5; ++f)
    WriteCifarFile(dir + "/data_batch_" + std::to_string(f) + ".bin", f, per_file);
  WriteCifarFile(dir + "/test_batch.bin", 6, per_file);
}

TEST(ConvertersTest, Cifar10Binary) {
  TempDir tmp;
  WriteFakeCifar(tmp / "in", 20);
  ConvertOptions o;
  o.shard_size = 30;
  absl::StatusOr<ConvertReport> r = ConvertCifar10Binary(tmp / "in", tmp / "out", o);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->written, (std::vector<int64_t>{100, 20}));
  auto train = OpenDataset(tmp / "out/train");
  auto test = OpenDataset(tmp / "out/test");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ((*train)->info().class_names[0], "airplane");
  EXPECT_EQ((*train)->info().class_names[9], "truck");
  // Record 3 of data_batch_2 is image 23 (files in order, records in order).
  std::vector<uint8_t> px;
  absl::StatusOr<int> label = (*train)->Read(23, &px);
  ASSERT_TRUE(label.ok());
  EXPECT_EQ(*label, (2 + 3) % 10);
  for (int p : {0, 1, 500, 1023})
    for (int c = 0; c < 3; ++c) ASSERT_EQ(px[p * 3 + c], CifarByte(2, 3, c, p));
  // The test split stores the training mean.
  EXPECT_EQ((*test)->mean_image(), (*train)->mean_image());
  absl::StatusOr<DatasetIndex> idx = ReadDatasetIndex(tmp / "out/test");
  ASSERT_TRUE(idx.ok());
  EXPECT_EQ(idx->mean_source, "train");

  // JPEG encoding: the stored stream is the encoding of the raw image at that quality.
  o.encoding = "jpeg";
  o.jpeg_quality = 95;
  r = ConvertCifar10Binary(tmp / "in", tmp / "outj", o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto trainj = OpenDataset(tmp / "outj/train");
  ASSERT_TRUE(trainj.ok());
  std::vector<uint8_t> pj;
  ASSERT_TRUE((*trainj)->Read(23, &pj).ok());
  Image raw;
  raw.height = raw.width = 32;
  raw.channels = 3;
  raw.pixels = px;
  std::string enc = *EncodeJpeg(raw, 95);
  Image dec;
  ASSERT_TRUE(DecodeJpeg(reinterpret_cast<const uint8_t*>(enc.data()), enc.size(), 3, &dec).ok());
  EXPECT_EQ(pj, dec.pixels);
}

TEST(ConvertersTest, Cifar10BinaryErrors) {
  TempDir tmp;
  WriteFakeCifar(tmp / "in", 5);
  ConvertOptions o;
  // Truncated file.
  std::string b3 = testing::ReadFileBytes(tmp / "in/data_batch_3.bin");
  testing::WriteFileBytes(tmp / "in/data_batch_3.bin", b3.substr(0, b3.size() - 100));
  absl::StatusOr<ConvertReport> r = ConvertCifar10Binary(tmp / "in", tmp / "out", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            tmp / "in/data_batch_3.bin" +
                ": size 15265 bytes is not a positive multiple of the 3073-byte record "
                "(truncated?)");
  // Bad label.
  WriteCifarFile(tmp / "in/data_batch_3.bin", 3, 5, /*bad_label_at=*/3);
  r = ConvertCifar10Binary(tmp / "in", tmp / "out2", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            tmp / "in/data_batch_3.bin" + ": label: label 12 at index 3 is >= num_classes 10");
  // Missing file.
  unlink((tmp / "in/test_batch.bin").c_str());
  WriteCifarFile(tmp / "in/data_batch_3.bin", 3, 5);
  r = ConvertCifar10Binary(tmp / "in", tmp / "out3", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), tmp / "in/test_batch.bin" + ": file not found");
}

// ---- image folders ----------------------------------------------------------------------

Image Pattern(int h, int w, int c, int seed) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(static_cast<size_t>(h) * w * c);
  for (size_t i = 0; i < img.pixels.size(); ++i)
    img.pixels[i] = static_cast<uint8_t>((i * 5 + seed * 40) % 256);
  return img;
}

void WriteJpeg(const std::string& path, const Image& img) {
  testing::WriteFileBytes(path, *EncodeJpeg(img, 92));
}

// root/cat: a.jpg 24x16 RGB, b.JPEG 16x24 gray, c.png 2x2; root/dog: d.jpg, bad.jpg
// (garbage), notes.txt; plus a stray file at the root.
void WriteTree(const std::string& root) {
  testing::MakeDir(root);
  testing::MakeDir(root + "/cat");
  testing::MakeDir(root + "/dog");
  WriteJpeg(root + "/cat/a.jpg", Pattern(16, 24, 3, 1));
  WriteJpeg(root + "/cat/b.JPEG", Pattern(24, 16, 1, 2));
  testing::WriteFileBytes(
      root + "/cat/c.png",
      std::string(reinterpret_cast<const char*>(testing::kTinyPng), sizeof(testing::kTinyPng)));
  WriteJpeg(root + "/dog/d.jpg", Pattern(20, 20, 3, 3));
  testing::WriteFileBytes(root + "/dog/bad.jpg", "\xFF\xD8\xFF garbage, not a jpeg");
  testing::WriteFileBytes(root + "/dog/notes.txt", "hello");
  testing::WriteFileBytes(root + "/README", "stray");
}

// The PNG half of the folder tests only runs with libpng; in CI (COLONNADE_NO_SKIP=1),
// where setup.sh installs libpng-dev, a build without it is a failure.
TEST(ConvertersTest, PngSupportIsBuiltWhereRequired) {
  if (!HavePngSupport()) SKIP_OR_FAIL_WITHOUT("libpng in this build (libpng-dev)");
}

TEST(ConvertersTest, ImageFolderSkipsUndecodableAndResizes) {
  TempDir tmp;
  WriteTree(tmp / "root");
  ConvertOptions o;
  o.resize = 16;
  absl::StatusOr<ConvertReport> r = ConvertImageFolder(tmp / "root", tmp / "out", o);
  ASSERT_TRUE(r.ok()) << r.status();
  // Without libpng, c.png is skipped with a clear per-file message.
  const int64_t png = HavePngSupport() ? 1 : 0;
  EXPECT_EQ(r->written, std::vector<int64_t>{3 + png});
  EXPECT_EQ(r->skipped, 2 - png);
  ASSERT_EQ(r->skipped_messages.size(), static_cast<size_t>(2 - png));
  bool bad_reported = false, png_reported = false;
  for (const std::string& m : r->skipped_messages) {
    bad_reported |= m.rfind(tmp / "root/dog/bad.jpg" + ": undecodable JPEG", 0) == 0;
    png_reported |=
        m == tmp / "root/cat/c.png" + ": png unsupported in this build (libpng not found)";
  }
  EXPECT_TRUE(bad_reported);
  EXPECT_EQ(png_reported, !HavePngSupport());
  EXPECT_EQ(r->ignored, 2);  // notes.txt, README
  auto ds = OpenDataset(tmp / "out");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->info().class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ((*ds)->info().class_counts, (std::vector<int64_t>{2 + png, 1}));
  EXPECT_EQ((*ds)->info().height, 16);
  EXPECT_EQ((*ds)->info().channels, 3);
  // The grayscale image became RGB with equal channels; find it by its label/content.
  int gray_found = 0;
  for (int64_t i = 0; i < 3 + png; ++i) {
    std::vector<uint8_t> px;
    ASSERT_TRUE((*ds)->Read(i, &px).ok());
    bool gray = true;
    for (int p = 0; p < 256; ++p) gray &= px[3 * p] == px[3 * p + 1] && px[3 * p] == px[3 * p + 2];
    gray_found += gray;
  }
  EXPECT_GE(gray_found, 1);

  // --strict: the undecodable file is fatal and named.
  o.strict = true;
  r = ConvertImageFolder(tmp / "root", tmp / "out_strict", o);
  ASSERT_FALSE(r.ok());
  const std::string strict_msg(r.status().message());
  EXPECT_TRUE(
      strict_msg.rfind(tmp / "root/dog/bad.jpg: undecodable JPEG", 0) == 0 ||
      (!HavePngSupport() && strict_msg.rfind(tmp / "root/cat/c.png: png unsupported", 0) == 0))
      << strict_msg;

  // Without a resize option, images of different sizes are a fatal configuration error.
  o.strict = false;
  o.resize = 0;
  r = ConvertImageFolder(tmp / "root", tmp / "out_nores", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("pass --resize or --resize_exact"), std::string::npos)
      << r.status();

  // Exact resize.
  o.resize_height = 8;
  o.resize_width = 12;
  r = ConvertImageFolder(tmp / "root", tmp / "out_exact", o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto ex = OpenDataset(tmp / "out_exact");
  ASSERT_TRUE(ex.ok());
  EXPECT_EQ((*ex)->info().height, 8);
  EXPECT_EQ((*ex)->info().width, 12);
}

TEST(ConvertersTest, ImageFolderIsDeterministicAcrossThreadsAndSplits) {
  TempDir tmp;
  const std::string root = tmp / "root";
  testing::MakeDir(root);
  for (int k = 0; k < 3; ++k) {
    const std::string cls = root + "/class" + std::to_string(k);
    testing::MakeDir(cls);
    for (int i = 0; i < 20; ++i)
      WriteJpeg(cls + "/" + std::to_string(i) + ".jpg", Pattern(12, 12, 3, k * 20 + i));
  }
  ConvertOptions o;
  o.val_fraction = 0.25;
  o.shard_size = 7;
  o.threads = 1;
  absl::StatusOr<ConvertReport> a = ConvertImageFolder(root, tmp / "a", o);
  ASSERT_TRUE(a.ok()) << a.status();
  o.threads = 3;
  absl::StatusOr<ConvertReport> b = ConvertImageFolder(root, tmp / "b", o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->written, (std::vector<int64_t>{45, 15}));
  for (const char* f : {"train/dataset.h5", "train/shard-00000.h5", "train/shard-00006.h5",
                        "val/dataset.h5", "val/shard-00002.h5"}) {
    std::string fa = testing::ReadFileBytes(tmp / "a/" + f);
    EXPECT_FALSE(fa.empty()) << f;
    EXPECT_EQ(fa, testing::ReadFileBytes(tmp / "b/" + f)) << f;
  }
  auto val = OpenDataset(tmp / "a/val");
  auto train = OpenDataset(tmp / "a/train");
  ASSERT_TRUE(val.ok() && train.ok());
  EXPECT_EQ((*val)->info().class_counts, (std::vector<int64_t>{5, 5, 5}));  // stratified
  EXPECT_EQ((*val)->mean_image(), (*train)->mean_image());
  // Not stored class-sorted.
  std::vector<int> first;
  for (int i = 0; i < 10; ++i) first.push_back((*train)->Label(i));
  EXPECT_NE(std::count(first.begin(), first.end(), first[0]), 10);
}

TEST(ConvertersTest, JpegPassthroughKeepsSourceBytes) {
  TempDir tmp;
  const std::string root = tmp / "root";
  testing::MakeDir(root);
  testing::MakeDir(root + "/a");
  WriteJpeg(root + "/a/x.jpg", Pattern(10, 10, 3, 9));
  ConvertOptions o;
  o.encoding = "jpeg";
  ASSERT_TRUE(ConvertImageFolder(root, tmp / "out", o).ok());
  hid_t f = H5Fopen((tmp / "out/shard-00000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, "/images", H5P_DEFAULT);
  hid_t space = H5Dget_space(d);
  hsize_t n;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  std::string stored(n, '\0');
  H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  EXPECT_EQ(stored, testing::ReadFileBytes(root + "/a/x.jpg"));

  // A 64x64 source resized to 32 is re-encoded at 32x32 even though libjpeg decodes it at
  // 1/2 scale straight to 32x32: the stored stream must decode to the stored size.
  testing::MakeDir(root + "/b");
  WriteJpeg(root + "/b/big.jpg", Pattern(64, 64, 3, 4));
  unlink((root + "/a/x.jpg").c_str());
  o.resize = 32;
  ASSERT_TRUE(ConvertImageFolder(root, tmp / "out2", o).ok());
  auto ds = OpenDataset(tmp / "out2");
  ASSERT_TRUE(ds.ok()) << ds.status();
  f = H5Fopen((tmp / "out2/shard-00000.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  d = H5Dopen2(f, "/images", H5P_DEFAULT);
  space = H5Dget_space(d);
  H5Sget_simple_extent_dims(space, &n, nullptr);
  stored.assign(n, '\0');
  H5Dread(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, stored.data());
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  int h = 0, w = 0;
  ASSERT_TRUE(
      JpegSize(reinterpret_cast<const uint8_t*>(stored.data()), stored.size(), &h, &w).ok());
  EXPECT_EQ(h, 32);
  EXPECT_EQ(w, 32);
}

TEST(ConvertersTest, SyntheticShardsMatchTheInMemoryDataset) {
  TempDir tmp;
  SyntheticOptions so;
  so.size = 60;
  so.height = so.width = 12;
  so.num_classes = 4;
  ConvertOptions o;
  o.shard_size = 25;
  absl::StatusOr<ConvertReport> r = WriteSyntheticShards(so, 20, tmp / "syn", o);
  ASSERT_TRUE(r.ok()) << r.status();
  auto mem = MakeSyntheticDataset(so);
  auto disk = OpenDataset(tmp / "syn/train");
  ASSERT_TRUE(disk.ok()) << disk.status();
  for (int64_t i = 0; i < 60; ++i) {
    std::vector<uint8_t> a, b;
    ASSERT_EQ(*(*mem)->Read(i, &a), *(*disk)->Read(i, &b));
    ASSERT_EQ(a, b);
  }
  so.held_out = true;
  so.size = 20;
  auto mem_test = MakeSyntheticDataset(so);
  auto disk_test = OpenDataset(tmp / "syn/test");
  ASSERT_TRUE(disk_test.ok());
  std::vector<uint8_t> a, b;
  ASSERT_TRUE((*mem_test)->Read(7, &a).ok());
  ASSERT_TRUE((*disk_test)->Read(7, &b).ok());
  EXPECT_EQ(a, b);
}

// ---- bad inputs: nothing hangs, nothing is stored as a fake image, failures leave nothing --

// The dataset files (dataset.h5, its temporary, shard-*.h5) under `dir`, recursively.
std::vector<std::string> DatasetFilesUnder(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    const std::string p = dir + "/" + n;
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      for (const std::string& q : DatasetFilesUnder(p)) out.push_back(q);
    } else if (n.rfind("dataset.h5", 0) == 0 || n.rfind("shard-", 0) == 0) {
      out.push_back(p);
    }
  }
  closedir(d);
  return out;
}

// root/cat: four 20x20 JPEGs; root/dog: three, and `bad_name` (in dog) holding `bad_bytes`.
void WriteTreeWith(const std::string& root, const std::string& bad_name,
                   const std::string& bad_bytes) {
  testing::MakeDir(root);
  testing::MakeDir(root + "/cat");
  testing::MakeDir(root + "/dog");
  for (int i = 0; i < 4; ++i) {
    WriteJpeg(root + "/cat/" + std::to_string(i) + ".jpg", Pattern(20, 20, 3, i));
  }
  for (int i = 0; i < 3; ++i) {
    WriteJpeg(root + "/dog/" + std::to_string(i) + ".jpg", Pattern(20, 20, 3, 9 + i));
  }
  if (!bad_name.empty()) testing::WriteFileBytes(root + "/dog/" + bad_name, bad_bytes);
}

// make_shards --source=shards: JPEG shards re-encoded as raw hold exactly the images the
// JPEG dataset's readers decode, in order (no shuffle), with its labels, class names and
// mean image; raw shards re-encoded as JPEG decode to images close to the raw ones.
TEST(ConvertersTest, ShardsReencodeKeepsImagesLabelsAndMean) {
  TempDir tmp;
  SyntheticOptions so;
  so.size = 45;
  so.height = so.width = 16;
  so.num_classes = 3;
  ConvertOptions o;
  o.shard_size = 20;
  o.encoding = "jpeg";
  ASSERT_TRUE(WriteSyntheticShards(so, 0, tmp / "jpeg", o).ok());
  ConvertOptions re;
  re.encoding = "raw";
  re.shuffle = false;
  re.shard_size = 7;
  absl::StatusOr<ConvertReport> r = ConvertShards(tmp / "jpeg/train", tmp / "raw", re);
  ASSERT_TRUE(r.ok()) << r.status();
  auto jpeg = OpenDataset(tmp / "jpeg/train");
  auto raw = OpenDataset(tmp / "raw");
  ASSERT_TRUE(jpeg.ok() && raw.ok()) << raw.status();
  EXPECT_EQ((*raw)->info().encoding, "raw");
  EXPECT_EQ((*raw)->info().size, 45);
  EXPECT_EQ((*raw)->info().class_names, (*jpeg)->info().class_names);
  EXPECT_EQ((*raw)->mean_image(), (*jpeg)->mean_image());
  for (int64_t i = 0; i < 45; ++i) {
    std::vector<uint8_t> a, b;
    absl::StatusOr<int> la = (*jpeg)->Read(i, &a), lb = (*raw)->Read(i, &b);
    ASSERT_TRUE(la.ok() && lb.ok());
    ASSERT_EQ(*la, *lb) << i;
    ASSERT_EQ(a, b) << i;
  }
  re.encoding = "jpeg";
  re.jpeg_quality = 95;
  ASSERT_TRUE(ConvertShards(tmp / "raw", tmp / "jpeg2", re).ok());
  auto jpeg2 = OpenDataset(tmp / "jpeg2");
  ASSERT_TRUE(jpeg2.ok()) << jpeg2.status();
  EXPECT_EQ((*jpeg2)->info().encoding, "jpeg");
  std::vector<uint8_t> a, b;
  ASSERT_TRUE((*raw)->Read(4, &a).ok() && (*jpeg2)->Read(4, &b).ok());
  ASSERT_EQ(a.size(), b.size());
  double err = 0;
  for (size_t k = 0; k < a.size(); ++k) err += std::abs(int{a[k]} - int{b[k]});
  EXPECT_LT(err / a.size(), 8.0);  // a second JPEG compression at quality 95
  EXPECT_FALSE(ConvertShards(tmp / "missing", tmp / "x", re).ok());
}

TEST(ConvertersTest, JpegWithoutImageDataIsSkippedNotStoredGray) {
  TempDir tmp;
  const std::string gray = testing::JpegWithoutImageData(*EncodeJpeg(Pattern(64, 64, 3, 5), 90));
  ASSERT_FALSE(gray.empty());
  WriteTreeWith(tmp / "root", "gray.jpg", gray);
  ConvertOptions o;
  o.resize = 16;
  // Before: written as a flat gray image (8 written, 0 skipped).
  absl::StatusOr<ConvertReport> r = ConvertImageFolder(tmp / "root", tmp / "out", o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->written, std::vector<int64_t>{7});
  EXPECT_EQ(r->skipped, 1);
  ASSERT_EQ(r->skipped_messages.size(), 1u);
  EXPECT_EQ(r->skipped_messages[0], tmp / "root/dog/gray.jpg" +
                                        ": undecodable JPEG: Corrupt JPEG data: premature end "
                                        "of data segment");
}

TEST(ConvertersTest, FifoNamedLikeAnImageIsSkippedNotWaitedFor) {
  TempDir tmp;
  WriteTreeWith(tmp / "root", "", "");
  ASSERT_TRUE(testing::MakeFifo(tmp / "root/dog/pipe.jpg"));
  // Before: open() of the FIFO blocked forever (the guard kills the child after 20 s).
  testing::Guarded g = testing::RunGuarded([&] {
    ConvertOptions o;
    o.resize = 16;
    absl::StatusOr<ConvertReport> r = ConvertImageFolder(tmp / "root", tmp / "out", o);
    if (!r.ok()) return std::string(r.status().message());
    return std::to_string(r->skipped) +
           " skipped: " + (r->skipped_messages.empty() ? std::string() : r->skipped_messages[0]);
  });
  EXPECT_EQ(g.text, "1 skipped: " + tmp / "root/dog/pipe.jpg" + ": is a FIFO, not a regular file");
}

TEST(ConvertersTest, HugePngHeaderIsSkippedWithoutAllocating) {
  if (!HavePngSupport()) GTEST_SKIP() << "this build has no libpng";
  TempDir tmp;
  WriteTreeWith(tmp / "root", "huge.png", testing::PngClaimingSize(20000, 20000));
  // Before: 1.2 GB allocated for the pixels of the header's claim (here: the guard's 1 GiB
  // address-space limit turns that into an abort).
  testing::Guarded g = testing::RunGuarded(
      [&] {
        ConvertOptions o;
        o.resize = 16;
        o.threads = 1;
        absl::StatusOr<ConvertReport> r = ConvertImageFolder(tmp / "root", tmp / "out", o);
        if (!r.ok()) return std::string(r.status().message());
        return std::to_string(r->skipped) + " skipped: " +
               (r->skipped_messages.empty() ? std::string() : r->skipped_messages[0]);
      },
      60, uint64_t{1} << 30);
  EXPECT_EQ(g.text, "1 skipped: " + tmp / "root/dog/huge.png" +
                        ": PNG too large: 20000x20000 is larger than the limit of 16384 pixels "
                        "per side (COLONNADE_MAX_IMAGE_SIDE)");
}

TEST(ConvertersTest, FailedConversionLeavesNoDatasetBehind) {
  TempDir tmp;
  // An image size the reader refuses. Before: the whole split was written, its read-back
  // failed, and an invalid OUT/train/dataset.h5 was left behind.
  SyntheticOptions so;
  so.size = 4;
  so.height = 100000;
  so.width = 4;
  so.num_classes = 2;
  ConvertOptions o;
  absl::StatusOr<ConvertReport> r = WriteSyntheticShards(so, 2, tmp / "syn", o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("100000x4 is larger than the limit of 16384 pixels per "
                                      "side"),
            std::string::npos)
      << r.status();
  EXPECT_EQ(DatasetFilesUnder(tmp / "syn"), std::vector<std::string>{});

  // --strict stops at an undecodable image after some shards were written: they go too.
  WriteTreeWith(tmp / "root", "zz_bad.jpg", "\xFF\xD8\xFF garbage");
  o = ConvertOptions();
  o.resize = 16;
  o.strict = true;
  o.shuffle = false;
  o.shard_size = 1;
  r = ConvertImageFolder(tmp / "root", tmp / "strict", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(DatasetFilesUnder(tmp / "strict"), std::vector<std::string>{});

  // The validation split fails after the training split was complete: neither is kept.
  // (Unshuffled, each class's first images in name order go to val; "0_bad" sorts first.)
  TempDir tmp2;
  WriteTreeWith(tmp2 / "root", "0_bad.jpg", "\xFF\xD8\xFF garbage");
  o.shard_size = 100;
  o.val_fraction = 0.5;
  r = ConvertImageFolder(tmp2 / "root", tmp2 / "split", o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().rfind(tmp2 / "root/dog/0_bad.jpg: undecodable JPEG", 0), 0u)
      << r.status();
  EXPECT_EQ(DatasetFilesUnder(tmp2 / "split"), std::vector<std::string>{});
}

// ---- the make_shards tool ---------------------------------------------------------------

TEST(MakeShardsToolTest, FlagsExitCodesAndOverwrite) {
  TempDir tmp;
  const std::string bin = testing::MakeShardsBinary();
  std::string out;
  EXPECT_EQ(testing::RunCommand(bin + " --help", &out), 0);
  for (const char* flag : {"--source", "--resize", "--resize_exact", "--shard_size", "--strict",
                           "--force", "--val_fraction", "--encoding", "--mean_from"}) {
    EXPECT_NE(out.find(flag), std::string::npos) << flag << " missing from --help";
  }
  EXPECT_EQ(testing::RunCommand(bin + " --no_such_flag=1", &out), 2);
  EXPECT_EQ(out, "make_shards: unknown flag --no_such_flag (see --help)\n");
  EXPECT_EQ(testing::RunCommand(bin + " --source=synthetic", &out), 2);
  EXPECT_EQ(out, "make_shards: --output is required (see --help)\n");
  EXPECT_EQ(testing::RunCommand(bin + " --source=synthetic --output=x --shard_size=abc", &out), 2);
  EXPECT_NE(out.find("bad value 'abc' for --shard_size"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(bin + " --source=folder --output=x", &out), 2);

  const std::string cmd = bin +
                          " --source=synthetic --size=40 --test_size=10 --height=8 "
                          "--width=8 --progress=false --output=" +
                          tmp / "syn";
  ASSERT_EQ(testing::RunCommand(cmd, &out), 0) << out;
  EXPECT_NE(out.find("wrote " + tmp / "syn/train: 40 images"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(cmd, &out), 1);
  EXPECT_NE(out.find("already holds a dataset"), std::string::npos) << out;
  EXPECT_NE(out.find("--force"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(cmd + " --force", &out), 0) << out;
  // An undecodable image in a folder: skipped and counted, or fatal with --strict.
  WriteTree(tmp / "tree");
  const std::string folder =
      bin + " --source=folder --resize=16 --progress=false --input=" + tmp / "tree --output=";
  ASSERT_EQ(testing::RunCommand(folder + tmp / "f1", &out), 0) << out;
  EXPECT_NE(
      out.find("skipped " + std::to_string(HavePngSupport() ? 1 : 2) + " undecodable file(s)"),
      std::string::npos)
      << out;
  EXPECT_NE(out.find(tmp / "tree/dog/bad.jpg: undecodable JPEG"), std::string::npos) << out;
  EXPECT_EQ(testing::RunCommand(folder + tmp / "f2 --strict", &out), 1) << out;
  EXPECT_EQ(out.rfind("make_shards: " + tmp / "tree/", 0), 0u) << out;
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  // Conversion errors are one line and exit 1.
  EXPECT_EQ(testing::RunCommand(
                bin + " --source=cifar10 --input=" + tmp / "none --output=" + tmp / "c", &out),
            1);
  EXPECT_EQ(out, "make_shards: " + tmp / "none/data_batch_1.bin" + ": file not found\n");
}

}  // namespace
}  // namespace colonnade::data
