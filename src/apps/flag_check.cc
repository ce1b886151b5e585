#include "apps/flag_check.h"

#include <algorithm>
#include <cstdio>

#include <iostream>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace colonnade {

absl::StatusOr<std::vector<FlagArg>> ResolveFlags(const std::vector<std::string>& args) {
  std::vector<FlagArg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (!absl::StartsWith(arg, "-")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'; flags look like --name=value"));
    }
    std::string body = arg.substr(absl::StartsWith(arg, "--") ? 2 : 1);
    std::string name = body, value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    // Abseil's built-in help and flag-file flags are handled by ParseCommandLine itself.
    if (absl::StartsWith(name, "help") || name == "version" || name == "only_check_args" ||
        name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok") {
      if (!has_value && (name == "flagfile" || name == "fromenv" || name == "tryfromenv" ||
                         name == "undefok"))
        ++i;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, "; run with --help to list the flags"));
    }
    const bool is_bool = flag->IsOfType<bool>();
    if (negated) {
      if (!is_bool || has_value) {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
      }
      out.push_back({std::string(flag->Name()), "false", flag});
      continue;
    }
    if (!has_value) {
      if (is_bool) {
        out.push_back({std::string(flag->Name()), "true", flag});
        continue;
      }
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    out.push_back({std::string(flag->Name()), value, flag});
  }
  return out;
}

absl::Status CheckFlags(int argc, char** argv) {
  absl::StatusOr<std::vector<FlagArg>> flags =
      ResolveFlags(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
  if (!flags.ok()) return flags.status();
  for (const FlagArg& f : *flags) {
    // Parse into a scratch copy of the value so the check changes nothing.
    std::string error;
    std::string saved = f.flag->CurrentValue();
    if (!f.flag->ParseFrom(f.value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad value '", f.value, "' for --", f.name, ": ", error));
    }
    f.flag->ParseFrom(saved, &error);
  }
  return absl::OkStatus();
}

bool WantsHelp(int argc, char** argv, const char* source_file, bool print) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-help" || a == "--helpshort" || a == "-h") {
      // Abseil's own --help exits with status 1; a request for help is not an error.
      if (print) {
        absl::flags_internal::SetProgramInvocationName(argv[0]);
        absl::flags_internal::FlagsHelp(std::cout, source_file,
                                        absl::flags_internal::HelpFormat::kHumanReadable,
                                        absl::ProgramUsageMessage());
      }
      return true;
    }
  }
  return false;
}

bool ParseFlagsOrExplain(int argc, char** argv, const char* program, bool print) {
  absl::Status s = CheckFlags(argc, argv);
  if (!s.ok()) {
    if (print) std::fprintf(stderr, "%s: error: %s\n", program, std::string(s.message()).c_str());
    return false;
  }
  absl::ParseCommandLine(argc, argv);
  return true;
}

}  // namespace colonnade
