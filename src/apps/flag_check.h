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
// unknown flag, negated non-boolean or missing value. Values are not parsed.
absl::StatusOr<std::vector<FlagArg>> ResolveFlags(const std::vector<std::string>& args);

// Returns an error naming the first unknown flag or unparsable value in argv.
absl::Status CheckFlags(int argc, char** argv);

// Parses the command line (after CheckFlags) or prints the error, once per job (rank 0
// only when `print` is false elsewhere), and returns false on a usage error.
bool ParseFlagsOrExplain(int argc, char** argv, const char* program, bool print);

// True when argv asks for --help (or -h); prints the usage message and the flags defined
// in files named like `source_file` (e.g. "src/apps/trainer") to stdout when `print`.
bool WantsHelp(int argc, char** argv, const char* source_file, bool print);

}  // namespace colonnade
