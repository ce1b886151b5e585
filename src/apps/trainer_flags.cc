#include "apps/trainer_flags.h"

#include <sstream>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/train_config.h"
#include "core/models.h"

namespace colonnade {

const char* FlagGroupTitle(FlagGroup g) {
  switch (g) {
    case FlagGroup::kModel:
      return "Model";
    case FlagGroup::kData:
      return "Data and augmentation";
    case FlagGroup::kOptimisation:
      return "Optimisation";
    case FlagGroup::kCheckpoints:
      return "Checkpoints, resume and modes";
    case FlagGroup::kParallel:
      return "Parallel (ranks, columns, communication)";
    case FlagGroup::kGpu:
      return "Device, precision and memory";
    case FlagGroup::kOutput:
      return "Output";
  }
  return "";
}

const std::vector<TrainerFlagSpec>& TrainerFlagSpecs() {
#define COLONNADE_SPEC(group, type, name, def, range, help) {FlagGroup::group, #name, range, help},
  static const auto* specs =
      new std::vector<TrainerFlagSpec>{COLONNADE_TRAINER_FLAGS(COLONNADE_SPEC)};
#undef COLONNADE_SPEC
  return *specs;
}

absl::Span<const FlagRange> TrainerFlagRanges() {
  static const auto* ranges = [] {
    auto* out = new std::vector<FlagRange>;
    for (const TrainerFlagSpec& f : TrainerFlagSpecs()) {
      if (!f.range.has_range) continue;
      out->push_back({f.name, f.range.min, f.range.max, f.range.max_open, f.range.recipe_sentinel,
                      -1, f.range.recipe_sentinel ? "the model's recipe" : ""});
    }
    return out;
  }();
  return *ranges;
}

std::string TrainerFlagHelp(const char* name, const char* help) {
  return RangeHelp(TrainerFlagRanges(), name, help);
}

namespace {

// `text` wrapped to lines of at most `width` characters, each indented by `indent`.
std::string Wrap(const std::string& text, int indent, int width) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && static_cast<int>(line.size() + 1 + word.size()) > width - indent) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// What a default that means "the model's" resolves to for `model`, or "".
std::string ResolvedDefault(const std::string& flag, const std::string& value, const ModelInfo& m) {
  const Recipe& r = m.recipe;
  auto note = [&](const std::string& v) { return absl::StrCat(" (", m.name, ": ", v, ")"); };
  if (flag == "batch_size" && value == "0") return note(absl::StrCat(r.batch_size));
  if (flag == "lr" && value == "-1") return note(absl::StrFormat("%g", r.lr));
  if (flag == "momentum" && value == "-1") return note(absl::StrFormat("%g", r.momentum));
  if (flag == "weight_decay" && value == "-1") return note(absl::StrFormat("%g", r.weight_decay));
  if (flag == "lr_schedule" && value.empty()) return note(r.schedule);
  if (flag == "weight_decay_on" && value.empty()) {
    return note(r.weight_decay_on == DecayOn::kAll ? "all" : "weights");
  }
  if (flag == "columns" && value == "0") return note(absl::StrCat(m.default_columns));
  return "";
}

}  // namespace

void PrintTrainerHelp(std::ostream& out, const std::string& usage, const std::string& model) {
  absl::StatusOr<const ModelInfo*> info = FindModel(model);
  out << usage
      << "\n\nFlags of trainer, by group (--help --model=NAME shows what a model's recipe "
         "makes of the defaults";
  if (info.ok()) out << "; shown here for " << model;
  out << "):\n";
  for (int g = 0; g <= static_cast<int>(FlagGroup::kOutput); ++g) {
    out << "\n" << FlagGroupTitle(static_cast<FlagGroup>(g)) << ":\n";
    for (const TrainerFlagSpec& f : TrainerFlagSpecs()) {
      if (static_cast<int>(f.group) != g) continue;
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(f.name);
      const std::string def = flag != nullptr ? flag->DefaultValue() : "";
      const bool is_text = flag != nullptr && flag->IsOfType<std::string>();
      out << "  --" << f.name << "=" << (is_text ? absl::StrCat("\"", def, "\"") : def)
          << (info.ok() ? ResolvedDefault(f.name, def, **info) : "") << "\n";
      out << Wrap(TrainerFlagHelp(f.name, f.help), 6, 90);
    }
  }
  out << "\nAlso: --version, --help. Flags take --name=value or --name value; a boolean "
         "also --name / --noname.\n";
}

}  // namespace colonnade
