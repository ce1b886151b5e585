#include "data/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace colonnade::data {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, ": is ", KindOf(mode), ", not a regular file"));
}

absl::Status StatError(const std::string& path, int e) {
  if (e == ENOENT || e == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(e)));
}

}  // namespace

absl::Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return StatError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return StatError(path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return StatError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegular(path, st.st_mode);
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: file of %d bytes is larger than the limit of %d bytes", path,
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
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: file is larger than the limit of %d bytes", path, max_bytes));
    }
  }
  return data;
}

}  // namespace colonnade::data
