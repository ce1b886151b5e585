// Batch pipeline: layout independence (dp slices, thread counts), exact resume, eval
// order, augmentation semantics (including padding), ten crops, error propagation,
// synthetic learnability.
#include "data/pipeline.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "core/philox.h"
#include "data/converters.h"
#include "data/image.h"
#include "pipeline_test_util.h"
#include "test_util.h"
#include "gtest/gtest.h"

namespace colonnade::data {
namespace {

SyntheticOptions SmallSynth(int64_t size = 100) {
  SyntheticOptions o;
  o.size = size;
  o.height = 16;
  o.width = 16;
  o.num_classes = 10;
  o.seed = 5;
  return o;
}

PipelineOptions TrainOptions(int64_t batch) {
  PipelineOptions o;
  o.global_batch = batch;
  o.seed = 1234;
  o.crop = 12;
  o.mirror = true;
  o.lighting = 0.1f;
  o.mean = "image";
  return o;
}

// Bitwise equality of images [n0, n0 + a.n()) of `whole` with `part`.
void ExpectSliceEqual(const Tensor& whole, int64_t n0, const Tensor& part) {
  ASSERT_EQ(whole.c(), part.c());
  ASSERT_EQ(whole.h(), part.h());
  ASSERT_EQ(whole.w(), part.w());
  const int64_t rows = whole.c() * whole.h() * whole.w();
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(std::memcmp(whole.data() + r * whole.n() + n0, part.data() + r * part.n(),
                          part.n() * sizeof(float)),
              0)
        << "row " << r;
  }
}

void ExpectBatchesEqual(const Batch& a, const Batch& b) {
  ASSERT_EQ(a.images.shape(), b.images.shape());
  ExpectSliceEqual(a.images, 0, b.images);
  EXPECT_EQ(a.labels.ToHost(), b.labels.ToHost());
  EXPECT_EQ(a.indices, b.indices);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.cursor, b.cursor);
  EXPECT_EQ(a.next, b.next);
}

TEST(PipelineTest, DpSlicesConcatenateToTheDp1BatchBitwise) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  ASSERT_TRUE(ds.ok());
  const int kBatches = 7;  // 100 images, batch 32, drop_last: 3 per epoch -> crosses epochs
  PipelineOptions o = TrainOptions(32);
  o.threads = 1;
  std::vector<Batch> whole = Take(ds->get(), o, kBatches);
  ASSERT_EQ(whole.size(), static_cast<size_t>(kBatches));
  EXPECT_EQ(whole[3].epoch, 1);
  EXPECT_EQ(whole[3].index_in_epoch, 0);
  for (int dp : {2, 4}) {
    for (int r = 0; r < dp; ++r) {
      PipelineOptions od = o;
      od.dp_size = dp;
      od.dp_rank = r;
      od.threads = 3;
      od.queue_depth = 2;
      std::vector<Batch> part = Take(ds->get(), od, kBatches);
      ASSERT_EQ(part.size(), static_cast<size_t>(kBatches));
      for (int b = 0; b < kBatches; ++b) {
        const int64_t local = 32 / dp;
        ASSERT_EQ(part[b].images.n(), local);
        ExpectSliceEqual(whole[b].images, r * local, part[b].images);
        std::vector<float> wl = whole[b].labels.ToHost(), pl = part[b].labels.ToHost();
        for (int64_t i = 0; i < local; ++i) {
          EXPECT_EQ(pl[i], wl[r * local + i]);
          EXPECT_EQ(part[b].indices[i], whole[b].indices[r * local + i]);
        }
        EXPECT_EQ(part[b].next, whole[b].next);
      }
    }
  }
  // Thread count and queue depth never change the data.
  PipelineOptions many = o;
  many.threads = 4;
  many.queue_depth = 7;
  std::vector<Batch> again = Take(ds->get(), many, kBatches);
  for (int b = 0; b < kBatches; ++b) ExpectBatchesEqual(whole[b], again[b]);
}

// The same images from raw shards, JPEG shards (decoded on 4 threads, concurrent HDF5
// reads) and memory: raw shards give bitwise the in-memory batches; JPEG shards give the
// same batches for 1 and 4 threads.
TEST(PipelineTest, ShardBackedPipelinesMatchAcrossStorageAndThreads) {
  testing::TempDir tmp;
  SyntheticOptions so = SmallSynth(96);
  ConvertOptions co;
  co.shard_size = 20;
  ASSERT_TRUE(WriteSyntheticShards(so, 0, tmp / "raw", co).ok());
  co.encoding = "jpeg";
  ASSERT_TRUE(WriteSyntheticShards(so, 0, tmp / "jpeg", co).ok());
  auto mem = MakeSyntheticDataset(so);
  auto raw = OpenDataset(tmp / "raw/train");
  auto jpeg = OpenDataset(tmp / "jpeg/train");
  ASSERT_TRUE(raw.ok() && jpeg.ok());
  PipelineOptions o = TrainOptions(32);
  o.mean = "none";
  o.threads = 4;
  std::vector<Batch> from_mem = Take(mem->get(), o, 5);
  std::vector<Batch> from_raw = Take(raw->get(), o, 5);
  o.threads = 1;
  std::vector<Batch> jpeg1 = Take(jpeg->get(), o, 5);
  o.threads = 4;
  std::vector<Batch> jpeg4 = Take(jpeg->get(), o, 5);
  for (int b = 0; b < 5; ++b) {
    ExpectBatchesEqual(from_mem[b], from_raw[b]);
    ExpectBatchesEqual(jpeg1[b], jpeg4[b]);
  }
}

TEST(PipelineTest, ShuffledEpochsCoverTheDatasetOnceAndDiffer) {
  auto ds = MakeSyntheticDataset(SmallSynth(96));
  PipelineOptions o = TrainOptions(32);
  std::vector<Batch> b = Take(ds->get(), o, 6);
  std::set<int64_t> epoch0, epoch1;
  for (int i = 0; i < 3; ++i) epoch0.insert(b[i].indices.begin(), b[i].indices.end());
  for (int i = 3; i < 6; ++i) epoch1.insert(b[i].indices.begin(), b[i].indices.end());
  EXPECT_EQ(epoch0.size(), 96u);
  EXPECT_EQ(epoch1.size(), 96u);
  EXPECT_NE(b[0].indices, b[3].indices);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(b[0].indices[i], EpochPermutation(96, o.seed, 0)[i]);
    EXPECT_EQ(b[0].labels.ToHost()[i], static_cast<float>(b[0].indices[i] % 10));
  }
}

TEST(PipelineTest, ResumeFromASavedCursorContinuesIdentically) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  PipelineOptions o = TrainOptions(32);
  o.threads = 2;
  std::vector<Batch> straight = Take(ds->get(), o, 8);
  for (int k : {1, 3, 5}) {
    // Save the cursor after batch k-1 as a string (as a checkpoint would) and resume.
    absl::StatusOr<Cursor> saved = Cursor::Parse(straight[k - 1].next.ToString());
    ASSERT_TRUE(saved.ok());
    PipelineOptions o2 = o;
    o2.threads = 3;
    std::vector<Batch> resumed = Take(ds->get(), o2, 8 - k, *saved);
    ASSERT_EQ(resumed.size(), static_cast<size_t>(8 - k));
    for (int i = 0; i < 8 - k; ++i) ExpectBatchesEqual(straight[k + i], resumed[i]);
  }
  EXPECT_EQ(straight[2].next, (Cursor{1, 0}));
}

TEST(PipelineTest, EvalIsInOrderAndKeepsThePartialLastBatch) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  PipelineOptions o;
  o.global_batch = 32;
  o.train = false;
  o.crop = 12;
  o.mirror = true;    // ignored in eval
  o.lighting = 0.1f;  // ignored in eval
  o.epochs = 1;
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->batches_per_epoch(), 4);
  int64_t next_index = 0;
  for (int b = 0; b < 4; ++b) {
    absl::StatusOr<Batch> batch = (*p)->Next();
    ASSERT_TRUE(batch.ok()) << batch.status();
    const int64_t n = b < 3 ? 32 : 4;
    EXPECT_EQ(batch->images.n(), n);
    EXPECT_EQ(batch->labels.n(), n);
    EXPECT_EQ(batch->global_count, n);
    EXPECT_EQ(batch->index_in_epoch, b);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(batch->indices[i], next_index++);
    EXPECT_EQ(batch->next, b < 3 ? (Cursor{0, 32 * (b + 1)}) : (Cursor{1, 0}));
  }
  absl::StatusOr<Batch> end = (*p)->Next();
  EXPECT_TRUE(absl::IsOutOfRange(end.status())) << end.status();

  // dp = 8 on the last batch of 4 images: ranks get 0 or 1 image, together all 4.
  std::vector<int64_t> last;
  for (int r = 0; r < 8; ++r) {
    PipelineOptions od = o;
    od.dp_size = 8;
    od.dp_rank = r;
    std::vector<Batch> bs = Take(ds->get(), od, 4);
    ASSERT_EQ(bs.size(), 4u);
    EXPECT_EQ(bs[0].images.n(), 4);
    EXPECT_EQ(bs[3].global_count, 4);
    EXPECT_LE(bs[3].images.n(), 1);
    last.insert(last.end(), bs[3].indices.begin(), bs[3].indices.end());
  }
  EXPECT_EQ(last, (std::vector<int64_t>{96, 97, 98, 99}));
}

TEST(PipelineTest, AugmentationSemantics) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  Dataset* d = ds->get();
  // No mean, scale 1: outputs are the raw pixels of the crop (mirrored or not).
  PipelineOptions o;
  o.global_batch = 50;
  o.seed = 77;
  o.crop = 10;
  o.mirror = true;
  o.mean = "none";
  o.scale = 1.0f;
  std::vector<Batch> b = Take(d, o, 2);
  int mirrored = 0, total = 0;
  std::set<std::pair<int, int>> offsets;
  for (const Batch& batch : b) {
    const int64_t N = batch.images.n();
    for (int64_t n = 0; n < N; ++n) {
      std::vector<uint8_t> px;
      ASSERT_TRUE(d->Read(batch.indices[n], &px).ok());
      const float* out = batch.images.data();
      // Find the crop offset and mirror flag that explain the output.
      bool found = false;
      for (int y0 = 0; y0 <= 6 && !found; ++y0) {
        for (int x0 = 0; x0 <= 6 && !found; ++x0) {
          for (int m = 0; m < 2 && !found; ++m) {
            bool ok = true;
            for (int c = 0; c < 3 && ok; ++c)
              for (int y = 0; y < 10 && ok; ++y)
                for (int x = 0; x < 10 && ok; ++x) {
                  int sx = m ? x0 + 9 - x : x0 + x;
                  ok = out[((c * 10 + y) * 10 + x) * N + n] == px[((y0 + y) * 16 + sx) * 3 + c];
                }
            if (ok) {
              found = true;
              mirrored += m;
              offsets.insert({y0, x0});
            }
          }
        }
      }
      EXPECT_TRUE(found) << "image " << n << " is not a crop of its source";
      ++total;
    }
  }
  EXPECT_GT(mirrored, total / 4);
  EXPECT_LT(mirrored, 3 * total / 4);
  EXPECT_GT(offsets.size(), 10u);  // many distinct crops

  // Eval: the centre crop, mean image subtracted, default scale 1/255.
  PipelineOptions e;
  e.global_batch = 10;
  e.train = false;
  e.crop = 10;
  std::vector<Batch> eb = Take(d, e, 1);
  const std::vector<float>& mean = d->mean_image();
  for (int64_t n = 0; n < 10; ++n) {
    std::vector<uint8_t> px;
    ASSERT_TRUE(d->Read(n, &px).ok());
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 10; ++y)
        for (int x = 0; x < 10; ++x) {
          const int s = ((3 + y) * 16 + 3 + x) * 3 + c;
          EXPECT_EQ(eb[0].images.data()[((c * 10 + y) * 10 + x) * 10 + n],
                    (static_cast<float>(px[s]) - mean[s] + 0.f) * (1.0f / 255.0f));
        }
  }
  // Channel mean: out = pixel - average of the mean image over pixels of that channel.
  PipelineOptions cm = e;
  cm.mean = "channel";
  cm.crop = 0;
  std::vector<Batch> cb = Take(d, cm, 1);
  double chan[3] = {0, 0, 0};
  for (int p = 0; p < 256; ++p)
    for (int c = 0; c < 3; ++c) chan[c] += mean[p * 3 + c] / 256.0;
  std::vector<uint8_t> px0;
  ASSERT_TRUE(d->Read(0, &px0).ok());
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(cb[0].images.data()[((c * 16 + 5) * 16 + 7) * 10],
                (px0[(5 * 16 + 7) * 3 + c] - chan[c]) / 255.0, 1e-5);
  }
}

TEST(PipelineTest, LightingAddsOnePcaColourShiftPerImage) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  PipelineOptions base;
  base.global_batch = 40;
  base.seed = 3;
  base.mean = "none";
  base.scale = 1.0f;
  PipelineOptions lit = base;
  lit.lighting = 0.1f;
  Batch a = std::move(Take(ds->get(), base, 1)[0]);
  Batch b = std::move(Take(ds->get(), lit, 1)[0]);
  ASSERT_EQ(a.indices, b.indices);
  const int64_t N = 40, HW = 16 * 16;
  std::set<float> distinct;
  for (int64_t n = 0; n < N; ++n) {
    float delta[3];
    for (int c = 0; c < 3; ++c) {
      delta[c] = b.images.data()[(c * HW) * N + n] - a.images.data()[(c * HW) * N + n];
      for (int64_t p = 1; p < HW; ++p) {
        float d = b.images.data()[(c * HW + p) * N + n] - a.images.data()[(c * HW + p) * N + n];
        ASSERT_NEAR(d, delta[c], 1e-3) << "lighting must be constant over the image";
      }
      EXPECT_LT(std::fabs(delta[c]), 255 * 0.2175 * 0.6);  // |alpha| < 6 sigma
    }
    // The shift is along the PCA basis: reconstruct alpha and compare with the draw.
    const uint64_t key = MixKey(lit.seed, static_cast<uint64_t>(RandomPurpose::kLighting));
    float alpha[3], expect[3];
    for (int j = 0; j < 3; ++j) alpha[j] = 0.1f * PhiloxNormal(key, 0, 3 * n + j);
    LightingDelta(alpha, expect);
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(delta[c], expect[c], 1e-3);
    distinct.insert(delta[0]);
  }
  EXPECT_GT(distinct.size(), 30u);
}

TEST(PipelineTest, ChunkWriterIsBitwiseTheSingleImageWriter) {
  for (MeanMode mode : {MeanMode::kImage, MeanMode::kChannel, MeanMode::kNone}) {
    AugmentConfig cfg;
    cfg.height = 11;
    cfg.width = 13;
    cfg.channels = 3;
    cfg.crop_h = 7;
    cfg.crop_w = 9;
    cfg.mean = mode;
    cfg.scale = 0.37f;
    for (int e = 0; e < 11 * 13 * 3; ++e) cfg.mean_image.push_back(0.31f * e);
    cfg.channel_mean = {10.1f, 20.2f, 30.3f};
    for (int shape = 0; shape < 2; ++shape) {
      // 21 images at column 3 of 25 (unaligned, partial blocks); 16 at column 16 of 32 (the
      // aligned whole-cache-line path).
      const int count = shape == 0 ? 21 : 16;
      const int64_t N = shape == 0 ? 25 : 32, n0 = shape == 0 ? 3 : 16;
      std::vector<std::vector<uint8_t>> images(count);
      std::vector<const uint8_t*> ptrs;
      std::vector<ImageAugment> augs;
      for (int j = 0; j < count; ++j) {
        for (int e = 0; e < 11 * 13 * 3; ++e)
          images[j].push_back(static_cast<uint8_t>(e * 7 + j * 13));
        ptrs.push_back(images[j].data());
        augs.push_back(DrawAugment(cfg, 99, 2, j, true, true, 0.1f));
      }
      // 64-byte aligned outputs, like Tensor storage.
      const int64_t size = 3 * 7 * 9 * N;
      Tensor ta(Shape{size}), tb(Shape{size});
      std::fill(ta.data(), ta.data() + size, -1.f);
      std::fill(tb.data(), tb.data() + size, -1.f);
      WriteChunkCHWN(ptrs.data(), augs.data(), count, cfg, ta.data(), N, n0);
      for (int j = 0; j < count; ++j) WriteImageCHWN(ptrs[j], cfg, augs[j], tb.data(), N, n0 + j);
      ASSERT_EQ(std::memcmp(ta.data(), tb.data(), size * sizeof(float)), 0);
    }
  }
}

TEST(PipelineTest, TenCropsPositionsAndMirrors) {
  const int64_t C = 2, H = 6, W = 7, N = 3;
  Tensor t(Shape::CHWN(C, H, W, N));
  for (int64_t i = 0; i < t.size(); ++i) t.data()[i] = static_cast<float>(i);
  auto at = [&](int64_t c, int64_t y, int64_t x, int64_t n) {
    return t.data()[((c * H + y) * W + x) * N + n];
  };
  absl::StatusOr<std::vector<Tensor>> crops = TenCrops(t, 4);
  ASSERT_TRUE(crops.ok());
  ASSERT_EQ(crops->size(), 10u);
  const int64_t oy[5] = {1, 0, 0, 2, 2}, ox[5] = {1, 0, 3, 0, 3};
  for (int k = 0; k < 10; ++k) {
    const Tensor& cr = (*crops)[k];
    EXPECT_EQ(cr.shape(), Shape::CHWN(C, 4, 4, N));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < 4; ++y)
        for (int64_t x = 0; x < 4; ++x)
          for (int64_t n = 0; n < N; ++n) {
            int64_t sx = k < 5 ? ox[k % 5] + x : ox[k % 5] + 3 - x;
            ASSERT_EQ(cr.data()[((c * 4 + y) * 4 + x) * N + n], at(c, oy[k % 5] + y, sx, n));
          }
  }
  EXPECT_FALSE(TenCrops(t, 7).ok());
}

// A dataset that fails on one index, or reads slowly.
class TestDataset : public Dataset {
 public:
  TestDataset(int64_t bad, int sleep_us) : bad_(bad), sleep_us_(sleep_us) {
    info_.size = 64;
    info_.height = info_.width = 4;
    info_.channels = 3;
    info_.num_classes = 2;
    info_.class_names = {"a", "b"};
    info_.path = "test";
    mean_.assign(48, 0.f);
  }
  const DatasetInfo& info() const override { return info_; }
  const std::vector<float>& mean_image() const override { return mean_; }
  int Label(int64_t i) const override { return static_cast<int>(i % 2); }
  absl::StatusOr<int> Read(int64_t i, std::vector<uint8_t>* px) override {
    reads++;
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (i == bad_) {
      return absl::DataLossError("data/x/shard-00000.h5: /images: image 13: undecodable JPEG");
    }
    px->assign(48, static_cast<uint8_t>(i));
    return Label(i);
  }
  std::atomic<int> reads{0};

 private:
  int64_t bad_;
  int sleep_us_;
  DatasetInfo info_;
  std::vector<float> mean_;
};

TEST(PipelineTest, ReaderErrorsSurfaceInNextAndStay) {
  TestDataset ds(13, 0);
  PipelineOptions o;
  o.global_batch = 8;
  o.train = false;
  o.threads = 3;
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(&ds, o);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->Next().ok());          // images 0..7
  absl::StatusOr<Batch> b = (*p)->Next();  // images 8..15 include 13
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), "data/x/shard-00000.h5: /images: image 13: undecodable JPEG");
  absl::StatusOr<Batch> again = (*p)->Next();
  EXPECT_EQ(again.status(), b.status());
}

TEST(PipelineTest, DestructorStopsPromptly) {
  TestDataset ds(-1, 2000);  // 2 ms per image
  PipelineOptions o;
  o.global_batch = 32;
  o.threads = 2;
  o.queue_depth = 8;
  auto t0 = std::chrono::steady_clock::now();
  {
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(&ds, o);
    ASSERT_TRUE(p.ok());
    ASSERT_TRUE((*p)->Next().ok());
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 1.0);
  EXPECT_LT(ds.reads.load(), 64 * 8);
}

TEST(PipelineTest, OptionValidation) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  auto err = [&](PipelineOptions o, Cursor c = {}) {
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o, c);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  PipelineOptions o = TrainOptions(30);
  o.dp_size = 4;
  EXPECT_NE(err(o).find("global_batch 30 is not divisible by dp_size 4"), std::string::npos);
  o = TrainOptions(32);
  o.crop = 17;
  EXPECT_NE(err(o).find("crop 17 does not fit the 16x16 images"), std::string::npos);
  o = TrainOptions(32);
  o.pinned = true;
  EXPECT_NE(err(o).find("pinned_allocator"), std::string::npos);
  o = TrainOptions(128);
  EXPECT_NE(err(o).find("fewer than one global batch"), std::string::npos);
  o = TrainOptions(32);
  o.mean = "median";
  EXPECT_NE(err(o).find("median"), std::string::npos);
  o = TrainOptions(32);
  EXPECT_NE(err(o, Cursor{0, 101}).find("start cursor 0:101"), std::string::npos);
  o.dp_rank = 1;
  EXPECT_NE(err(o).find("dp_rank 1 / dp_size 1"), std::string::npos);
}

// A batch tensor beyond the limit is refused by Create. Before: accepted, and the first
// batch's allocation (3 x 12 x 12 x 2^28 floats, 460 GB) aborted the process.
TEST(PipelineTest, BatchBeyondTheTensorLimitIsRefused) {
  testing::Guarded g = testing::RunGuarded([] {
    auto ds = MakeSyntheticDataset(SmallSynth(int64_t{1} << 28));
    PipelineOptions o = TrainOptions(int64_t{1} << 28);
    o.shuffle = false;  // no 2 GB epoch permutation
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
    if (!p.ok()) return std::string(p.status().message());
    absl::StatusOr<Batch> b = (*p)->Next();
    return std::string(b.ok() ? "batch" : b.status().message());
  });
  EXPECT_EQ(g.text,
            "batch pipeline: a batch of 268435456 images of 3x12x12 per rank is more "
            "than the limit of 2147483647 values (docs/LIMITS.md)");
}

TEST(PipelineTest, PinnedAllocatorHookAndRecycling) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  int calls = 0;
  PipelineOptions o = TrainOptions(16);
  o.pinned = true;
  o.queue_depth = 2;
  o.pinned_allocator = [&calls](const Shape& s) {
    ++calls;  // called under the pipeline's lock: no extra synchronisation needed
    return Tensor(s, Device::kCPU);
  };
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(p.ok());
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Batch> b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    (*p)->Recycle(std::move(*b));
  }
  EXPECT_GT(calls, 0);
  EXPECT_LE(calls, 2 * (o.queue_depth + 3));  // images + labels, bounded by the queue
}

// ---- Padding (PipelineOptions::pad, AugmentConfig::pad) ----------------------------------

// The naive padding reference: builds the (H+2P) x (W+2P) x C image of OUTPUT values
// explicitly (image pixels normalised as (pixel - mean + light) * scale, padding 0), then
// takes the crop at (y0+P, x0+P) of the padded image and mirrors it. Returns the
// C x crop_h x crop_w output column; `padding` counts the values that came from padding.
std::vector<float> PaddedReference(const uint8_t* hwc, const AugmentConfig& cfg,
                                   const ImageAugment& a, int P, int* padding = nullptr) {
  const int H = cfg.height, W = cfg.width, C = cfg.channels, ch = cfg.crop_h, cw = cfg.crop_w;
  const int PW = W + 2 * P;
  std::vector<float> padded(static_cast<size_t>(H + 2 * P) * PW * C, 0.0f);
  std::vector<bool> inside(padded.size(), false);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x)
      for (int c = 0; c < C; ++c) {
        const int e = (y * W + x) * C + c;
        float offset = a.light[c];
        if (cfg.mean == MeanMode::kChannel) offset -= cfg.channel_mean[c];
        float v = static_cast<float>(hwc[e]);
        if (cfg.mean == MeanMode::kImage) v -= cfg.mean_image[e];
        const size_t pe = (static_cast<size_t>(y + P) * PW + x + P) * C + c;
        padded[pe] = (v + offset) * cfg.scale;
        inside[pe] = true;
      }
  std::vector<float> out(static_cast<size_t>(C) * ch * cw);
  for (int c = 0; c < C; ++c)
    for (int y = 0; y < ch; ++y)
      for (int x = 0; x < cw; ++x) {
        const int py = a.y0 + P + y, px = (a.mirror ? a.x0 + cw - 1 - x : a.x0 + x) + P;
        EXPECT_TRUE(py >= 0 && py < H + 2 * P && px >= 0 && px < PW)
            << "offset (" << a.y0 << ", " << a.x0 << ") is outside the padded image";
        const size_t pe = (static_cast<size_t>(py) * PW + px) * C + c;
        out[(static_cast<size_t>(c) * ch + y) * cw + x] = padded.at(pe);
        if (padding && !inside.at(pe)) ++*padding;
      }
  return out;
}

// Column n of a CHWN buffer equals `want` bitwise (0.0f and -0.0f differ).
::testing::AssertionResult ColumnIs(const float* data, int64_t N, int64_t n,
                                    const std::vector<float>& want) {
  for (size_t r = 0; r < want.size(); ++r) {
    const float got = data[static_cast<int64_t>(r) * N + n];
    if (std::memcmp(&got, &want[r], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "column " << n << " value " << r << ": " << got << " != " << want[r];
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(PadTest, WritersEqualAnExplicitlyPaddedImage) {
  struct Geo {
    int H, W, ch, cw, P;
  };
  // Crop inside the image; crop = the full image (the CIFAR case); pad = crop - 1 (crops
  // with a single image row or column); no padding.
  const Geo geos[] = {{11, 13, 7, 9, 3}, {11, 13, 11, 13, 4}, {11, 13, 7, 9, 6}, {11, 13, 7, 9, 0}};
  std::mt19937 rng(42);
  int64_t padding_values = 0;
  for (const Geo& g : geos) {
    for (int C : {3, 1}) {
      for (MeanMode mode : {MeanMode::kImage, MeanMode::kChannel, MeanMode::kNone}) {
        AugmentConfig cfg;
        cfg.height = g.H;
        cfg.width = g.W;
        cfg.channels = C;
        cfg.crop_h = g.ch;
        cfg.crop_w = g.cw;
        cfg.pad = g.P;
        cfg.mean = mode;
        cfg.scale = 0.37f;
        const int values = g.H * g.W * C;
        for (int e = 0; e < values; ++e) cfg.mean_image.push_back(3.0f + 0.31f * e);
        cfg.channel_mean = {10.1f, 20.2f, 30.3f};
        cfg.channel_mean.resize(C);
        const int ylo = -g.P, yhi = g.H - g.ch + g.P, xlo = -g.P, xhi = g.W - g.cw + g.P;
        // Counts 1..16 at column 1 (unaligned, scalar stores); then 16 at column 16 of 32
        // (64-byte aligned, N % 4 == 0: the streaming-store path).
        for (int round = 1; round <= 17; ++round) {
          const int count = std::min(round, 16);
          const int64_t n0 = round == 17 ? 16 : 1, N = round == 17 ? 32 : n0 + count + 2;
          std::vector<std::vector<uint8_t>> images(count);
          std::vector<const uint8_t*> ptrs;
          std::vector<ImageAugment> augs(count);
          for (int j = 0; j < count; ++j) {
            for (int e = 0; e < values; ++e) images[j].push_back(static_cast<uint8_t>(rng()));
            ptrs.push_back(images[j].data());
            ImageAugment& a = augs[j];
            if (j < 8) {  // the four extreme corners, unmirrored then mirrored
              a.y0 = (j & 1) ? yhi : ylo;
              a.x0 = (j & 2) ? xhi : xlo;
              a.mirror = j >= 4;
            } else {
              a.y0 = ylo + static_cast<int>(rng() % (yhi - ylo + 1));
              a.x0 = xlo + static_cast<int>(rng() % (xhi - xlo + 1));
              a.mirror = rng() & 1;
            }
            for (int c = 0; c < 3; ++c)
              a.light[c] = static_cast<float>(rng() % 4001) / 100.f - 20.f;
          }
          const int64_t size = static_cast<int64_t>(C) * g.ch * g.cw * N;
          Tensor ta(Shape{size}), tb(Shape{size});
          std::fill(ta.data(), ta.data() + size, -1.f);
          std::fill(tb.data(), tb.data() + size, -1.f);
          WriteChunkCHWN(ptrs.data(), augs.data(), count, cfg, ta.data(), N, n0);
          for (int j = 0; j < count; ++j)
            WriteImageCHWN(ptrs[j], cfg, augs[j], tb.data(), N, n0 + j);
          const std::vector<float> untouched(static_cast<size_t>(C) * g.ch * g.cw, -1.f);
          for (int64_t n = 0; n < N; ++n) {
            const bool in = n >= n0 && n < n0 + count;
            int padding = 0;
            const std::vector<float> want =
                in ? PaddedReference(images[n - n0].data(), cfg, augs[n - n0], g.P, &padding)
                   : untouched;
            padding_values += padding;
            ASSERT_TRUE(ColumnIs(ta.data(), N, n, want))
                << "WriteChunkCHWN, pad " << g.P << " C " << C << " mean " << static_cast<int>(mode)
                << " count " << count << " offset (" << (in ? augs[n - n0].y0 : 0) << ", "
                << (in ? augs[n - n0].x0 : 0) << ") mirror " << (in && augs[n - n0].mirror);
            ASSERT_TRUE(ColumnIs(tb.data(), N, n, want))
                << "WriteImageCHWN, pad " << g.P << " C " << C << " mean " << static_cast<int>(mode)
                << " count " << count;
          }
        }
      }
    }
  }
  EXPECT_GT(padding_values, 10000);  // the padding really was exercised
}

TEST(PadTest, DrawnOffsetsCoverExactlyThePaddedRange) {
  struct Geo {
    int H, W, ch, cw, P;
  };
  for (const Geo& g : {Geo{16, 16, 12, 12, 4}, Geo{32, 32, 32, 32, 4}, Geo{11, 13, 7, 9, 6},
                       Geo{16, 16, 12, 12, 0}}) {
    AugmentConfig cfg;
    cfg.height = g.H;
    cfg.width = g.W;
    cfg.channels = 3;
    cfg.crop_h = g.ch;
    cfg.crop_w = g.cw;
    cfg.pad = g.P;
    std::map<int, int> ys, xs;
    const int draws = 40000;
    for (int64_t p = 0; p < draws; ++p) {
      const ImageAugment a = DrawAugment(cfg, 7, p % 3, p, true, true, 0.f);
      ++ys[a.y0];
      ++xs[a.x0];
    }
    const int ylo = -g.P, yhi = g.H - g.ch + g.P, xlo = -g.P, xhi = g.W - g.cw + g.P;
    EXPECT_EQ(ys.begin()->first, ylo) << "pad " << g.P;
    EXPECT_EQ(ys.rbegin()->first, yhi) << "pad " << g.P;
    EXPECT_EQ(xs.begin()->first, xlo) << "pad " << g.P;
    EXPECT_EQ(xs.rbegin()->first, xhi) << "pad " << g.P;
    // Every offset in between, roughly uniformly.
    EXPECT_EQ(static_cast<int>(ys.size()), yhi - ylo + 1);
    EXPECT_EQ(static_cast<int>(xs.size()), xhi - xlo + 1);
    for (const auto& [v, n] : ys) EXPECT_GT(n, draws / (yhi - ylo + 1) / 2) << "y0 " << v;
    for (const auto& [v, n] : xs) EXPECT_GT(n, draws / (xhi - xlo + 1) / 2) << "x0 " << v;
  }
  // Without padding, a crop of the full image has one position and draws nothing.
  AugmentConfig full;
  full.height = full.width = full.crop_h = full.crop_w = 8;
  full.channels = 3;
  const ImageAugment a = DrawAugment(full, 7, 0, 3, true, false, 0.f);
  EXPECT_EQ(a.y0, 0);
  EXPECT_EQ(a.x0, 0);
}

// pad = 0 is the pipeline as it was: the same batches as default options, and offsets from
// the pre-padding formula (uniform in [0, H - crop] from the kCrop Philox words).
TEST(PadTest, PadZeroIsThePipelineWithoutPadding) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  Dataset* d = ds->get();
  PipelineOptions def = TrainOptions(32);  // crop 12 of 16, mirror, lighting, mean image
  PipelineOptions zero = def;
  zero.pad = 0;
  zero.threads = 3;
  std::vector<Batch> a = Take(d, def, 5), b = Take(d, zero, 5);
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (int i = 0; i < 5; ++i) ExpectBatchesEqual(a[i], b[i]);

  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(d, zero);
  ASSERT_TRUE(p.ok());
  const AugmentConfig& cfg = (*p)->augment_config();
  EXPECT_EQ(cfg.pad, 0);
  const uint64_t key = MixKey(zero.seed, static_cast<uint64_t>(RandomPurpose::kCrop));
  for (const Batch& batch : b) {
    for (int64_t n = 0; n < batch.images.n(); ++n) {
      const int64_t position = batch.cursor.position + n;
      ImageAugment aug = DrawAugment(cfg, zero.seed, batch.epoch, position, true, true, 0.1f);
      const Philox4 r =
          Philox4x32(key, static_cast<uint64_t>(batch.epoch), static_cast<uint64_t>(position));
      ASSERT_EQ(aug.y0, static_cast<int>((static_cast<uint64_t>(r.v[0]) * 5) >> 32));
      ASSERT_EQ(aug.x0, static_cast<int>((static_cast<uint64_t>(r.v[1]) * 5) >> 32));
      std::vector<uint8_t> px;
      ASSERT_TRUE(d->Read(batch.indices[n], &px).ok());
      ASSERT_TRUE(ColumnIs(batch.images.data(), batch.images.n(), n,
                           PaddedReference(px.data(), cfg, aug, 0)));
    }
  }
}

// A training pipeline with pad 4 and crop = the full image (the CIFAR recipe): every image
// is the reference crop of its padded image at the drawn offset, and padding shows up.
TEST(PadTest, TrainingPipelineCropsThePaddedImage) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  Dataset* d = ds->get();
  PipelineOptions o = TrainOptions(32);
  o.crop = 0;
  o.pad = 4;
  o.threads = 3;
  std::vector<Batch> batches = Take(d, o, 4);
  ASSERT_EQ(batches.size(), 4u);
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(d, o);
  ASSERT_TRUE(p.ok());
  const AugmentConfig& cfg = (*p)->augment_config();
  ASSERT_EQ(cfg.pad, 4);
  ASSERT_EQ(cfg.crop_h, 16);
  int64_t padding = 0, shifted = 0;
  for (const Batch& batch : batches) {
    EXPECT_EQ(batch.images.shape(), Shape::CHWN(3, 16, 16, 32));
    for (int64_t n = 0; n < batch.images.n(); ++n) {
      const ImageAugment aug =
          DrawAugment(cfg, o.seed, batch.epoch, batch.cursor.position + n, true, true, 0.1f);
      shifted += aug.y0 != 0 || aug.x0 != 0;
      std::vector<uint8_t> px;
      ASSERT_TRUE(d->Read(batch.indices[n], &px).ok());
      int pad_values = 0;
      ASSERT_TRUE(ColumnIs(batch.images.data(), 32, n,
                           PaddedReference(px.data(), cfg, aug, 4, &pad_values)));
      padding += pad_values;
    }
  }
  EXPECT_GT(shifted, 100);
  EXPECT_GT(padding, 0);
}

// Evaluation is never padded: eval pipelines with pad > 0 give exactly the pad 0 batches.
TEST(PadTest, EvalPipelinesIgnorePad) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  for (int crop : {12, 0}) {
    PipelineOptions o;
    o.global_batch = 32;
    o.train = false;
    o.crop = crop;
    o.epochs = 1;
    PipelineOptions padded = o;
    padded.pad = 4;
    padded.threads = 3;
    std::vector<Batch> a = Take(ds->get(), o, 4), b = Take(ds->get(), padded, 4);
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (int i = 0; i < 4; ++i) ExpectBatchesEqual(a[i], b[i]);
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), padded);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->augment_config().pad, 0);
  }
  // DrawAugment's eval path is the centre crop whatever the pad.
  AugmentConfig cfg;
  cfg.height = cfg.width = 16;
  cfg.crop_h = cfg.crop_w = 11;
  cfg.channels = 3;
  cfg.pad = 4;
  for (int64_t p = 0; p < 50; ++p) {
    const ImageAugment a = DrawAugment(cfg, 7, 0, p, false, true, 0.1f);
    EXPECT_EQ(a.y0, 2);
    EXPECT_EQ(a.x0, 2);
    EXPECT_FALSE(a.mirror);
  }
}

TEST(PadTest, PipelineRejectsBadPad) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  auto err = [&](PipelineOptions o) {
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
    EXPECT_FALSE(p.ok()) << "pad " << o.pad << " crop " << o.crop;
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  PipelineOptions o = TrainOptions(32);  // crop 12 of 16x16
  o.pad = -1;
  EXPECT_NE(err(o).find("pad -1 must be >= 0"), std::string::npos) << err(o);
  EXPECT_NE(err(o).find("synthetic:train"), std::string::npos) << err(o);
  o.train = false;  // rejected in eval too, although unused there
  EXPECT_NE(err(o).find("pad -1"), std::string::npos);
  o = TrainOptions(32);
  o.pad = 12;  // not smaller than the crop
  EXPECT_NE(err(o).find("pad 12 must be >= 0 and smaller than the crop side 12"), std::string::npos)
      << err(o);
  o.crop = 0;
  o.pad = 16;  // crop 0: the crop side is the image side
  EXPECT_NE(err(o).find("crop side 16"), std::string::npos) << err(o);
  // The largest accepted pads.
  o.pad = 15;
  EXPECT_TRUE(BatchPipeline::Create(ds->get(), o).ok());
  o.crop = 12;
  o.pad = 11;
  EXPECT_TRUE(BatchPipeline::Create(ds->get(), o).ok());
}

// Learnability proxy: a nearest-class-mean classifier on raw pixels, trained on the
// training split, labels the disjoint held-out split well above chance (10%).
TEST(PipelineTest, SyntheticIsLearnableAndSplitsAreDisjoint) {
  SyntheticOptions so;
  so.size = 2000;
  auto train = MakeSyntheticDataset(so);
  so.held_out = true;
  so.size = 500;
  auto test = MakeSyntheticDataset(so);
  ASSERT_TRUE(train.ok() && test.ok());
  const int D = 32 * 32 * 3;
  std::vector<std::vector<double>> centroid(10, std::vector<double>(D, 0.0));
  std::set<std::vector<uint8_t>> seen;
  for (int64_t i = 0; i < 2000; ++i) {
    std::vector<uint8_t> px;
    int l = *(*train)->Read(i, &px);
    for (int e = 0; e < D; ++e) centroid[l][e] += px[e] / 200.0;
    if (i < 500) seen.insert(px);
  }
  int correct = 0;
  for (int64_t i = 0; i < 500; ++i) {
    std::vector<uint8_t> px;
    int l = *(*test)->Read(i, &px);
    EXPECT_EQ(seen.count(px), 0u) << "held-out image " << i << " also in train";
    int best = -1;
    double best_d = 1e300;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (int e = 0; e < D; ++e) d += (px[e] - centroid[k][e]) * (px[e] - centroid[k][e]);
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == l;
  }
  EXPECT_GT(correct, 300) << "nearest-centroid accuracy " << correct / 5.0 << "%";
  // Same options, same images: everything is a pure function of the options.
  auto again = MakeSyntheticDataset(so);
  std::vector<uint8_t> a, b;
  ASSERT_TRUE((*test)->Read(17, &a).ok());
  ASSERT_TRUE((*again)->Read(17, &b).ok());
  EXPECT_EQ(a, b);
}

// ---- uint8 and indices-only outputs (the GPU feed's host half) -------------------------------

namespace feed {

// The float batch a consumer of a uint8 batch must produce: WriteImageCHWN of every source
// image with its augment.
Tensor ApplyOnHost(const Batch& b, const AugmentConfig& cfg) {
  const int64_t n = static_cast<int64_t>(b.indices.size());
  Tensor out(Shape::CHWN(cfg.channels, cfg.crop_h, cfg.crop_w, n));
  const size_t image = static_cast<size_t>(cfg.height) * cfg.width * cfg.channels;
  for (int64_t j = 0; j < n; ++j) {
    WriteImageCHWN(b.pixels.data() + j * image, cfg, b.augments[j], out.data(), n, j);
  }
  return out;
}

void ExpectSameAugment(const ImageAugment& a, const ImageAugment& b) {
  EXPECT_EQ(a.y0, b.y0);
  EXPECT_EQ(a.x0, b.x0);
  EXPECT_EQ(a.mirror, b.mirror);
  EXPECT_EQ(std::memcmp(a.light, b.light, sizeof(a.light)), 0);
}

}  // namespace feed

// A uint8 batch carries exactly the float batch: its pixels are Read's bytes, its augments
// the ones the float output applied, so applying them on the host gives the float batch
// bit for bit (padding, mirror, lighting, image and channel mean, dp slices, two epochs).
TEST(FeedOutputTest, Uint8BatchesAreTheFloatBatchesBeforeAugmentation) {
  auto ds = MakeSyntheticDataset(SmallSynth(70));
  ASSERT_TRUE(ds.ok());
  for (const char* mean : {"image", "channel", "none"}) {
    for (int dp_rank : {0, 2}) {
      SCOPED_TRACE(absl::StrCat(mean, " dp_rank ", dp_rank));
      PipelineOptions o = TrainOptions(33);
      o.mean = mean;
      o.pad = 3;
      o.dp_rank = dp_rank;
      o.dp_size = 3;
      o.threads = 3;
      std::vector<Batch> want = Take(ds->get(), o, 4);
      o.output = BatchOutput::kSourceUint8;
      absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
      ASSERT_TRUE(p.ok()) << p.status();
      const AugmentConfig& cfg = (*p)->augment_config();
      const size_t image = 16 * 16 * 3;
      for (const Batch& w : want) {
        absl::StatusOr<Batch> b = (*p)->Next();
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_TRUE(b->images.empty());
        ASSERT_EQ(b->pixels.size(), b->indices.size() * image);
        ASSERT_EQ(b->augments.size(), b->indices.size());
        EXPECT_EQ(b->indices, w.indices);
        EXPECT_EQ(b->labels.ToHost(), w.labels.ToHost());
        EXPECT_EQ(b->cursor, w.cursor);
        EXPECT_EQ(b->next, w.next);
        std::vector<uint8_t> px;
        for (size_t j = 0; j < b->indices.size(); ++j) {
          ASSERT_TRUE((*ds)->Read(b->indices[j], &px).ok());
          ASSERT_EQ(std::memcmp(px.data(), b->pixels.data() + j * image, image), 0) << j;
        }
        Tensor got = feed::ApplyOnHost(*b, cfg);
        ExpectSliceEqual(w.images, 0, got);
        (*p)->Recycle(std::move(*b));
      }
    }
  }
}

// Indices-only batches are the uint8 batches without pixels: same indices, labels and
// augments.
TEST(FeedOutputTest, IndicesOnlyBatchesCarryIndicesLabelsAndAugments) {
  auto ds = MakeSyntheticDataset(SmallSynth(70));
  ASSERT_TRUE(ds.ok());
  PipelineOptions o = TrainOptions(16);
  o.pad = 2;
  o.output = BatchOutput::kSourceUint8;
  std::vector<Batch> want = Take(ds->get(), o, 6);
  o.output = BatchOutput::kIndicesOnly;
  std::vector<Batch> got = Take(ds->get(), o, 6);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(got[i].pixels.empty());
    EXPECT_TRUE(got[i].images.empty());
    EXPECT_EQ(got[i].indices, want[i].indices);
    EXPECT_EQ(got[i].labels.ToHost(), want[i].labels.ToHost());
    ASSERT_EQ(got[i].augments.size(), want[i].augments.size());
    for (size_t j = 0; j < got[i].augments.size(); ++j) {
      feed::ExpectSameAugment(got[i].augments[j], want[i].augments[j]);
    }
  }
}

// Encoded batches (for nvJPEG on the GPU) carry each image's stored JPEG stream, which
// decodes to exactly the uint8 batch's pixels, with the same indices, labels and augments;
// recycled batches keep working. Raw shards and synthetic data have no streams to give.
TEST(FeedOutputTest, EncodedBatchesAreTheStoredJpegStreams) {
  testing::TempDir tmp;
  SyntheticOptions so = SmallSynth(70);
  ConvertOptions co;
  co.shard_size = 16;
  ASSERT_TRUE(WriteSyntheticShards(so, 0, tmp / "raw", co).ok());
  co.encoding = "jpeg";
  ASSERT_TRUE(WriteSyntheticShards(so, 0, tmp / "jpeg", co).ok());
  auto jpeg = OpenDataset(tmp / "jpeg/train");
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  PipelineOptions o = TrainOptions(24);
  o.pad = 2;
  o.dp_rank = 1;
  o.dp_size = 2;
  o.threads = 3;
  o.output = BatchOutput::kSourceUint8;
  std::vector<Batch> want = Take(jpeg->get(), o, 6);
  o.output = BatchOutput::kEncoded;
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(jpeg->get(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  const size_t image = 16 * 16 * 3;
  for (const Batch& w : want) {
    absl::StatusOr<Batch> b = (*p)->Next();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_TRUE(b->pixels.empty());
    EXPECT_TRUE(b->images.empty());
    EXPECT_EQ(b->indices, w.indices);
    EXPECT_EQ(b->labels.ToHost(), w.labels.ToHost());
    ASSERT_EQ(b->encoded.size(), w.indices.size());
    ASSERT_EQ(b->augments.size(), w.augments.size());
    for (size_t j = 0; j < b->encoded.size(); ++j) {
      feed::ExpectSameAugment(b->augments[j], w.augments[j]);
      std::string stored;
      ASSERT_TRUE((*jpeg)->ReadEncoded(b->indices[j], &stored).ok());
      EXPECT_EQ(b->encoded[j], stored) << j;
      Image decoded;
      const std::string& e = b->encoded[j];
      ASSERT_TRUE(
          DecodeJpeg(reinterpret_cast<const uint8_t*>(e.data()), e.size(), 3, &decoded).ok());
      ASSERT_EQ(decoded.pixels.size(), image);
      EXPECT_EQ(std::memcmp(decoded.pixels.data(), w.pixels.data() + j * image, image), 0) << j;
    }
    (*p)->Recycle(std::move(*b));
  }
  // No streams to hand: refused when the pipeline is made, and by the dataset.
  auto raw = OpenDataset(tmp / "raw/train");
  ASSERT_TRUE(raw.ok());
  absl::StatusOr<std::unique_ptr<BatchPipeline>> bad = BatchPipeline::Create(raw->get(), o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_NE(bad.status().message().find("JPEG shards"), std::string::npos) << bad.status();
  std::string bytes;
  EXPECT_TRUE(absl::IsUnimplemented((*raw)->ReadEncoded(0, &bytes).status()));
  auto mem = MakeSyntheticDataset(so);
  EXPECT_TRUE(absl::IsUnimplemented((*mem)->ReadEncoded(0, &bytes).status()));
  EXPECT_FALSE(BatchPipeline::Create(mem->get(), o).ok());
  EXPECT_TRUE(absl::IsOutOfRange((*jpeg)->ReadEncoded(70, &bytes).status()));
}

// Pinned uint8 batches come from the bytes allocator, and recycled buffers are reused.
TEST(FeedOutputTest, PinnedBytesAllocatorAndRecycling) {
  auto ds = MakeSyntheticDataset(SmallSynth());
  PipelineOptions o = TrainOptions(16);
  o.output = BatchOutput::kSourceUint8;
  o.pinned = true;
  o.queue_depth = 2;
  o.pinned_allocator = [](const Shape& s) { return Tensor(s, Device::kCPU); };
  EXPECT_FALSE(BatchPipeline::Create(ds->get(), o).ok());  // no bytes allocator
  int calls = 0;
  o.pinned_bytes_allocator = [&calls](size_t n) {
    ++calls;
    return HostBytes(n);
  };
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(p.ok()) << p.status();
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<Batch> b = (*p)->Next();
    ASSERT_TRUE(b.ok());
    (*p)->Recycle(std::move(*b));
  }
  EXPECT_GT(calls, 0);
  EXPECT_LE(calls, o.queue_depth + 3);
}

// The synthetic recipe describes Read: its grid is the class colours, and the pattern
// built from it at a grid point is the grid value (a device that reads the recipe starts
// from the same floats as the host).
TEST(FeedOutputTest, SyntheticRecipeDescribesTheDataset) {
  SyntheticOptions so = SmallSynth();
  so.max_shift = -1;
  auto ds = MakeSyntheticDataset(so);
  ASSERT_TRUE(ds.ok());
  const SyntheticRecipe* r = (*ds)->synthetic_recipe();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->height, 16);
  EXPECT_EQ(r->channels, 3);
  EXPECT_EQ(r->num_classes, 10);
  EXPECT_EQ(r->max_shift, 16 / 8);
  EXPECT_EQ(r->noise, so.noise);
  ASSERT_EQ(r->grid.size(), 10u * 4 * 4 * 3);
  for (float v : r->grid) {
    EXPECT_GE(v, 40.f);
    EXPECT_LE(v, 215.f);
  }
}

}  // namespace
}  // namespace colonnade::data
