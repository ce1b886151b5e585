#include "cuda/conv/catalogue.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/env.h"
#include "core/log.h"
#include "cuda/autotune.h"
#include "cuda/conv/common.h"
#include "cuda/conv/conv.h"

namespace colonnade::cuda {

// An override: groups of configurations tried in order; the first group with a member that
// runs the problem chooses among its members by its family's automatic rule. A name is one
// group (a configuration alone, or a whole family); the deprecated variables may make two.
struct ConvOverride {
  struct Group {
    ConvFamily family;
    std::vector<const ConvConfig*> members;
  };
  std::vector<Group> groups;
  std::string text = "auto";
};

namespace {

constexpr unsigned kF = ConvProblemBit(ConvProblem::kForward);
constexpr unsigned kD = ConvProblemBit(ConvProblem::kBackwardData);
constexpr unsigned kW = ConvProblemBit(ConvProblem::kBackwardFilter);

constexpr char kSimtAny[] =
    "any batch and alignment (forward, backward data: scalar loads; backward filter: float4 "
    "loads where the batch is a multiple of 4 and x, dy are 16-byte aligned)";
constexpr char kSimtVec[] = "batch a multiple of 4, tensors 16-byte aligned";
constexpr char kMmaAny[] =
    "any batch and alignment (16-byte cp.async chunks where the batch is a multiple of the "
    "chunk and the gathered operand is aligned)";
constexpr char kWgmmaNeeds[] =
    "bf16 operands in bf16 storage (backward filter: x and dy), batch a multiple of 8, 16-byte "
    "aligned; an sm_90a build on a compute capability 9.0 GPU";
constexpr char kWgmmaTmaNeeds[] =
    "as wgmma, and a 1 x 1 convolution of stride 1 without padding (the gathered operand a plain "
    "matrix); forward and backward data also any convolution at a batch that is a multiple of "
    "64";

// On the CPU emulator the automatic choice leaves wgmma off: an emulated wgmma costs 128
// fibers' scalar products, and the emulator's whole-net tests would take several times longer
// (TcWgmmaTest and COLONNADE_CONV_CONFIG=wgmma turn it on).
#if defined(COLONNADE_CUDA_EMULATE)
constexpr bool kWgmmaByDefault = false;
#else
constexpr bool kWgmmaByDefault = true;
#endif

// The most K slices of 64 for which the automatic wgmma choice of a forward or backward-data
// GEMM takes wgmma_128x128x64_3 (ChooseWgmma).
constexpr int64_t kShortKSlices = 4;
// The fewest K slices per split for which backward filter takes wgmma_128x256x64_4
// (ChooseWgmma).
constexpr int64_t kWideWgradSlices = 24;

const ConvConfig& Named(const char* name) {
  const ConvConfig* c = FindConvConfig(name);
  CHECK(c != nullptr) << "no convolution configuration " << name;
  return *c;
}

std::string KnownNames() { return absl::StrJoin(ConvConfigChoices(), ", "); }

// The override for `name`, or null when it names nothing.
std::shared_ptr<const ConvOverride> OverrideFor(absl::string_view name) {
  auto o = std::make_shared<ConvOverride>();
  o->text = std::string(name);
  if (name == "auto") return o;
  for (ConvFamily f : {ConvFamily::kMma, ConvFamily::kWgmma}) {
    if (name != ConvFamilyName(f)) continue;
    ConvOverride::Group g{f, {}};
    for (const ConvConfig& c : ConvCatalogue())
      if (c.family == f) g.members.push_back(&c);
    o->groups.push_back(std::move(g));
    return o;
  }
  const ConvConfig* c = FindConvConfig(name);
  if (c == nullptr) return nullptr;
  o->groups.push_back({c->family, {c}});
  return o;
}

// The deprecated variables (docs/OPERATIONS.md §3) as an override, each with a one-line
// warning naming its replacement; null when neither is set.
std::shared_ptr<const ConvOverride> DeprecatedOverride() {
  auto word = [](const char* name) {
    absl::StatusOr<std::optional<std::string>> v = EnvWord(name);
    CHECK(v.ok()) << v.status().message();
    return *v;
  };
  const std::optional<std::string> tile = word("COLONNADE_TC_TILE");
  const std::optional<std::string> wgmma = word("COLONNADE_TC_WGMMA");
  if (!tile && !wgmma) return nullptr;
  auto o = std::make_shared<ConvOverride>();
  std::vector<std::string> text;
  if (tile) {
    // mma.sync tiles of either math (the variable set both), or one wgmma configuration.
    static const std::map<std::string, std::vector<const char*>> kTiles = {
        {"128x128", {"mma_bf16_128x128x32_4", "mma_tf32_128x128x16_4"}},
        {"64x128", {"mma_bf16_64x128x32_4", "mma_tf32_64x128x16_4"}},
        {"128x256", {"mma_bf16_128x256x32_3", "mma_tf32_128x256x16_3"}},
        {"wg128x128", {"wgmma_128x128x64_6"}},
        {"wg64x256", {"wgmma_64x256x64_5"}},
        {"wg128x256", {"wgmma_128x256x64_4"}},
        {"wg128x128s3", {"wgmma_128x128x64_3"}},
    };
    const std::vector<const char*>& names = kTiles.at(*tile);
    ConvOverride::Group g{Named(names[0]).family, {}};
    for (const char* n : names) g.members.push_back(&Named(n));
    o->groups.push_back(std::move(g));
    LOG(WARNING) << "COLONNADE_TC_TILE=" << *tile << " is deprecated: it means " << kConvConfigEnv
                 << "=" << names[0]
                 << (names.size() > 1 ? absl::StrCat(" (tf32: ", names[1], ")") : "")
                 << " (docs/OPERATIONS.md §3)";
    text.push_back(names[0]);
  }
  if (wgmma) {
    const char* family = *wgmma == "1" ? "wgmma" : "mma";
    o->groups.push_back(OverrideFor(family)->groups[0]);
    LOG(WARNING) << "COLONNADE_TC_WGMMA=" << *wgmma << " is deprecated: it means " << kConvConfigEnv
                 << "=" << family << " (docs/OPERATIONS.md §3)";
    text.push_back(family);
  }
  o->text = absl::StrJoin(text, ",");
  return o;
}

// The override in force; the environment is read on the first call.
struct OverrideState {
  std::mutex mu;
  bool read = false;
  std::shared_ptr<const ConvOverride> current = std::make_shared<ConvOverride>();
};
OverrideState& State() {
  static OverrideState* s = new OverrideState();
  return *s;
}

std::shared_ptr<const ConvOverride> CurrentOverride() {
  OverrideState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.read) {
    s.read = true;
    absl::StatusOr<std::optional<std::string>> v = EnvWord(kConvConfigEnv);
    CHECK(v.ok()) << v.status().message();
    if (v->has_value()) {
      s.current = OverrideFor(**v);
      for (const char* old : {"COLONNADE_TC_TILE", "COLONNADE_TC_WGMMA"})
        if (std::getenv(old) != nullptr)
          LOG(WARNING) << old << " is ignored: " << kConvConfigEnv << " is set";
    } else if (std::shared_ptr<const ConvOverride> d = DeprecatedOverride()) {
      s.current = d;
    }
  }
  return s.current;
}

void SetOverride(std::shared_ptr<const ConvOverride> o) {
  OverrideState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.read = true;
  s.current = std::move(o);
}

// Registers the names as COLONNADE_CONV_CONFIG's values (core/env.h), before main, so that a
// program's start-up check (CheckEnvironment) refuses an unknown one.
const bool kEnvWordsRegistered = [] {
  SetEnvWords(kConvConfigEnv, ConvConfigChoices());
  return true;
}();

// ---- the families' automatic rules, among the candidates that run the problem ----------------

int64_t Padded(int64_t size, int64_t tile) { return CeilDiv(size, tile) * tile; }

// The row tile that pads the fewest rows of m, ties to the larger one.
int ChooseRows(int64_t m, const std::vector<const ConvConfig*>& cands) {
  std::vector<int> rows;
  for (const ConvConfig* c : cands) rows.push_back(c->bm);
  std::sort(rows.rbegin(), rows.rend());
  int best = rows[0];
  for (int bm : rows)
    if (Padded(m, bm) < Padded(m, best)) best = bm;
  return best;
}

// Times the candidates (K slices of one row tile, shallower first: the tie and the emulator's
// choice) once per shape; one autotuner per candidate set.
const ConvConfig& Race(const std::vector<const ConvConfig*>& cands, const ConvRace* race) {
  if (race == nullptr) return *cands[0];
  static std::mutex mu;
  static auto* tuners = new std::map<std::vector<const ConvConfig*>, KernelAutotuner*>();
  const std::vector<ConvConfig>& all = ConvCatalogue();
  KernelAutotuner* tuner = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    KernelAutotuner*& t = (*tuners)[cands];
    if (t == nullptr) {
      std::vector<int> ids;
      for (const ConvConfig* c : cands) ids.push_back(static_cast<int>(c - all.data()));
      t = new KernelAutotuner(nullptr, ids, ids[0]);
    }
    tuner = t;
  }
  std::vector<int> key = race->key;
  key.push_back(cands[0]->bm);
  const int id = tuner->Choose(race->stream, key, [&](int i) { race->run(all[size_t(i)]); });
  return all[size_t(id)];
}

// SIMT forward / backward data: the scalar kernel where the float4 loads do not apply (it is
// then the only candidate); else the 3-stage pipeline with the row tile that pads the fewest
// rows, the faster of its K slices (bitwise the same results).
const ConvConfig& ChooseSimtGemm(const std::vector<const ConvConfig*>& cands, const ConvGemmDesc& d,
                                 const ConvRace* race) {
  std::vector<const ConvConfig*> pipelined;
  for (const ConvConfig* c : cands)
    if (c->stages == 3) pipelined.push_back(c);
  if (!d.vec || pipelined.empty()) return *cands[0];
  const int bm = ChooseRows(d.m, pipelined);
  std::vector<const ConvConfig*> same;
  for (const ConvConfig* c : pipelined)
    if (c->bm == bm) same.push_back(c);
  std::sort(same.begin(), same.end(),
            [](const ConvConfig* a, const ConvConfig* b) { return a->bk < b->bk; });
  return same.size() == 1 ? *same[0] : Race(same, race);
}

// mma.sync: 128 x 128 or 64 x 128, whichever pads fewer rows (ties to 128 x 128); 128 x 256
// only when asked for (one block of 8 warps per multiprocessor at up to 255 registers).
const ConvConfig& ChooseMma(const std::vector<const ConvConfig*>& cands, const ConvGemmDesc& d) {
  const ConvConfig *large = nullptr, *small = nullptr;
  for (const ConvConfig* c : cands) {
    if (c->bm == 128 && c->bn == 128) large = c;
    if (c->bm == 64 && c->bn == 128) small = c;
  }
  if (large && small) return Padded(d.m, small->bm) < Padded(d.m, large->bm) ? *small : *large;
  if (large) return *large;
  if (small) return *small;
  return *cands[0];
}

// wgmma: the tile whose padded M x N area is smallest, ties to 128 x 256, then 128 x 128.
// bench_layers on an H100 (experiments/mixed_precision/results_layers/
// bench_layers_bf16_9a8f4df.log): 128 x 256 was the fastest wgmma tile on every AlexNet GEMM
// where it pads no more than the others, by 5-25%; 64 x 256 where M <= 64 (conv2's backward
// data: 0.65 ms, 128 x 128 0.90); 128 x 128 where N pads less (conv1's backward filter, N =
// 363: 0.25 ms, 128 x 256 0.29). Not 128 x 256 for a forward or backward-data GEMM whose blocks
// would leave multiprocessors idle (one block per multiprocessor; backward filter fills them
// by splitting K). A forward or backward-data GEMM of at most kShortKSlices slices of 64 (1 x 1
// convolutions of 64-256 channels) takes 128 x 128 in 3 stages (two blocks per multiprocessor)
// instead of 128 x 128 or 128 x 256: GoogLeNet +3% on an H100 (its inception reductions),
// ResNet-50 and AlexNet unchanged (experiments/mixed_precision/results_layers/
// shortk_b219d93.jsonl; TC_NOTES.md).
const ConvConfig& ChooseWgmma(const std::vector<const ConvConfig*>& cands, const ConvGemmDesc& d,
                              bool split_k) {
  if (cands.size() == 1) return *cands[0];
  auto has = [&](const char* name) -> const ConvConfig* {
    for (const ConvConfig* c : cands)
      if (absl::string_view(c->name) == name) return c;
    return nullptr;
  };
  const ConvConfig* wide = has("wgmma_128x256x64_4");
  const ConvConfig* mid = has("wgmma_128x128x64_6");
  const ConvConfig* low = has("wgmma_64x256x64_5");
  const ConvConfig* short_k = has("wgmma_128x128x64_3");
  // The output tiles (blocks, before any split of K) of configuration c.
  auto tiles = [&](const ConvConfig* c) {
    return CeilDiv(d.m, c->bm) * CeilDiv(d.n, c->bn) * d.groups;
  };
  auto area = [&](const ConvConfig* c) { return tiles(c) * c->bm * c->bn; };
  // A plain GEMM (1 x 1, stride 1, no padding) in forward or backward data runs the persistent
  // TMA tile: its blocks take output tiles in turn, so a block's epilogue overlaps the next
  // tile's loads and no wave is left part idle. bench_layers, ResNet-50 at batch 128 on an H100
  // (experiments/resnet_kernels/results/layers_resnet50_b128_ff7f372.csv), against the choice
  // below it replaced, faster in every group of the 62 plain products: 128 x 128 short K 1.419
  // -> 1.247 ms forward and 1.182 -> 0.984 backward data, 128 x 128 0.554 -> 0.440 and 0.632
  // -> 0.505, the TMA 128 x 256 0.370 -> 0.324 and 0.320 -> 0.306, 64 x 256 (M = 64) 0.281 ->
  // 0.265 and 0.503 -> 0.463: 5.26 -> 4.53 ms of the step. It loses on 3 x 3 layers (tap
  // boxes: layer1's 0.129 -> 0.182 ms), which keep the rules below. Not where the epilogue
  // reads a mask or the gradient it adds to (ConvGemmDesc::epilogue_reads): in the step on an
  // H100 (breakdown_resnet50_1d7882c.log against _ff7f372) those backward-data GEMMs, each
  // block's first 1 x 1 (layer1_1_conv1 0.376 -> 0.484 ms with its backward filter), lost
  // what the others gained: one block per multiprocessor has too few loads in flight for an
  // epilogue that reads twice what it writes, where 128 x 128 in 3 stages runs two.
  if (d.plain && !split_k && !d.epilogue_reads) {
    if (const ConvConfig* persistent = has("wgmma_tma_persistent_128x128x64_4")) return *persistent;
  }
  const ConvConfig* best = nullptr;
  for (const ConvConfig* c : {wide, mid, low}) {
    if (c == nullptr) continue;
    if (c == wide && !split_k && tiles(c) < d.sm_count) continue;
    if (best == nullptr || area(c) < area(best)) best = c;
  }
  if (!split_k && best != low && short_k && CeilDiv(d.k, 64) <= kShortKSlices) return *short_k;
  // Backward filter: 128 x 256 where its splits run at least kWideWgradSlices K slices and it
  // pads at most 1/8 more than 128 x 128; else 128 x 128. Why: per product 128 x 256 is
  // faster, but each block also fills its pipeline and writes a 128 x 256 FP32 partial tile,
  // which splits of 16-17 slices do not repay. bench_layers on an H100 (experiments/
  // resnet_kernels/results/layers_ws_fed10e4.csv, auto before -> after): VGG-16's conv2_2
  // (119 slices, 1/9 more area) 0.656 -> 0.520 ms, conv3_1 0.353 -> 0.293; ResNet-50's
  // layer3 3 x 3 (17 slices) 0.142 -> 0.123, its 1 x 1 0.074 -> 0.070. Neither side of the
  // thresholds was close in those data: 128 x 256 won at 25 slices and more (VGG-16 conv5:
  // 0.179 against 0.190) and lost at 16-17 by 5-15%; conv2_1 (1/5 more area) lost by 3%.
  // (An unsplit reduction keeps the area rule: no such shape was measured.)
  if (split_k && wide != nullptr && mid != nullptr && (best == wide || best == mid)) {
    const conv::KSplit split =
        conv::SplitReduction(tiles(wide), d.k, d.sm_count, conv::kWgradMinSlices, wide->bk);
    if (split.splits > 1) {
      const bool deep = split.ksplit / wide->bk >= kWideWgradSlices;
      best = deep && 8 * area(wide) <= 9 * area(mid) ? wide : mid;
    }
  }
  // Whole waves (forward, backward data): a grid of a few waves of 128 x 256 blocks can leave
  // most of its last wave idle where 128 x 128 blocks fill theirs. Cost = waves x block area /
  // the tile's speed, 128 x 256 being kWideSpeed times faster per product where both fill
  // their waves. bench_layers on an H100 (experiments/resnet_kernels/README.md, "Warp
  // specialization and whole waves"): VGG-16's conv5 (14 x 14, batch 64: 196 blocks of 128 x
  // 256 on 132 SMs) 0.206 -> 0.178 ms, ResNet-50's layer3 3 x 3 (batch 128) 0.106 -> 0.092.
  if (!split_k && best == wide && mid != nullptr) {
    constexpr double kWideSpeed = 1.12;
    auto cost = [&](const ConvConfig* c, double speed) {
      return double(CeilDiv(tiles(c), int64_t(std::max(1, d.sm_count)))) * c->bm * c->bn / speed;
    };
    if (cost(mid, 1.0) < cost(wide, kWideSpeed)) best = mid;
  }
  // A plain GEMM (1 x 1, stride 1, no padding) runs the TMA twin of 128 x 256, and of 128 x
  // 128 in backward filter: one loader thread issuing a box per operand and slice instead of
  // the multiplying warps computing and issuing 16-byte cp.async chunks. bench_layers, ResNet-50
  // at batch 128 on an H100 (experiments/resnet_kernels/results/layers_tma_e0cca23.log), twin
  // against the cooperative tile: 128 x 256 as fast or faster on every 1 x 1 GEMM (layer3's
  // 0.049-0.054 ms against 0.056-0.061, layer2_0_conv1 0.120 against 0.134); 128 x 128 in
  // backward filter 2-5% faster on every layer (0.065 against 0.069), in forward and backward
  // data within +-5% either way (layer1 0.203 against 0.193, layer3_0_conv1 0.111 against
  // 0.119), so not there.
  if (d.plain && best != nullptr) {
    const ConvConfig* twin = best == wide             ? has("wgmma_tma_128x256x64_4")
                             : best == mid && split_k ? has("wgmma_tma_128x128x64_6")
                                                      : nullptr;
    if (twin != nullptr) best = twin;
  }
  return best ? *best : *cands[0];
}

const ConvConfig& ChooseIn(ConvFamily f, const std::vector<const ConvConfig*>& cands, ConvProblem p,
                           const ConvGemmDesc& d, const ConvRace* race) {
  switch (f) {
    case ConvFamily::kSimt:
      if (p == ConvProblem::kBackwardFilter) {
        const int bm = ChooseRows(d.m, cands);
        for (const ConvConfig* c : cands)
          if (c->bm == bm) return *c;
      }
      return ChooseSimtGemm(cands, d, race);
    case ConvFamily::kMma:
      return ChooseMma(cands, d);
    case ConvFamily::kWgmma:
      return ChooseWgmma(cands, d, p == ConvProblem::kBackwardFilter);
  }
  return *cands[0];
}

std::vector<const ConvConfig*> Runners(ConvFamily f, ConvProblem p, const ConvGemmDesc& d) {
  std::vector<const ConvConfig*> r;
  for (const ConvConfig& c : ConvCatalogue())
    if (c.family == f && ConvConfigRuns(c, p, d)) r.push_back(&c);
  return r;
}

const ConvConfig& Select(ConvProblem p, const ConvGemmDesc& d, const ConvRace* race) {
  const std::shared_ptr<const ConvOverride> o = CurrentOverride();
  for (const ConvOverride::Group& g : o->groups) {
    std::vector<const ConvConfig*> cands;
    for (const ConvConfig* c : g.members)
      if (ConvConfigRuns(*c, p, d)) cands.push_back(c);
    if (!cands.empty()) return ChooseIn(g.family, cands, p, d, race);
  }
  if (d.math == MathMode::kFP32)
    return ChooseIn(ConvFamily::kSimt, Runners(ConvFamily::kSimt, p, d), p, d, race);
  if (kWgmmaByDefault) {
    const std::vector<const ConvConfig*> w = Runners(ConvFamily::kWgmma, p, d);
    if (!w.empty()) return ChooseIn(ConvFamily::kWgmma, w, p, d, race);
  }
  return ChooseIn(ConvFamily::kMma, Runners(ConvFamily::kMma, p, d), p, d, race);
}

}  // namespace

const char* ConvFamilyName(ConvFamily f) {
  switch (f) {
    case ConvFamily::kSimt:
      return "simt";
    case ConvFamily::kMma:
      return "mma";
    case ConvFamily::kWgmma:
      return "wgmma";
  }
  return "?";
}

const char* ConvProblemName(ConvProblem p) {
  switch (p) {
    case ConvProblem::kForward:
      return "forward";
    case ConvProblem::kBackwardData:
      return "backward data";
    case ConvProblem::kBackwardFilter:
      return "backward filter";
  }
  return "?";
}

const char* MathModeName(MathMode m) {
  switch (m) {
    case MathMode::kFP32:
      return "fp32";
    case MathMode::kTF32:
      return "tf32";
    case MathMode::kBF16:
      return "bf16";
  }
  return "?";
}

const std::vector<ConvConfig>& ConvCatalogue() {
  using F = ConvFamily;
  using M = MathMode;
  static const auto* table = new std::vector<ConvConfig>{
      // SIMT (simt.cu): 256 threads, each an (BM/16) x 8 register tile.
      {"simt_64x128x8_2", F::kSimt, M::kFP32, 64, 128, 8, 2, 2, kF | kD | kW, kSimtAny},
      {"simt_96x128x8_2", F::kSimt, M::kFP32, 96, 128, 8, 2, 2, kW, kSimtVec},
      {"simt_128x128x8_2", F::kSimt, M::kFP32, 128, 128, 8, 2, 2, kW, kSimtVec},
      {"simt_64x128x8_3", F::kSimt, M::kFP32, 64, 128, 8, 3, 2, kF | kD, kSimtVec},
      {"simt_96x128x8_3", F::kSimt, M::kFP32, 96, 128, 8, 3, 2, kF | kD, kSimtVec},
      {"simt_128x128x8_3", F::kSimt, M::kFP32, 128, 128, 8, 3, 2, kF | kD, kSimtVec},
      {"simt_64x128x16_3", F::kSimt, M::kFP32, 64, 128, 16, 3, 2, kF | kD, kSimtVec},
      {"simt_96x128x16_3", F::kSimt, M::kFP32, 96, 128, 16, 3, 2, kF | kD, kSimtVec},
      {"simt_128x128x16_3", F::kSimt, M::kFP32, 128, 128, 16, 3, 2, kF | kD, kSimtVec},
      // mma.sync (mma.cu): 8 warps; K slice 64 bytes (32 bf16 or 16 tf32 elements).
      {"mma_bf16_128x128x32_4", F::kMma, M::kBF16, 128, 128, 32, 4, 2, kF | kD | kW, kMmaAny},
      {"mma_bf16_64x128x32_4", F::kMma, M::kBF16, 64, 128, 32, 4, 2, kF | kD | kW, kMmaAny},
      {"mma_bf16_128x256x32_3", F::kMma, M::kBF16, 128, 256, 32, 3, 1, kF | kD | kW, kMmaAny},
      {"mma_tf32_128x128x16_4", F::kMma, M::kTF32, 128, 128, 16, 4, 2, kF | kD | kW, kMmaAny},
      {"mma_tf32_64x128x16_4", F::kMma, M::kTF32, 64, 128, 16, 4, 2, kF | kD | kW, kMmaAny},
      {"mma_tf32_128x256x16_3", F::kMma, M::kTF32, 128, 256, 16, 3, 1, kF | kD | kW, kMmaAny},
      // wgmma (wgmma.cu): two warpgroups, K slice 64 (one 128-byte line of bf16).
      {"wgmma_128x128x64_6", F::kWgmma, M::kBF16, 128, 128, 64, 6, 1, kF | kD | kW, kWgmmaNeeds},
      {"wgmma_64x256x64_5", F::kWgmma, M::kBF16, 64, 256, 64, 5, 1, kF | kD | kW, kWgmmaNeeds},
      {"wgmma_128x256x64_4", F::kWgmma, M::kBF16, 128, 256, 64, 4, 1, kF | kD | kW, kWgmmaNeeds},
      {"wgmma_128x128x64_3", F::kWgmma, M::kBF16, 128, 128, 64, 3, 2, kF | kD | kW, kWgmmaNeeds},
      // warp-specialized wgmma: a loader warpgroup + two multiplying ones (384 threads).
      {"wgmma_ws_128x256x64_4", F::kWgmma, M::kBF16, 128, 256, 64, 4, 1, kF | kD | kW, kWgmmaNeeds,
       true},
      {"wgmma_ws_128x128x64_6", F::kWgmma, M::kBF16, 128, 128, 64, 6, 1, kF | kD | kW, kWgmmaNeeds,
       true},
      // TMA-fed warp-specialized wgmma: one loader thread copies each slice as boxes.
      {"wgmma_tma_128x256x64_4", F::kWgmma, M::kBF16, 128, 256, 64, 4, 1, kF | kD | kW,
       kWgmmaTmaNeeds, true, true},
      {"wgmma_tma_128x128x64_6", F::kWgmma, M::kBF16, 128, 128, 64, 6, 1, kF | kD | kW,
       kWgmmaTmaNeeds, true, true},
      // Forward and backward data of M <= 64 (forced only: not yet timed).
      {"wgmma_tma_64x256x64_5", F::kWgmma, M::kBF16, 64, 256, 64, 5, 1, kF | kD, kWgmmaTmaNeeds,
       true, true},
      // Persistent TMA-fed (forward, backward data): blocks take output tiles in turn. The
      // automatic choice of plain GEMMs (ChooseWgmma); forced elsewhere.
      {"wgmma_tma_persistent_128x128x64_4", F::kWgmma, M::kBF16, 128, 128, 64, 4, 1, kF | kD,
       kWgmmaTmaNeeds, true, true, true},
  };
  return *table;
}

const ConvConfig* FindConvConfig(absl::string_view name) {
  for (const ConvConfig& c : ConvCatalogue())
    if (name == c.name) return &c;
  return nullptr;
}

std::vector<std::string> ConvConfigChoices() {
  std::vector<std::string> r = {"auto", "mma", "wgmma"};
  for (const ConvConfig& c : ConvCatalogue()) r.push_back(c.name);
  return r;
}

absl::Status SetConvConfig(absl::string_view name) {
  std::shared_ptr<const ConvOverride> o = OverrideFor(name);
  if (o == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no convolution configuration '", name, "': one of ", KnownNames()));
  }
  SetOverride(std::move(o));
  return absl::OkStatus();
}

std::string ConvConfigSetting() { return CurrentOverride()->text; }

ScopedConvConfig::ScopedConvConfig(absl::string_view name) : saved_(CurrentOverride()) {
  Set(name);
}
ScopedConvConfig::~ScopedConvConfig() { SetOverride(saved_); }
void ScopedConvConfig::Set(absl::string_view name) {
  const absl::Status s = SetConvConfig(name);
  CHECK(s.ok()) << s.message();
}

void SetConvGemmVersion(int version) {
  CHECK(version == 0 || version == 2 || version == 3)
      << "no float4 convolution GEMM version " << version;
  if (version == 0) {
    SetOverride(OverrideFor("auto"));
    return;
  }
  auto o = std::make_shared<ConvOverride>();
  ConvOverride::Group g{ConvFamily::kSimt, {}};
  for (const ConvConfig& c : ConvCatalogue())
    if (c.family == ConvFamily::kSimt && c.stages == 3 && c.bk == (version == 2 ? 8 : 16))
      g.members.push_back(&c);
  o->groups.push_back(std::move(g));
  o->text = absl::StrCat("simt_<BM>x128x", version == 2 ? 8 : 16, "_3");
  SetOverride(std::move(o));
}

bool ConvConfigRuns(const ConvConfig& c, ConvProblem p, const ConvGemmDesc& d) {
  if (!c.Runs(p) || c.math != d.math) return false;
  switch (c.family) {
    case ConvFamily::kSimt:  // the scalar kernels (BM 64, 2 stages) take any problem
      return d.vec || (c.bm == 64 && c.stages == 2);
    case ConvFamily::kMma:
      return true;
    case ConvFamily::kWgmma:
      return d.vec && d.bf16_operands &&
             (!c.tma || d.plain || (d.tap_boxes && p != ConvProblem::kBackwardFilter)) &&
             conv::WgmmaAvailable();
  }
  return false;
}

const ConvConfig& SelectForwardConfig(const ConvGemmDesc& d, const ConvRace* race) {
  return Select(ConvProblem::kForward, d, race);
}
const ConvConfig& SelectBackwardDataConfig(const ConvGemmDesc& d, const ConvRace* race) {
  return Select(ConvProblem::kBackwardData, d, race);
}
const ConvConfig& SelectBackwardFilterConfig(const ConvGemmDesc& d) {
  return Select(ConvProblem::kBackwardFilter, d, nullptr);
}

bool TcWgmmaAvailable() { return conv::WgmmaAvailable(); }

bool TcWgmmaEnabled() {
  if (!conv::WgmmaAvailable()) return false;
  for (const ConvOverride::Group& g : CurrentOverride()->groups) {
    if (g.family == ConvFamily::kWgmma) return true;
    if (g.family == ConvFamily::kMma) return false;
  }
  return kWgmmaByDefault;
}

}  // namespace colonnade::cuda
