// Command-line handling shared by the data tools (make_shards, bench_data).
//
// Flags are absl flags, parsed strictly: `--help` prints the usage and every flag of the
// tool (name, default, help) and exits 0; an unknown flag, a malformed value or a
// positional argument prints one line "<tool>: <reason> (see --help)" and exits 2.
#pragma once

#include <string>

namespace colonnade::data {

// `flag_file_substring` selects the tool's own flags for --help (e.g. "make_shards.cc").
void ParseToolFlags(int argc, char** argv, const std::string& usage,
                    const std::string& flag_file_substring);

// Prints "<tool>: <message> (see --help)" to stderr and exits with status 2.
[[noreturn]] void FlagError(const std::string& message);

}  // namespace colonnade::data
