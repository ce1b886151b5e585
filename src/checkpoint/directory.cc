// The checkpoint directory's policy (checkpoint.h): file names, the directory lock, the
// keep-newest rule after a write, and the search for the newest valid checkpoint.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h"
#include "checkpoint/signals.h"
#include "core/paths.h"
#include "core/status_macros.h"

namespace colonnade::checkpoint {

using internal::Errno;

namespace internal {

bool IsPartialName(const std::string& n) {
  return n.rfind("ckpt-", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, ".tmp") == 0;
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  std::vector<std::string> out;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    out.push_back(it->path().filename().string());
  }
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(absl::StrFormat("%s does not exist", dir));
    }
    return absl::PermissionDeniedError(absl::StrFormat("cannot list %s: %s", dir, ec.message()));
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ApplyKeepPolicy(const std::string& d, int64_t step, int keep_last,
                     const std::string& own_suffix, bool clean_others,
                     std::vector<std::string>* warnings) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(d);
  if (!names.ok()) {
    if (warnings) warnings->push_back(std::string(names.status().message()));
    return;
  }
  std::vector<std::pair<int64_t, std::string>> older;
  for (const std::string& n : *names) {
    const int64_t s = ParseCheckpointStep(n);
    if (s >= 0 && s < step) older.push_back({s, n});
    if (IsPartialName(n) && (clean_others || absl::EndsWith(n, own_suffix))) {
      const std::string p = JoinPath(d, n);
      if (unlink(p.c_str()) == 0) {
        if (warnings) {
          warnings->push_back(p + ": removed a partial checkpoint left by an interrupted write");
        }
      } else if (warnings && errno != ENOENT) {
        warnings->push_back(
            absl::StrFormat("%s: cannot remove partial checkpoint: %s", p, Errno(errno)));
      }
    }
  }
  if (keep_last <= 0) return;
  // The new checkpoint counts as one of the `keep_last`; the newest older ones stay.
  std::sort(older.rbegin(), older.rend());
  for (size_t i = static_cast<size_t>(keep_last - 1); i < older.size(); ++i) {
    const std::string p = JoinPath(d, older[i].second);
    if (unlink(p.c_str()) != 0 && warnings) {
      warnings->push_back(absl::StrFormat("%s: cannot delete old checkpoint: %s", p, Errno(errno)));
    }
  }
}

}  // namespace internal

// ---- names -------------------------------------------------------------------------------

std::string CheckpointFileName(int64_t step) { return absl::StrFormat("ckpt-%09d.h5", step); }

int64_t ParseCheckpointStep(const std::string& n) {
  constexpr size_t kPrefix = 5, kSuffix = 3;  // "ckpt-", ".h5"
  if (n.size() < kPrefix + 9 + kSuffix || n.rfind("ckpt-", 0) != 0 ||
      n.compare(n.size() - kSuffix, kSuffix, ".h5") != 0) {
    return -1;
  }
  const std::string digits = n.substr(kPrefix, n.size() - kPrefix - kSuffix);
  if (digits.size() > 18) return -1;
  int64_t v = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return -1;
    v = v * 10 + (ch - '0');
  }
  // Only the canonical spelling (so "ckpt-0000000100.h5" and "ckpt-000000100.h5" cannot
  // both claim step 100).
  return CheckpointFileName(v) == n ? v : -1;
}

std::string ProcessTag() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string tag = absl::StrFormat("%s-%d", host, static_cast<int>(getpid()));
  for (char& c : tag) {
    const bool keep = absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_';
    if (!keep && c != '-') c = '_';
  }
  return tag;
}

// ---- the directory lock ------------------------------------------------------------------

namespace {

// "host H pid P [slurm job J] since 2025-01-31T12:00:00Z": what the lock file says.
std::string HolderText() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  std::string text = absl::StrFormat("host %s pid %d", host, static_cast<int>(getpid()));
  if (const char* job = std::getenv("SLURM_JOB_ID"); job != nullptr && *job != '\0') {
    absl::StrAppend(&text, " slurm job ", job);
  }
  char when[32] = {0};
  const std::time_t now = std::time(nullptr);
  struct tm utc;
  if (gmtime_r(&now, &utc) != nullptr) {
    std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
  }
  absl::StrAppend(&text, " since ", when);
  return text;
}

// The holder recorded in an open lock file, or "an unknown process" (it may not have
// written its line yet).
std::string ReadHolder(int fd) {
  char buf[512];
  const ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
  std::string text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  text = std::string(absl::StripAsciiWhitespace(text.substr(0, text.find('\n'))));
  return text.empty() ? "an unknown process" : text;
}

// Lock files hold one holder line: never more than this.
constexpr int64_t kMaxLockFileBytes = 1024;

// Whether `text` (a lock file's contents) is what HolderText writes: empty (created, the
// line not yet written), or "host H pid P [slurm job J] since T" and a newline, printable.
bool IsHolderText(const std::string& text) {
  if (text.empty()) return true;
  std::string line = text;
  if (line.back() == '\n') line.pop_back();
  for (char c : line) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  const size_t pid = line.find(" pid ");
  return line.rfind("host ", 0) == 0 && pid != std::string::npos && pid + 5 < line.size() &&
         absl::ascii_isdigit(static_cast<unsigned char>(line[pid + 5])) &&
         line.find(" since ", pid) != std::string::npos;
}

// "a FIFO", "a directory", ... for a file that is not a regular file.
const char* FileKind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
                          : "of an unknown kind";
}

// The refusal of a lock file that is not certainly ours: `why` it is not, and the fix.
absl::Status NotALockFile(const std::string& path, const std::string& why) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "checkpoint lock file %s %s: the trainer writes its holder over a lock file's contents, "
      "so it opens no file that may be another one; remove it (the trainer makes a new one) "
      "and run again",
      path, why));
}

// Opens the lock file `path` for writing, creating it if needed, only when it is certainly
// a lock file (DirectoryLock): never through a symbolic link, and only a regular file with
// one link and no contents but a holder line. Nothing is written here.
absl::StatusOr<int> OpenLockFile(const std::string& path) {
  // O_NOFOLLOW: a symbolic link (dangling or not) fails with ELOOP. O_NONBLOCK: opening a
  // FIFO or a device must not wait; it is refused below.
  const int fd =
      open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY,
           0666);  // umask applies
  if (fd < 0) {
    const int e = errno;
    struct stat lst;
    if (lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      std::error_code ec;
      const std::string target = std::filesystem::read_symlink(path, ec).string();
      return NotALockFile(
          path, absl::StrFormat("is a symbolic link (to %s)", ec ? std::string("?") : target));
    }
    if (lstat(path.c_str(), &lst) == 0 && !S_ISREG(lst.st_mode)) {  // a directory, a socket
      return NotALockFile(path,
                          absl::StrFormat("is not a regular file (%s)", FileKind(lst.st_mode)));
    }
    return absl::PermissionDeniedError(
        absl::StrFormat("cannot create the checkpoint lock file %s: %s", path, Errno(e)));
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0) {
    why = absl::StrFormat("cannot be examined (%s)", Errno(errno));
  } else if (!S_ISREG(st.st_mode)) {
    why = absl::StrFormat("is not a regular file (%s)", FileKind(st.st_mode));
  } else if (st.st_nlink != 1) {
    why = absl::StrFormat(
        "has %d hard links (the same file has another name, perhaps a checkpoint's)",
        static_cast<int64_t>(st.st_nlink));
  } else {
    std::string text;
    if (st.st_size <= kMaxLockFileBytes) {
      text.resize(static_cast<size_t>(st.st_size));
      const ssize_t n = text.empty() ? 0 : pread(fd, text.data(), text.size(), 0);
      text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    }
    if (st.st_size > kMaxLockFileBytes || !IsHolderText(text)) {
      why = absl::StrFormat(
          "is not a lock file (%d bytes that are not a holder line 'host H pid P since T')",
          static_cast<int64_t>(st.st_size));
    }
  }
  if (!why.empty()) {
    close(fd);
    return NotALockFile(path, why);
  }
  return fd;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DirectoryLock>> DirectoryLock::Acquire(
    const std::string& dir, double wait_secs, std::vector<std::string>* warnings) {
  const std::string d = dir.empty() ? "." : dir;
  RETURN_IF_ERROR(MakeDirs(d, "checkpoint directory"));
  const std::string path = JoinPath(d, kFileName);
  ASSIGN_OR_RETURN(const int fd, OpenLockFile(path));
  std::unique_ptr<DirectoryLock> lock(new DirectoryLock());
  lock->dir_ = d;
  lock->owner_ = ProcessTag();
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::max(0.0, wait_secs)));
  while (true) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    const int e = errno;
    if (e == EINTR) continue;
    if (e != EWOULDBLOCK) {
      // NFS without lockd, Lustre without -o flock, ...: run unprotected, but say so.
      close(fd);
      if (warnings) {
        warnings->push_back(absl::StrFormat(
            "cannot lock checkpoint directory %s (flock %s: %s): its file system does not "
            "support locks, so nothing stops a second job from writing there too",
            d, path, Errno(e)));
      }
      return lock;
    }
    if (StopRequested()) {
      const std::string holder = ReadHolder(fd);
      close(fd);
      return absl::CancelledError(
          absl::StrFormat("stopped by %s while waiting for checkpoint directory %s, locked by %s",
                          SignalName(SignalReceived()), d, holder));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::string holder = ReadHolder(fd);
      close(fd);
      return absl::UnavailableError(absl::StrFormat(
          "checkpoint directory %s is in use by another job: %s/%s is locked by %s; gave up "
          "after %g s. Two jobs must not share a checkpoint directory: let that job end, or "
          "give this one its own directory",
          d, d, kFileName, holder, wait_secs));
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100)));
  }
  // Ours now. Record who holds it, for the message of the next job that finds it locked.
  const std::string text = HolderText() + "\n";
  if (ftruncate(fd, 0) != 0 || pwrite(fd, text.data(), text.size(), 0) < 0) {
    if (warnings) {
      warnings->push_back(
          absl::StrFormat("%s: cannot record the lock's holder: %s", path, Errno(errno)));
    }
  }
  lock->fd_ = fd;
  return lock;
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);  // releases the flock
}

// ---- the newest valid checkpoint ---------------------------------------------------------

absl::StatusOr<Checkpoint> LoadLatestValid(const std::string& dir,
                                           std::vector<std::string>* warnings,
                                           const ExpectedModel* expected) {
  const std::string d = dir.empty() ? "." : dir;
  absl::StatusOr<std::vector<std::string>> names = internal::ListDir(d);
  if (!names.ok()) {
    if (absl::IsNotFound(names.status())) {
      return absl::NotFoundError(
          absl::StrFormat("no checkpoint in %s: the directory does not exist", d));
    }
    return names.status();
  }
  std::vector<std::pair<int64_t, std::string>> candidates;
  for (const std::string& n : *names) {
    const int64_t step = ParseCheckpointStep(n);
    if (step >= 0) candidates.push_back({step, n});
    if (internal::IsPartialName(n) && warnings) {
      warnings->push_back(JoinPath(d, n) +
                          ": partial checkpoint (a write was interrupted); ignored");
    }
  }
  if (candidates.empty()) {
    return absl::NotFoundError(absl::StrFormat("no checkpoint (ckpt-<step>.h5) in %s", d));
  }
  std::sort(candidates.rbegin(), candidates.rend());
  for (const auto& [step, n] : candidates) {
    bool model_mismatch = false;
    absl::StatusOr<Checkpoint> c = internal::ReadChecked(JoinPath(d, n), expected, &model_mismatch);
    if (c.ok() || model_mismatch) return c;
    if (warnings) warnings->push_back(absl::StrCat("skipped: ", c.status().message()));
  }
  return absl::DataLossError(absl::StrFormat(
      "%s holds %d checkpoint file(s) but none is valid (see the warnings); not starting over "
      "silently: move them away to start over",
      d, candidates.size()));
}

absl::StatusOr<std::string> FindLatestValid(const std::string& dir,
                                            std::vector<std::string>* warnings,
                                            const ExpectedModel* expected) {
  ASSIGN_OR_RETURN(Checkpoint c, LoadLatestValid(dir, warnings, expected));
  return c.path;
}

}  // namespace colonnade::checkpoint
