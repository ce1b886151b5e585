// Opening input files safely: only regular files are read. A FIFO blocks open() until a
// writer appears (forever, for a crafted input), and a device such as /dev/zero never
// ends; both are refused with an error naming the path.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace colonnade::data {

// Reads a whole regular file. The file is opened non-blocking and checked with fstat
// before any read, so a FIFO put in its place between a check and the open cannot block.
// Files larger than `max_bytes` are refused (InvalidArgument) before reading.
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes);

}  // namespace colonnade::data
