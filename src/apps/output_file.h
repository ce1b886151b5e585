// The files the tools write for the user (trainer --predictions and --metrics_file, rank
// logs, the benchmarks' result tables): one set of rules so that no output flag can
// destroy data or lose a write without saying so (docs/OPERATIONS.md §8).
//
//   * A whole file is written to a unique temporary name next to it and renamed into place
//     only when every write, flush and close succeeded; a failed write leaves the old file.
//   * An existing file is replaced only with consent (`ExistingOutput`), and never when it
//     is a symbolic link, not a regular file (a device such as /dev/full, a FIFO, a
//     directory) or an HDF5 file other than an earlier predictions file (a checkpoint, a
//     dataset index or a shard).
//   * An appended log refuses an HDF5 file (appending would corrupt a checkpoint) and a
//     directory, and reports every failed write, flush and close.
#pragma once

#include <cstdio>
#include <functional>
#include <string>

#include "absl/status/status.h"

namespace colonnade {

// What may happen to a file that already exists where an output goes.
enum class ExistingOutput {
  kRefuse,              // nothing: the user did not consent (trainer --predictions)
  kReplaceText,         // a regular file that is not HDF5 (benchmark result tables)
  kReplacePredictions,  // that, or an HDF5 predictions file (trainer --overwrite)
};

// An error (InvalidArgument, naming `flag` and `path`) when the file at `path` may not be
// written under `rule`; OK when there is none or it may be replaced.
absl::Status CheckOutputPath(const std::string& path, const std::string& flag, ExistingOutput rule);

// Checks `path` (CheckOutputPath), creates a unique temporary file next to it, has
// `write` fill that file (given its name), flushes it to disk and renames it over `path`.
// With kRefuse the rename also refuses a file that appeared meanwhile. On any failure the
// temporary file is removed and `path` is left as it was. HDF5 writers call this inside
// their hdf5::Scope.
absl::Status WriteOutputFile(const std::string& path, const std::string& flag, ExistingOutput rule,
                             const std::function<absl::Status(const std::string& tmp)>& write);
// WriteOutputFile for a text file with the given contents.
absl::Status WriteTextOutputFile(const std::string& path, const std::string& flag,
                                 ExistingOutput rule, const std::string& contents);

// A number for a JSON line: `decimals` after the point, or null when it is not finite (a
// diverged loss: printf's "nan" or "inf" would make the whole line invalid JSON).
std::string JsonNumber(double v, int decimals);

// OK when `dir` is an existing directory (symlinks followed); else InvalidArgument
// "<flag>=<dir> does not exist" / "... is not a directory".
absl::Status CheckIsDirectory(const std::string& dir, const std::string& flag);

// A log that lines are appended to (trainer --metrics_file, rank logs, bench_train --json).
// Every line is flushed at once, so a crash loses nothing written before it.
class AppendFile {
 public:
  AppendFile() = default;
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // kFollowLinks: a path the user named (--metrics_file) may be a symbolic link to the
  // file meant. kNoLinks: a file the program names itself inside a directory (the rank
  // logs, rank-NNNNN.log) is never appended to through a link, which could point at any
  // file (a checkpoint).
  enum LinkRule { kFollowLinks, kNoLinks };
  // Opens `path` for appending (creating it); refuses a directory or an HDF5 file, and a
  // symbolic link under kNoLinks (InvalidArgument, naming `flag` and `path`).
  absl::Status Open(const std::string& path, const std::string& flag,
                    LinkRule links = kFollowLinks);
  bool is_open() const { return file_ != nullptr; }
  // Appends `line` and a newline and flushes; an error names the file and errno's reason
  // (e.g. "No space left on device" for /dev/full). No-op when not open.
  absl::Status WriteLine(const std::string& line);
  // Closes the file; an error when the close (the last flush) failed.
  absl::Status Close();

 private:
  std::FILE* file_ = nullptr;
  std::string path_, flag_;
};

}  // namespace colonnade
