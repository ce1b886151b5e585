// The command-line front end of every Colonnade program (trainer, make_shards,
// checkpoint_diff, bench_*): one parser over the registered Abseil flags.
//
//   const colonnade::Cli kCli = {"make_shards", "src/apps/make_shards", kUsage};
//   if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, kCli)) return *code;
//
// `--help` (also -h, -help, --helpshort, --helpfull) prints the usage and the program's own
// flags to stdout and exits 0. An unknown flag, a malformed or out-of-range value or a
// stray argument is one line on stderr and exit 2 (docs/OPERATIONS.md). Abseil 20220623's
// own ParseCommandLine exits with status 1 and several lines on those errors, so the
// command line is checked here first and handed to Abseil only once it is known to parse.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace colonnade {

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

// How a program words its usage errors; both are one line on stderr. The data tools kept
// the second form when they joined this front end (tests and docs quote it).
enum class UsageStyle {
  kError,    // "trainer: error: unknown flag --x; run with --help to list the flags"
  kSeeHelp,  // "make_shards: unknown flag --x (see --help)"
};

// What the front end needs to know about a program.
struct Cli {
  const char* program;     // the prefix of every message: "trainer"
  const char* flags_file;  // --help lists the flags defined in files whose path contains
                           // this: "src/apps/trainer"
  std::string usage;       // printed by --help above the flags
  absl::Span<const FlagRange> ranges = {};  // checked after parsing
  UsageStyle style = UsageStyle::kError;
  bool positional = false;  // arguments that are not flags are allowed (file names)
  // --help's output, when the program groups its flags itself (the trainer); given the
  // arguments. Empty: Abseil's list of the flags defined in `flags_file`.
  std::function<void(const std::vector<std::string>& args)> print_help = nullptr;
};

// "trainer 0.1 (commit 4d0485d, Release build, CUDA 13.0 for sm_90a)": what --version
// prints for every program (the commit is read at build time, "unknown" outside git).
std::string VersionText(const char* program);

// Handles --help, parses argv into the flags and checks `cli.ranges`. Returns the exit
// code when the program must stop now (0 after --help, 2 after a usage error, printed in
// one line), or nullopt when it should run. Messages are printed only when `print` (false
// on every MPI rank but 0, which sees the same command line). Arguments that are not flags
// are appended to `positional` when cli.positional.
std::optional<int> ParseCommandLine(int argc, char** argv, const Cli& cli, bool print = true,
                                    std::vector<std::string>* positional = nullptr);

// Prints `message` as a usage error in the program's style (one line on stderr) and
// returns the usage exit code, 2.
int UsageError(const Cli& cli, absl::string_view message);

// One command-line flag, resolved against the registered flags as Abseil reads it:
// "--name=v" and "--name v" give v; a bare boolean "--name" gives "true", "--noname"
// "false". Abseil's own flags (--help, --flagfile, ...) are left out.
struct FlagArg {
  std::string name;
  std::string value;
  absl::CommandLineFlag* flag;
};

// The flags of `args` (argv without the program name), or an error naming the first
// unknown flag (NotFound), negated non-boolean or missing value (InvalidArgument). Values
// are not parsed. Arguments that are not flags are an error, unless `positional` is given:
// then they are appended to it. Also reads the flag text saved in checkpoints.
absl::StatusOr<std::vector<FlagArg>> ResolveFlags(const std::vector<std::string>& args,
                                                  std::vector<std::string>* positional = nullptr);

// True when argv (as given to ParseCommandLine, already checked by it) sets the flag `name`
// in any spelling (--name, --name=v, --name v, --noname). For a flag whose default depends
// on another flag: a value the user gave is checked against it, the default is not.
bool FlagGiven(int argc, char** argv, absl::string_view name);

// "Valid: from 0 to 1024." style text for --help, from the entry of `ranges` named `name`.
std::string RangeText(absl::Span<const FlagRange> ranges, const char* name);
// `help` followed by RangeText: for the help argument of ABSL_FLAG (which may be an
// expression).
std::string RangeHelp(absl::Span<const FlagRange> ranges, const char* name, const char* help);

// After parsing: an error naming the first flag of `ranges` whose value is NaN, infinite or
// out of its range (a table entry that names no registered flag is an error too).
absl::Status CheckFlagRanges(absl::Span<const FlagRange> ranges);

}  // namespace colonnade
