// Validates a command line against the registered Abseil flags before parsing it.
//
// Abseil 20220623's ParseCommandLine exits with status 1 on an unknown flag or a bad
// value; our tools promise exit status 2 for usage errors (docs/OPERATIONS.md). This
// check finds those errors first and reports them in one line.
#pragma once

#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace colonnade {

// One command-line flag, resolved against the registered flags as Abseil reads it:
// "--name=v" and "--name v" give v; a bare boolean "--name" gives "true", "--noname"
// "false". Abseil's own flags (--help, --flagfile, ...) are left out.
struct FlagArg {
  std::string name;
  std::string value;
  absl::CommandLineFlag* flag;
};

// The flags of `args` (argv without the program name), or an error naming the first
// unknown flag, negated non-boolean or missing value. Values are not parsed. Arguments
// that are not flags are an error, unless `positional` is given: then they are appended
// to it (a program that takes file names, like checkpoint_diff).
absl::StatusOr<std::vector<FlagArg>> ResolveFlags(const std::vector<std::string>& args,
                                                  std::vector<std::string>* positional = nullptr);

// Returns an error naming the first unknown flag or unparsable value in argv (and the
// first non-flag argument unless `allow_positional`).
absl::Status CheckFlags(int argc, char** argv, bool allow_positional = false);

// Parses the command line (after CheckFlags) or prints the error, once per job (rank 0
// only when `print` is false elsewhere), and returns false on a usage error. With
// `positional`, arguments that are not flags are allowed and returned there.
bool ParseFlagsOrExplain(int argc, char** argv, const char* program, bool print,
                         std::vector<std::string>* positional = nullptr);

// The valid values of one numeric flag: a finite number in [min, max] (max excluded when
// max_open), or exactly `sentinel` when has_sentinel (e.g. -1: "the model's recipe").
// Each program lists its numeric flags' ranges in one table, which both the check below
// and the flags' --help text (RangeHelp) read, so the two cannot disagree.
struct FlagRange {
  const char* name;
  double min, max;
  bool max_open = false;
  bool has_sentinel = false;
  double sentinel = 0;
  const char* sentinel_meaning = "";  // "the recipe's": shown in --help and errors
};

// "Range: 0 to 1024." style text for --help, from the entry of `ranges` named `name`.
std::string RangeText(absl::Span<const FlagRange> ranges, const char* name);
// `help` followed by RangeText: for the help argument of ABSL_FLAG (which may be an
// expression).
std::string RangeHelp(absl::Span<const FlagRange> ranges, const char* name, const char* help);

// After parsing: an error naming the first flag of `ranges` whose value is NaN, infinite or
// out of its range (a table entry that names no registered flag is an error too).
absl::Status CheckFlagRanges(absl::Span<const FlagRange> ranges);

// True when argv asks for --help (or -h); prints the usage message and the flags defined
// in files named like `source_file` (e.g. "src/apps/trainer") to stdout when `print`.
bool WantsHelp(int argc, char** argv, const char* source_file, bool print);

}  // namespace colonnade
