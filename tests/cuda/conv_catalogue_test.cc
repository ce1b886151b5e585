// The convolution catalogue (src/cuda/conv/catalogue.h): every configuration's name says its
// family, math, block tile, K slice and stages, each name once; the override
// (COLONNADE_CONV_CONFIG, SetConvConfig) refuses an unknown name with the list of the known
// ones, maps the deprecated variables with a warning, and reaches every configuration of every
// family (each one forced runs where it is asked for, reports its name and matches the CPU);
// the automatic choice per problem is the one the dispatch made before the catalogue.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/backend.h"
#include "core/cpu_ops.h"
#include "core/env.h"
#include "cuda/conv/catalogue.h"
#include "cuda/conv/conv.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"
#include "gtest/gtest.h"
#include "gpu_test.h"

namespace colonnade {
namespace {

using cuda::ConvConfig;
using cuda::ConvFamily;
using cuda::ConvProblem;
using cuda::MathMode;
using cuda::StorageType;

// <family>[_<math>][_ws|_tma|_tma_persistent]_<BM>x<BN>x<BK>_<stages>, from the entry's fields.
std::string NameOf(const ConvConfig& c) {
  const std::string math =
      c.family == ConvFamily::kMma ? absl::StrCat("_", cuda::MathModeName(c.math)) : "";
  const char* loader = c.persistent         ? "_tma_persistent"
                       : c.tma              ? "_tma"
                       : c.warp_specialized ? "_ws"
                                            : "";
  return absl::StrFormat("%s%s%s_%dx%dx%d_%d", cuda::ConvFamilyName(c.family), math, loader, c.bm,
                         c.bn, c.bk, c.stages);
}

TEST(ConvCatalogueTest, NamesAreUniqueAndSayTheShape) {
  std::set<std::string> names;
  for (const ConvConfig& c : cuda::ConvCatalogue()) {
    EXPECT_TRUE(names.insert(c.name).second) << "two configurations named " << c.name;
    EXPECT_EQ(c.name, NameOf(c)) << "the name does not say the configuration's shape";
    EXPECT_EQ(cuda::FindConvConfig(c.name), &c) << c.name;
    EXPECT_NE(c.problems, 0u) << c.name << " runs no problem";
    switch (c.family) {
      case ConvFamily::kSimt:
        EXPECT_EQ(c.math, MathMode::kFP32) << c.name;
        break;
      case ConvFamily::kMma:  // a K slice of 64 bytes
        EXPECT_EQ(c.bk, c.math == MathMode::kBF16 ? 32 : 16) << c.name;
        EXPECT_NE(c.math, MathMode::kFP32) << c.name;
        break;
      case ConvFamily::kWgmma:  // one 128-byte line of bf16
        EXPECT_EQ(c.math, MathMode::kBF16) << c.name;
        EXPECT_EQ(c.bk, 64) << c.name;
        break;
    }
    if (c.warp_specialized) {  // the loader takes registers the kernel must own alone
      EXPECT_EQ(c.family, ConvFamily::kWgmma) << c.name;
      EXPECT_EQ(c.blocks_per_sm, 1) << c.name;
    }
    if (c.tma) EXPECT_TRUE(c.warp_specialized) << c.name << ": TMA feeds the loader warpgroup";
    if (c.persistent) EXPECT_TRUE(c.tma) << c.name << ": the persistent kernel is TMA-fed";
  }
  // Every problem has a configuration in every family of its math, and every family is there.
  for (ConvFamily f : {ConvFamily::kSimt, ConvFamily::kMma, ConvFamily::kWgmma}) {
    for (ConvProblem p :
         {ConvProblem::kForward, ConvProblem::kBackwardData, ConvProblem::kBackwardFilter}) {
      bool found = false;
      for (const ConvConfig& c : cuda::ConvCatalogue()) found |= c.family == f && c.Runs(p);
      EXPECT_TRUE(found) << cuda::ConvFamilyName(f) << " has nothing for "
                         << cuda::ConvProblemName(p);
    }
  }
  // The override's values: auto, the families that have an automatic choice of their own,
  // then each configuration once.
  const std::vector<std::string> choices = cuda::ConvConfigChoices();
  EXPECT_EQ(std::set<std::string>(choices.begin(), choices.end()).size(), choices.size());
  EXPECT_EQ(choices.size(), cuda::ConvCatalogue().size() + 3);
  EXPECT_EQ(cuda::FindConvConfig("simt_64x64x8_3"), nullptr);
}

TEST(ConvCatalogueTest, AnUnknownNameIsAnErrorListingTheKnownOnes) {
  const std::string before = cuda::ConvConfigSetting();
  const absl::Status s = cuda::SetConvConfig("wgmma_256x256x64_4");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& name : cuda::ConvConfigChoices())
    EXPECT_NE(s.message().find(name), std::string::npos) << name << " not listed: " << s;
  EXPECT_EQ(cuda::ConvConfigSetting(), before) << "a refused name changed the override";
  // The environment variable, as a program checks it at start-up (core/env.h).
  setenv(cuda::kConvConfigEnv, "mma_bf16_128x128x16_4", 1);
  const absl::Status env = CheckEnvironment();
  absl::StatusOr<std::optional<std::string>> word = EnvWord(cuda::kConvConfigEnv);
  unsetenv(cuda::kConvConfigEnv);
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.message().find("COLONNADE_CONV_CONFIG='mma_bf16_128x128x16_4'"), std::string::npos)
      << env;
  for (const std::string& name : cuda::ConvConfigChoices())
    EXPECT_NE(env.message().find(name), std::string::npos) << name << " not listed: " << env;
  EXPECT_FALSE(word.ok());
  for (const std::string& name : cuda::ConvConfigChoices()) {
    setenv(cuda::kConvConfigEnv, name.c_str(), 1);
    EXPECT_TRUE(CheckEnvironment().ok()) << name;
    unsetenv(cuda::kConvConfigEnv);
  }
}

// The deprecated variables of docs/OPERATIONS.md §3 each in a fresh process (the environment
// is read once per process): a one-line warning that names the replacement, and that
// override in force.
TEST(ConvCatalogueDeathTest, DeprecatedVariablesWarnAndMapToNames) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  struct Case {
    std::vector<std::pair<const char*, const char*>> env;
    const char* setting;
    const char* warning;
  };
  const Case cases[] = {
      {{{"COLONNADE_TC_WGMMA", "0"}},
       "mma",
       "COLONNADE_TC_WGMMA=0 is deprecated: it means COLONNADE_CONV_CONFIG=mma"},
      {{{"COLONNADE_TC_WGMMA", "1"}},
       "wgmma",
       "COLONNADE_TC_WGMMA=1 is deprecated: it means COLONNADE_CONV_CONFIG=wgmma"},
      {{{"COLONNADE_TC_TILE", "wg128x256"}},
       "wgmma_128x256x64_4",
       "COLONNADE_TC_TILE=wg128x256 is deprecated: it means "
       "COLONNADE_CONV_CONFIG=wgmma_128x256x64_4"},
      {{{"COLONNADE_TC_TILE", "64x128"}, {"COLONNADE_TC_WGMMA", "1"}},
       "mma_bf16_64x128x32_4,wgmma",
       "COLONNADE_CONV_CONFIG=mma_bf16_64x128x32_4 \\(tf32: mma_tf32_64x128x16_4\\)"},
      {{{"COLONNADE_CONV_CONFIG", "simt_96x128x16_3"}, {"COLONNADE_TC_WGMMA", "0"}},
       "simt_96x128x16_3",
       "COLONNADE_TC_WGMMA is ignored: COLONNADE_CONV_CONFIG is set"},
  };
  for (const Case& k : cases) {
    EXPECT_EXIT(
        {
          for (const auto& [name, value] : k.env) setenv(name, value, 1);
          std::exit(cuda::ConvConfigSetting() == k.setting ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), k.warning)
        << k.setting;
  }
}

// The automatic choice of each family on the GEMMs that decided it before the catalogue
// (no timing here: the SIMT race's first candidate, the 8-deep slice, as on the emulator).
TEST(ConvCatalogueTest, AutomaticChoicesAsBefore) {
  auto desc = [](MathMode math, int64_t m, int64_t n, int64_t k, bool vec, bool bf16) {
    cuda::ConvGemmDesc d;
    d.math = math;
    d.m = m;
    d.n = n;
    d.k = k;
    d.groups = 1;
    d.sm_count = 132;
    d.vec = vec;
    d.bf16_operands = bf16;
    return d;
  };
  const cuda::ScopedConvConfig automatic("auto");
  struct Case {
    cuda::ConvGemmDesc d;
    const char* forward;  // = backward data
    const char* backward_filter;
  };
  const MathMode fp32 = MathMode::kFP32, bf16 = MathMode::kBF16, tf32 = MathMode::kTF32;
  const Case fp32_cases[] = {
      // The row tile that pads the fewest rows, ties to the larger; scalar loads: 64 rows.
      {desc(fp32, 48, 4096, 1200, true, false), "simt_64x128x8_3", "simt_64x128x8_2"},
      {desc(fp32, 96, 4096, 363, true, false), "simt_96x128x8_3", "simt_96x128x8_2"},
      {desc(fp32, 192, 4096, 1728, true, false), "simt_96x128x8_3", "simt_96x128x8_2"},
      {desc(fp32, 256, 4096, 1728, true, false), "simt_128x128x8_3", "simt_128x128x8_2"},
      {desc(fp32, 256, 4096, 1728, false, false), "simt_64x128x8_2", "simt_64x128x8_2"},
      // mma.sync: 64 x 128 where it pads fewer rows than 128 x 128, else 128 x 128.
      {desc(bf16, 48, 4096, 1200, true, false), "mma_bf16_64x128x32_4", "mma_bf16_64x128x32_4"},
      {desc(bf16, 96, 4096, 363, true, false), "mma_bf16_128x128x32_4", "mma_bf16_128x128x32_4"},
      {desc(bf16, 192, 4096, 1728, false, true), "mma_bf16_64x128x32_4", "mma_bf16_64x128x32_4"},
      {desc(tf32, 384, 4096, 2304, true, false), "mma_tf32_128x128x16_4", "mma_tf32_128x128x16_4"},
  };
  for (const Case& k : fp32_cases) {
    EXPECT_STREQ(cuda::SelectForwardConfig(k.d).name, k.forward) << k.d.m;
    EXPECT_STREQ(cuda::SelectBackwardDataConfig(k.d).name, k.forward) << k.d.m;
    EXPECT_STREQ(cuda::SelectBackwardFilterConfig(k.d).name, k.backward_filter) << k.d.m;
  }
  if (!cuda::TcWgmmaAvailable()) return;  // a GPU build without sm_90a, or no 9.0 device
  // wgmma (asked for: the emulator's default leaves it off): the smallest padded area, ties to
  // 128 x 256, then 128 x 128; 128 x 256 not where its blocks leave SMs idle or fill fewer
  // whole waves than 128 x 128's (forward, backward data), nor where a split backward filter's
  // splits are short or it pads much more; 128 x 128 in 3 stages for at most 4 K slices (not
  // backward filter); never the warp-specialized ones.
  const cuda::ScopedConvConfig wgmma("wgmma");
  const Case wgmma_cases[] = {
      {desc(bf16, 128, 204800, 1200, true, true), "wgmma_128x256x64_4", "wgmma_128x256x64_4"},
      {desc(bf16, 48, 204800, 1200, true, true), "wgmma_64x256x64_5", "wgmma_64x256x64_5"},
      {desc(bf16, 384, 363, 200000, true, true), "wgmma_128x128x64_6", "wgmma_128x128x64_6"},
      {desc(bf16, 128, 8192, 1200, true, true), "wgmma_128x128x64_6", "wgmma_128x256x64_4"},
      {desc(bf16, 256, 204800, 256, true, true), "wgmma_128x128x64_3", "wgmma_128x256x64_4"},
      {desc(bf16, 48, 204800, 256, true, true), "wgmma_64x256x64_5", "wgmma_64x256x64_5"},
      // Whole waves: ResNet-50's layer3 3 x 3 at batch 128 (196 blocks of 128 x 256 on 132
      // SMs: 128 x 128's three full waves cost less than 128 x 256's two, the second mostly
      // idle); its layer2 (392 blocks, three nearly full waves) stays 128 x 256.
      // (As a backward filter, the first splits its 2304 into two of 18 slices: 128 x 128,
      // below.)
      {desc(bf16, 256, 25088, 2304, true, true), "wgmma_128x128x64_6", "wgmma_128x128x64_6"},
      {desc(bf16, 128, 100352, 1152, true, true), "wgmma_128x256x64_4", "wgmma_128x256x64_4"},
      // Backward filter of split reductions: 128 x 256 where its splits run at least 24 slices
      // and it pads at most 1/8 more: VGG-16's conv2_2 at batch 64 (119 slices, 1/9 more);
      // not ResNet-50's layer3 3 x 3 at batch 128 (17 slices) nor VGG-16's conv2_1 (1/5 more).
      {desc(bf16, 128, 1152, 802816, true, true), "wgmma_128x128x64_6", "wgmma_128x256x64_4"},
      {desc(bf16, 256, 2304, 25088, true, true), "wgmma_128x128x64_6", "wgmma_128x128x64_6"},
      {desc(bf16, 128, 576, 802816, true, true), "wgmma_128x128x64_6", "wgmma_128x128x64_6"},
      // Not eligible: mma.sync.
      {desc(bf16, 128, 204800, 1200, false, true), "mma_bf16_128x128x32_4",
       "mma_bf16_128x128x32_4"},
      {desc(bf16, 128, 204800, 1200, true, false), "mma_bf16_128x128x32_4",
       "mma_bf16_128x128x32_4"},
  };
  for (const Case& k : wgmma_cases) {
    const std::string what = absl::StrFormat("M %d N %d K %d", k.d.m, k.d.n, k.d.k);
    EXPECT_STREQ(cuda::SelectForwardConfig(k.d).name, k.forward) << what;
    EXPECT_STREQ(cuda::SelectBackwardDataConfig(k.d).name, k.forward) << what;
    EXPECT_STREQ(cuda::SelectBackwardFilterConfig(k.d).name, k.backward_filter) << what;
  }
  // Plain GEMMs (1 x 1, stride 1, no padding): the persistent TMA tile in forward and backward
  // data whatever the shape; in backward filter the TMA twin of 128 x 256 or of 128 x 128, the
  // other tiles as they were. ResNet-50 at batch 128: layer2's conv1 (M 128, N 100352, K 512),
  // layer3's (M 256, N 25088, K 1024), layer1's conv3 (M 256, K 64) and its conv1 (M 64); the
  // last, layer3's conv1 as a backward filter (M 256, N 1024, K 25088: split, 128 x 128).
  constexpr const char* kPersistent = "wgmma_tma_persistent_128x128x64_4";
  auto plain = [&](int64_t m, int64_t n, int64_t k) {
    cuda::ConvGemmDesc d = desc(bf16, m, n, k, true, true);
    d.plain = true;
    return d;
  };
  const Case plain_cases[] = {
      {plain(128, 100352, 512), kPersistent, "wgmma_tma_128x256x64_4"},
      {plain(256, 25088, 1024), kPersistent, "wgmma_tma_128x256x64_4"},
      {plain(256, 401408, 64), kPersistent, "wgmma_tma_128x256x64_4"},
      {plain(256, 1024, 25088), kPersistent, "wgmma_tma_128x128x64_6"},
      {plain(64, 401408, 256), kPersistent, "wgmma_64x256x64_5"},
  };
  for (const Case& k : plain_cases) {
    const std::string what = absl::StrFormat("plain M %d N %d K %d", k.d.m, k.d.n, k.d.k);
    EXPECT_STREQ(cuda::SelectForwardConfig(k.d).name, k.forward) << what;
    EXPECT_STREQ(cuda::SelectBackwardDataConfig(k.d).name, k.forward) << what;
    EXPECT_STREQ(cuda::SelectBackwardFilterConfig(k.d).name, k.backward_filter) << what;
  }
  // Not where backward data's epilogue reads a mask or the gradient it adds to: the rules
  // before it. ResNet-50 at batch 128, the backward data of a block's first 1 x 1: layer1's
  // (M 256, K 64) and layer2's (M 512, K 128) short K, layer4's (M 2048, K 512).
  const std::pair<cuda::ConvGemmDesc, const char*> reading_cases[] = {
      {plain(256, 401408, 64), "wgmma_128x128x64_3"},
      {plain(512, 100352, 128), "wgmma_128x128x64_3"},
      {plain(2048, 6272, 512), "wgmma_128x128x64_6"},
  };
  for (auto [d, want] : reading_cases) {
    const std::string what = absl::StrFormat("plain M %d N %d K %d", d.m, d.n, d.k);
    EXPECT_STREQ(cuda::SelectBackwardDataConfig(d).name, kPersistent) << what;
    d.epilogue_reads = true;
    EXPECT_STREQ(cuda::SelectBackwardDataConfig(d).name, want) << what << ", epilogue reads";
  }
  // A configuration forced runs wherever it can; elsewhere the automatic choice does (which
  // on the emulator leaves wgmma off).
  const cuda::ScopedConvConfig forced("mma_tf32_64x128x16_4");
  EXPECT_STREQ(cuda::SelectForwardConfig(wgmma_cases[0].d).name,
               kEmulated ? "mma_bf16_128x128x32_4" : "wgmma_128x256x64_4");
  EXPECT_STREQ(cuda::SelectForwardConfig(fp32_cases[8].d).name, "mma_tf32_64x128x16_4");
}

// The override reaches every configuration of every family: each one forced runs each problem
// it has (a batch of 8, aligned: every kind of load applies), says so in its launch info and
// matches the CPU; the SIMT configurations, and the mma.sync ones of one math, agree with
// each other bit for bit in forward and backward data (each output sums its K slices in the
// same order whatever the tile).
class ConvOverrideTest : public GpuTest {
 protected:
  static cuda::CudaOps& Ops() { return dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)); }
};

// One convolution of the test below, its operands and the CPU's results.
struct OverrideProblem {
  ConvParams p;
  cuda::ConvDims d;
  Shape xs, ys, ws;
  Tensor x, w, dy;
  std::vector<float> ref[3];  // y, dx, dw
};

// The convolutions: 3 x 3 / 2 with padding for every configuration, and (the TMA
// configurations run only plain GEMMs) a 1 x 1 of stride 1 with 24 input channels and 40
// filters over 200 columns, so that the TMA boxes cross every edge of the tensors.
TEST_F(ConvOverrideTest, ReachesEveryConfiguration) {
  auto make = [](int kernel, int pad, int stride, const cuda::ConvDims& d) {
    OverrideProblem q;
    q.p.kernel_h = q.p.kernel_w = kernel;
    q.p.pad = pad;
    q.p.stride = stride;
    q.d = d;
    q.xs = Shape{d.c, d.h, d.w, d.n};
    q.ys = Shape{d.f, d.oh, d.ow, d.n};
    q.ws = Shape{d.f, d.c, kernel, kernel};
    return q;
  };
  OverrideProblem problems[2] = {make(3, 1, 2, cuda::ConvDims{8, 8, 9, 9, 24, 5, 5}),
                                 make(1, 0, 1, cuda::ConvDims{8, 24, 5, 5, 40, 5, 5})};
  // bf16-representable values, so that every math sees the same operands as the CPU.
  auto random = [](const Shape& s, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Tensor t(s, Device::kCPU);
    for (int64_t i = 0; i < s.elements(); ++i)
      t.data()[i] = Bf16BitsToFloat(FloatToBf16Bits(u(rng)));
    return t;
  };
  auto host = [](const Tensor& t) { return std::vector<float>(t.data(), t.data() + t.size()); };
  CpuOps cpu;
  for (OverrideProblem& q : problems) {
    q.x = random(q.xs, 1);
    q.w = random(q.ws, 2);
    q.dy = random(q.ys, 3);
    Tensor y_ref(q.ys, Device::kCPU), dx_ref(q.xs, Device::kCPU), dw_ref(q.ws, Device::kCPU);
    cpu.ConvForward(q.x, q.w, y_ref, q.p);
    cpu.ConvBackwardData(q.dy, q.w, dx_ref, q.p);
    cpu.ConvBackwardFilter(q.x, q.dy, dw_ref, q.p);
    q.ref[0] = host(y_ref);
    q.ref[1] = host(dx_ref);
    q.ref[2] = host(dw_ref);
  }
  const cuda::DeviceContext& ctx = Ops().context();
  std::map<std::string, std::vector<float>> first;  // per family and math: fwd, bwd data
  for (const ConvConfig& c : cuda::ConvCatalogue()) {
    if (c.family == ConvFamily::kWgmma && !cuda::TcWgmmaAvailable()) continue;
    const OverrideProblem& q = problems[c.tma ? 1 : 0];
    const ConvParams& p = q.p;
    const cuda::ConvDims& d = q.d;
    const Shape &xs = q.xs, &ys = q.ys, &ws = q.ws;
    const std::vector<float>(&ref)[3] = q.ref;
    const Tensor gx = q.x.To(Device::kCUDA), gw = q.w.To(Device::kCUDA),
                 gdy = q.dy.To(Device::kCUDA);
    // bf16 copies for the tensor cores' bf16 storage.
    Tensor bx(xs, Device::kCUDA, DType::kBF16), bdy(ys, Device::kCUDA, DType::kBF16);
    bx.CopyFromHost(host(q.x));
    bdy.CopyFromHost(host(q.dy));
    const cuda::ScopedConvConfig forced(c.name);
    for (ConvProblem problem :
         {ConvProblem::kForward, ConvProblem::kBackwardData, ConvProblem::kBackwardFilter}) {
      if (!c.Runs(problem)) continue;
      const int op = static_cast<int>(problem);
      const std::string what = absl::StrCat(c.name, ", ", cuda::ConvProblemName(problem));
      const Shape& out_shape = op == 0 ? ys : op == 1 ? xs : ws;
      Tensor out(out_shape, Device::kCUDA);
      out.Fill(std::numeric_limits<float>::quiet_NaN());
      cuda::ConvLaunchInfo info;
      double tol = 1e-5;
      if (c.family == ConvFamily::kSimt) {
        if (op == 0) info = cuda::ConvForwardGpu(ctx, d, p, gx.data(), gw.data(), out.data());
        if (op == 1) info = cuda::ConvBackwardDataGpu(ctx, d, p, gdy.data(), gw.data(), out.data());
        if (op == 2)
          info = cuda::ConvBackwardFilterGpu(ctx, d, p, gx.data(), gdy.data(), out.data());
      } else {
        // bf16: bf16 activations (the wgmma kernels need them; dx stored as float); tf32: float.
        const bool b = c.math == MathMode::kBF16;
        tol = b ? 1e-2 : 2e-3;
        cuda::TcConvArgs a;
        a.dims = d;
        a.conv = p;
        a.math = c.math;
        a.w = gw.data();
        a.x = b ? cuda::TcInput{bx.raw(), StorageType::kBF16} : cuda::TcInput{gx.data()};
        a.dy = b ? cuda::TcInput{bdy.raw(), StorageType::kBF16} : cuda::TcInput{gdy.data()};
        a.y = cuda::TcOutput{out.data()};
        a.dx = cuda::TcOutput{out.data()};
        a.dw = out.data();
        if (op == 0) info = cuda::ConvForwardTc(ctx, a);
        if (op == 1) info = cuda::ConvBackwardDataTc(ctx, a);
        if (op == 2) info = cuda::ConvBackwardFilterTc(ctx, a);
      }
      EXPECT_STREQ(info.config, c.name) << what << ": the override did not reach it";
      EXPECT_EQ(info.wgmma, c.family == ConvFamily::kWgmma) << what;
      const std::vector<float> got = out.ToHost();
      const double err = RelErr(got, ref[op]);
      EXPECT_LT(err, tol) << what;
      std::printf("  %-24s %-16s rel err %.2e\n", c.name, cuda::ConvProblemName(problem), err);
      if (op < 2 && c.family != ConvFamily::kWgmma) {
        const std::string key =
            absl::StrCat(cuda::ConvFamilyName(c.family), cuda::MathModeName(c.math), op);
        if (!first.count(key)) {
          first[key] = got;
        } else {
          EXPECT_TRUE(BitwiseEqual(got, first[key])) << what;
        }
      }
    }
  }
}

}  // namespace
}  // namespace colonnade
