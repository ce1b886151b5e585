#include "core/paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace colonnade {

namespace fs = std::filesystem;

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return (fs::path(dir) / name).string();
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

absl::Status MakeDirs(const std::string& dir, const std::string& what) {
  if (dir.empty()) return absl::OkStatus();
  std::error_code ec;
  // create_directories uses perms::all (0777), which the kernel masks with the umask.
  fs::create_directories(dir, ec);
  std::error_code stat_ec;
  if (fs::is_directory(dir, stat_ec)) return absl::OkStatus();
  if (fs::exists(dir, stat_ec)) {
    return absl::FailedPreconditionError(absl::StrCat(what, " ", dir, " is not a directory"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "cannot create ", what, " ", dir, ": ", ec ? ec.message() : std::string("unknown error")));
}

absl::Status FileOpenError(const std::string& path, int e) {
  if (e == ENOENT || e == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open: ", std::strerror(e)));
}

absl::Status NotRegularFileError(const std::string& path, unsigned mode) {
  const char* kind = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                                      : "not a regular file";
  return absl::FailedPreconditionError(absl::StrCat(path, ": is ", kind, ", not a regular file"));
}

absl::Status CheckRegularFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return FileOpenError(path, errno);
  if (!S_ISREG(st.st_mode)) return NotRegularFileError(path, st.st_mode);
  return absl::OkStatus();
}

}  // namespace colonnade
