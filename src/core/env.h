// The COLONNADE_* environment variables, read one way everywhere. A variable that is set
// is meant: an empty value or one with stray characters (" 5", "4x") is an error naming
// the variable, never quietly the same as unset (docs/OPERATIONS.md §3 lists them).
// Programs call CheckEnvironment() at start-up, so a typo stops them before any work;
// the readers below apply the same rules where a library reads its setting later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace colonnade {

// One known variable: an integer in [min, max], or one of `words`.
struct EnvVariable {
  const char* name;
  int64_t min = 0, max = 0;        // an integer variable when `words` is empty
  std::vector<std::string> words;  // the allowed values of a word variable
  const char* meaning = "";        // for the error: what it sets
};

// Every COLONNADE_* variable the project reads.
const std::vector<EnvVariable>& KnownEnvVariables();

// Sets the words of a word variable whose values a library outside core defines (the CUDA
// backend's COLONNADE_CONV_CONFIG: its convolution configurations). Until a library sets
// them such a variable takes any non-empty value (in a program without that library it is
// read by nobody). Call before main (a static initializer of the library), so that
// CheckEnvironment at start-up sees them.
void SetEnvWords(const char* name, std::vector<std::string> words);

// nullopt when `name` is unset; its value when it is a whole integer in [min, max]
// (digits with an optional leading '-', nothing else); InvalidArgument otherwise,
// e.g. "COLONNADE_CPU_THREADS=' 5' is not an integer from 1 to 1024: unset it or ...".
absl::StatusOr<std::optional<int64_t>> EnvInt(const char* name);
// nullopt when unset; the value when it is one of the variable's words; InvalidArgument
// otherwise (an empty value included).
absl::StatusOr<std::optional<std::string>> EnvWord(const char* name);

// Variables an earlier version read and this one does not, with what became of them.
struct RemovedEnvVariable {
  const char* name;
  const char* note;
};
const std::vector<RemovedEnvVariable>& RemovedEnvVariables();

// Every known COLONNADE_* variable that is set has a valid value (the first error), and
// `unknown` (if not null) receives the names of set COLONNADE_* variables nobody reads
// (a typo such as COLONNADE_TC_WGMA): a warning, since a variable of a newer or older
// version may be set on purpose. A removed variable that is set (RemovedEnvVariables) is no
// error and not in `unknown`: `gone` (if not null) receives a one-line note for it,
// "COLONNADE_POOL_BWD is set but gone, and ignored: ...", for a program to print as a warning.
absl::Status CheckEnvironment(std::vector<std::string>* unknown = nullptr,
                              std::vector<std::string>* gone = nullptr);

}  // namespace colonnade
