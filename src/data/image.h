// 8-bit images (H x W x C, interleaved), JPEG/PNG decoding, JPEG encoding and resizing.
//
// Decoding always produces the requested number of channels: grayscale sources are
// replicated to RGB, CMYK/YCCK JPEGs are converted, alpha is dropped. All functions are
// deterministic and thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/limits.h"

namespace colonnade::data {

struct Image {
  int height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height * width * channels, row-major, channels innermost
  size_t bytes() const { return pixels.size(); }
};

enum class ImageFormat { kUnknown, kJpeg, kPng };
// Identifies the format from the file signature (not the name).
ImageFormat SniffFormat(const uint8_t* data, size_t size);
// True when this build decodes PNG (libpng found at configure time).
bool HavePngSupport();

// Decodes a JPEG into `channels` (1 or 3) channels. `min_height`/`min_width` > 0 allow
// libjpeg's DCT-domain downscaling by 1/2, 1/4 or 1/8 as long as the decoded image stays
// at least that large (a large speed-up for big photos that are resized anyway).
// Errors (InvalidArgument) carry libjpeg's message. Missing image data is an error, not a
// gray-filled image: a premature end of the file or of a data segment, a bad Huffman or
// arithmetic code, a lost restart marker. An image whose header size does not fit `limits`
// is refused before any pixel memory is allocated.
absl::Status DecodeJpeg(const uint8_t* data, size_t size, int channels, Image* out,
                        int min_height = 0, int min_width = 0,
                        const ImageLimits& limits = ImageLimits());
// Reads only the header: the full-resolution size.
absl::Status JpegSize(const uint8_t* data, size_t size, int* height, int* width);
// PNG: the header size is checked against `limits` before decoding.
absl::Status DecodePng(const uint8_t* data, size_t size, int channels, Image* out,
                       const ImageLimits& limits = ImageLimits());
// Sniffs the format and decodes. Unknown formats and PNG without libpng are errors
// ("png unsupported in this build").
absl::Status DecodeImage(const uint8_t* data, size_t size, int channels, Image* out,
                         int min_height = 0, int min_width = 0,
                         const ImageLimits& limits = ImageLimits());

// Baseline JPEG, 4:2:0 chroma subsampling for 3 channels, `quality` 1..100.
absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality);

// Resamples the window [y0, y0+h) x [x0, x0+w) of `in` to out_h x out_w with a triangle
// (bilinear) filter widened by the scale factor when shrinking, i.e. antialiased like
// PIL's BILINEAR. Deterministic (fixed evaluation order in float).
Image ResizeRegion(const Image& in, int y0, int x0, int h, int w, int out_h, int out_w);
inline Image Resize(const Image& in, int out_h, int out_w) {
  return ResizeRegion(in, 0, 0, in.height, in.width, out_h, out_w);
}
// AlexNet's preprocessing: scale the shorter side to `size`, then take the central
// size x size square. Implemented as one resample of the central square of the source,
// which is the same operation without the intermediate image.
Image ResizeShorterAndCenterCrop(const Image& in, int size);

}  // namespace colonnade::data
