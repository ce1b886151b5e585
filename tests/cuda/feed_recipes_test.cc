// The GPU feed with the recipes' augmentation (docs/DATA.md §5.1) against the host, bit for
// bit: the resize kernel (random-resized crops, boxes of the crop's size, the resized eval
// crop) and cutout in the tiled kernel against data::WriteImageCHWN; uint8 and indices-only
// pipelines with the random-resized crop and cutout through DeviceFeed against the float
// pipeline (plain and graphed steps, across an epoch); the two views of --eval_views=2
// through ProduceView against the host's eval batch and its mirror. Outputs are poisoned
// (NaN) before each run. Built for the GPU (cuda_tests) and the CPU emulator (cuda_emu_tests,
// smaller cases); skips without a GPU.

#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "apps/device_feed.h"
#include "core/tensor.h"
#include "cuda/batch_feed.h"
#include "cuda/feed_kernels.h"
#include "cuda/port.h"
#include "cuda/step_graph.h"
#include "data/augment.h"
#include "data/dataset.h"
#include "data/pipeline.h"
#include "feed_test_util.h"
#include "gpu_test.h"
#include "gtest/gtest.h"

namespace colonnade {
namespace {

class FeedRecipeTest : public GpuTest {
 protected:
  cudaStream_t Stream() { return static_cast<cudaStream_t>(cuda::ComputeStream()); }
};

// ---- the kernels against WriteImageCHWN -------------------------------------------------------

struct KernelCase {
  int c, h, w, crop;
  bool resized_crop;  // the resize kernel with random-resized boxes (else the tiled kernel)
  int pad, cutout;
  data::MeanMode mean;
  int n;
  bool large;  // GPU only
};

std::string KernelName(const KernelCase& k) {
  const char* mean[] = {"image", "channel", "none"};
  return absl::StrFormat("c%d_%dx%d_crop%d_%s_pad%d_cut%d_%s_n%d", k.c, k.h, k.w, k.crop,
                         k.resized_crop ? "rrc" : "crop", k.pad, k.cutout,
                         mean[static_cast<int>(k.mean)], k.n);
}

const KernelCase kKernelCases[] = {
    {3, 13, 11, 9, true, 0, 4, data::MeanMode::kImage, 7, false},
    {3, 20, 24, 16, true, 0, 0, data::MeanMode::kChannel, 33, false},
    {1, 9, 10, 7, true, 0, 3, data::MeanMode::kNone, 1, false},
    {3, 17, 19, 23, true, 0, 8, data::MeanMode::kImage, 36, false},     // upscaling boxes
    {3, 12, 12, 12, false, 3, 5, data::MeanMode::kImage, 36, false},    // tiled, float4 stores
    {3, 40, 38, 32, false, 4, 8, data::MeanMode::kChannel, 33, false},  // tiled, scalar stores
    {1, 16, 16, 16, false, 0, 16, data::MeanMode::kNone, 8, false},     // cutout = the output
    {3, 256, 256, 224, true, 0, 56, data::MeanMode::kImage, 128, true},
    {3, 224, 224, 128, true, 0, 0, data::MeanMode::kChannel, 257, true},
};

class RecipeKernelTest : public FeedRecipeTest, public ::testing::WithParamInterface<KernelCase> {};

// Random images and a random (non-integral) mean; augments drawn by DrawAugment (boxes
// smaller and larger than the crop, mirror, lighting, cutout), plus, for the resize kernel,
// images whose box is the crop's size (box 0 and box = crop, which the host writes by its
// unresized path): the kernel's batch equals WriteImageCHWN's, through direct buffers and
// through a graphed step's slot table.
TEST_P(RecipeKernelTest, EqualsTheCpuWriterBitwise) {
  const KernelCase& k = GetParam();
  if (IsSkipped()) return;
  if (kEmulated && k.large) GTEST_SKIP() << "large case skipped on the emulator";
  data::AugmentConfig cfg;
  cfg.height = k.h;
  cfg.width = k.w;
  cfg.channels = k.c;
  cfg.crop_h = cfg.crop_w = k.crop;
  cfg.pad = k.pad;
  cfg.mean = k.mean;
  cfg.scale = 1.f / 255;
  cfg.resized_crop.on = k.resized_crop;
  cfg.cutout = k.cutout;
  std::mt19937 rng(k.n * 17 + k.h);
  const size_t image = static_cast<size_t>(k.h) * k.w * k.c;
  const std::vector<uint8_t> pixels = RandomMeansAndPixels(&cfg, k.n, &rng);
  std::vector<data::ImageAugment> augs(k.n);
  std::vector<cuda::FeedAugment> feed_augs(k.n);
  int resized = 0;
  for (int j = 0; j < k.n; ++j) {
    augs[j] = data::DrawAugment(cfg, 31, 2, 500 + 7 * j, true, true, k.c == 3 ? 0.1f : 0.f);
    if (k.resized_crop && k.crop <= std::min(k.h, k.w) && j % 5 == 1) {  // the crop's size
      augs[j].box_h = augs[j].box_w = j % 2 ? k.crop : 0;
      augs[j].y0 = static_cast<int>(rng() % (k.h - k.crop + 1));
      augs[j].x0 = static_cast<int>(rng() % (k.w - k.crop + 1));
    }
    resized += augs[j].resized(cfg);
    feed_augs[j] = FeedAugmentOf(augs[j]);
  }
  if (k.resized_crop && k.n > 4) EXPECT_GT(resized, k.n / 2);
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
  g.scale = cfg.scale;
  g.mean_image = dev.Upload(cfg.mean_image);
  g.channel_mean = dev.Upload(cfg.channel_mean);
  g.resize = k.resized_crop ? 1 : 0;
  std::vector<float> labels(k.n);
  for (int j = 0; j < k.n; ++j) labels[j] = static_cast<float>(j % 10);
  const cuda::FeedBatchBuffers batch{dev.Upload(pixels), dev.Upload(feed_augs), dev.Upload(labels)};
  for (bool table : {false, true}) {
    SCOPED_TRACE(table ? "slot table" : "direct buffers");
    cuda::FeedSource src;
    if (table) {  // `direct` and slot 0 hold buffers of nothing that must not be read
      const cuda::FeedBatchBuffers junk{dev.Alloc<uint8_t>(pixels.size()),
                                        dev.Alloc<cuda::FeedAugment>(k.n), dev.Alloc<float>(k.n)};
      src.direct = junk;
      src.slots = dev.Upload(std::vector<cuda::FeedBatchBuffers>{junk, batch});
      src.slot_on_device = dev.Upload(std::vector<int32_t>{1});
    } else {
      src.direct = batch;
    }
    float* out = dev.Alloc<float>(out_size);
    float* labels_out = dev.Alloc<float>(k.n);
    cuda::AugmentBatchGpu(Stream(), g, src, k.n, out, labels_out);
    EXPECT_TRUE(BitwiseEqual(dev.Download(out, out_size), want));
    EXPECT_TRUE(BitwiseEqual(dev.Download(labels_out, k.n), labels));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RecipeKernelTest, ::testing::ValuesIn(kKernelCases),
                         [](const auto& info) { return KernelName(info.param); });

// ---- the whole feed
// ------------------------------------------------------------------------------

struct RecipePipeCase {
  data::BatchOutput output;
  const char* mean;
  int batch, dp_rank, dp_size;
  bool graphed;
};

class RecipeFeedPipelineTest : public FeedRecipeTest,
                               public ::testing::WithParamInterface<RecipePipeCase> {};

// A float pipeline and a uint8 (or indices-only) pipeline through DeviceFeed, both with the
// random-resized crop, cutout, mirror and lighting, from the same cursor: every batch bit
// for bit, the copy of batch k + 1 staged while batch k is produced, across an epoch; graphed:
// produced inside a cuda::StepGraph step that is captured and replayed.
TEST_P(RecipeFeedPipelineTest, EqualsTheFloatPipelineBitwise) {
  const RecipePipeCase& k = GetParam();
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
  o.seed = 99;
  o.crop = so.height - 6;
  o.resized_crop.on = true;
  o.cutout = so.height / 4;
  o.mirror = true;
  o.lighting = 0.1f;
  o.mean = k.mean;
  o.threads = 2;
  const data::Cursor start{1, k.batch};
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
  const int64_t n = k.batch / k.dp_size;
  Tensor images(Shape::CHWN(3, o.crop, o.crop, n), Device::kCUDA);
  Tensor labels(Shape::CHWN(1, 1, 1, n), Device::kCUDA);
  std::optional<cuda::StepGraph> graph;
  if (k.graphed) graph.emplace();
  absl::StatusOr<data::Batch> next = (*pipe)->Next();
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE((*feed)->Stage(*next).ok());
  const int kBatches = 5;  // crosses the end of epoch 1
  for (int b = 0; b < kBatches; ++b) {
    SCOPED_TRACE(absl::StrFormat("batch %d", b));
    data::Batch cur = std::move(*next);
    absl::StatusOr<data::Batch> want = (*float_pipe)->Next();
    ASSERT_TRUE(want.ok()) << want.status();
    images.Fill(std::numeric_limits<float>::quiet_NaN());
    labels.Fill(std::numeric_limits<float>::quiet_NaN());
    if (graph) {
      absl::StatusOr<int> slot = (*feed)->BeginProduce(static_cast<int>(n));
      ASSERT_TRUE(slot.ok()) << slot.status();
      StepScalars values;
      values.feed_slot = *slot;
      graph->Step(/*shape=*/1, values, [&](const StepScalars* dev) {
        absl::Status s =
            (*feed)->Augment(&images, &labels, dev != nullptr ? &dev->feed_slot : nullptr);
        EXPECT_TRUE(s.ok()) << s;
      });
      (*feed)->EndProduce();
    } else {
      ASSERT_TRUE((*feed)->Produce(&images, &labels).ok());
    }
    if (b + 1 < kBatches) {
      next = (*pipe)->Next();
      ASSERT_TRUE(next.ok()) << next.status();
      ASSERT_TRUE((*feed)->Stage(*next).ok());
    }
    EXPECT_EQ(cur.indices, want->indices);
    EXPECT_TRUE(BitwiseEqual(images.ToHost(), want->images.ToHost()));
    EXPECT_TRUE(BitwiseEqual(labels.ToHost(), want->labels.ToHost()));
    (*feed)->Recycle(std::move(cur));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, RecipeFeedPipelineTest,
    ::testing::Values(RecipePipeCase{data::BatchOutput::kSourceUint8, "image", 32, 0, 1, false},
                      RecipePipeCase{data::BatchOutput::kIndicesOnly, "channel", 33, 1, 3, false},
                      RecipePipeCase{data::BatchOutput::kSourceUint8, "none", 32, 0, 1, true}),
    [](const auto& info) {
      const RecipePipeCase& k = info.param;
      return absl::StrFormat("%s_%s_b%d_dp%dof%d%s",
                             k.output == data::BatchOutput::kSourceUint8 ? "uint8" : "indices",
                             k.mean, k.batch, k.dp_rank, k.dp_size, k.graphed ? "_graphed" : "");
    });

// --eval_views=2 as the trainer's evaluation runs it on a GPU: an eval pipeline handing
// uint8 images (or indices) with crop = the input side, each batch staged once and produced
// twice through ProduceView (the pipeline's centre view, then the same mirrored), against
// the float eval pipeline's batch and data::MirrorCHWN of it; the plain centre crop and the
// resized one (eval crop fraction), the last batch partial.
TEST_F(FeedRecipeTest, TwoViewsEqualTheHostsCentreCropAndItsMirror) {
  if (IsSkipped()) return;
  for (double fraction : {0.0, 0.875}) {
    for (data::BatchOutput output :
         {data::BatchOutput::kSourceUint8, data::BatchOutput::kIndicesOnly}) {
      SCOPED_TRACE(
          absl::StrFormat("fraction %g, %s", fraction,
                          output == data::BatchOutput::kSourceUint8 ? "uint8" : "indices"));
      data::SyntheticOptions so;
      so.size = 37;
      so.height = so.width = kEmulated ? 19 : 41;
      so.num_classes = 10;
      so.seed = 5;
      so.held_out = true;
      auto ds = data::MakeSyntheticDataset(so);
      ASSERT_TRUE(ds.ok());
      data::PipelineOptions o;
      o.global_batch = 16;
      o.train = false;
      o.epochs = 1;
      o.mean = "image";
      // A crop well inside the centre square, so that the fraction's square (0.875 of
      // the side, rounded) differs from it on both sizes and is resized.
      o.crop = so.height - 9;
      o.eval_crop_fraction = fraction;
      auto float_pipe = data::BatchPipeline::Create(ds->get(), o);
      ASSERT_TRUE(float_pipe.ok()) << float_pipe.status();
      o.output = output;
      auto pipe = data::BatchPipeline::Create(ds->get(), o);
      ASSERT_TRUE(pipe.ok()) << pipe.status();
      absl::StatusOr<std::unique_ptr<DeviceFeed>> feed = DeviceFeed::Create(**ds, pipe->get());
      ASSERT_TRUE(feed.ok()) << feed.status();
      data::ImageAugment centre =
          data::DrawAugment((*pipe)->augment_config(), o.seed, 0, 0, false, false, 0.f);
      EXPECT_EQ(centre.resized((*pipe)->augment_config()), fraction > 0);
      data::ImageAugment mirrored = centre;
      mirrored.mirror = true;
      for (int64_t b = 0; b < (*pipe)->batches_per_epoch(); ++b) {
        SCOPED_TRACE(absl::StrFormat("batch %d", b));
        absl::StatusOr<data::Batch> cur = (*pipe)->Next();
        absl::StatusOr<data::Batch> host = (*float_pipe)->Next();
        ASSERT_TRUE(cur.ok() && host.ok());
        absl::StatusOr<Tensor> flipped = data::MirrorCHWN(host->images);
        ASSERT_TRUE(flipped.ok());
        const int64_t n = static_cast<int64_t>(cur->indices.size());
        ASSERT_TRUE((*feed)->Stage(*cur).ok());
        for (int v = 0; v < 2; ++v) {
          Tensor images(Shape::CHWN(3, o.crop, o.crop, n), Device::kCUDA);
          Tensor labels(Shape::CHWN(1, 1, 1, n), Device::kCUDA);
          images.Fill(std::numeric_limits<float>::quiet_NaN());
          labels.Fill(std::numeric_limits<float>::quiet_NaN());
          ASSERT_TRUE((*feed)->ProduceView(v ? mirrored : centre, v == 1, &images, &labels).ok());
          EXPECT_TRUE(BitwiseEqual(images.ToHost(), (v ? *flipped : host->images).ToHost()))
              << "view " << v;
          EXPECT_TRUE(BitwiseEqual(labels.ToHost(), host->labels.ToHost()));
        }
        (*feed)->Recycle(std::move(*cur));
      }
    }
  }
}

// A view outside the images, or a resized view on a feed made without resize, is refused
// and consumes nothing.
TEST_F(FeedRecipeTest, BadViewsAreRefused) {
  if (IsSkipped()) return;
  cuda::FeedConfig cfg;
  cfg.height = cfg.width = 8;
  cfg.channels = 1;
  cfg.crop_h = cfg.crop_w = 4;
  cfg.max_batch = 2;
  auto feed = cuda::BatchFeed::Create(cfg);
  ASSERT_TRUE(feed.ok()) << feed.status();
  std::vector<uint8_t> px(2 * 64, 7);
  std::vector<cuda::FeedAugment> augs(2);
  std::vector<float> lab(2, 1.f);
  cuda::HostBatch hb;
  hb.n = 2;
  hb.pixels = px.data();
  hb.augments = augs.data();
  hb.labels = lab.data();
  ASSERT_TRUE((*feed)->Stage(hb).ok());
  Tensor images(Shape::CHWN(1, 4, 4, 2), Device::kCUDA), labels(Shape{2}, Device::kCUDA);
  cuda::FeedAugment v;
  v.y0 = 5;  // rows 5..8 of 8
  EXPECT_EQ((*feed)->ProduceView(v, true, &images, &labels).code(),
            absl::StatusCode::kInvalidArgument);
  v.y0 = 0;
  v.box_h = v.box_w = 6;  // resized, but the feed was made without resize
  absl::Status s = (*feed)->ProduceView(v, true, &images, &labels);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("needs a feed made with resize"), std::string::npos) << s;
  EXPECT_EQ((*feed)->staged(), 1);
  v.box_h = v.box_w = 4;  // the crop's size: fine
  EXPECT_TRUE((*feed)->ProduceView(v, true, &images, &labels).ok());
  EXPECT_EQ((*feed)->staged(), 0);
}

}  // namespace
}  // namespace colonnade
