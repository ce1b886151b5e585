// What the files of the checkpoint module share and nothing else may use: the write path
// (write.cc), the reader (read.cc) and the directory policy (directory.cc) are split by job
// and meet only here. Not part of the public API (checkpoint.h).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
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

// The valid range of an integer root attribute (docs/CHECKPOINTS.md, section 2): Read
// refuses a file outside it as corrupt, and Write never writes one.
struct IntAttrRange {
  const char* name;
  int64_t lo, hi;
};
// The trainer's limit of --num_classes (src/apps/trainer.cc).
inline constexpr int64_t kMaxNumClasses = 1000000;
inline constexpr int64_t kMaxInt32 = INT32_MAX;
// Every integer root attribute but format_version and seed, in the order Read checks them.
inline constexpr IntAttrRange kIntAttrs[] = {
    {"step", 0, INT64_MAX},
    {"epoch", 0, INT64_MAX},
    {"cursor_epoch", 0, INT64_MAX},
    {"cursor_position", 0, INT64_MAX},
    {"columns", 1, kMaxInt32},
    {"input_size", 1, kMaxInt32},
    {"num_classes", 1, kMaxNumClasses},
    {"input_channels", 1, kMaxInt32},
    {"num_params", 1, kMaxInt32},
    {"has_optimizer_state", 0, 1},
};
// "NAME = V is out of range [LO, HI]", or "" when V is in range.
std::string OutOfRange(const IntAttrRange& r, int64_t v);

// A model zoo name: 1 to 64 lowercase letters, digits, '.', '_' or '-', beginning with a
// letter or digit (no spaces, slashes or line breaks: it is printed and compared as is).
bool IsModelName(const std::string& name);
inline constexpr char kModelNameRule[] =
    "1 to 64 lowercase letters, digits, '.', '_' or '-', beginning with a letter or digit";

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
