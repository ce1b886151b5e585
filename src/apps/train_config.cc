#include "apps/train_config.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace colonnade {
namespace {

// One closed set of flag words: each word and its enum value, in the order --help and
// error messages list them.
template <typename E>
using Words = absl::Span<const std::pair<const char*, E>>;

template <typename E>
bool ParseWord(absl::string_view text, Words<E> words, E* out, std::string* error) {
  for (const auto& [word, value] : words) {
    if (text == word) {
      *out = value;
      return true;
    }
  }
  // "must be train, eval or predict"
  *error = "must be ";
  for (size_t i = 0; i < words.size(); ++i) {
    absl::StrAppend(error, i == 0 ? "" : i + 1 == words.size() ? " or " : ", ", words[i].first);
  }
  return false;
}

template <typename E>
std::string WordOf(E value, Words<E> words) {
  for (const auto& [word, v] : words) {
    if (v == value) return word;
  }
  return absl::StrCat(static_cast<int>(value));  // not reached: the sets are complete
}

constexpr std::pair<const char*, RunMode> kModes[] = {
    {"train", RunMode::kTrain}, {"eval", RunMode::kEval}, {"predict", RunMode::kPredict}};
constexpr std::pair<const char*, DeviceChoice> kDevices[] = {
    {"cpu", DeviceChoice::kCpu}, {"cuda", DeviceChoice::kCuda}, {"auto", DeviceChoice::kAuto}};
constexpr std::pair<const char*, CommChoice> kComms[] = {
    {"auto", CommChoice::kAuto}, {"nccl", CommChoice::kNccl}, {"mpi", CommChoice::kMpi}};
constexpr std::pair<const char*, GpuAugment> kGpuAugments[] = {
    {"auto", GpuAugment::kAuto}, {"on", GpuAugment::kOn}, {"off", GpuAugment::kOff}};
constexpr std::pair<const char*, JpegDecoderChoice> kJpegDecoders[] = {
    {"auto", JpegDecoderChoice::kAuto},
    {"host", JpegDecoderChoice::kHost},
    {"nvjpeg", JpegDecoderChoice::kNvjpeg}};
constexpr std::pair<const char*, CudaGraphs> kCudaGraphs[] = {
    {"auto", CudaGraphs::kAuto}, {"on", CudaGraphs::kOn}, {"off", CudaGraphs::kOff}};
constexpr std::pair<const char*, MemoryPlanMode> kPlans[] = {{"on", MemoryPlanMode::kOn},
                                                             {"off", MemoryPlanMode::kOff}};
constexpr std::pair<const char*, EvalViews> kEvalViews[] = {
    {"1", EvalViews::kOne}, {"2", EvalViews::kTwo}, {"10", EvalViews::kTen}};
constexpr std::pair<const char*, RecomputePolicy> kRecomputes[] = {
    {"bn_relu_add", RecomputePolicy::kBatchNormReluAdd},
    {"bn_relu", RecomputePolicy::kBatchNormRelu},
    {"off", RecomputePolicy::kOff}};
constexpr std::pair<const char*, OptimizerChoice> kOptimizers[] = {
    {"sgd", OptimizerChoice::kSgd}, {"lars", OptimizerChoice::kLars}};
constexpr std::pair<const char*, EvalWeights> kEvalWeights[] = {
    {"auto", EvalWeights::kAuto}, {"ema", EvalWeights::kEma}, {"raw", EvalWeights::kRaw}};
constexpr std::pair<const char*, LrScaling> kLrScalings[] = {{"none", LrScaling::kNone},
                                                             {"linear", LrScaling::kLinear}};
constexpr std::pair<const char*, data::MeanMode> kMeans[] = {{"image", data::MeanMode::kImage},
                                                             {"channel", data::MeanMode::kChannel},
                                                             {"none", data::MeanMode::kNone}};

// One number of a range flag: a decimal or a fraction p/q, finite.
bool ParseNumber(absl::string_view text, double* v) {
  const size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return absl::SimpleAtod(text, v) && std::isfinite(*v);
  double p = 0, q = 0;
  if (!absl::SimpleAtod(text.substr(0, slash), &p) ||
      !absl::SimpleAtod(text.substr(slash + 1), &q) || q == 0) {
    return false;
  }
  *v = p / q;
  return std::isfinite(*v);
}

// A number as the shortest text that reads back to it: p/q when it is one with q <= 16 (4/3),
// else a decimal (0.08).
std::string NumberText(double v) {
  for (int q = 2; q <= 16; ++q) {
    const double p = std::nearbyint(v * q);
    if (p / q == v && std::fmod(p, q) != 0) return absl::StrFormat("%.0f/%d", p, q);
  }
  for (int precision = 1; precision <= 17; ++precision) {
    const std::string s = absl::StrFormat("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(s, &back) && back == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

// "MIN,MAX" with 0 < MIN <= MAX (<= 1 when `at_most_one`).
bool ParseRange(absl::string_view text, bool at_most_one, double* lo, double* hi,
                std::string* error) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  if (parts.size() != 2 || !ParseNumber(parts[0], lo) || !ParseNumber(parts[1], hi)) {
    *error = "must be MIN,MAX: two numbers (decimals or fractions like 3/4)";
    return false;
  }
  if (!(*lo > 0 && *lo <= *hi && (!at_most_one || *hi <= 1))) {
    *error = at_most_one ? "must satisfy 0 < MIN <= MAX <= 1" : "must satisfy 0 < MIN <= MAX";
    return false;
  }
  return true;
}

}  // namespace

bool AbslParseFlag(absl::string_view text, RrcScale* range, std::string* error) {
  return ParseRange(text, true, &range->min, &range->max, error);
}
std::string AbslUnparseFlag(RrcScale range) {
  return absl::StrCat(NumberText(range.min), ",", NumberText(range.max));
}
bool AbslParseFlag(absl::string_view text, RrcRatio* range, std::string* error) {
  return ParseRange(text, false, &range->min, &range->max, error);
}
std::string AbslUnparseFlag(RrcRatio range) {
  return absl::StrCat(NumberText(range.min), ",", NumberText(range.max));
}

bool AbslParseFlag(absl::string_view text, RunMode* mode, std::string* error) {
  return ParseWord<RunMode>(text, kModes, mode, error);
}
std::string AbslUnparseFlag(RunMode mode) { return WordOf<RunMode>(mode, kModes); }

bool AbslParseFlag(absl::string_view text, DeviceChoice* device, std::string* error) {
  return ParseWord<DeviceChoice>(text, kDevices, device, error);
}
std::string AbslUnparseFlag(DeviceChoice device) { return WordOf<DeviceChoice>(device, kDevices); }

bool AbslParseFlag(absl::string_view text, CommChoice* comm, std::string* error) {
  return ParseWord<CommChoice>(text, kComms, comm, error);
}
std::string AbslUnparseFlag(CommChoice comm) { return WordOf<CommChoice>(comm, kComms); }

bool AbslParseFlag(absl::string_view text, GpuAugment* mode, std::string* error) {
  return ParseWord<GpuAugment>(text, kGpuAugments, mode, error);
}
std::string AbslUnparseFlag(GpuAugment mode) { return WordOf<GpuAugment>(mode, kGpuAugments); }
bool AbslParseFlag(absl::string_view text, JpegDecoderChoice* mode, std::string* error) {
  return ParseWord<JpegDecoderChoice>(text, kJpegDecoders, mode, error);
}
std::string AbslUnparseFlag(JpegDecoderChoice mode) {
  return WordOf<JpegDecoderChoice>(mode, kJpegDecoders);
}
bool AbslParseFlag(absl::string_view text, CudaGraphs* mode, std::string* error) {
  return ParseWord<CudaGraphs>(text, kCudaGraphs, mode, error);
}
std::string AbslUnparseFlag(CudaGraphs mode) { return WordOf<CudaGraphs>(mode, kCudaGraphs); }
bool AbslParseFlag(absl::string_view text, MemoryPlanMode* plan, std::string* error) {
  return ParseWord<MemoryPlanMode>(text, kPlans, plan, error);
}
std::string AbslUnparseFlag(MemoryPlanMode plan) { return WordOf<MemoryPlanMode>(plan, kPlans); }
bool AbslParseFlag(absl::string_view text, EvalViews* views, std::string* error) {
  return ParseWord<EvalViews>(text, kEvalViews, views, error);
}
std::string AbslUnparseFlag(EvalViews views) { return WordOf<EvalViews>(views, kEvalViews); }
bool AbslParseFlag(absl::string_view text, RecomputePolicy* policy, std::string* error) {
  return ParseWord<RecomputePolicy>(text, kRecomputes, policy, error);
}
std::string AbslUnparseFlag(RecomputePolicy policy) {
  return WordOf<RecomputePolicy>(policy, kRecomputes);
}

bool AbslParseFlag(absl::string_view text, OptimizerChoice* choice, std::string* error) {
  return ParseWord<OptimizerChoice>(text, kOptimizers, choice, error);
}
std::string AbslUnparseFlag(OptimizerChoice choice) {
  return WordOf<OptimizerChoice>(choice, kOptimizers);
}
bool AbslParseFlag(absl::string_view text, EvalWeights* weights, std::string* error) {
  return ParseWord<EvalWeights>(text, kEvalWeights, weights, error);
}
std::string AbslUnparseFlag(EvalWeights weights) {
  return WordOf<EvalWeights>(weights, kEvalWeights);
}
bool AbslParseFlag(absl::string_view text, LrScaling* scaling, std::string* error) {
  return ParseWord<LrScaling>(text, kLrScalings, scaling, error);
}
std::string AbslUnparseFlag(LrScaling scaling) { return WordOf<LrScaling>(scaling, kLrScalings); }

namespace data {

bool AbslParseFlag(absl::string_view text, MeanMode* mean, std::string* error) {
  return ParseWord<MeanMode>(text, kMeans, mean, error);
}
std::string AbslUnparseFlag(MeanMode mean) { return WordOf<MeanMode>(mean, kMeans); }

}  // namespace data
bool TrainConfig::Given(const std::string& name) const {
  return std::find(given.begin(), given.end(), name) != given.end();
}

}  // namespace colonnade
