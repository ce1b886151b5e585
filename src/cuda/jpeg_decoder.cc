// CreateJpegDecoder with nvJPEG (jpeg_decoder.h). Built only when the toolkit has
// nvjpeg.h (src/cuda/CMakeLists.txt); jpeg_decoder_none.cc stands in otherwise.
#include "cuda/jpeg_decoder.h"

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace colonnade::cuda {

bool HaveNvjpeg() { return true; }

namespace {

const char* StatusName(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "success";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG:
      return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "not supported on this GPU";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "implementation not supported";
    default:
      return "unknown status";
  }
}

// One nvJPEG backend: its library handle and the decode state of batched calls.
struct Engine {
  nvjpegHandle_t handle = nullptr;
  nvjpegJpegState_t state = nullptr;
  int batch = 0;  // batch size the state was initialised for (0: none)
  ~Engine() {
    if (state) nvjpegJpegStateDestroy(state);
    if (handle) nvjpegDestroy(handle);
  }
};

nvjpegStatus_t StartEngine(nvjpegBackend_t backend, Engine* e) {
  nvjpegStatus_t s = nvjpegCreateEx(backend, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &e->handle);
  if (s != NVJPEG_STATUS_SUCCESS) {
    e->handle = nullptr;
    return s;
  }
  return nvjpegJpegStateCreate(e->handle, &e->state);
}

class NvjpegDecoder : public JpegDecoder {
 public:
  NvjpegDecoder(std::unique_ptr<Engine> engine, const char* name, int channels)
      : engine_(std::move(engine)), name_(name), channels_(channels) {}

  absl::Status Decode(void* stream, const uint8_t* const* data, const size_t* sizes, int n,
                      int height, int width, uint8_t* out, const int64_t* ids) override {
    if (n <= 0) return absl::OkStatus();
    const nvjpegOutputFormat_t format = channels_ == 1 ? NVJPEG_OUTPUT_Y : NVJPEG_OUTPUT_RGBI;
    const size_t image = static_cast<size_t>(height) * width * channels_;
    images_.assign(n, nvjpegImage_t{});
    for (int j = 0; j < n; ++j) {
      images_[j].channel[0] = out + j * image;
      images_[j].pitch[0] = static_cast<size_t>(width) * channels_;
    }
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    Engine& e = *engine_;
    nvjpegStatus_t st = NVJPEG_STATUS_SUCCESS;
    if (e.batch != n) {
      st = nvjpegDecodeBatchedInitialize(e.handle, e.state, n, 1, format);
      e.batch = st == NVJPEG_STATUS_SUCCESS ? n : 0;
    }
    if (st == NVJPEG_STATUS_SUCCESS) {
      st = nvjpegDecodeBatched(e.handle, e.state, data, sizes, images_.data(), s);
    }
    if (st == NVJPEG_STATUS_SUCCESS) return absl::OkStatus();
    e.batch = 0;  // a failed batch needs a fresh initialisation
    // Name the image: decode them one by one (a failure path only).
    for (int j = 0; j < n; ++j) {
      nvjpegStatus_t one =
          nvjpegDecode(e.handle, e.state, data[j], sizes[j], format, &images_[j], s);
      if (one != NVJPEG_STATUS_SUCCESS) {
        return absl::DataLossError(absl::StrFormat(
            "nvJPEG (%s) cannot decode %s %d: %s (decode on the host with "
            "--jpeg_decoder=host to see libjpeg's message)",
            name_, ids ? "dataset image" : "image", ids ? ids[j] : j, StatusName(one)));
      }
    }
    return absl::DataLossError(
        absl::StrFormat("nvJPEG (%s) failed on a batch of %d images: %s (each decodes on its "
                        "own; try --jpeg_decoder=host)",
                        name_, n, StatusName(st)));
  }

  const char* backend() const override { return name_; }

 private:
  std::unique_ptr<Engine> engine_;
  const char* name_;
  int channels_;
  std::vector<nvjpegImage_t> images_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JpegDecoder>> CreateJpegDecoder(int channels, int max_batch) {
  if ((channels != 1 && channels != 3) || max_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "nvJPEG decoder: %d channels, batch %d (1 or 3 channels, batch > 0)", channels, max_batch));
  }
  // COLONNADE_NVJPEG_BACKEND=hardware|gpu_hybrid forces one (for measurements); by default
  // the hardware engines when the GPU has them.
  const char* forced = std::getenv("COLONNADE_NVJPEG_BACKEND");
  const std::string want = forced != nullptr ? forced : "";
  if (!want.empty() && want != "hardware" && want != "gpu_hybrid") {
    return absl::InvalidArgumentError(
        absl::StrFormat("COLONNADE_NVJPEG_BACKEND=%s: expected hardware or gpu_hybrid", want));
  }
  struct Candidate {
    nvjpegBackend_t backend;
    const char* name;
  };
  const Candidate candidates[] = {{NVJPEG_BACKEND_HARDWARE, "hardware"},
                                  {NVJPEG_BACKEND_GPU_HYBRID, "gpu_hybrid"}};
  std::string tried;
  for (const Candidate& c : candidates) {
    if (!want.empty() && want != c.name) continue;
    auto engine = std::make_unique<Engine>();
    nvjpegStatus_t s = StartEngine(c.backend, engine.get());
    if (s == NVJPEG_STATUS_SUCCESS) {
      return std::unique_ptr<JpegDecoder>(new NvjpegDecoder(std::move(engine), c.name, channels));
    }
    tried += absl::StrFormat("%s%s: %s", tried.empty() ? "" : "; ", c.name, StatusName(s));
  }
  return absl::InternalError("nvJPEG could not start (" + tried + ")");
}

}  // namespace colonnade::cuda
