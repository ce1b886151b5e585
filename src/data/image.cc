#include "data/image.h"

// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <algorithm>

#include <jpeglib.h>
#include <jerror.h>

#if defined(COLONNADE_HAVE_PNG)
#include <png.h>
#endif

#include "absl/strings/str_cat.h"

namespace colonnade::data {

ImageFormat SniffFormat(const uint8_t* d, size_t n) {
  if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return ImageFormat::kJpeg;
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (n >= 8 && std::memcmp(d, kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

bool HavePngSupport() {
#if defined(COLONNADE_HAVE_PNG)
  return true;
#else
  return false;
#endif
}

namespace {

// libjpeg reports fatal errors through error_exit, which must not return: we longjmp back
// to the decode call with the formatted message.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  JpegError* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int level) {
  // level -1: warning. The warnings below mean image data is missing, which libjpeg fills
  // with gray (or zero coefficients) and carries on: an error for us, so a broken file is
  // never stored or trained on as a flat gray image. Other warnings (e.g. extraneous bytes
  // before a marker) are common in real photo collections and harmless.
  if (level >= 0) return;
  JpegError* err = reinterpret_cast<JpegError*>(cinfo->err);
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
      std::snprintf(err->message, sizeof(err->message), "premature end of data (truncated)");
      std::longjmp(err->jump, 1);
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
      (*cinfo->err->format_message)(cinfo, err->message);
      std::longjmp(err->jump, 1);
    default:
      break;
  }
}

void SetupErrors(JpegError* err, j_common_ptr cinfo) {
  cinfo->err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = JpegErrorExit;
  err->mgr.emit_message = JpegEmitMessage;
  err->message[0] = '\0';
}

}  // namespace

absl::Status JpegSize(const uint8_t* data, size_t size, int* height, int* width) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  SetupErrors(&err, reinterpret_cast<j_common_ptr>(&cinfo));
  jpeg_create_decompress(&cinfo);
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("undecodable JPEG: ", err.message));
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  *height = static_cast<int>(cinfo.image_height);
  *width = static_cast<int>(cinfo.image_width);
  jpeg_destroy_decompress(&cinfo);
  return absl::OkStatus();
}

absl::Status DecodeJpeg(const uint8_t* data, size_t size, int channels, Image* out, int min_height,
                        int min_width, const ImageLimits& limits) {
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported channel count ", channels));
  }
  if (size == 0) return absl::InvalidArgumentError("undecodable JPEG: empty data");
  jpeg_decompress_struct cinfo;
  JpegError err;
  SetupErrors(&err, reinterpret_cast<j_common_ptr>(&cinfo));
  jpeg_create_decompress(&cinfo);
  // Buffers touched after setjmp must not live in registers: keep them outside.
  std::vector<uint8_t> cmyk_row;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("undecodable JPEG: ", err.message));
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // Before jpeg_start_decompress, which allocates in proportion to the image (the whole
  // coefficient image for a progressive JPEG), and before our pixel buffer.
  if (std::string why = ImageSizeProblem(cinfo.image_height, cinfo.image_width, limits);
      !why.empty()) {
    jpeg_destroy_decompress(&cinfo);
    return absl::InvalidArgumentError(absl::StrCat("JPEG too large: ", why));
  }
  bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (cmyk) {
    cinfo.out_color_space = JCS_CMYK;  // converted by hand below
  } else {
    cinfo.out_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  }
  if (min_height > 0 && min_width > 0) {
    int denom = 8;
    while (denom > 1 && (static_cast<int>(cinfo.image_height) / denom < min_height ||
                         static_cast<int>(cinfo.image_width) / denom < min_width)) {
      denom /= 2;
    }
    cinfo.scale_num = 1;
    cinfo.scale_denom = denom;
  }
  jpeg_start_decompress(&cinfo);
  const int h = static_cast<int>(cinfo.output_height), w = static_cast<int>(cinfo.output_width);
  out->height = h;
  out->width = w;
  out->channels = channels;
  out->pixels.resize(static_cast<size_t>(h) * w * channels);
  if (cmyk) {
    cmyk_row.resize(static_cast<size_t>(w) * 4);
    while (cinfo.output_scanline < cinfo.output_height) {
      int y = static_cast<int>(cinfo.output_scanline);
      JSAMPROW row = cmyk_row.data();
      jpeg_read_scanlines(&cinfo, &row, 1);
      uint8_t* dst = out->pixels.data() + static_cast<size_t>(y) * w * channels;
      for (int x = 0; x < w; ++x) {
        // Adobe writes inverted CMYK: channel value v means (255 - v) ink.
        int c = cmyk_row[4 * x], m = cmyk_row[4 * x + 1], yy = cmyk_row[4 * x + 2],
            k = cmyk_row[4 * x + 3];
        int r = c * k / 255, g = m * k / 255, b = yy * k / 255;
        if (channels == 3) {
          dst[3 * x] = static_cast<uint8_t>(r);
          dst[3 * x + 1] = static_cast<uint8_t>(g);
          dst[3 * x + 2] = static_cast<uint8_t>(b);
        } else {
          dst[x] = static_cast<uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
        }
      }
    }
  } else {
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = out->pixels.data() + static_cast<size_t>(cinfo.output_scanline) * w * channels;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return absl::OkStatus();
}

absl::Status DecodePng(const uint8_t* data, size_t size, int channels, Image* out,
                       const ImageLimits& limits) {
#if defined(COLONNADE_HAVE_PNG)
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    std::string msg = img.message;
    png_image_free(&img);
    return absl::InvalidArgumentError(absl::StrCat("undecodable PNG: ", msg));
  }
  if (std::string why = ImageSizeProblem(img.height, img.width, limits); !why.empty()) {
    png_image_free(&img);
    return absl::InvalidArgumentError(absl::StrCat("PNG too large: ", why));
  }
  img.format = channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  out->height = static_cast<int>(img.height);
  out->width = static_cast<int>(img.width);
  out->channels = channels;
  out->pixels.resize(PNG_IMAGE_SIZE(img));
  // A transparent pixel is composited onto black (background = nullptr).
  if (!png_image_finish_read(&img, nullptr, out->pixels.data(), 0, nullptr)) {
    std::string msg = img.message;
    png_image_free(&img);
    return absl::InvalidArgumentError(absl::StrCat("undecodable PNG: ", msg));
  }
  return absl::OkStatus();
#else
  (void)data;
  (void)size;
  (void)channels;
  (void)out;
  (void)limits;
  return absl::UnimplementedError("png unsupported in this build (libpng not found)");
#endif
}

absl::Status DecodeImage(const uint8_t* data, size_t size, int channels, Image* out, int min_height,
                         int min_width, const ImageLimits& limits) {
  switch (SniffFormat(data, size)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(data, size, channels, out, min_height, min_width, limits);
    case ImageFormat::kPng:
      return DecodePng(data, size, channels, out, limits);
    case ImageFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError("undecodable image: neither JPEG nor PNG signature");
}

absl::StatusOr<std::string> EncodeJpeg(const Image& image, int quality) {
  if (image.channels != 1 && image.channels != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG encoding needs 1 or 3 channels, got ", image.channels));
  }
  jpeg_compress_struct cinfo;
  JpegError err;
  SetupErrors(&err, reinterpret_cast<j_common_ptr>(&cinfo));
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long buffer_size = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    free(buffer);
    return absl::InternalError(absl::StrCat("JPEG encoding failed: ", err.message));
  }
  jpeg_mem_dest(&cinfo, &buffer, &buffer_size);
  cinfo.image_width = image.width;
  cinfo.image_height = image.height;
  cinfo.input_components = image.channels;
  cinfo.in_color_space = image.channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  const size_t stride = static_cast<size_t>(image.width) * image.channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(image.pixels.data()) + cinfo.next_scanline * stride;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), buffer_size);
  jpeg_destroy_compress(&cinfo);
  free(buffer);
  return out;
}

namespace {

// Filter taps of one output coordinate: source indices [first, first + weights.size()).
struct Taps {
  int first;
  std::vector<float> weights;
};

std::vector<Taps> ComputeTaps(int in_offset, int in_size, int out_size) {
  std::vector<Taps> taps(out_size);
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;  // triangle filter has radius 1
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    int lo = static_cast<int>(std::floor(center - support + 0.5));
    int hi = static_cast<int>(std::floor(center + support + 0.5));
    lo = std::max(lo, 0);
    hi = std::min(hi, in_size);
    std::vector<double> w;
    double total = 0;
    for (int i = lo; i < hi; ++i) {
      double t = std::fabs((i + 0.5 - center) / filter_scale);
      double v = t < 1.0 ? 1.0 - t : 0.0;
      w.push_back(v);
      total += v;
    }
    if (total <= 0) {  // degenerate: nearest neighbour
      lo = std::min(std::max(static_cast<int>(center), 0), in_size - 1);
      w.assign(1, 1.0);
      total = 1.0;
    }
    taps[o].first = in_offset + lo;
    for (double v : w) taps[o].weights.push_back(static_cast<float>(v / total));
  }
  return taps;
}

}  // namespace

Image ResizeRegion(const Image& in, int y0, int x0, int h, int w, int out_h, int out_w) {
  const int c = in.channels;
  Image out;
  out.height = out_h;
  out.width = out_w;
  out.channels = c;
  out.pixels.resize(static_cast<size_t>(out_h) * out_w * c);
  if (y0 == 0 && x0 == 0 && h == in.height && w == in.width && h == out_h && w == out_w) {
    out.pixels = in.pixels;
    return out;
  }
  std::vector<Taps> tx = ComputeTaps(x0, w, out_w);
  std::vector<Taps> ty = ComputeTaps(y0, h, out_h);
  // Horizontal pass over the rows the vertical pass needs: rows [y0, y0 + h).
  std::vector<float> tmp(static_cast<size_t>(h) * out_w * c);
  for (int y = 0; y < h; ++y) {
    const uint8_t* src = in.pixels.data() + static_cast<size_t>(y0 + y) * in.width * c;
    float* dst = tmp.data() + static_cast<size_t>(y) * out_w * c;
    for (int x = 0; x < out_w; ++x) {
      const Taps& t = tx[x];
      for (int ch = 0; ch < c; ++ch) {
        float acc = 0.f;
        for (size_t k = 0; k < t.weights.size(); ++k) {
          acc += t.weights[k] * src[(t.first + k) * c + ch];
        }
        dst[x * c + ch] = acc;
      }
    }
  }
  for (int y = 0; y < out_h; ++y) {
    const Taps& t = ty[y];
    uint8_t* dst = out.pixels.data() + static_cast<size_t>(y) * out_w * c;
    for (int i = 0; i < out_w * c; ++i) {
      float acc = 0.f;
      for (size_t k = 0; k < t.weights.size(); ++k) {
        acc += t.weights[k] * tmp[(static_cast<size_t>(t.first - y0 + k)) * out_w * c + i];
      }
      int v = static_cast<int>(std::lround(acc));
      dst[i] = static_cast<uint8_t>(std::min(255, std::max(0, v)));
    }
  }
  return out;
}

Image ResizeShorterAndCenterCrop(const Image& in, int size) {
  const int side = std::min(in.height, in.width);
  const int y0 = (in.height - side) / 2, x0 = (in.width - side) / 2;
  return ResizeRegion(in, y0, x0, side, side, size, size);
}

}  // namespace colonnade::data
