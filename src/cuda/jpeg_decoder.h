// JPEG decoding on the GPU for the feed (nvJPEG, part of the CUDA toolkit): a batch of
// JPEG streams in host memory becomes n x H x W x C uint8 images in device memory, the
// layout the feed's augmentation kernel reads (batch_feed.h). Backends, tried in this
// order when the decoder is created: nvJPEG's hardware decoder (the NVJPG engines of
// A100/H100-class GPUs: no SM time at all), then its GPU-assisted Huffman decoder
// ("gpu_hybrid": Huffman and IDCT on the SMs).
//
// The decoded pixels are not bitwise libjpeg's (data/image.cc): IDCT and chroma
// upsampling differ by a few levels on some pixels (tests/cuda/jpeg_decoder_test.cc
// measures how much). Runs that must reproduce the host pipeline bit for bit use the
// host decoder (trainer --jpeg_decoder=host, docs/DATA.md).
//
// This header has no CUDA or nvJPEG types: a build without nvJPEG (no nvjpeg.h at
// configure time, e.g. a CUDA toolkit without it, or the CPU emulator) compiles the
// same callers, and CreateJpegDecoder returns Unavailable there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colonnade::cuda {

class JpegDecoder {
 public:
  virtual ~JpegDecoder() = default;
  // Enqueues on `stream` (a cudaStream_t) the decoding of streams data[j] (sizes[j] bytes,
  // host memory that stays untouched until the stream has passed this work) into `out`:
  // image j at out + j*height*width*channels, interleaved (RGB, or Y for 1 channel).
  // Every stream must declare height x width (the caller checks the headers: the data
  // module's ReadEncoded does). A batch nvJPEG refuses is an error (DataLoss) naming the
  // first refused image: ids[j] (e.g. its dataset index) when `ids` is given, else j.
  virtual absl::Status Decode(void* stream, const uint8_t* const* data, const size_t* sizes, int n,
                              int height, int width, uint8_t* out,
                              const int64_t* ids = nullptr) = 0;
  // "hardware" or "gpu_hybrid": the backend in use.
  virtual const char* backend() const = 0;
};

// True when this build has nvJPEG (COLONNADE_HAVE_NVJPEG at configure time); false in a
// build without the CUDA backend, which links no decoder at all.
#if defined(COLONNADE_WITH_CUDA) && COLONNADE_WITH_CUDA
bool HaveNvjpeg();
#else
inline bool HaveNvjpeg() { return false; }
#endif

// A decoder for `channels` (1 or 3) and batches of up to `max_batch` images, on the current
// CUDA device. Unavailable without nvJPEG in the build; Internal when nvJPEG cannot start.
absl::StatusOr<std::unique_ptr<JpegDecoder>> CreateJpegDecoder(int channels, int max_batch);

}  // namespace colonnade::cuda
