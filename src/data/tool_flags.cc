#include "data/tool_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace colonnade::data {
namespace {
std::string g_tool = "tool";
}  // namespace

void FlagError(const std::string& message) {
  std::fprintf(stderr, "%s: %s (see --help)\n", g_tool.c_str(), message.c_str());
  std::exit(2);
}

void ParseToolFlags(int argc, char** argv, const std::string& usage,
                    const std::string& flag_file_substring) {
  if (argc > 0) {
    std::string a0 = argv[0];
    size_t slash = a0.find_last_of('/');
    g_tool = slash == std::string::npos ? a0 : a0.substr(slash + 1);
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-help" || arg == "-h" || arg == "--helpfull") {
      std::printf("%s\n\nFlags:\n", usage.c_str());
      std::vector<absl::CommandLineFlag*> flags;
      for (const auto& kv : absl::GetAllFlags()) {
        if (absl::StrContains(kv.second->Filename(), flag_file_substring)) {
          flags.push_back(kv.second);
        }
      }
      std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
      for (absl::CommandLineFlag* f : flags) {
        std::printf("  --%s (default: %s)\n      %s\n", std::string(f->Name()).c_str(),
                    f->DefaultValue().empty() ? "\"\"" : f->DefaultValue().c_str(),
                    f->Help().c_str());
      }
      std::exit(0);
    }
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') FlagError(absl::StrCat("unexpected argument '", arg, "'"));
    std::string body = arg.substr(arg[1] == '-' ? 2 : 1);
    std::string name = body, value;
    bool has_value = false;
    size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if ((flag == nullptr || !absl::StrContains(flag->Filename(), flag_file_substring)) &&
        absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* f2 = absl::FindCommandLineFlag(name.substr(2));
      if (f2 != nullptr && f2->IsOfType<bool>() && !has_value) {
        flag = f2;
        negated = true;
      }
    }
    // Only the tool's own flags are accepted (not absl's internal ones).
    if (flag == nullptr || !absl::StrContains(flag->Filename(), flag_file_substring)) {
      FlagError(absl::StrCat("unknown flag --", name));
    }
    if (negated) {
      value = "false";
    } else if (!has_value) {
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        FlagError(absl::StrCat("flag --", name, " needs a value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      FlagError(absl::StrCat("bad value '", value, "' for --", name, ": ", error));
    }
  }
}

}  // namespace colonnade::data
