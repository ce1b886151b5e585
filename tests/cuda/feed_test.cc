// The GPU feed (src/cuda/feed_kernels.cu, batch_feed.h, src/apps/device_feed.h) against
// the CPU: the augmentation kernel equals data::WriteImageCHWN, its ten-crop views equal
// data::TenCrops, the synthetic kernel equals SyntheticDataset::Read, and a uint8 pipeline through
// the feed equals the float pipeline, all bit for bit. Outputs are poisoned (NaN / 0xAB bytes)
// before each run so that an unwritten element fails. Built for the GPU (cuda_tests) and the CPU
// emulator (cuda_emu_tests, smaller cases); skips without a GPU.

#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "apps/device_feed.h"
#include "core/backend.h"
#include "core/tensor.h"
#include "cuda/batch_feed.h"
#include "cuda/cuda_backend.h"
#include "cuda/feed_kernels.h"
#include "cuda/port.h"
#include "cuda/step_graph.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "gtest/gtest.h"
#include "feed_test_util.h"
#include "gpu_test.h"

namespace colonnade {
namespace {

class FeedTest : public GpuTest {
 protected:
  cudaStream_t Stream() { return static_cast<cudaStream_t>(cuda::ComputeStream()); }
};

cuda::FeedAugment ToFeed(const data::ImageAugment& a) {
  cuda::FeedAugment f;
  f.y0 = a.y0;
  f.x0 = a.x0;
  f.mirror = a.mirror;
  for (int c = 0; c < 3; ++c) f.light[c] = a.light[c];
  return f;
}

// ---- the augmentation kernel ------------------------------------------------------------------

struct AugCase {
  int c, h, w, crop, pad;
  bool mirror;
  float lighting;
  data::MeanMode mean;
  int n;
  bool train;
  float scale;
  bool large;  // GPU only
};

std::string AugName(const AugCase& k) {
  const char* mean[] = {"image", "channel", "none"};
  return absl::StrFormat("c%d_%dx%d_crop%d_pad%d_m%d_l%d_%s_n%d_%s", k.c, k.h, k.w, k.crop, k.pad,
                         k.mirror, static_cast<int>(k.lighting * 100),
                         mean[static_cast<int>(k.mean)], k.n, k.train ? "train" : "eval");
}

const AugCase kAugCases[] = {
    {3, 13, 11, 9, 2, true, 0.1f, data::MeanMode::kImage, 7, true, 1.f / 255, false},
    {3, 12, 12, 12, 3, true, 0.1f, data::MeanMode::kChannel, 33, true, 1.f / 255, false},
    {1, 9, 10, 7, 0, true, 0.f, data::MeanMode::kNone, 1, true, 1.f / 255, false},
    {1, 8, 8, 8, 0, false, 0.f, data::MeanMode::kImage, 128, true, 0.0173f, false},
    {1, 10, 10, 10, 4, true, 0.f, data::MeanMode::kChannel, 7, true, 1.f / 255, false},
    {3, 16, 16, 14, 0, false, 0.5f, data::MeanMode::kNone, 128, true, 1.f / 255, false},
    {3, 13, 11, 9, 0, false, 0.f, data::MeanMode::kImage, 33, false, 1.f / 255, false},
    {3, 17, 19, 15, 6, true, 0.1f, data::MeanMode::kImage, 33, true, 0.0173f, false},
    {3, 256, 256, 224, 0, true, 0.1f, data::MeanMode::kImage, 128, true, 1.f / 255, true},
    {3, 40, 40, 32, 4, true, 0.1f, data::MeanMode::kChannel, 257, true, 1.f / 255, false},
    // The tiled kernel's edges (32 columns x 32 images a block): several column tiles, the
    // last one partial, odd widths, padding past the image, mirror; float4 stores with a
    // partial image group (36, 260), scalar stores (1, 257); crop = the full image.
    {3, 70, 69, 65, 6, true, 0.1f, data::MeanMode::kImage, 36, true, 1.f / 255, false},
    {3, 41, 43, 37, 5, true, 0.1f, data::MeanMode::kChannel, 1, true, 0.0173f, false},
    {3, 40, 40, 40, 0, true, 0.1f, data::MeanMode::kImage, 8, true, 1.f / 255, false},
    {1, 45, 33, 33, 7, true, 0.f, data::MeanMode::kImage, 257, true, 1.f / 255, false},
    {3, 38, 39, 34, 3, true, 0.1f, data::MeanMode::kNone, 260, true, 1.f / 255, false},
};

class AugmentKernelTest : public FeedTest, public ::testing::WithParamInterface<AugCase> {};

// Random images, a random mean image (not integral: the subtraction rounds), augments drawn
// by DrawAugment (negative origins with padding) for many positions: the kernel's batch
// equals WriteImageCHWN's column by column, bit for bit.
TEST_P(AugmentKernelTest, EqualsTheCpuWriterBitwise) {
  const AugCase& k = GetParam();
  if (IsSkipped()) return;
  if (kEmulated && k.large) GTEST_SKIP() << "large case skipped on the emulator";
  data::AugmentConfig cfg;
  cfg.height = k.h;
  cfg.width = k.w;
  cfg.channels = k.c;
  cfg.crop_h = cfg.crop_w = k.crop;
  cfg.pad = k.train ? k.pad : 0;
  cfg.mean = k.mean;
  cfg.scale = k.scale;
  std::mt19937 rng(k.n * 131 + k.h);
  const size_t image = static_cast<size_t>(k.h) * k.w * k.c;
  const std::vector<uint8_t> pixels = RandomMeansAndPixels(&cfg, k.n, &rng);
  std::vector<data::ImageAugment> augs(k.n);
  std::vector<cuda::FeedAugment> feed_augs(k.n);
  for (int j = 0; j < k.n; ++j) {
    augs[j] = data::DrawAugment(cfg, 77, 3, 1000 + 17 * j, k.train, k.mirror, k.lighting);
    feed_augs[j] = ToFeed(augs[j]);
  }
  const int64_t out_size = static_cast<int64_t>(k.c) * k.crop * k.crop * k.n;
  std::vector<float> want(out_size);
  for (int j = 0; j < k.n; ++j) {
    data::WriteImageCHWN(pixels.data() + j * image, cfg, augs[j], want.data(), k.n, j);
  }

  DeviceBuffers dev;
  cuda::FeedGeometry g;
  g.height = k.h;
  g.width = k.w;
  g.channels = k.c;
  g.crop_h = g.crop_w = k.crop;
  g.mean = static_cast<cuda::FeedMean>(static_cast<int>(k.mean));
  g.scale = k.scale;
  g.mean_image = dev.Upload(cfg.mean_image);
  g.channel_mean = dev.Upload(cfg.channel_mean);
  std::vector<float> labels(k.n);
  for (int j = 0; j < k.n; ++j) labels[j] = static_cast<float>((j * 7) % 10);
  const cuda::FeedBatchBuffers batch{dev.Upload(pixels), dev.Upload(feed_augs), dev.Upload(labels)};
  {
    SCOPED_TRACE("direct buffers");
    float* out = dev.Alloc<float>(out_size);  // NaN
    float* labels_out = dev.Alloc<float>(k.n);
    cuda::FeedSource src;
    src.direct = batch;
    cuda::AugmentBatchGpu(Stream(), g, src, k.n, out, labels_out);
    EXPECT_TRUE(BitwiseEqual(dev.Download(out, out_size), want));
    EXPECT_TRUE(BitwiseEqual(dev.Download(labels_out, k.n), labels));
  }
  {
    // A graphed step's launch: the batch is slot 1 of a slot table, named by a device
    // index; `direct` and slot 0 hold buffers of nothing (0xFF bytes) that must not be read.
    SCOPED_TRACE("slot table");
    const cuda::FeedBatchBuffers junk{dev.Alloc<uint8_t>(pixels.size()),
                                      dev.Alloc<cuda::FeedAugment>(k.n), dev.Alloc<float>(k.n)};
    cuda::FeedSource src;
    src.direct = junk;
    src.slots = dev.Upload(std::vector<cuda::FeedBatchBuffers>{junk, batch});
    src.slot_on_device = dev.Upload(std::vector<int32_t>{1});
    float* out = dev.Alloc<float>(out_size);
    float* labels_out = dev.Alloc<float>(k.n);
    cuda::AugmentBatchGpu(Stream(), g, src, k.n, out, labels_out);
    EXPECT_TRUE(BitwiseEqual(dev.Download(out, out_size), want));
    EXPECT_TRUE(BitwiseEqual(dev.Download(labels_out, k.n), labels));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AugmentKernelTest, ::testing::ValuesIn(kAugCases),
                         [](const auto& info) { return AugName(info.param); });

// ---- ten-crop views --------------------------------------------------------------------------

struct ViewCase {
  int c, h, w, crop;
  data::MeanMode mean;
  int n;
  float scale;
  bool large;  // GPU only
};

const ViewCase kViewCases[] = {
    {3, 13, 11, 9, data::MeanMode::kImage, 7, 1.f / 255, false},    // margins 4 and 2, H != W
    {3, 37, 37, 32, data::MeanMode::kImage, 33, 1.f / 255, false},  // odd margin 5
    {1, 9, 10, 7, data::MeanMode::kNone, 1, 1.f / 255, false},
    {3, 12, 12, 12, data::MeanMode::kChannel, 5, 0.0173f, false},  // crop = image
    {3, 17, 19, 15, data::MeanMode::kChannel, 65, 1.f / 255, false},
    {1, 36, 35, 32, data::MeanMode::kImage, 257, 1.f, false},
    {3, 256, 256, 224, data::MeanMode::kImage, 128, 1.f / 255, true},
};

class TenCropViewTest : public FeedTest, public ::testing::WithParamInterface<ViewCase> {};

// Random images and a random (non-integral) mean: TenCropViewGpu's view v of the uint8
// images equals data::TenCrops' view v of the normalised full images (the eval pipeline's
// float batch with crop 0, written here by WriteImageCHWN), bit for bit, for all ten.
TEST_P(TenCropViewTest, EqualsTenCropsBitwise) {
  const ViewCase& k = GetParam();
  if (IsSkipped()) return;
  if (kEmulated && k.large) GTEST_SKIP() << "large case skipped on the emulator";
  data::AugmentConfig full;  // the whole image, as an eval pipeline with crop = 0 writes it
  full.height = full.crop_h = k.h;
  full.width = full.crop_w = k.w;
  full.channels = k.c;
  full.mean = k.mean;
  full.scale = k.scale;
  std::mt19937 rng(k.n * 7 + k.w);
  const size_t image = static_cast<size_t>(k.h) * k.w * k.c;
  const std::vector<uint8_t> pixels = RandomMeansAndPixels(&full, k.n, &rng);
  Tensor images(Shape::CHWN(k.c, k.h, k.w, k.n));
  const data::ImageAugment centre = data::DrawAugment(full, 1, 0, 0, false, false, 0.f);
  for (int j = 0; j < k.n; ++j) {
    data::WriteImageCHWN(pixels.data() + j * image, full, centre, images.data(), k.n, j);
  }
  absl::StatusOr<std::vector<Tensor>> want = data::TenCrops(images, k.crop);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(want->size(), static_cast<size_t>(cuda::kTenCropViews));

  DeviceBuffers dev;
  cuda::FeedGeometry g;
  g.height = k.h;
  g.width = k.w;
  g.channels = k.c;
  g.crop_h = g.crop_w = k.crop;
  g.mean = static_cast<cuda::FeedMean>(static_cast<int>(k.mean));
  g.scale = k.scale;
  g.mean_image = dev.Upload(full.mean_image);
  g.channel_mean = dev.Upload(full.channel_mean);
  cuda::FeedSource src;
  src.direct.pixels = dev.Upload(pixels);
  const int64_t out_size = static_cast<int64_t>(k.c) * k.crop * k.crop * k.n;
  for (int v = 0; v < cuda::kTenCropViews; ++v) {
    SCOPED_TRACE(absl::StrFormat("view %d", v));
    float* out = dev.Alloc<float>(out_size);  // NaN
    cuda::TenCropViewGpu(Stream(), g, src, v, k.n, out, /*labels_out=*/nullptr);
    EXPECT_TRUE(BitwiseEqual(dev.Download(out, out_size), (*want)[v].ToHost()));
  }
}

std::string ViewName(const ViewCase& k) {
  const char* mean[] = {"image", "channel", "none"};
  return absl::StrFormat("c%d_%dx%d_crop%d_%s_n%d", k.c, k.h, k.w, k.crop,
                         mean[static_cast<int>(k.mean)], k.n);
}

INSTANTIATE_TEST_SUITE_P(Cases, TenCropViewTest, ::testing::ValuesIn(kViewCases),
                         [](const auto& info) { return ViewName(info.param); });

// ---- the synthetic kernel --------------------------------------------------------------------

struct SynthCase {
  int h, w, c, classes;
  float noise;
  int max_shift;
  int64_t size;
  int n;
  bool large;
};

const SynthCase kSynthCases[] = {
    {13, 11, 3, 7, 24.f, -1, 1000, 7, false},       {9, 16, 1, 3, 0.f, 4, 50, 33, false},
    {16, 16, 3, 10, 255.f, -1, 100000, 33, false},  {5, 17, 3, 1000, 24.f, 0, 5000, 1, false},
    {32, 32, 3, 10, 24.f, 16, 300, 128, false},     {64, 64, 3, 100, 24.f, -1, 1000000, 128, false},
    {224, 224, 3, 10, 24.f, -1, 1281167, 33, true},
};

class SyntheticKernelTest : public FeedTest, public ::testing::WithParamInterface<SynthCase> {};

// Random indices (repeats allowed, up to the dataset's last): the kernel's bytes equal
// Read's, image by image.
TEST_P(SyntheticKernelTest, EqualsReadBitwise) {
  const SynthCase& k = GetParam();
  if (IsSkipped()) return;
  if (kEmulated && k.large) GTEST_SKIP() << "large case skipped on the emulator";
  data::SyntheticOptions so;
  so.size = k.size;
  so.height = k.h;
  so.width = k.w;
  so.channels = k.c;
  so.num_classes = k.classes;
  so.noise = k.noise;
  so.max_shift = k.max_shift;
  so.seed = 99;
  so.held_out = k.n % 2 == 1;
  auto ds = data::MakeSyntheticDataset(so);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const data::SyntheticRecipe* r = (*ds)->synthetic_recipe();
  ASSERT_NE(r, nullptr);
  std::mt19937_64 rng(k.size);
  std::vector<int64_t> indices(k.n);
  for (int64_t& i : indices) i = static_cast<int64_t>(rng() % k.size);
  indices[0] = k.size - 1;
  const size_t image = static_cast<size_t>(k.h) * k.w * k.c;
  std::vector<uint8_t> want(image * k.n), px;
  for (int j = 0; j < k.n; ++j) {
    ASSERT_TRUE((*ds)->Read(indices[j], &px).ok());
    std::memcpy(want.data() + j * image, px.data(), image);
  }
  DeviceBuffers dev;
  cuda::SyntheticGeometry g = SyntheticGeometryOf(*r);
  g.grid = dev.Upload(r->grid);
  uint8_t* out = dev.Alloc<uint8_t>(want.size(), 0xAB);
  cuda::SyntheticImagesGpu(Stream(), g, dev.Upload(indices), k.n, out);
  std::vector<uint8_t> got = dev.Download(out, want.size());
  for (int j = 0; j < k.n; ++j) {
    for (size_t e = 0; e < image; ++e) {
      ASSERT_EQ(got[j * image + e], want[j * image + e])
          << "image " << j << " (index " << indices[j] << ") byte " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SyntheticKernelTest, ::testing::ValuesIn(kSynthCases),
                         [](const auto& info) {
                           const SynthCase& k = info.param;
                           return absl::StrFormat("%dx%dx%d_k%d_noise%d_shift%d_n%d", k.h, k.w, k.c,
                                                  k.classes, static_cast<int>(k.noise),
                                                  k.max_shift + 1, k.n);
                         });

// ---- the whole feed: pipeline -> Stage / Produce -> the net's input ----------------------------

struct PipeCase {
  data::BatchOutput output;
  const char* mean;
  int pad;
  int batch;
  int dp_rank, dp_size;
  bool graphed = false;  // produced inside a cuda::StepGraph step, as the trainer does
};

class FeedPipelineTest : public FeedTest, public ::testing::WithParamInterface<PipeCase> {};

// A float-mode pipeline and a uint8 (or indices-only) pipeline + DeviceFeed over the same
// dataset, seed and cursor give bitwise equal batches, with the feed used as the trainer
// uses it: batch k+1 staged right after batch k is produced (two slots in flight), every
// batch recycled through the feed, the uint8 buffers pinned and reused. Graphed: each
// batch is produced inside a cuda::StepGraph step (plain, captured, then replayed while
// the batches alternate between the feed's slots: the replays find theirs through
// StepScalars::feed_slot).
TEST_P(FeedPipelineTest, EqualsTheFloatPipelineBitwise) {
  const PipeCase& k = GetParam();
  if (IsSkipped()) return;
  data::SyntheticOptions so;
  so.size = 150;
  so.height = so.width = kEmulated ? 20 : 64;
  so.num_classes = 10;
  so.seed = 3;
  auto ds = data::MakeSyntheticDataset(so);
  ASSERT_TRUE(ds.ok());
  data::PipelineOptions o;
  o.global_batch = k.batch;
  o.dp_rank = k.dp_rank;
  o.dp_size = k.dp_size;
  o.seed = 2024;
  o.crop = so.height - 4;
  o.pad = k.pad;
  o.mirror = true;
  o.lighting = 0.1f;
  o.mean = k.mean;
  o.threads = 2;
  const data::Cursor start{1, k.batch};  // epoch 1, second batch
  auto float_pipe = data::BatchPipeline::Create(ds->get(), o, start);
  ASSERT_TRUE(float_pipe.ok()) << float_pipe.status();
  o.output = k.output;
  o.pinned = true;
  o.pinned_allocator = [](const Shape& s) { return Tensor::PinnedHost(s, Device::kCUDA); };
  o.pinned_bytes_allocator = PinnedBytesAllocator(Device::kCUDA);
  auto pipe = data::BatchPipeline::Create(ds->get(), o, start);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  absl::StatusOr<std::unique_ptr<DeviceFeed>> feed = DeviceFeed::Create(**ds, pipe->get());
  ASSERT_TRUE(feed.ok()) << feed.status();

  const int kBatches = 5;  // crosses the end of epoch 1 (150 / batch)
  // One pair of outputs for the whole run: a replayed graph writes where it was captured.
  const int64_t n = k.batch / k.dp_size;
  Tensor images(Shape::CHWN(3, o.crop, o.crop, n), Device::kCUDA);
  Tensor labels(Shape::CHWN(1, 1, 1, n), Device::kCUDA);
  std::optional<cuda::StepGraph> graph;
  if (k.graphed) graph.emplace();
  std::vector<cuda::StepRun> runs;
  absl::StatusOr<data::Batch> next = (*pipe)->Next();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*feed)->Stage(*next).ok());
  for (int b = 0; b < kBatches; ++b) {
    SCOPED_TRACE(absl::StrFormat("batch %d", b));
    data::Batch cur = std::move(*next);
    absl::StatusOr<data::Batch> want = (*float_pipe)->Next();
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_EQ(static_cast<int64_t>(cur.indices.size()), n);
    images.Fill(std::numeric_limits<float>::quiet_NaN());
    labels.Fill(std::numeric_limits<float>::quiet_NaN());
    if (graph) {
      absl::StatusOr<int> slot = (*feed)->BeginProduce(static_cast<int>(n));
      ASSERT_TRUE(slot.ok()) << slot.status();
      StepScalars values;
      values.feed_slot = *slot;
      runs.push_back(graph->Step(/*shape=*/1, values, [&](const StepScalars* dev) {
        absl::Status s =
            (*feed)->Augment(&images, &labels, dev != nullptr ? &dev->feed_slot : nullptr);
        EXPECT_TRUE(s.ok()) << s;
      }));
      (*feed)->EndProduce();
    } else {
      ASSERT_TRUE((*feed)->Produce(&images, &labels).ok());
    }
    if (b + 1 < kBatches) {  // the prefetch: staged while this batch is consumed
      next = (*pipe)->Next();
      ASSERT_TRUE(next.ok()) << next.status();
      ASSERT_TRUE((*feed)->Stage(*next).ok());
    }
    EXPECT_EQ(cur.indices, want->indices);
    EXPECT_TRUE(BitwiseEqual(images.ToHost(), want->images.ToHost()));
    EXPECT_TRUE(BitwiseEqual(labels.ToHost(), want->labels.ToHost()));
    (*feed)->Recycle(std::move(cur));
  }
  if (graph) {
    EXPECT_EQ(runs, (std::vector<cuda::StepRun>{cuda::StepRun::kPlain, cuda::StepRun::kCaptured,
                                                cuda::StepRun::kReplayed, cuda::StepRun::kReplayed,
                                                cuda::StepRun::kReplayed}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FeedPipelineTest,
    ::testing::Values(PipeCase{data::BatchOutput::kSourceUint8, "image", 2, 32, 0, 1},
                      PipeCase{data::BatchOutput::kSourceUint8, "channel", 0, 33, 1, 3},
                      PipeCase{data::BatchOutput::kIndicesOnly, "image", 3, 32, 0, 1},
                      PipeCase{data::BatchOutput::kIndicesOnly, "none", 0, 33, 2, 3},
                      PipeCase{data::BatchOutput::kSourceUint8, "image", 2, 32, 0, 1, true},
                      PipeCase{data::BatchOutput::kIndicesOnly, "channel", 0, 33, 1, 3, true}),
    [](const auto& info) {
      const PipeCase& k = info.param;
      return absl::StrFormat("%s_%s_pad%d_b%d_dp%dof%d%s",
                             k.output == data::BatchOutput::kSourceUint8 ? "uint8" : "indices",
                             k.mean, k.pad, k.batch, k.dp_rank, k.dp_size,
                             k.graphed ? "_graphed" : "");
    });

// Ten crops through the whole feed as the trainer's evaluation uses it: an eval pipeline
// handing uint8 images (or indices) with crop = the views' side, each batch staged once and
// produced ten times (ProduceView 0..9, the last consuming it), against TenCrops of the
// eval float pipeline's full images (crop 0): every view and label bit for bit, the last
// partial batch included.
class TenCropFeedTest : public FeedTest, public ::testing::WithParamInterface<data::BatchOutput> {};

TEST_P(TenCropFeedTest, EqualsTenCropsOfTheFloatPipelineBitwise) {
  if (IsSkipped()) return;
  data::SyntheticOptions so;
  so.size = 37;
  so.height = so.width = kEmulated ? 15 : 41;
  so.num_classes = 10;
  so.seed = 5;
  so.held_out = true;
  auto ds = data::MakeSyntheticDataset(so);
  ASSERT_TRUE(ds.ok());
  const int crop = so.height - 5;  // odd margin: the centre rounds down
  data::PipelineOptions o;
  o.global_batch = 16;
  o.train = false;
  o.epochs = 1;
  o.mean = "image";
  o.threads = 2;
  auto float_pipe = data::BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(float_pipe.ok()) << float_pipe.status();
  o.crop = crop;
  o.output = GetParam();
  auto pipe = data::BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  absl::StatusOr<std::unique_ptr<DeviceFeed>> feed = DeviceFeed::Create(**ds, pipe->get());
  ASSERT_TRUE(feed.ok()) << feed.status();
  for (int64_t b = 0; b < (*pipe)->batches_per_epoch(); ++b) {
    SCOPED_TRACE(absl::StrFormat("batch %d", b));
    absl::StatusOr<data::Batch> cur = (*pipe)->Next();
    absl::StatusOr<data::Batch> full = (*float_pipe)->Next();
    ASSERT_TRUE(cur.ok() && full.ok());
    absl::StatusOr<std::vector<Tensor>> want = data::TenCrops(full->images, crop);
    ASSERT_TRUE(want.ok()) << want.status();
    const int64_t n = static_cast<int64_t>(cur->indices.size());
    ASSERT_EQ(n, full->images.n());
    ASSERT_TRUE((*feed)->Stage(*cur).ok());
    for (int v = 0; v < cuda::kTenCropViews; ++v) {
      SCOPED_TRACE(absl::StrFormat("view %d", v));
      Tensor images(Shape::CHWN(3, crop, crop, n), Device::kCUDA);
      Tensor labels(Shape::CHWN(1, 1, 1, n), Device::kCUDA);
      images.Fill(std::numeric_limits<float>::quiet_NaN());
      labels.Fill(std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE((*feed)->ProduceView(v, v == cuda::kTenCropViews - 1, &images, &labels).ok());
      EXPECT_TRUE(BitwiseEqual(images.ToHost(), (*want)[v].ToHost()));
      EXPECT_TRUE(BitwiseEqual(labels.ToHost(), full->labels.ToHost()));
    }
    (*feed)->Recycle(std::move(*cur));
  }
}

INSTANTIATE_TEST_SUITE_P(Outputs, TenCropFeedTest,
                         ::testing::Values(data::BatchOutput::kSourceUint8,
                                           data::BatchOutput::kIndicesOnly),
                         [](const auto& info) {
                           return info.param == data::BatchOutput::kSourceUint8 ? "uint8"
                                                                                : "indices";
                         });

// Misuse is an error, not a hang or a crash: Produce before Stage, more Stages than slots,
// a tensor of the wrong shape.
// The synthetic feed's device-resident pool: a BatchFeed that gathers the staged indices
// from its pool produces bitwise the batches of one that generates them every Stage (each
// of 19x21x3 images, an odd size: byte copies; and 16x16x3: 16-byte copies), and refuses
// an index outside the pool without staging anything.
TEST_F(FeedTest, SyntheticPoolEqualsGeneration) {
  for (const int side : {19, 16}) {
    SCOPED_TRACE(absl::StrFormat("%dx%d images", side, side + (side == 19 ? 2 : 0)));
    data::SyntheticOptions so;
    so.size = 300;
    so.height = side;
    so.width = side == 19 ? 21 : side;
    so.num_classes = 7;
    so.seed = 5;
    auto ds = data::MakeSyntheticDataset(so);
    ASSERT_TRUE(ds.ok()) << ds.status();
    const data::SyntheticRecipe* r = (*ds)->synthetic_recipe();
    cuda::FeedConfig cfg;
    cfg.height = so.height;
    cfg.width = so.width;
    cfg.channels = 3;
    cfg.crop_h = cfg.crop_w = 12;
    cfg.max_batch = 33;
    cfg.synthetic = true;
    cfg.synthetic_geometry = SyntheticGeometryOf(*r);
    cfg.synthetic_grid = r->grid;
    auto generating = cuda::BatchFeed::Create(cfg);
    cfg.synthetic_pool = so.size;
    auto pooled = cuda::BatchFeed::Create(cfg);
    ASSERT_TRUE(generating.ok() && pooled.ok()) << generating.status() << pooled.status();
    std::mt19937_64 rng(side);
    std::vector<int64_t> indices(33);
    for (int64_t& i : indices) i = static_cast<int64_t>(rng() % so.size);
    indices[0] = so.size - 1;
    std::vector<cuda::FeedAugment> augs(33);
    for (int j = 0; j < 33; ++j) {
      augs[j].y0 = j % 5;
      augs[j].x0 = j % 7;
      augs[j].mirror = j % 2;
    }
    std::vector<float> labels(33, 1.0f);
    cuda::HostBatch hb;
    hb.n = 33;
    hb.indices = indices.data();
    hb.augments = augs.data();
    hb.labels = labels.data();
    std::vector<std::vector<float>> out;
    for (auto* feed : {&*generating, &*pooled}) {
      Tensor images(Shape::CHWN(3, 12, 12, 33), Device::kCUDA), lab(Shape{33}, Device::kCUDA);
      images.Fill(std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE((*feed)->Stage(hb).ok());
      ASSERT_TRUE((*feed)->Produce(&images, &lab).ok());
      out.push_back(images.ToHost());
    }
    EXPECT_TRUE(BitwiseEqual(out[1], out[0]));
    indices[3] = so.size;  // one past the pool
    EXPECT_EQ((*pooled)->Stage(hb).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*pooled)->staged(), 0);
  }
}

TEST_F(FeedTest, BatchFeedRefusesMisuse) {
  cuda::FeedConfig cfg;
  cfg.height = cfg.width = 8;
  cfg.channels = 1;
  cfg.crop_h = cfg.crop_w = 8;
  cfg.max_batch = 4;
  auto feed = cuda::BatchFeed::Create(cfg);
  ASSERT_TRUE(feed.ok()) << feed.status();
  Tensor images(Shape::CHWN(1, 8, 8, 4), Device::kCUDA), labels(Shape{4}, Device::kCUDA);
  EXPECT_EQ((*feed)->Produce(&images, &labels).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<uint8_t> px(4 * 64, 1);
  std::vector<cuda::FeedAugment> augs(4);
  std::vector<float> lab(4, 0.f);
  cuda::HostBatch hb;
  hb.n = 4;
  hb.pixels = px.data();
  hb.augments = augs.data();
  hb.labels = lab.data();
  ASSERT_TRUE((*feed)->Stage(hb).ok());
  ASSERT_TRUE((*feed)->Stage(hb).ok());
  EXPECT_EQ((*feed)->Stage(hb).status().code(), absl::StatusCode::kFailedPrecondition);
  Tensor wrong(Shape::CHWN(1, 8, 8, 3), Device::kCUDA);
  EXPECT_EQ((*feed)->Produce(&wrong, &labels).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*feed)->ProduceView(10, true, &images, &labels).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*feed)->ProduceView(-1, true, &images, &labels).code(),
            absl::StatusCode::kInvalidArgument);
  // The graphed step's parts: in order, and only for the batch size staged.
  EXPECT_EQ((*feed)->Augment(&images, &labels, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*feed)->BeginProduce(3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*feed)->staged(), 2);  // a refused view or produce consumes nothing
  EXPECT_TRUE((*feed)->ProduceView(3, false, &images, &labels).ok());
  EXPECT_EQ((*feed)->staged(), 2);  // not the last view: still staged
  EXPECT_TRUE((*feed)->Produce(&images, &labels).ok());
  std::vector<float> got = images.ToHost();
  EXPECT_EQ(got[0], 1.0f * cfg.scale);
  hb.n = 5;
  EXPECT_EQ((*feed)->Stage(hb).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace colonnade
