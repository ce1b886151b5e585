#include "data/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/paths.h"

namespace colonnade::data {

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return FileOpenError(path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return FileOpenError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegularFileError(path, st.st_mode);
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: file of %d bytes is larger than the limit of %d bytes", path,
                        static_cast<int64_t>(st.st_size), max_bytes));
  }
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, buf, sizeof(buf));
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::DataLossError(absl::StrCat(path, ": read error: ", std::strerror(errno)));
    }
    data.append(buf, static_cast<size_t>(got));
    // A file that grows while read is capped too.
    if (static_cast<int64_t>(data.size()) > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: file is larger than the limit of %d bytes", path, max_bytes));
    }
  }
  return data;
}

}  // namespace colonnade::data
