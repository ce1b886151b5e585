#include "data/image.h"

#include <cmath>

#include "gtest/gtest.h"
#include "test_util.h"

namespace colonnade::data {
namespace {

Image Gradient(int h, int w, int c) {
  Image img;
  img.height = h;
  img.width = w;
  img.channels = c;
  img.pixels.resize(static_cast<size_t>(h) * w * c);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        img.pixels[(y * w + x) * c + k] = static_cast<uint8_t>((y * 3 + x * 2 + k * 40) % 256);
  return img;
}

double MeanAbsDiff(const Image& a, const Image& b) {
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(a.pixels[i] - b.pixels[i]);
  return s / a.pixels.size();
}

TEST(ImageTest, JpegRoundTripIsClose) {
  Image img = Gradient(40, 56, 3);
  absl::StatusOr<std::string> jpg = EncodeJpeg(img, 95);
  ASSERT_TRUE(jpg.ok()) << jpg.status();
  EXPECT_EQ(SniffFormat(reinterpret_cast<const uint8_t*>(jpg->data()), jpg->size()),
            ImageFormat::kJpeg);
  Image back;
  ASSERT_TRUE(
      DecodeJpeg(reinterpret_cast<const uint8_t*>(jpg->data()), jpg->size(), 3, &back).ok());
  EXPECT_EQ(back.height, 40);
  EXPECT_EQ(back.width, 56);
  EXPECT_EQ(back.channels, 3);
  EXPECT_LT(MeanAbsDiff(img, back), 4.0);
  int h = 0, w = 0;
  ASSERT_TRUE(JpegSize(reinterpret_cast<const uint8_t*>(jpg->data()), jpg->size(), &h, &w).ok());
  EXPECT_EQ(h, 40);
  EXPECT_EQ(w, 56);
}

TEST(ImageTest, GrayscaleJpegDecodesToRgbWithEqualChannels) {
  Image gray = Gradient(16, 16, 1);
  absl::StatusOr<std::string> jpg = EncodeJpeg(gray, 90);
  ASSERT_TRUE(jpg.ok());
  Image rgb;
  ASSERT_TRUE(
      DecodeImage(reinterpret_cast<const uint8_t*>(jpg->data()), jpg->size(), 3, &rgb).ok());
  ASSERT_EQ(rgb.channels, 3);
  for (int p = 0; p < 16 * 16; ++p) {
    EXPECT_EQ(rgb.pixels[3 * p], rgb.pixels[3 * p + 1]);
    EXPECT_EQ(rgb.pixels[3 * p], rgb.pixels[3 * p + 2]);
  }
}

TEST(ImageTest, CorruptAndTruncatedJpegAreErrors) {
  std::string garbage = "\xFF\xD8\xFF this is not a jpeg at all";
  Image out;
  absl::Status s =
      DecodeImage(reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(), 3, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("undecodable JPEG"), std::string::npos) << s;

  absl::StatusOr<std::string> jpg = EncodeJpeg(Gradient(64, 64, 3), 90);
  ASSERT_TRUE(jpg.ok());
  std::string half = jpg->substr(0, jpg->size() / 2);
  s = DecodeImage(reinterpret_cast<const uint8_t*>(half.data()), half.size(), 3, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("truncated"), std::string::npos) << s;

  std::string text = "hello";
  s = DecodeImage(reinterpret_cast<const uint8_t*>(text.data()), text.size(), 3, &out);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("neither JPEG nor PNG"), std::string::npos) << s;
}

TEST(ImageTest, DctScalingKeepsAtLeastTheRequestedSize) {
  absl::StatusOr<std::string> jpg = EncodeJpeg(Gradient(400, 640, 3), 90);
  ASSERT_TRUE(jpg.ok());
  Image out;
  ASSERT_TRUE(
      DecodeJpeg(reinterpret_cast<const uint8_t*>(jpg->data()), jpg->size(), 3, &out, 100, 100)
          .ok());
  EXPECT_GE(out.height, 100);
  EXPECT_GE(out.width, 100);
  EXPECT_EQ(out.height, 100);  // 400 / 4
  EXPECT_EQ(out.width, 160);
}

TEST(ImageTest, ResizeKeepsConstantImagesAndShapes) {
  Image flat;
  flat.height = 37;
  flat.width = 91;
  flat.channels = 3;
  flat.pixels.assign(37 * 91 * 3, 77);
  Image r = Resize(flat, 20, 33);
  EXPECT_EQ(r.height, 20);
  EXPECT_EQ(r.width, 33);
  for (uint8_t v : r.pixels) EXPECT_EQ(v, 77);
  Image up = Resize(flat, 80, 200);
  for (uint8_t v : up.pixels) EXPECT_EQ(v, 77);
  Image sq = ResizeShorterAndCenterCrop(flat, 32);
  EXPECT_EQ(sq.height, 32);
  EXPECT_EQ(sq.width, 32);
  // Identity resize is exact.
  Image g = Gradient(10, 12, 3);
  EXPECT_EQ(Resize(g, 10, 12).pixels, g.pixels);
}

TEST(ImageTest, ShorterSideCropTakesTheCentre) {
  // Left third black, middle third white, right third black: the centre square is white.
  Image img;
  img.height = 30;
  img.width = 90;
  img.channels = 1;
  img.pixels.assign(30 * 90, 0);
  for (int y = 0; y < 30; ++y)
    for (int x = 30; x < 60; ++x) img.pixels[y * 90 + x] = 255;
  Image c = ResizeShorterAndCenterCrop(img, 30);
  for (uint8_t v : c.pixels) EXPECT_EQ(v, 255);
}

TEST(ImageTest, PngDecodeOrClearUnsupportedMessage) {
  Image out;
  absl::Status s = DecodeImage(testing::kTinyPng, sizeof(testing::kTinyPng), 3, &out);
  if (!HavePngSupport()) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("png unsupported"), std::string::npos) << s;
    return;
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out.height, 2);
  EXPECT_EQ(out.width, 2);
  EXPECT_EQ(out.pixels, std::vector<uint8_t>({255, 0, 0, 0, 255, 0, 0, 0, 255, 128, 128, 128}));
}

// ---- crafted headers and missing data ------------------------------------------------------

std::string GuardedDecode(const std::string& bytes) {
  testing::Guarded g = testing::RunGuarded(
      [&] {
        Image out;
        absl::Status s =
            DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 3, &out);
        return s.ok() ? std::string("decoded") : std::string(s.message());
      },
      20, uint64_t{1} << 30);
  return g.text;
}

TEST(ImageTest, HugeHeadersAreRefusedBeforeAllocating) {
  absl::StatusOr<std::string> jpg = EncodeJpeg(Gradient(16, 16, 3), 90);
  ASSERT_TRUE(jpg.ok());
  // Before: 60000 x 60000 x 3 bytes were allocated for the pixels (the process aborted).
  const std::string huge = testing::JpegClaimingSize(*jpg, 60000, 60000);
  ASSERT_FALSE(huge.empty());
  EXPECT_EQ(GuardedDecode(huge),
            "JPEG too large: 60000x60000 is larger than the limit of 16384 pixels per side "
            "(COLONNADE_MAX_IMAGE_SIDE)");
  EXPECT_EQ(GuardedDecode(testing::JpegClaimingSize(*jpg, 12000, 12000)),
            "JPEG too large: 12000x12000 has more than the limit of 134217728 pixels "
            "(COLONNADE_MAX_IMAGE_PIXELS)");
  if (!HavePngSupport()) GTEST_SKIP() << "PNG: this build has no libpng";
  // Before: 20000 x 20000 x 3 bytes (1.2 GB) were allocated before the data ran out.
  EXPECT_EQ(GuardedDecode(testing::PngClaimingSize(20000, 20000)),
            "PNG too large: 20000x20000 is larger than the limit of 16384 pixels per side "
            "(COLONNADE_MAX_IMAGE_SIDE)");
  // A small PNG with the same missing data is an ordinary decode error.
  std::string m = GuardedDecode(testing::PngClaimingSize(64, 64));
  EXPECT_EQ(m.rfind("undecodable PNG", 0), 0u) << m;
}

TEST(ImageTest, JpegWithoutImageDataIsAnErrorNotFlatGray) {
  absl::StatusOr<std::string> jpg = EncodeJpeg(Gradient(64, 64, 3), 90);
  ASSERT_TRUE(jpg.ok());
  const std::string empty = testing::JpegWithoutImageData(*jpg);
  ASSERT_FALSE(empty.empty());
  Image out;
  // Before: decoded "successfully" to a flat gray image (libjpeg only warns).
  absl::Status s =
      DecodeImage(reinterpret_cast<const uint8_t*>(empty.data()), empty.size(), 3, &out);
  EXPECT_EQ(s.message(), "undecodable JPEG: Corrupt JPEG data: premature end of data segment");
  // Also with DCT-domain downscaling (the make_shards --resize path).
  s = DecodeImage(reinterpret_cast<const uint8_t*>(empty.data()), empty.size(), 3, &out, 16, 16);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace colonnade::data
