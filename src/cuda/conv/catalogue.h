// The catalogue of convolution kernel configurations: every configuration of the three
// families, named as CUTLASS names its kernels, by block tile and pipeline depth:
//
//   <family>[_<math>][_ws|_tma|_tma_persistent]_<BM>x<BN>x<BK>_<stages>   e.g. simt_128x128x16_3,
//                                                   mma_bf16_64x128x32_4, wgmma_128x256x64_4,
//                                                   wgmma_ws_128x256x64_4, wgmma_tma_128x256x64_4
//
// BM x BN is the block's tile of the GEMM's output (rows: filters, or input channels in
// backward data; columns: output pixels x images), BK the K slice (elements) one pipeline
// stage holds, stages the depth of the shared-memory pipeline. The mma family names its math
// because its K slice depends on it (64 bytes: 32 bf16 or 16 tf32 elements); SIMT is FP32 and
// wgmma bf16 only. `_ws`: warp-specialized (a loader warpgroup and two multiplying ones).
// `_tma`: warp-specialized with the loader's operands copied by TMA, for GEMMs whose gathered
// operand is a plain matrix (1 x 1 convolutions of stride 1 without padding);
// `_tma_persistent`: the same with blocks that stay and take output tiles in turn.
// `ConvCatalogue()` is the table: name, family, math, shape, the problems (forward, backward data,
// backward filter) each configuration runs and what a problem needs for it;
// tests/cuda/conv_catalogue_test.cc checks every name against its kernel's constants.
//
// Selection: one function per problem picks the configuration of a launch. The automatic
// choice (the same as before the catalogue): SIMT forward / backward data the row tile that
// pads the fewest rows, then the faster K slice, timed on the first call of each shape
// (autotune.h; the results are bitwise the same); SIMT backward filter the row tile that pads
// the fewest rows; mma.sync 128 x 128 or 64 x 128, whichever pads fewer rows; wgmma (on a
// Hopper GPU, where it applies) the tile of the smallest padded area, 128 x 128 instead of
// 128 x 256 where its whole waves cost less, 128 x 128 in 3 stages for forward and
// backward-data GEMMs of at most 4 K slices, the TMA twin of the tile where the GEMM is plain,
// never the cp.async warp-specialized ones (ChooseWgmma in catalogue.cc says what was
// measured).
//
// Override: COLONNADE_CONV_CONFIG=<name> (read on first use; SetConvConfig in tests and
// benchmarks): every convolution that configuration runs runs on it, the others are chosen
// automatically. Besides the names: `mma` (the automatic choice without wgmma), `wgmma` (the
// automatic choice with wgmma where it applies; the CPU emulator's default leaves it off),
// `auto`. An unknown name is an error that lists the known ones.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

enum class ConvFamily { kSimt, kMma, kWgmma };
enum class ConvProblem { kForward, kBackwardData, kBackwardFilter };
const char* ConvFamilyName(ConvFamily f);    // "simt", "mma", "wgmma"
const char* ConvProblemName(ConvProblem p);  // "forward", "backward data", "backward filter"

// The bit of a problem in ConvConfig::problems.
constexpr unsigned ConvProblemBit(ConvProblem p) { return 1u << static_cast<int>(p); }

struct ConvConfig {
  const char* name;
  ConvFamily family;
  MathMode math;      // SIMT kFP32, mma kBF16 or kTF32, wgmma kBF16
  int bm, bn, bk;     // block tile of the output, K slice per pipeline stage (elements)
  int stages;         // shared-memory pipeline depth
  int blocks_per_sm;  // blocks per multiprocessor the kernel's registers are bounded for
  unsigned problems;  // ConvProblemBit of each problem it runs
  const char* needs;  // what a problem needs beyond the math (documentation, --help)
  // wgmma only: a loader warpgroup feeds the two multiplying ones through mbarriers
  // (wgmma.cu, WsProduce / WsConsume); named wgmma_ws_...
  bool warp_specialized = false;
  // wgmma only, warp-specialized: the loader copies by TMA (plain GEMMs only); wgmma_tma_...
  bool tma = false;
  // TMA, forward and backward data: blocks stay and take tiles in turn, the loader filling
  // the next tile's stages while the multiplying warpgroups store this one;
  // wgmma_tma_persistent_...
  bool persistent = false;

  bool Runs(ConvProblem p) const { return (problems & ConvProblemBit(p)) != 0; }
};

// Every configuration, each name once.
const std::vector<ConvConfig>& ConvCatalogue();
// The configuration called `name`, or null.
const ConvConfig* FindConvConfig(absl::string_view name);
// Every value COLONNADE_CONV_CONFIG takes: auto, mma, wgmma, then each configuration's name.
std::vector<std::string> ConvConfigChoices();

inline constexpr char kConvConfigEnv[] = "COLONNADE_CONV_CONFIG";

// Overrides the automatic choice with `name` (one of ConvConfigChoices(); "auto" restores
// it), in place of the environment's COLONNADE_CONV_CONFIG. InvalidArgument listing the
// known names otherwise.
absl::Status SetConvConfig(absl::string_view name);
// The override in force, as set: "auto" when there is none.
std::string ConvConfigSetting();

// An override in force (opaque): ScopedConvConfig saves and restores it.
struct ConvOverride;
// Sets the override for its lifetime and restores the one before it afterwards (tests,
// benchmarks). An unknown name is a fatal error (a test's or a program's own mistake).
class ScopedConvConfig {
 public:
  explicit ScopedConvConfig(absl::string_view name);
  ~ScopedConvConfig();
  ScopedConvConfig(const ScopedConvConfig&) = delete;
  ScopedConvConfig& operator=(const ScopedConvConfig&) = delete;
  void Set(absl::string_view name);  // another one, the first still restored at the end

 private:
  std::shared_ptr<const ConvOverride> saved_;
};

// One implicit GEMM of a convolution as the selection sees it.
struct ConvGemmDesc {
  MathMode math = MathMode::kFP32;  // kFP32: the SIMT family; kTF32 / kBF16: the tensor cores
  int64_t m = 0, n = 0, k = 0;      // per group: output rows, output columns, reduction length
  int64_t groups = 1;
  int sm_count = 1;
  // The vector loads apply. SIMT: batch a multiple of 4 and every tensor 16-byte aligned;
  // tensor cores: batch a multiple of the 16-byte chunk (8 bf16, 4 tf32) and the gathered
  // operand (backward filter: x and dy) 16-byte aligned.
  bool vec = false;
  bool bf16_operands = false;  // tensor cores: the activation operands are stored in bf16
  // The gathered operand is a plain matrix per group (a 1 x 1 convolution of stride 1 without
  // padding; forward and backward data: the output columns plain too): every K slice of it is
  // a tile of a 2-D matrix, which a TMA configuration copies as a box.
  bool plain = false;
  // Forward and backward data, not plain: the batch is a multiple of 64, so that 64 columns
  // are 64 images of one pixel and a TMA configuration can copy each K slice of one tap as
  // boxes of the activations (forced only: not timed yet).
  bool tap_boxes = false;
  // Backward data: the epilogue also reads memory of dx's size (the ReLU mask, or the gradient
  // it adds to: TcConvArgs::dx_mask / dx_add), so that the store, not the product, bounds it.
  bool epilogue_reads = false;
};

// How a selection times candidates (SIMT forward and backward data race their K slices on the
// first call of a shape): run(c) queues configuration c on `stream`; `key` tells shapes apart.
struct ConvRace {
  cudaStream_t stream = nullptr;
  std::vector<int> key;
  std::function<void(const ConvConfig&)> run;
};

// Whether configuration c runs problem p of this GEMM (math, problem, the loads it needs).
bool ConvConfigRuns(const ConvConfig& c, ConvProblem p, const ConvGemmDesc& d);

// The configuration of one launch: the override where it applies, else the automatic choice.
// Without `race` a choice that would be timed takes its first candidate (as on the emulator).
const ConvConfig& SelectForwardConfig(const ConvGemmDesc& d, const ConvRace* race = nullptr);
const ConvConfig& SelectBackwardDataConfig(const ConvGemmDesc& d, const ConvRace* race = nullptr);
const ConvConfig& SelectBackwardFilterConfig(const ConvGemmDesc& d);

}  // namespace colonnade::cuda
