#include "apps/cli.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "apps/exit_codes.h"
#include "apps/version.h"
#include "core/env.h"
#include "core/status_macros.h"

namespace colonnade {
namespace {

// Abseil's help flags: every one of them prints this program's help (exit 0).
bool IsHelpFlag(absl::string_view name) {
  return name == "help" || name == "helpfull" || name == "helpshort" || name == "helppackage" ||
         name == "helpon" || name == "helpmatch" || name == "h";
}

// Abseil's flags that its own ParseCommandLine handles; those of them that take a value
// take it as the next argument when it is not given with '='.
bool IsAbseilFlag(absl::string_view name, bool* takes_value) {
  *takes_value =
      name == "flagfile" || name == "fromenv" || name == "tryfromenv" || name == "undefok";
  return *takes_value || IsHelpFlag(name) || name == "version" || name == "only_check_args";
}

}  // namespace

absl::StatusOr<std::vector<FlagArg>> ResolveFlags(const std::vector<std::string>& args,
                                                  std::vector<std::string>* positional) {
  std::vector<FlagArg> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      if (positional != nullptr) {
        positional->insert(positional->end(), args.begin() + i + 1, args.end());
      }
      break;
    }
    if (positional != nullptr && (arg == "-" || !absl::StartsWith(arg, "-"))) {
      positional->push_back(arg);
      continue;
    }
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
    if (bool takes_value = false; IsAbseilFlag(name, &takes_value)) {
      if (takes_value && !has_value) ++i;
      continue;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    bool negated = false;
    if (flag == nullptr && absl::StartsWith(name, "no")) {
      flag = absl::FindCommandLineFlag(name.substr(2));
      negated = flag != nullptr;
    }
    if (flag == nullptr) return absl::NotFoundError(absl::StrCat("unknown flag --", name));
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

namespace {

// Edit distance (insertions, deletions, substitutions) of two flag names.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// "; did you mean --batch_size?" for an unknown flag close to one of the program's own
// (those defined in a file whose path contains `flags_file`), else "".
std::string Suggestion(absl::string_view unknown, const char* flags_file) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, unknown.size() / 3) + 1;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!absl::StrContains(flag->Filename(), flags_file)) continue;
    const size_t d = EditDistance(unknown, name);
    if (d < best_distance) {
      best_distance = d;
      best = std::string(name);
    }
  }
  return best.empty() ? "" : absl::StrCat("; did you mean --", best, "?");
}

// An error naming the first unknown flag or unparsable value in argv (and the first
// argument that is not a flag unless `allow_positional`). Sets no flag.
absl::Status CheckFlags(int argc, char** argv, bool allow_positional) {
  std::vector<std::string> positional;
  ASSIGN_OR_RETURN(const std::vector<FlagArg> flags,
                   ResolveFlags(std::vector<std::string>(argv + std::min(argc, 1), argv + argc),
                                allow_positional ? &positional : nullptr));
  for (const FlagArg& f : flags) {
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

// 1024 -> "1024", 0.5 -> "0.5", 1e12 -> "1e+12": integers as integers while short.
std::string FormatBound(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e10) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%g", v);
}

const FlagRange* FindRange(absl::Span<const FlagRange> ranges, absl::string_view name) {
  for (const FlagRange& r : ranges)
    if (name == r.name) return &r;
  return nullptr;
}

// "from 0 to 1024", "from 0 up to but not including 1", plus ", or -1 (the recipe's)".
std::string Describe(const FlagRange& r) {
  std::string text =
      absl::StrCat("from ", FormatBound(r.min), r.max_open ? " up to but not including " : " to ",
                   FormatBound(r.max));
  if (r.has_sentinel) {
    absl::StrAppend(&text, ", or ", FormatBound(r.sentinel), " (", r.sentinel_meaning, ")");
  }
  return text;
}

}  // namespace

std::string RangeText(absl::Span<const FlagRange> ranges, const char* name) {
  const FlagRange* r = FindRange(ranges, name);
  if (r == nullptr) return "";
  return absl::StrCat("Valid: ", Describe(*r), ".");
}

std::string RangeHelp(absl::Span<const FlagRange> ranges, const char* name, const char* help) {
  return absl::StrCat(help, " ", RangeText(ranges, name));
}

absl::Status CheckFlagRanges(absl::Span<const FlagRange> ranges) {
  for (const FlagRange& r : ranges) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(r.name);
    if (flag == nullptr) {
      return absl::InternalError(absl::StrCat("the range table names --", r.name,
                                              ", which is not a flag of this program"));
    }
    const std::string text = flag->CurrentValue();
    double v = 0;
    // SimpleAtod reads "nan" and "inf" too; those are rejected below with the rest.
    const bool parsed = absl::SimpleAtod(text, &v);
    const bool sentinel = parsed && r.has_sentinel && v == r.sentinel;
    const bool in_range =
        parsed && std::isfinite(v) && v >= r.min && (r.max_open ? v < r.max : v <= r.max);
    if (!sentinel && !in_range) {
      return absl::InvalidArgumentError(absl::StrCat("bad value '", text, "' for --", r.name,
                                                     ": must be a finite number ", Describe(r)));
    }
  }
  return absl::OkStatus();
}

namespace {

// True when argv asks for help in any of Abseil's spellings (or -h).
bool WantsHelp(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (!absl::ConsumePrefix(&a, "--")) absl::ConsumePrefix(&a, "-");
    if (IsHelpFlag(a.substr(0, a.find('=')))) return true;
  }
  return false;
}

// True when argv asks for the version (--version, -version).
bool WantsVersion(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--version" || a == "-version") return true;
  }
  return false;
}

// --help shows "src/apps/trainer.cc", not the build machine's absolute path, and only
// the program's own flags.
void ConfigureUsage(const Cli& cli) {
  absl::FlagsUsageConfig usage;
  const std::string flags_file = cli.flags_file;
  usage.contains_help_flags = [flags_file](absl::string_view file) {
    return absl::StrContains(file, flags_file);
  };
  const std::string program = cli.program;
  usage.version_string = [program] { return VersionText(program.c_str()) + "\n"; };
  usage.normalize_filename = [](absl::string_view f) {
    size_t at = f.rfind("src/apps/");
    return std::string(at == absl::string_view::npos ? f : f.substr(at));
  };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(cli.usage);
}

}  // namespace

std::string VersionText(const char* program) {
  return absl::StrCat(program, " ", COLONNADE_VERSION, " (commit ", BuildCommit(), ", ",
                      COLONNADE_BUILD_TYPE, " build, ", COLONNADE_BUILD_CUDA, ")");
}

int UsageError(const Cli& cli, absl::string_view message) {
  if (cli.style == UsageStyle::kSeeHelp) {
    std::fprintf(stderr, "%s: %s (see --help)\n", cli.program, std::string(message).c_str());
  } else {
    std::fprintf(stderr, "%s: error: %s\n", cli.program, std::string(message).c_str());
  }
  return kExitUsage;
}

std::optional<int> ParseCommandLine(int argc, char** argv, const Cli& cli, bool print,
                                    std::vector<std::string>* positional) {
  ConfigureUsage(cli);
  if (WantsHelp(argc, argv)) {
    // Abseil's own --help exits with status 1; a request for help is not an error.
    if (print && cli.print_help) {
      cli.print_help(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
    } else if (print) {
      absl::flags_internal::SetProgramInvocationName(argv[0]);
      absl::flags_internal::FlagsHelp(std::cout, cli.flags_file,
                                      absl::flags_internal::HelpFormat::kHumanReadable, cli.usage);
    }
    return kExitOk;
  }
  if (WantsVersion(argc, argv)) {
    if (print) std::cout << VersionText(cli.program) << "\n";
    return kExitOk;
  }
  absl::Status s = CheckFlags(argc, argv, cli.positional);
  if (absl::IsNotFound(s)) {
    const std::string unknown(absl::StripPrefix(s.message(), "unknown flag --"));
    s = absl::NotFoundError(
        absl::StrCat(s.message(), Suggestion(unknown, cli.flags_file),
                     cli.style == UsageStyle::kError ? "; run with --help to list the flags" : ""));
  }
  if (s.ok()) {
    std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
    if (cli.positional && positional != nullptr && !rest.empty()) {
      positional->assign(rest.begin() + 1, rest.end());
    }
    s = CheckFlagRanges(cli.ranges);
  }
  // The environment is part of the command line: a malformed COLONNADE_* value stops the
  // program here, as a bad flag does; a variable nobody reads (a typo) is a warning.
  std::vector<std::string> unknown, gone;
  if (s.ok()) s = CheckEnvironment(&unknown, &gone);
  if (s.ok()) {
    for (const std::string& note : gone) {
      if (print) std::fprintf(stderr, "%s: warning: %s\n", cli.program, note.c_str());
    }
    for (const std::string& name : unknown) {
      if (print) {
        std::fprintf(stderr,
                     "%s: warning: %s is set but is no variable Colonnade reads (a typo? "
                     "docs/OPERATIONS.md §3 lists them)\n",
                     cli.program, name.c_str());
      }
    }
    return std::nullopt;
  }
  if (print) UsageError(cli, s.message());
  return kExitUsage;
}

bool FlagGiven(int argc, char** argv, absl::string_view name) {
  std::vector<std::string> positional;
  const absl::StatusOr<std::vector<FlagArg>> flags =
      ResolveFlags(std::vector<std::string>(argv + std::min(argc, 1), argv + argc), &positional);
  if (!flags.ok()) return false;
  for (const FlagArg& f : *flags)
    if (f.name == name) return true;
  return false;
}

}  // namespace colonnade
