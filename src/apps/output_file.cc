#include "apps/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "hdf5/hdf5.h"

namespace colonnade {
namespace {

std::string Errno(int e) { return std::strerror(e); }

std::string Dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// -1: not an HDF5 file; else whether it is exactly a predictions file (/logits and
// /labels at the root, nothing else).
int PredictionsFileKind(const std::string& path) {
  hdf5::Scope scope;
  if (!hdf5::IsHdf5File(path)) return -1;
  absl::StatusOr<hdf5::Handle> file = hdf5::OpenFileReadOnly(path);
  if (!file.ok()) return 0;  // HDF5 but unreadable: not known to be ours
  const hdf5::Id root = file->get();
  return hdf5::LinkCount(root) == 2 && hdf5::LinkExists(root, "logits") &&
                 hdf5::LinkExists(root, "labels")
             ? 1
             : 0;
}

bool IsHdf5(const std::string& path) {
  hdf5::Scope scope;
  return hdf5::IsHdf5File(path);
}

// Flushes a written file's data to disk (through a fresh descriptor: HDF5 has closed its).
absl::Status SyncFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0 || fsync(fd) != 0) {
    const int e = errno;
    if (fd >= 0) close(fd);
    return absl::InternalError(absl::StrCat("cannot flush ", path, ": ", Errno(e)));
  }
  close(fd);
  return absl::OkStatus();
}

// Renames tmp to path; with no_replace it fails (EEXIST) when path exists, atomically
// where the file system supports it (renameat2 RENAME_NOREPLACE, else link + unlink).
int MoveIntoPlace(const std::string& tmp, const std::string& path, bool no_replace) {
  if (!no_replace) return std::rename(tmp.c_str(), path.c_str());
  if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  if (link(tmp.c_str(), path.c_str()) != 0) return -1;
  unlink(tmp.c_str());
  return 0;
}

}  // namespace

absl::Status CheckOutputPath(const std::string& path, const std::string& flag,
                             ExistingOutput rule) {
  const std::string what = absl::StrCat(flag, "=", path);
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", Errno(errno)));
  }
  if (S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is a symbolic link; refusing to replace it (give the path of a new file)"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     " exists and is not a regular file (a device, FIFO or directory); refusing to "
                     "write there (give the path of a new file)"));
  }
  if (rule == ExistingOutput::kRefuse) {
    return absl::InvalidArgumentError(absl::StrCat(
        what,
        " exists; pass --overwrite to replace it (a checkpoint or dataset file is never "
        "replaced)"));
  }
  const int kind = PredictionsFileKind(path);
  if (kind < 0 || (kind == 1 && rule == ExistingOutput::kReplacePredictions)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is an HDF5 file", kind == 1 ? "" : " that is not a predictions file",
                   " (a checkpoint, dataset or shard?); refusing to replace it"));
}

absl::Status WriteOutputFile(const std::string& path, const std::string& flag, ExistingOutput rule,
                             const std::function<absl::Status(const std::string& tmp)>& write) {
  if (absl::Status s = CheckOutputPath(path, flag, rule); !s.ok()) return s;
  // A unique name (not PATH.tmp): two writers, or a writer and a left-over file from a
  // crash, never share a temporary file.
  std::string tmp = path + ".tmp.XXXXXX";
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot create a file next to ", flag, "=", path, ": ", Errno(errno)));
  }
  // mkstemp creates the file 0600; an output gets the permissions any new file would get.
  const mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  close(fd);
  tmp = name.data();
  absl::Status s = write(tmp);
  if (s.ok()) s = SyncFile(tmp);
  if (s.ok() && MoveIntoPlace(tmp, path, rule == ExistingOutput::kRefuse) != 0) {
    s = absl::InternalError(
        absl::StrCat("cannot move ", tmp, " to ", flag, "=", path, ": ", Errno(errno)));
  }
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  // Make the rename itself durable (best effort: some file systems refuse a directory fsync).
  if (const int dir = open(Dir(path).c_str(), O_RDONLY | O_DIRECTORY); dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return absl::OkStatus();
}

absl::Status WriteTextOutputFile(const std::string& path, const std::string& flag,
                                 ExistingOutput rule, const std::string& contents) {
  return WriteOutputFile(path, flag, rule, [&](const std::string& tmp) -> absl::Status {
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", Errno(errno)));
    }
    int error = 0;  // the first failure's errno
    if (std::fwrite(contents.data(), 1, contents.size(), f) != contents.size()) error = errno;
    if (std::fflush(f) != 0 && error == 0) error = errno;
    if (std::fclose(f) != 0 && error == 0) error = errno;
    if (error != 0) {
      return absl::InternalError(
          absl::StrCat("writing ", flag, "=", path, " failed: ", Errno(error)));
    }
    return absl::OkStatus();
  });
}

AppendFile::~AppendFile() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status AppendFile::Open(const std::string& path, const std::string& flag, LinkRule links) {
  path_ = path;
  flag_ = flag;
  const std::string named = absl::StrCat(flag, "=", path);
  struct stat st;
  if (links == kNoLinks && lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(named,
                     " is a symbolic link; it is never appended to through a link (which may point "
                     "at a checkpoint): remove it"));
  }
  // O_NOFOLLOW closes the window between the check above and the open.
  const int fd =
      open(path.c_str(),
           O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | (links == kNoLinks ? O_NOFOLLOW : 0), 0666);
  if (fd < 0) {
    const int e = errno;
    if (e == EISDIR) return absl::InvalidArgumentError(named + " is a directory");
    if (e == ELOOP) return absl::InvalidArgumentError(named + " is a symbolic link; remove it");
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", named, " for appending: ", Errno(e)));
  }
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && IsHdf5(path)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        named, " is an HDF5 file (a checkpoint or dataset?); appending text would corrupt it"));
  }
  file_ = fdopen(fd, "a");
  if (file_ == nullptr) {
    const int e = errno;
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open ", named, " for appending: ", Errno(e)));
  }
  return absl::OkStatus();
}

absl::Status CheckIsDirectory(const std::string& dir, const std::string& flag) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "=", dir, " does not exist (", Errno(errno), "): create it first"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, "=", dir, " is not a directory"));
  }
  return absl::OkStatus();
}

absl::Status AppendFile::WriteLine(const std::string& line) {
  if (file_ == nullptr) return absl::OkStatus();
  errno = 0;
  const bool ok = std::fprintf(file_, "%s\n", line.c_str()) >= 0 && std::fflush(file_) == 0;
  if (ok) return absl::OkStatus();
  const int e = errno;
  std::fclose(file_);
  file_ = nullptr;
  return absl::InternalError(
      absl::StrCat("writing ", flag_, "=", path_, " failed: ", e ? Errno(e) : "write error"));
}

absl::Status AppendFile::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int r = std::fclose(file_);
  file_ = nullptr;
  if (r != 0) {
    return absl::InternalError(
        absl::StrCat("closing ", flag_, "=", path_, " failed: ", Errno(errno)));
  }
  return absl::OkStatus();
}

std::string JsonNumber(double v, int decimals) {
  return std::isfinite(v) ? absl::StrFormat("%.*f", decimals, v) : std::string("null");
}

}  // namespace colonnade
