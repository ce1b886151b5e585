// What the files of the checkpoint module share and nothing else may use: the write path
// (write.cc), the reader (read.cc) and the directory policy (directory.cc) are split by job
// and meet only here. Not part of the public API (checkpoint.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint.h"

namespace colonnade::checkpoint::internal {

inline std::string Errno(int e) { return std::strerror(e); }

// "(96, 3, 11, 11)", "(10,)": the Python tuple spelling, as h5py users see shapes.
inline std::string ShapeText(const std::vector<int64_t>& s) {
  if (s.size() == 1) return absl::StrCat("(", s[0], ",)");
  return absl::StrCat("(", absl::StrJoin(s, ", "), ")");
}

// "ckpt-....tmp": a temporary of an interrupted (or running) write.
bool IsPartialName(const std::string& name);

// Names of the entries of `dir` (no "." / ".."), sorted. NotFound when dir is missing.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

// Read() of `path` (read.cc), also telling whether an error means "a sound checkpoint of
// another model" (`*model_mismatch`) rather than a damaged file: LoadLatestValid skips
// damaged files but stops at a mismatch, which every file of the directory would share.
absl::StatusOr<Checkpoint> ReadChecked(const std::string& path, const ExpectedModel* expected,
                                       bool* model_mismatch);

// The directory policy after a checkpoint of `step` became durable in `dir` (directory.cc):
// deletes the oldest ckpt-<step>.h5 so that `keep_last` remain among those with a step <=
// `step` (keep_last <= 0 keeps all), and removes partial files: this process's own (named
// with `own_suffix`), and every other when `clean_others` (the caller holds the lock).
// Failures become warnings: the new checkpoint is safe whatever happens here.
void ApplyKeepPolicy(const std::string& dir, int64_t step, int keep_last,
                     const std::string& own_suffix, bool clean_others,
                     std::vector<std::string>* warnings);

}  // namespace colonnade::checkpoint::internal
