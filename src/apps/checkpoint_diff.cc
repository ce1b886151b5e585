// checkpoint_diff: compares the root attributes (training state and model options) and
// the tensors (parameters and optimizer state) of two checkpoints. Exit 0 when every
// attribute is equal and every tensor matches within --rtol (0: bitwise), 1 when they
// differ (each differing attribute and tensor is named), 2 on a usage or read error (an
// unknown flag or a --rtol out of range included: a bad flag must never read as "they
// differ"; a file that fails validation, an attribute out of range included). The
// `flags` attribute is shown when it differs but does not count: runs compared for
// equivalence differ in their command lines by design. Used by the resume and layout
// equivalence tests; handy to compare two runs. It writes no files.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "apps/cli.h"
#include "checkpoint/checkpoint.h"

namespace {

// The valid values of the numeric flags (apps/cli.h): enforced and shown by --help.
// A NaN --rtol would make every comparison pass.
const colonnade::FlagRange kRanges[] = {
    {"rtol", 0, 1e30},
};

}  // namespace

ABSL_FLAG(double, rtol, 0.0,
          colonnade::RangeHelp(kRanges, "rtol",
                               "Largest accepted ||a - b|| / ||b|| per tensor; 0 requires "
                               "bitwise equality."));
ABSL_FLAG(bool, velocity, true, "Also compare the optimizer state (momentum).");

namespace {

// Relative L2 difference, and whether the two arrays are bitwise identical.
double RelDiff(const std::vector<float>& a, const std::vector<float>& b, bool* identical) {
  double num = 0, den = 0;
  *identical = a.size() == b.size();
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) *identical = false;
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

// The root attributes of `a` and `b` that differ, one line each: "attribute /NAME
// differs: A vs B". has_optimizer_state counts only when velocities are compared.
std::vector<std::string> DifferingAttributes(const colonnade::checkpoint::Checkpoint& a,
                                             const colonnade::checkpoint::Checkpoint& b,
                                             bool velocity) {
  const colonnade::checkpoint::TrainState &x = a.state, &y = b.state;
  const std::pair<const char*, std::pair<std::string, std::string>> attrs[] = {
      {"format_version", {std::to_string(a.format_version), std::to_string(b.format_version)}},
      {"step", {std::to_string(x.step), std::to_string(y.step)}},
      {"epoch", {std::to_string(x.epoch), std::to_string(y.epoch)}},
      {"cursor_epoch", {std::to_string(x.cursor_epoch), std::to_string(y.cursor_epoch)}},
      {"cursor_position", {std::to_string(x.cursor_position), std::to_string(y.cursor_position)}},
      {"seed", {std::to_string(x.seed), std::to_string(y.seed)}},
      {"model", {x.model, y.model}},
      {"columns", {std::to_string(x.columns), std::to_string(y.columns)}},
      {"input_size", {std::to_string(x.input_size), std::to_string(y.input_size)}},
      {"num_classes", {std::to_string(x.num_classes), std::to_string(y.num_classes)}},
      {"input_channels", {std::to_string(x.input_channels), std::to_string(y.input_channels)}},
      {"has_optimizer_state",
       {std::to_string(a.has_optimizer_state), std::to_string(b.has_optimizer_state)}},
      {"has_ema", {std::to_string(a.has_ema), std::to_string(b.has_ema)}},
  };
  std::vector<std::string> out;
  for (const auto& [name, values] : attrs) {
    if (values.first == values.second) continue;
    if (!velocity && std::strcmp(name, "has_optimizer_state") == 0) continue;
    out.push_back(std::string("attribute /") + name + " differs: " + values.first + " vs " +
                  values.second);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const colonnade::Cli cli = {
      "checkpoint_diff",
      "src/apps/checkpoint_diff",
      "compares two checkpoints, their root attributes (training state, model options) and\n"
      "tensors: checkpoint_diff A.h5 B.h5 [--rtol=X] [--novelocity]\n"
      "Prints each differing attribute and tensor; the flags attribute is shown but not\n"
      "counted (compared runs may differ in their command lines).\n"
      "Exit codes: 0 same, 1 different (an attribute or a tensor), 2 usage or read error.",
      kRanges,
      colonnade::UsageStyle::kError,
      /*positional=*/true};
  std::vector<std::string> files;
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli, true, &files)) {
    return *code;
  }
  if (files.size() != 2) {
    std::fprintf(stderr, "usage: checkpoint_diff A.h5 B.h5 [--rtol=X] [--novelocity]\n");
    return 2;
  }
  const std::vector<std::string> args = {argv[0], files[0], files[1]};
  auto a = colonnade::checkpoint::Read(args[1]);
  auto b = colonnade::checkpoint::Read(args[2]);
  for (auto* r : {&a, &b}) {
    if (!r->ok()) {
      std::fprintf(stderr, "checkpoint_diff: %s\n", std::string(r->status().message()).c_str());
      return 2;
    }
  }
  const double rtol = absl::GetFlag(FLAGS_rtol);
  bool differ = false;
  for (const std::string& line : DifferingAttributes(*a, *b, absl::GetFlag(FLAGS_velocity))) {
    std::printf("%s\n", line.c_str());
    differ = true;
  }
  if (a->state.flags != b->state.flags) {
    std::printf(
        "attribute /flags differs (not counted: compared runs may differ in their "
        "command lines)\n");
  }
  if (a->tensors.size() != b->tensors.size()) {
    std::printf("tensor count differs: %zu vs %zu\n", a->tensors.size(), b->tensors.size());
    return 1;
  }
  double worst = 0;
  int identical_count = 0;
  for (const auto& ta : a->tensors) {
    const auto* tb = b->Find(ta.name);
    if (tb == nullptr || tb->shape != ta.shape) {
      std::printf("%s: missing or of another shape in %s\n", ta.name.c_str(), args[2].c_str());
      differ = true;
      continue;
    }
    bool same_v = false, same_m = true, same_e = true;
    double dv = RelDiff(ta.value, tb->value, &same_v), dm = 0;
    if (absl::GetFlag(FLAGS_velocity)) dm = RelDiff(ta.velocity, tb->velocity, &same_m);
    // The moving average (/ema) is compared whenever a file has one (has_ema differs
    // otherwise, above).
    const double de = RelDiff(ta.ema, tb->ema, &same_e);
    worst = std::max({worst, dv, dm, de});
    if (same_v && same_m && same_e) ++identical_count;
    const bool bad =
        rtol == 0 ? !(same_v && same_m && same_e) : (dv > rtol || dm > rtol || de > rtol);
    if (bad) {
      std::printf("%s: value rel diff %.3g, velocity rel diff %.3g, ema rel diff %.3g\n",
                  ta.name.c_str(), dv, dm, de);
      differ = true;
    }
  }
  std::printf("%s: %d/%zu tensors bitwise identical, largest relative difference %.3g (rtol %g)\n",
              differ ? "DIFFERENT" : "same", identical_count, a->tensors.size(), worst, rtol);
  return differ ? 1 : 0;
}
