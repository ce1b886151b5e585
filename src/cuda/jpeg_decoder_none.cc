// CreateJpegDecoder of a build without nvJPEG (jpeg_decoder.h): the CPU emulator's, and
// a CUDA build whose toolkit has no nvjpeg.h.
#include "cuda/jpeg_decoder.h"

namespace colonnade::cuda {

bool HaveNvjpeg() { return false; }

absl::StatusOr<std::unique_ptr<JpegDecoder>> CreateJpegDecoder(int, int) {
  return absl::UnavailableError(
      "this build has no nvJPEG (nvjpeg.h was not found next to the CUDA toolkit at "
      "configure time): decode JPEGs on the host (--jpeg_decoder=host)");
}

}  // namespace colonnade::cuda
