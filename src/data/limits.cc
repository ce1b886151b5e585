#include "data/limits.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/env.h"
#include "core/status_macros.h"

namespace colonnade::data {
namespace {

absl::Status ReadLimit(const char* name, int64_t* value) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, EnvInt(name));
  if (v.has_value()) *value = *v;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImageLimits> ImageLimitsFromEnvironment() {
  ImageLimits l;
  // Sides beyond 2^20 or more than 2^40 pixels are no images a node can hold.
  // The ranges (sides up to 2^20, up to 2^40 pixels: no image a node can hold is larger)
  // are in core/env.cc with every variable's.
  RETURN_IF_ERROR(ReadLimit(kMaxImageSideEnv, &l.max_side));
  RETURN_IF_ERROR(ReadLimit(kMaxImagePixelsEnv, &l.max_pixels));
  return l;
}

absl::StatusOr<int64_t> ShardCacheBytesFromEnvironment() {
  constexpr int64_t kMb = int64_t{1} << 20;
  // Up to 2^24 MB (16 TiB, core/env.cc): more than any host's memory, and far from
  // overflow in bytes.
  ASSIGN_OR_RETURN(std::optional<int64_t> mb, EnvInt(kShardCacheMbEnv));
  if (mb.has_value()) return *mb * kMb;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  const int64_t ram = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  return std::min(kDefaultShardCacheMaxMb * kMb, ram / 16);
}

std::string ImageSizeProblem(int64_t height, int64_t width, const ImageLimits& limits) {
  if (height <= 0 || width <= 0) {
    return absl::StrFormat("%dx%d is not a positive size", height, width);
  }
  if (height > limits.max_side || width > limits.max_side) {
    return absl::StrFormat("%dx%d is larger than the limit of %d pixels per side (%s)", height,
                           width, limits.max_side, kMaxImageSideEnv);
  }
  int64_t pixels = 0;
  if (!CheckedMul(height, width, &pixels) || pixels > limits.max_pixels) {
    return absl::StrFormat("%dx%d has more than the limit of %d pixels (%s)", height, width,
                           limits.max_pixels, kMaxImagePixelsEnv);
  }
  return "";
}

bool CheckedMul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace colonnade::data
