#include "core/env.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

extern char** environ;

namespace colonnade {
namespace {

// A variable set by the test scripts for the scripts themselves: any non-empty value.
EnvVariable ScriptVariable(const char* name) {
  return {name, 0, 0, {"*"}, "a test script's setting"};
}

const EnvVariable* Find(const char* name) {
  for (const EnvVariable& v : KnownEnvVariables())
    if (std::strcmp(v.name, name) == 0) return &v;
  return nullptr;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Digits with an optional leading '-': what a person means by an integer, and nothing
// that strtol or SimpleAtoi would also take (" 5", "5 ", "+5", "0x10").
bool ParseWholeInt(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 19) return false;
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return false;
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (!IsDigit(text[i])) return false;
    v = v * 10 + (text[i] - '0');
  }
  *out = text[0] == '-' ? -v : v;
  return true;
}

absl::Status Invalid(const EnvVariable& v, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError(
      absl::StrFormat("environment variable %s='%s' is not %s (%s): unset it or give a valid "
                      "value (docs/OPERATIONS.md §3)",
                      v.name, value, want, v.meaning));
}

// KnownEnvVariables(), writable for SetEnvWords.
std::vector<EnvVariable>& Registry() {
  static auto* known = new std::vector<EnvVariable>{
      {"COLONNADE_CPU_THREADS", 1, 1024, {}, "CPU-op threads of the library"},
      {"COLONNADE_MAX_IMAGE_SIDE", 1, int64_t{1} << 20, {}, "largest image side, pixels"},
      {"COLONNADE_MAX_IMAGE_PIXELS", 1, int64_t{1} << 40, {}, "largest image, pixels"},
      {"COLONNADE_SHARD_CACHE_MB", 0, int64_t{1} << 24, {}, "shard image cache, MiB; 0: off"},
      // Words set by the CUDA backend (src/cuda/conv/catalogue.cc): its configurations.
      {"COLONNADE_CONV_CONFIG", 0, 0, {"*"}, "convolution configuration"},
      // Deprecated: mapped to COLONNADE_CONV_CONFIG with a warning.
      {"COLONNADE_TC_WGMMA", 0, 0, {"0", "1"}, "wgmma convolutions off or on (deprecated)"},
      {"COLONNADE_TC_TILE",
       0,
       0,
       {"128x128", "64x128", "128x256", "wg128x128", "wg64x256", "wg128x256", "wg128x128s3"},
       "tensor-core convolution tile (deprecated)"},
      {"COLONNADE_NVJPEG_BACKEND", 0, 0, {"hardware", "gpu_hybrid"}, "nvJPEG backend"},
      {"COLONNADE_TEST_RANKS_PER_NODE", 1, 65536, {}, "test only: ranks per pretended node"},
      ScriptVariable("COLONNADE_NO_SKIP"),
      ScriptVariable("COLONNADE_SHARED_DATA"),
      ScriptVariable("COLONNADE_TEST_CUDA"),
      ScriptVariable("COLONNADE_TEST_TUNER"),
      ScriptVariable("COLONNADE_TEST_PROBE"),
      ScriptVariable("COLONNADE_TEST_MPIRUN"),
      ScriptVariable("COLONNADE_REQUIRE_SLURM"),
      ScriptVariable("COLONNADE_SLURM_CASES"),
      ScriptVariable("COLONNADE_SLURM_TEST_DEADLINE"),
      ScriptVariable("COLONNADE_BUILD_DIR"),
      ScriptVariable("COLONNADE_MAKE_SHARDS"),
      ScriptVariable("COLONNADE_SOURCE_DIR"),
  };
  return *known;
}

}  // namespace

const std::vector<EnvVariable>& KnownEnvVariables() { return Registry(); }

void SetEnvWords(const char* name, std::vector<std::string> words) {
  for (EnvVariable& v : Registry()) {
    if (std::strcmp(v.name, name) == 0 && !v.words.empty()) {
      v.words = std::move(words);
      return;
    }
  }
  std::fprintf(stderr, "SetEnvWords: %s is not a known word variable\n", name);
  std::abort();
}

absl::StatusOr<std::optional<int64_t>> EnvInt(const char* name) {
  const EnvVariable* v = Find(name);
  if (v == nullptr || !v->words.empty()) {
    return absl::InternalError(absl::StrFormat("%s is not a known integer variable", name));
  }
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<int64_t>();
  int64_t parsed = 0;
  if (!ParseWholeInt(text, &parsed) || parsed < v->min || parsed > v->max) {
    return Invalid(*v, text, absl::StrFormat("an integer from %d to %d", v->min, v->max));
  }
  return std::optional<int64_t>(parsed);
}

absl::StatusOr<std::optional<std::string>> EnvWord(const char* name) {
  const EnvVariable* v = Find(name);
  if (v == nullptr || v->words.empty()) {
    return absl::InternalError(absl::StrFormat("%s is not a known word variable", name));
  }
  const char* text = std::getenv(name);
  if (text == nullptr) return std::optional<std::string>();
  const std::string value = text;
  for (const std::string& w : v->words)
    if (value == w || (w == "*" && !value.empty())) return std::optional<std::string>(value);
  return Invalid(*v, value,
                 v->words[0] == "*" ? std::string("a non-empty value")
                                    : "one of " + absl::StrJoin(v->words, ", "));
}

const std::vector<RemovedEnvVariable>& RemovedEnvVariables() {
  static const auto* removed = new std::vector<RemovedEnvVariable>{
      {"COLONNADE_POOL_BWD",
       "max-pool backward has one version on the main path (training reads the forward's argmax "
       "record); versions 2 and 3 are compared in dev/pool_backward"},
      {"COLONNADE_LRN_POOL_FWD",
       "the LRN + max-pool fusion measured slower and left the main path (dev/lrn_pool)"},
      {"COLONNADE_CONV_GEMM",
       "the SIMT convolution versions are named configurations now: "
       "COLONNADE_CONV_CONFIG=simt_<M>x<N>x<K>_<stages> (src/cuda/README.md)"},
      {"COLONNADE_TC_SHORTK",
       "the short-K tile choice is fixed by the measurement (src/cuda/conv/catalogue.cc); "
       "COLONNADE_CONV_CONFIG=wgmma_128x128x64_3 forces that tile"},
  };
  return *removed;
}

absl::Status CheckEnvironment(std::vector<std::string>* unknown, std::vector<std::string>* gone) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!absl::StartsWith(entry, "COLONNADE_")) continue;
    const std::string name = entry.substr(0, entry.find('='));
    const auto removed = std::find_if(RemovedEnvVariables().begin(), RemovedEnvVariables().end(),
                                      [&](const RemovedEnvVariable& r) { return name == r.name; });
    if (removed != RemovedEnvVariables().end()) {
      if (gone != nullptr) {
        gone->push_back(
            absl::StrFormat("%s is set but gone, and ignored: %s", name, removed->note));
      }
      continue;
    }
    const EnvVariable* v = Find(name.c_str());
    if (v == nullptr) {
      if (unknown != nullptr) unknown->push_back(name);
      continue;
    }
    if (v->words.empty()) {
      if (absl::StatusOr<std::optional<int64_t>> r = EnvInt(v->name); !r.ok()) return r.status();
    } else if (absl::StatusOr<std::optional<std::string>> r = EnvWord(v->name); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace colonnade
