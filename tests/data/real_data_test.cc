// Real data from ../shared/data (never committed): CIFAR-10 and Imagenette image-folder
// trees converted with make_shards and read back. Skipped when the archives are absent.
#include <chrono>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "data/dataset.h"
#include "data/image.h"
#include "data/pipeline.h"
#include "data/shard_format.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace colonnade::data {
namespace {

using testing::TempDir;

std::string ArchiveOrSkipMessage(const std::string& name) {
  const std::string p = testing::SharedDataDir() + "/" + name;
  return testing::PathExists(p) ? p : std::string();
}

double RunTimed(const std::string& cmd, std::string* out, int* rc) {
  auto t0 = std::chrono::steady_clock::now();
  *rc = testing::RunCommand(cmd, out);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(RealDataTest, Cifar10JpegTreeConvertsUnderTwoMinutesAndReadsBack) {
  const std::string archive = ArchiveOrSkipMessage("cifar10-jpeg.tar.gz");
  if (archive.empty()) {
    SKIP_OR_FAIL_WITHOUT("real data: "
                         << testing::SharedDataDir()
                         << "/cifar10-jpeg.tar.gz (set COLONNADE_SHARED_DATA to its folder)");
  }
  TempDir tmp;
  std::string out;
  ASSERT_EQ(testing::RunCommand("tar xzf " + archive + " -C " + tmp.path(), &out), 0) << out;
  const std::string src = tmp / "cifar10-jpeg";
  const std::string bin = testing::MakeShardsBinary();
  int rc = 0;
  // The acceptance measurement: both splits, raw encoding, 2 threads (the 2-core machine).
  double t_train = RunTimed(bin + " --source=folder --threads=2 --progress=false --input=" + src +
                                "/train --output=" + tmp / "shards/train",
                            &out, &rc);
  ASSERT_EQ(rc, 0) << out;
  double t_test =
      RunTimed(bin + " --source=folder --threads=2 --progress=false --input=" + src +
                   "/test --output=" + tmp / "shards/test --mean_from=" + tmp / "shards/train",
               &out, &rc);
  ASSERT_EQ(rc, 0) << out;
  const double total = t_train + t_test;
  std::printf(
      "[ MEASURE  ] CIFAR-10 JPEG tree -> raw shards, 2 threads: train %.1f s, test %.1f s, "
      "total %.1f s\n",
      t_train, t_test, total);
  RecordProperty("cifar10_convert_seconds", absl::StrFormat("%.1f", total));
  EXPECT_LT(total, 120.0) << "acceptance: the CIFAR-10 folder tree converts in < 2 minutes";

  auto train = OpenDataset(tmp / "shards/train");
  auto test = OpenDataset(tmp / "shards/test");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_TRUE(test.ok()) << test.status();
  const std::vector<std::string> names = {"airplane", "automobile", "bird",  "cat",  "deer",
                                          "dog",      "frog",       "horse", "ship", "truck"};
  EXPECT_EQ((*train)->info().size, 50000);
  EXPECT_EQ((*test)->info().size, 10000);
  EXPECT_EQ((*train)->info().class_names, names);
  EXPECT_EQ((*test)->info().class_names, names);
  EXPECT_EQ((*train)->info().class_counts, std::vector<int64_t>(10, 5000));
  EXPECT_EQ((*test)->info().class_counts, std::vector<int64_t>(10, 1000));
  EXPECT_EQ((*train)->info().height, 32);
  EXPECT_EQ((*test)->mean_image(), (*train)->mean_image());
  // CIFAR-10's mean colour is about (125, 123, 114).
  double m[3] = {0, 0, 0};
  for (int p = 0; p < 1024; ++p)
    for (int c = 0; c < 3; ++c) m[c] += (*train)->mean_image()[p * 3 + c] / 1024;
  EXPECT_NEAR(m[0], 125, 5);
  EXPECT_NEAR(m[1], 123, 5);
  EXPECT_NEAR(m[2], 114, 5);
  // A stored image equals the decoded source file: find test image 0 of class "cat" by
  // comparing against the file's pixels.
  const std::string cat0 = src + "/test/cat/" + [&] {
    std::string o;
    testing::RunCommand("ls " + src + "/test/cat | head -1", &o);
    while (!o.empty() && (o.back() == '\n' || o.back() == '\r')) o.pop_back();
    return o;
  }();
  std::string bytes = testing::ReadFileBytes(cat0);
  Image ref;
  ASSERT_TRUE(
      DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 3, &ref).ok());
  bool found = false;
  for (int64_t i = 0; i < 10000 && !found; ++i) {
    if ((*test)->Label(i) != 3) continue;
    std::vector<uint8_t> px;
    ASSERT_TRUE((*test)->Read(i, &px).ok());
    found = px == ref.pixels;
  }
  EXPECT_TRUE(found) << cat0 << " not found bit-exactly in the test shards";
  // A whole evaluation epoch through the pipeline.
  PipelineOptions o;
  o.global_batch = 1000;
  o.train = false;
  o.epochs = 1;
  auto p = BatchPipeline::Create(test->get(), o);
  ASSERT_TRUE(p.ok());
  int64_t seen = 0;
  while (true) {
    absl::StatusOr<Batch> b = (*p)->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    seen += b->images.n();
  }
  EXPECT_EQ(seen, 10000);
}

TEST(RealDataTest, ImagenetteValWithGrayscaleImages) {
  const std::string archive = ArchiveOrSkipMessage("imagenette-224.tar.gz");
  if (archive.empty()) {
    SKIP_OR_FAIL_WITHOUT("real data: "
                         << testing::SharedDataDir()
                         << "/imagenette-224.tar.gz (set COLONNADE_SHARED_DATA to its folder)");
  }
  TempDir tmp;
  std::string out;
  ASSERT_EQ(
      testing::RunCommand("tar xzf " + archive + " -C " + tmp.path() + " imagenette-224/val", &out),
      0)
      << out;
  int rc = 0;
  double secs = RunTimed(testing::MakeShardsBinary() +
                             " --source=folder --encoding=jpeg --threads=2 --progress=false "
                             "--shard_size=1000 --input=" +
                             tmp / "imagenette-224/val --output=" + tmp / "val",
                         &out, &rc);
  ASSERT_EQ(rc, 0) << out;
  std::printf("[ MEASURE  ] Imagenette val (3925 JPEGs 224x224) -> jpeg shards: %.1f s\n", secs);
  auto ds = OpenDataset(tmp / "val");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->info().size, 3925);
  EXPECT_EQ((*ds)->info().num_classes, 10);
  EXPECT_EQ((*ds)->info().height, 224);
  EXPECT_EQ((*ds)->info().channels, 3);
  EXPECT_EQ((*ds)->info().class_names.front(), "n01440764");
  // Decode everything through an AlexNet-style eval pipeline (centre 192 crop here).
  PipelineOptions o;
  o.global_batch = 256;
  o.train = false;
  o.crop = 192;
  o.epochs = 1;
  o.threads = 2;
  auto p = BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(p.ok());
  int64_t seen = 0;
  while (true) {
    absl::StatusOr<Batch> b = (*p)->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    seen += b->images.n();
  }
  EXPECT_EQ(seen, 3925);
}

}  // namespace
}  // namespace colonnade::data
