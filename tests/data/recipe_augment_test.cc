// The recipes' augmentation (docs/DATA.md §5): the bilinear resize of core/bilinear.h, the
// random-resized crop (its draws, its writer against a double-precision bilinear reference,
// the chunk writer bitwise the single-image one), cutout, the resized evaluation crop, the
// mirrored view of --eval_views=2, and the pipeline's resume / dp-slice / option checks
// with them. The draws' distribution against torchvision's sampler is
// tests/data/rrc_distribution_test.py (ctest data.rrc_matches_torchvision).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "core/bilinear.h"
#include "data/augment.h"
#include "data/pipeline.h"
#include "pipeline_test_util.h"
#include "gtest/gtest.h"

namespace colonnade::data {
namespace {

SyntheticOptions Synth(int side, int64_t size = 96) {
  SyntheticOptions o;
  o.size = size;
  o.height = o.width = side;
  o.num_classes = 10;
  o.seed = 11;
  return o;
}

PipelineOptions RecipeOptions(int64_t batch, int crop) {
  PipelineOptions o;
  o.global_batch = batch;
  o.seed = 77;
  o.crop = crop;
  o.mirror = true;
  o.lighting = 0.1f;
  o.mean = "image";
  o.resized_crop.on = true;
  o.cutout = 5;
  o.threads = 2;
  return o;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Column n of a CHWN tensor with N images: C x crop_h x crop_w values.
std::vector<float> Column(const float* t, int64_t N, int64_t n, int64_t values) {
  std::vector<float> v(values);
  for (int64_t i = 0; i < values; ++i) v[i] = t[i * N + n];
  return v;
}

AugmentConfig Config(int H, int W, int C, int crop_h, int crop_w, MeanMode mean,
                     std::mt19937& rng) {
  AugmentConfig cfg;
  cfg.height = H;
  cfg.width = W;
  cfg.channels = C;
  cfg.crop_h = crop_h;
  cfg.crop_w = crop_w;
  cfg.mean = mean;
  cfg.scale = 1.0f;
  std::uniform_real_distribution<float> u(0.f, 255.f);
  cfg.mean_image.resize(static_cast<size_t>(H) * W * C);
  for (float& m : cfg.mean_image) m = u(rng);
  cfg.channel_mean.resize(C);
  for (float& m : cfg.channel_mean) m = u(rng);
  return cfg;
}

// ---- core/bilinear.h ----------------------------------------------------------------------

// Taps are half-pixel centres (align_corners=False) in 1/256 pixel, rounded down, clamped at
// the left edge and to the box; a box the output's size samples every pixel exactly.
TEST(BilinearTest, TapsAreHalfPixelCentresInFixedPoint) {
  for (int box : {1, 2, 3, 7, 32, 224, 256}) {
    for (int out : {1, 2, 3, 7, 32, 128, 224}) {
      for (int o = 0; o < out; ++o) {
        const BilinearTap t = BilinearTapOf(o, out, box);
        const double s = std::max(0.0, (o + 0.5) * box / out - 0.5);
        const int64_t fixed = static_cast<int64_t>(std::floor(s * 256.0 + 1e-9));
        ASSERT_EQ(t.i0, fixed / 256) << o << " of " << out << ", box " << box;
        ASSERT_EQ(t.f, fixed % 256) << o << " of " << out << ", box " << box;
        ASSERT_EQ(t.i1, std::min(t.i0 + 1, box - 1));
        ASSERT_LT(t.i0, box);
        ASSERT_EQ(t.nearest(), t.f >= 128 ? t.i1 : t.i0);
        if (box == out) ASSERT_TRUE(t.i0 == o && t.f == 0);
      }
    }
  }
  // The largest value, 255 * 2^16, and every value below it are exact floats.
  EXPECT_EQ(BilinearFixed(255, 255, 255, 255, 17, 200), 255 * 65536);
  EXPECT_EQ(BilinearValue(BilinearFixed(255, 255, 255, 255, 17, 200)), 255.0f);
  EXPECT_EQ(BilinearValue(BilinearFixed(10, 20, 30, 40, 128, 128)), 25.0f);
  EXPECT_EQ(BilinearValue(BilinearFixed(0, 1, 0, 0, 1, 0)), 1.0f / 256.0f);
}

// ---- the random-resized crop's draws --------------------------------------------------------

TEST(ResizedCropTest, DrawsAreBoxesInTheImageKeyedBySeedEpochAndPosition) {
  std::mt19937 rng(1);
  AugmentConfig cfg = Config(37, 53, 3, 24, 24, MeanMode::kNone, rng);
  cfg.resized_crop.on = true;
  AugmentConfig plain = cfg;
  plain.resized_crop.on = false;
  std::set<std::vector<int>> boxes;
  int full = 0;
  for (int64_t p = 0; p < 2000; ++p) {
    const ImageAugment a = DrawAugment(cfg, 5, 2, p, true, true, 0.1f);
    ASSERT_GE(a.y0, 0);
    ASSERT_GE(a.x0, 0);
    ASSERT_GE(a.box_h, 1);
    ASSERT_GE(a.box_w, 1);
    ASSERT_LE(a.y0 + a.box_h, cfg.height);
    ASSERT_LE(a.x0 + a.box_w, cfg.width);
    // Area and aspect within the ranges, up to the rounding of the sides (the fallback, the
    // whole image, has aspect 53/37 > 4/3).
    const double area = static_cast<double>(a.box_h) * a.box_w / (37.0 * 53.0);
    const double aspect = static_cast<double>(a.box_w) / a.box_h;
    if (a.box_h == 37 && a.box_w == 49 && a.y0 == 0 && a.x0 == 2) {
      ++full;  // the fallback: the whole height, width round(37 * 4/3) = 49, centred
    } else {
      const double slack_w = 0.5 / a.box_w, slack_h = 0.5 / a.box_h;
      EXPECT_GE(area, 0.08 * (1 - slack_w) * (1 - slack_h) - 1e-9) << p;
      EXPECT_LE(area, 1.0 + 1e-9) << p;
      EXPECT_GE(aspect, 0.75 * (1 - slack_w) / (1 + slack_h) - 1e-9) << p;
      EXPECT_LE(aspect, 4.0 / 3 * (1 + slack_w) / (1 - slack_h) + 1e-9) << p;
    }
    boxes.insert({a.y0, a.x0, a.box_h, a.box_w});
    // A pure function of (seed, epoch, position) ...
    const ImageAugment again = DrawAugment(cfg, 5, 2, p, true, true, 0.1f);
    ASSERT_TRUE(again.y0 == a.y0 && again.x0 == a.x0 && again.box_h == a.box_h &&
                again.box_w == a.box_w);
    // ... whose mirror and lighting draws are those of the crop at a random offset.
    const ImageAugment b = DrawAugment(plain, 5, 2, p, true, true, 0.1f);
    ASSERT_EQ(a.mirror, b.mirror);
    ASSERT_EQ(std::memcmp(a.light, b.light, sizeof(a.light)), 0);
    ASSERT_EQ(b.box_h, 0);
  }
  EXPECT_GT(boxes.size(), 1500u);
  EXPECT_LT(full, 40);  // 10 misses in a row are rare at the default ranges
  int same = 0, other_seed = 0;
  for (int64_t p = 0; p < 200; ++p) {
    const ImageAugment a = DrawAugment(cfg, 5, 2, p, true, false, 0.f);
    const ImageAugment e = DrawAugment(cfg, 5, 3, p, true, false, 0.f);
    const ImageAugment s = DrawAugment(cfg, 6, 2, p, true, false, 0.f);
    same += a.box_h == e.box_h && a.box_w == e.box_w && a.y0 == e.y0 && a.x0 == e.x0;
    other_seed += a.box_h == s.box_h && a.box_w == s.box_w && a.y0 == s.y0 && a.x0 == s.x0;
  }
  EXPECT_LT(same, 10);  // another epoch, other boxes
  EXPECT_LT(other_seed, 10);
}

// After ten misses, torchvision's fallback: the whole image cut to the nearest ratio in range.
TEST(ResizedCropTest, FallbackIsTheCentredImageClampedToTheRatios) {
  std::mt19937 rng(2);
  AugmentConfig cfg = Config(20, 20, 1, 8, 8, MeanMode::kNone, rng);
  cfg.resized_crop.on = true;
  cfg.resized_crop.scale_min = 0.9;
  cfg.resized_crop.ratio_min = 3.0;  // every box is wider than the image
  cfg.resized_crop.ratio_max = 4.0;
  for (int64_t p = 0; p < 50; ++p) {
    const ImageAugment a = DrawAugment(cfg, 1, 0, p, true, false, 0.f);
    EXPECT_EQ(a.box_w, 20);
    EXPECT_EQ(a.box_h, 7);  // round(20 / 3)
    EXPECT_EQ(a.x0, 0);
    EXPECT_EQ(a.y0, 6);  // (20 - 7) / 2
  }
  cfg.resized_crop.ratio_min = 0.1;
  cfg.resized_crop.ratio_max = 0.2;  // every box is taller: the whole width
  cfg.resized_crop.scale_min = 1.0;
  const ImageAugment a = DrawAugment(cfg, 1, 0, 3, true, false, 0.f);
  EXPECT_EQ(a.box_h, 20);
  EXPECT_EQ(a.box_w, 4);  // round(20 * 0.2)
  EXPECT_EQ(a.x0, 8);
}

// ---- the resize in the writers ----------------------------------------------------------------

// A double-precision bilinear of the box with half-pixel centres (PyTorch's
// interpolate(mode="bilinear", align_corners=False, antialias=False) of the cropped box),
// unquantised: pixel (c, y, x) of the output in pixel units, before mean and scale.
double ReferenceBilinear(const std::vector<uint8_t>& img, const AugmentConfig& cfg,
                         const ImageAugment& a, int c, int y, int x) {
  auto coord = [](int o, int out, int box, int* i0, int* i1, double* f) {
    const double s = std::max(0.0, (o + 0.5) * box / out - 0.5);
    *i0 = std::min(static_cast<int>(std::floor(s)), box - 1);
    *i1 = std::min(*i0 + 1, box - 1);
    *f = s - *i0;
  };
  int y0, y1, x0, x1;
  double fy, fx;
  coord(y, cfg.crop_h, a.box_h, &y0, &y1, &fy);
  coord(a.mirror ? cfg.crop_w - 1 - x : x, cfg.crop_w, a.box_w, &x0, &x1, &fx);
  auto px = [&](int yy, int xx) {
    return static_cast<double>(
        img[(static_cast<size_t>(a.y0 + yy) * cfg.width + a.x0 + xx) * cfg.channels + c]);
  };
  return (px(y0, x0) * (1 - fx) + px(y0, x1) * fx) * (1 - fy) +
         (px(y1, x0) * (1 - fx) + px(y1, x1) * fx) * fy;
}

// The resized crop is the bilinear resize of its box: on a ramp image (where bilinear
// interpolation is exact) within the 1/256-pixel position quantum, on random images within
// two pixel levels; boxes smaller and larger than the output, non-square, mirrored.
TEST(ResizedCropTest, WriterIsTheBilinearResizeOfTheBox) {
  std::mt19937 rng(3);
  for (bool ramp : {true, false}) {
    for (MeanMode mean : {MeanMode::kNone, MeanMode::kChannel}) {
      AugmentConfig cfg = Config(29, 31, 3, 11, 13, mean, rng);
      std::vector<uint8_t> img(static_cast<size_t>(29) * 31 * 3);
      for (int y = 0; y < 29; ++y) {
        for (int x = 0; x < 31; ++x) {
          for (int c = 0; c < 3; ++c) {
            img[(y * 31 + x) * 3 + c] =
                static_cast<uint8_t>(ramp ? 6 * x + 2 * y + 10 * c : rng() & 0xFF);
          }
        }
      }
      for (int k = 0; k < 60; ++k) {
        ImageAugment a;
        a.box_h = 1 + static_cast<int>(rng() % 29);
        a.box_w = 1 + static_cast<int>(rng() % 31);
        a.y0 = static_cast<int>(rng() % (29 - a.box_h + 1));
        a.x0 = static_cast<int>(rng() % (31 - a.box_w + 1));
        a.mirror = k % 2;
        a.light[0] = 1.5f, a.light[1] = -2.25f, a.light[2] = 0.5f;
        std::vector<float> out(3 * 11 * 13 * 2, -7.f);
        WriteImageCHWN(img.data(), cfg, a, out.data(), 2, 1);
        double worst = 0;
        for (int c = 0; c < 3; ++c) {
          const double offset =
              a.light[c] - (mean == MeanMode::kChannel ? cfg.channel_mean[c] : 0.0);
          for (int y = 0; y < 11; ++y) {
            for (int x = 0; x < 13; ++x) {
              const double want = ReferenceBilinear(img, cfg, a, c, y, x) + offset;
              const double got = out[((c * 11 + y) * 13 + x) * 2 + 1];
              ASSERT_EQ(out[((c * 11 + y) * 13 + x) * 2], -7.f);  // column 0 untouched
              worst = std::max(worst, std::abs(got - want));
            }
          }
        }
        // Ramp: slopes 6 and 2 per pixel, positions off by < 1/256 each, plus float rounding.
        const double tol = ramp ? (6.0 + 2.0) / 256 + 1e-3 : 2.0;
        EXPECT_LE(worst, tol) << "box " << a.box_h << "x" << a.box_w << " at (" << a.y0 << ", "
                              << a.x0 << ") mirror " << a.mirror << " ramp " << ramp;
      }
    }
  }
}

// In kImage mode a resized pixel subtracts the mean image at its nearest source tap: a
// constant image (the bilinear value is that constant, exactly) shows which mean was read.
TEST(ResizedCropTest, MeanImageIsReadAtTheNearestTap) {
  std::mt19937 rng(4);
  AugmentConfig cfg = Config(17, 19, 3, 7, 9, MeanMode::kImage, rng);
  cfg.scale = 0.5f;
  std::vector<uint8_t> img(static_cast<size_t>(17) * 19 * 3, 100);
  for (int k = 0; k < 40; ++k) {
    ImageAugment a;
    a.box_h = 2 + static_cast<int>(rng() % 16);
    a.box_w = 2 + static_cast<int>(rng() % 18);
    a.y0 = static_cast<int>(rng() % (17 - a.box_h + 1));
    a.x0 = static_cast<int>(rng() % (19 - a.box_w + 1));
    a.mirror = k % 3 == 0;
    std::vector<float> out(3 * 7 * 9);
    WriteImageCHWN(img.data(), cfg, a, out.data(), 1, 0);
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 7; ++y) {
        for (int x = 0; x < 9; ++x) {
          // The nearer tap, from the taps themselves (weight f of i1 out of 256).
          const BilinearTap ty = BilinearTapOf(y, 7, a.box_h);
          const BilinearTap tx = BilinearTapOf(a.mirror ? 8 - x : x, 9, a.box_w);
          const int sy = a.y0 + (ty.f >= 128 ? ty.i1 : ty.i0);
          const int sx = a.x0 + (tx.f >= 128 ? tx.i1 : tx.i0);
          const float want = (100.0f - cfg.mean_image[(sy * 19 + sx) * 3 + c]) * 0.5f;
          ASSERT_EQ(out[(c * 7 + y) * 9 + x], want) << c << " " << y << " " << x;
        }
      }
    }
  }
}

// The pipeline's chunk writer equals WriteImageCHWN bit for bit with random-resized crops,
// cutout, mirror and lighting, in every mean mode, 1..16 images, unaligned and streaming.
TEST(ResizedCropTest, ChunkWriterIsBitwiseTheSingleImageWriter) {
  std::mt19937 rng(5);
  for (int C : {3, 1}) {
    for (MeanMode mean : {MeanMode::kImage, MeanMode::kChannel, MeanMode::kNone}) {
      for (bool rrc : {true, false}) {
        AugmentConfig cfg = Config(23, 27, C, 12, 12, mean, rng);
        cfg.scale = 0.0173f;
        cfg.resized_crop.on = rrc;
        cfg.cutout = rrc ? 6 : 12;  // up to the whole output
        for (int round = 1; round <= 17; ++round) {
          const int count = std::min(round, 16);
          const int64_t n0 = round == 17 ? 16 : 1, N = round == 17 ? 32 : n0 + count + 2;
          std::vector<std::vector<uint8_t>> images(count);
          std::vector<const uint8_t*> ptrs;
          std::vector<ImageAugment> augs(count);
          for (int j = 0; j < count; ++j) {
            images[j].resize(static_cast<size_t>(23) * 27 * C);
            for (uint8_t& b : images[j]) b = static_cast<uint8_t>(rng());
            ptrs.push_back(images[j].data());
            augs[j] = DrawAugment(cfg, 9, round, j, true, true, C == 3 ? 0.1f : 0.f);
          }
          const int64_t size = static_cast<int64_t>(C) * 12 * 12 * N;
          Tensor ta(Shape{size}), tb(Shape{size});
          std::fill(ta.data(), ta.data() + size, -1.f);
          std::fill(tb.data(), tb.data() + size, -1.f);
          WriteChunkCHWN(ptrs.data(), augs.data(), count, cfg, ta.data(), N, n0);
          for (int j = 0; j < count; ++j)
            WriteImageCHWN(ptrs[j], cfg, augs[j], tb.data(), N, n0 + j);
          ASSERT_TRUE(SameBits(ta, tb)) << "C " << C << " mean " << static_cast<int>(mean)
                                        << " rrc " << rrc << " count " << count;
        }
      }
    }
  }
}

// ---- cutout -----------------------------------------------------------------------------------

// Cutout zeroes one S x S square (clipped) at a uniform centre and changes nothing else:
// the batches with and without it differ exactly there; every output pixel is a centre.
TEST(CutoutTest, OneSquareOfZerosAtAUniformCentre) {
  auto ds = MakeSyntheticDataset(Synth(20, 256));
  ASSERT_TRUE(ds.ok());
  for (bool rrc : {false, true}) {
    PipelineOptions o = RecipeOptions(64, 16);
    o.resized_crop.on = rrc;
    o.pad = rrc ? 0 : 2;
    o.cutout = 0;
    std::vector<Batch> plain = Take(ds->get(), o, 4);
    o.cutout = 7;
    std::vector<Batch> cut = Take(ds->get(), o, 4);
    ASSERT_EQ(plain.size(), 4u);
    ASSERT_EQ(cut.size(), 4u);
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
    ASSERT_TRUE(p.ok());
    const AugmentConfig& cfg = (*p)->augment_config();
    std::map<int, int> centre_rows;
    int clipped = 0;
    for (size_t b = 0; b < cut.size(); ++b) {
      for (int64_t n = 0; n < 64; ++n) {
        const ImageAugment a =
            DrawAugment(cfg, o.seed, cut[b].epoch, cut[b].cursor.position + n, true, true, 0.1f);
        ASSERT_LT(a.cut_y0, a.cut_y1);
        ASSERT_LE(a.cut_y1 - a.cut_y0, 7);
        ASSERT_LE(a.cut_x1 - a.cut_x0, 7);
        clipped += a.cut_y1 - a.cut_y0 < 7 || a.cut_x1 - a.cut_x0 < 7;
        // The centre: the square starts 3 before it (clipped at 0).
        const int cy = a.cut_y0 == 0 ? a.cut_y1 - 4 : a.cut_y0 + 3;
        ++centre_rows[cy];
        for (int c = 0; c < 3; ++c) {
          for (int y = 0; y < 16; ++y) {
            for (int x = 0; x < 16; ++x) {
              const int64_t i = ((c * 16 + y) * 16 + x) * 64 + n;
              const bool in = y >= a.cut_y0 && y < a.cut_y1 && x >= a.cut_x0 && x < a.cut_x1;
              const float got = cut[b].images.data()[i];
              if (in) {
                ASSERT_EQ(got, 0.0f);
                ASSERT_FALSE(std::signbit(got));
              } else {
                ASSERT_EQ(got, plain[b].images.data()[i]) << "outside the square";
              }
            }
          }
        }
      }
    }
    EXPECT_GT(clipped, 30);  // squares near the border are clipped, not moved inside
    // 256 centres over 16 rows: each row 16 expected; a row never drawn would show a bias.
    EXPECT_EQ(centre_rows.size(), 16u);
    for (const auto& [row, count] : centre_rows) EXPECT_LT(count, 40) << row;
  }
}

// ---- evaluation --------------------------------------------------------------------------------

// Evaluation with a crop fraction resizes the centre square of round(f * side) pixels; a
// fraction whose square is the crop gives the plain centre crop bit for bit. Evaluation
// ignores the random-resized crop and cutout; training ignores the fraction.
TEST(EvalCropTest, CentreSquareOfTheFractionResizedToTheCrop) {
  auto ds = MakeSyntheticDataset(Synth(24, 40));
  ASSERT_TRUE(ds.ok());
  PipelineOptions o;
  o.global_batch = 16;
  o.train = false;
  o.crop = 12;
  o.mean = "image";
  std::vector<Batch> centre = Take(ds->get(), o, 3);
  o.eval_crop_fraction = 0.5;  // 12 of 24: the crop itself
  o.resized_crop.on = true;
  o.cutout = 4;
  std::vector<Batch> half = Take(ds->get(), o, 3);
  ASSERT_EQ(half.size(), 3u);
  for (int b = 0; b < 3; ++b) EXPECT_TRUE(SameBits(half[b].images, centre[b].images)) << b;

  o.eval_crop_fraction = 0.875;  // round(21): resized to 12
  std::vector<Batch> resized = Take(ds->get(), o, 3);
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
  ASSERT_TRUE(p.ok());
  const AugmentConfig& cfg = (*p)->augment_config();
  EXPECT_EQ(cfg.eval_box, 21);
  EXPECT_EQ(EvalBoxOf(o, (*ds)->info()), 21);
  const ImageAugment a = DrawAugment(cfg, o.seed, 0, 0, false, true, 0.1f);
  EXPECT_EQ(a.box_h, 21);
  EXPECT_EQ(a.y0, 1);  // (24 - 21) / 2, rounded down as the centre crop
  EXPECT_EQ(a.cut_y1, 0);
  EXPECT_FALSE(a.mirror);
  for (int b = 0; b < 3; ++b) {
    Tensor want(resized[b].images.shape());
    for (int64_t n = 0; n < resized[b].images.n(); ++n) {
      std::vector<uint8_t> px;
      ASSERT_TRUE((*ds)->Read(resized[b].indices[n], &px).ok());
      WriteImageCHWN(px.data(), cfg, a, want.data(), want.n(), n);
    }
    EXPECT_TRUE(SameBits(resized[b].images, want)) << b;
    EXPECT_FALSE(SameBits(resized[b].images, centre[b].images));
  }
  // A training pipeline ignores the fraction.
  PipelineOptions t = RecipeOptions(16, 12);
  std::vector<Batch> a1 = Take(ds->get(), t, 2);
  t.eval_crop_fraction = 0.875;
  std::vector<Batch> a2 = Take(ds->get(), t, 2);
  for (int b = 0; b < 2; ++b) EXPECT_TRUE(SameBits(a1[b].images, a2[b].images));
}

// MirrorCHWN of an eval batch is the eval batch drawn with the mirror flag: the second view
// of --eval_views=2, for the plain and the resized centre crop.
TEST(EvalCropTest, MirrorIsTheMirroredView) {
  auto ds = MakeSyntheticDataset(Synth(21, 30));
  ASSERT_TRUE(ds.ok());
  for (double fraction : {0.0, 0.8}) {
    PipelineOptions o;
    o.global_batch = 10;
    o.train = false;
    o.crop = 13;
    o.mean = "channel";
    o.eval_crop_fraction = fraction;
    std::vector<Batch> batches = Take(ds->get(), o, 3);
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
    ASSERT_TRUE(p.ok());
    const AugmentConfig& cfg = (*p)->augment_config();
    ImageAugment a = DrawAugment(cfg, o.seed, 0, 0, false, false, 0.f);
    a.mirror = true;
    for (const Batch& b : batches) {
      absl::StatusOr<Tensor> m = MirrorCHWN(b.images);
      ASSERT_TRUE(m.ok()) << m.status();
      Tensor want(b.images.shape());
      for (int64_t n = 0; n < b.images.n(); ++n) {
        std::vector<uint8_t> px;
        ASSERT_TRUE((*ds)->Read(b.indices[n], &px).ok());
        WriteImageCHWN(px.data(), cfg, a, want.data(), want.n(), n);
      }
      EXPECT_TRUE(SameBits(*m, want)) << "fraction " << fraction;
    }
  }
  EXPECT_FALSE(MirrorCHWN(Tensor(Shape{3, 4})).ok());
}

// ---- the pipeline
// --------------------------------------------------------------------------------

// With the random-resized crop and cutout, a run resumed from a saved cursor continues bit
// for bit, the dp slices concatenate to the dp = 1 batch, and the uint8 output's augments
// applied by WriteImageCHWN are the float batch (what the GPU feed relies on).
TEST(RecipePipelineTest, ResumeSlicesAndUint8OutputAreBitwise) {
  auto ds = MakeSyntheticDataset(Synth(20, 100));
  ASSERT_TRUE(ds.ok());
  PipelineOptions o = RecipeOptions(24, 14);
  std::vector<Batch> straight = Take(ds->get(), o, 6);  // crosses an epoch (4 per epoch)
  ASSERT_EQ(straight.size(), 6u);
  std::vector<Batch> resumed = Take(ds->get(), o, 3, straight[2].next);
  ASSERT_EQ(resumed.size(), 3u);
  for (int b = 0; b < 3; ++b) {
    EXPECT_TRUE(SameBits(resumed[b].images, straight[3 + b].images)) << b;
    EXPECT_EQ(resumed[b].indices, straight[3 + b].indices);
  }
  for (int rank = 0; rank < 3; ++rank) {
    PipelineOptions r = o;
    r.dp_rank = rank;
    r.dp_size = 3;
    r.threads = 1 + rank;
    std::vector<Batch> part = Take(ds->get(), r, 6);
    ASSERT_EQ(part.size(), 6u);
    for (int b = 0; b < 6; ++b) {
      const int64_t n = part[b].images.n();
      ASSERT_EQ(n, 8);
      const int64_t values = part[b].images.size() / n;
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ(Column(part[b].images.data(), n, j, values),
                  Column(straight[b].images.data(), 24, rank * 8 + j, values))
            << "rank " << rank << " batch " << b << " image " << j;
      }
    }
  }
  PipelineOptions u = o;
  u.output = BatchOutput::kSourceUint8;
  std::vector<Batch> uint8 = Take(ds->get(), u, 6);
  absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), u);
  ASSERT_TRUE(p.ok());
  const AugmentConfig& cfg = (*p)->augment_config();
  int resized = 0, cut = 0;
  for (int b = 0; b < 6; ++b) {
    Tensor want(straight[b].images.shape());
    const size_t image = static_cast<size_t>(20) * 20 * 3;
    for (int64_t n = 0; n < 24; ++n) {
      const ImageAugment& a = uint8[b].augments[n];
      resized += a.resized(cfg);
      cut += a.cut_y0 < a.cut_y1;
      WriteImageCHWN(uint8[b].pixels.data() + n * image, cfg, a, want.data(), 24, n);
    }
    EXPECT_TRUE(SameBits(want, straight[b].images)) << b;
  }
  EXPECT_GT(resized, 100);
  EXPECT_EQ(cut, 6 * 24);
}

// Bad options are refused with a one-line reason naming the option.
TEST(RecipePipelineTest, OptionValidation) {
  auto ds = MakeSyntheticDataset(Synth(20, 40));
  ASSERT_TRUE(ds.ok());
  auto error = [&](PipelineOptions o) {
    absl::StatusOr<std::unique_ptr<BatchPipeline>> p = BatchPipeline::Create(ds->get(), o);
    return p.ok() ? std::string("ok") : std::string(p.status().message());
  };
  PipelineOptions o = RecipeOptions(8, 16);
  EXPECT_EQ(error(o), "ok");
  PipelineOptions b = o;
  b.resized_crop.scale_min = 0;
  EXPECT_NE(error(b).find("scale 0,1 must satisfy 0 < min <= max <= 1"), std::string::npos)
      << error(b);
  b = o;
  b.resized_crop.scale_max = 1.5;
  EXPECT_NE(error(b).find("scale"), std::string::npos);
  b = o;
  b.resized_crop.scale_min = 0.5;
  b.resized_crop.scale_max = 0.4;
  EXPECT_NE(error(b).find("scale"), std::string::npos);
  b = o;
  b.resized_crop.ratio_min = 2;
  b.resized_crop.ratio_max = 1;
  EXPECT_NE(error(b).find("ratio 2,1 must satisfy"), std::string::npos) << error(b);
  b = o;
  b.resized_crop.ratio_min = -1;
  EXPECT_NE(error(b).find("ratio"), std::string::npos);
  b = o;
  b.resized_crop.ratio_max = INFINITY;
  EXPECT_NE(error(b).find("ratio"), std::string::npos);
  b = o;
  b.pad = 2;
  EXPECT_NE(error(b).find("pad 2 and the random-resized crop exclude each other"),
            std::string::npos)
      << error(b);
  b = o;
  b.resized_crop.on = false;
  b.resized_crop.scale_min = -3;  // unused when off
  EXPECT_EQ(error(b), "ok");
  b = o;
  b.cutout = 17;
  EXPECT_NE(error(b).find("cutout 17 must be >= 0 and at most the crop side 16"), std::string::npos)
      << error(b);
  b.cutout = -1;
  EXPECT_NE(error(b).find("cutout -1"), std::string::npos);
  b = o;
  b.eval_crop_fraction = 1.5;
  EXPECT_NE(error(b).find("eval crop fraction 1.5 must be in [0, 1]"), std::string::npos)
      << error(b);
  b.eval_crop_fraction = NAN;
  EXPECT_NE(error(b).find("eval crop fraction"), std::string::npos);
  b.eval_crop_fraction = 0.01;
  EXPECT_NE(error(b).find("less than one pixel"), std::string::npos) << error(b);
}

}  // namespace
}  // namespace colonnade::data
