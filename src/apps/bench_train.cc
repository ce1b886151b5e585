// bench_train: the whole training step (forward, backward, SGD with momentum and weight
// decay) of a model on one GPU, in images per second, with peak device memory; a
// benchmark program, not a timed test. The peer is experiments/peer_pytorch/alexnet_step.py.
//
//   bench_train --model=alexnet --batch_sizes=128,256 --steps=30 --json=train.json
//
// Inputs are synthetic (random images and labels written to the device once), so the
// number is the network's, not the data pipeline's. Steps are timed with CUDA events after
// --warmup untimed steps; img/s = batch * steps / elapsed. --cuda_graphs=on (the default)
// replays the step as one CUDA graph, off launches its kernels one by one. --breakdown adds a
// per-layer forward/backward table from events recorded between layers.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/output_file.h"
#include "apps/train_config.h"
#include "apps/train_step.h"
#include "core/backend.h"
#include "core/log.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "core/results.h"
#include "core/philox.h"
#include "cuda/conv/conv.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/port.h"
#include "cuda/step_graph.h"

ABSL_FLAG(std::string, model, "alexnet", "model to train");
ABSL_FLAG(std::string, batch_sizes, "128,256", "comma-separated batch sizes");
ABSL_FLAG(int, warmup, 5, "untimed steps first");
ABSL_FLAG(int, steps, 30, "timed steps");
ABSL_FLAG(double, lr, 0.01, "learning rate");
ABSL_FLAG(bool, breakdown, true, "also print per-layer forward/backward times");
ABSL_FLAG(std::string, json, "", "append one JSON line per batch size here");
ABSL_FLAG(colonnade::MemoryPlanMode, memory_plan, colonnade::MemoryPlanMode::kOn,
          "on: activations and gradients share one arena by the step's static memory plan "
          "(docs/MEMORY.md); off: one allocation per buffer");
ABSL_FLAG(colonnade::CudaGraphs, cuda_graphs, colonnade::CudaGraphs::kAuto,
          "on (auto): every timed step is a replay of the step captured as one CUDA graph "
          "(cuda/step_graph.h; the warm-up steps include the plain step and the capture); "
          "off: plain steps, hundreds of kernel launches each. Run both to see what the host's "
          "launch rate costs a model");
ABSL_FLAG(colonnade::RecomputePolicy, recompute, colonnade::RecomputePolicy::kBatchNormRelu,
          "bn_relu_add, bn_relu or off: which activations are written again in the backward "
          "pass instead of kept (docs/MEMORY.md; the trainer's --recompute). Bitwise the same "
          "results");
ABSL_FLAG(std::string, fusions, "default",
          "which layer pairs run as one pass (core/net.h Fusions): a comma list of conv_relu, "
          "bn_relu, add_relu, conv_bn, bn_add, relu_grad, grad_add, add_alias, add_bn_sums, or "
          "default (the trainer's: all of them), all, or none. For measuring what each "
          "saves; bitwise the "
          "same results except conv_bn "
          "(batch-norm statistics from the convolution's epilogue) and relu_grad's bias gradients "
          "(from the backward-data epilogue's sums): docs/PRECISION.md (the LRN + max-pool fusion "
          "lives in dev/lrn_pool: bench_dev)");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 (strict), tf32 or bf16: the arithmetic of convolutions and fully connected "
          "products (docs/PRECISION.md); weights stay FP32, and activations too except in "
          "bf16 (--bf16_activations)");
ABSL_FLAG(bool, bf16_activations, true,
          "with --precision=bf16: store every blob outside the classifier in bf16 (the "
          "trainer's --bf16_activations, on by default as there; --nobf16_activations keeps "
          "them FP32; docs/PRECISION.md). Giving it with another precision is an error");

ABSL_FLAG(std::string, conv_config, "",
          "the convolution configuration, a name COLONNADE_CONV_CONFIG takes "
          "(src/cuda/conv/catalogue.h): auto (the trainer's default: in bf16 the wgmma kernels "
          "of sm_90a where they apply, bf16 activations and a batch that is a multiple of 8, "
          "else mma.sync), mma (mma.sync only), wgmma (an error where wgmma cannot run: a build "
          "without CMAKE_CUDA_ARCHITECTURES=90a, not a compute capability 9.0 GPU), or one "
          "configuration (e.g. wgmma_128x256x64_4, mma_bf16_128x128x32_4, simt_128x128x16_3) "
          "for every convolution it runs. Empty: COLONNADE_CONV_CONFIG, else auto");

namespace colonnade {
namespace {

cudaStream_t Stream() { return static_cast<cudaStream_t>(cuda::ComputeStream()); }

float ElapsedMs(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  COLONNADE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

RunContext Context(int64_t step, int64_t batch) {
  RunContext ctx;
  ctx.phase = Phase::kTrain;
  ctx.seed = 1;
  ctx.step = step;
  ctx.global_batch = batch;
  ctx.loss_scale = 1.0f / static_cast<float>(batch);
  return ctx;
}

// Per-layer times: forward by running the layers one by one (what Net::Forward does),
// backward through Net::Backward's per-layer callback.
void Breakdown(Net& net, int64_t batch, SgdOptimizer& opt, float lr) {
  Ops& ops = net.ops();
  const int nl = static_cast<int>(net.layers().size());
  const int reps = 5;
  std::vector<double> fwd(nl, 0.0), bwd(nl, 0.0);
  double sgd = 0.0;
  std::vector<cudaEvent_t> f(nl + 1), b(nl + 1);
  cudaEvent_t s0, s1;
  for (auto& e : f) COLONNADE_CUDA_CHECK(cudaEventCreate(&e));
  for (auto& e : b) COLONNADE_CUDA_CHECK(cudaEventCreate(&e));
  COLONNADE_CUDA_CHECK(cudaEventCreate(&s0));
  COLONNADE_CUDA_CHECK(cudaEventCreate(&s1));
  for (int r = 0; r < reps; ++r) {
    RunContext ctx = Context(1000 + r, batch);
    COLONNADE_CUDA_CHECK(cudaEventRecord(f[0], Stream()));
    std::vector<const Tensor*> x;
    std::vector<Tensor*> y;
    for (int i = 0; i < nl; ++i) {
      LayerEntry& e = net.layers()[i];
      x.clear();
      y.clear();
      for (const std::string& n : e.inputs) x.push_back(&net.blob(n));
      for (const std::string& n : e.outputs) y.push_back(&net.blob(n));
      e.layer->Forward(ops, ctx, x, y);
      COLONNADE_CUDA_CHECK(cudaEventRecord(f[i + 1], Stream()));
    }
    // Backward visits layers nl-1 .. 0; event b[i] is recorded after layer i.
    COLONNADE_CUDA_CHECK(cudaEventRecord(b[nl], Stream()));
    net.Backward(ctx, [&](int i) { COLONNADE_CUDA_CHECK(cudaEventRecord(b[i], Stream())); });
    COLONNADE_CUDA_CHECK(cudaEventRecord(s0, Stream()));
    opt.Step(net, lr);
    COLONNADE_CUDA_CHECK(cudaEventRecord(s1, Stream()));
    COLONNADE_CUDA_CHECK(cudaEventSynchronize(s1));
    for (int i = 0; i < nl; ++i) {
      fwd[i] += ElapsedMs(f[i], f[i + 1]) / reps;
      bwd[i] += ElapsedMs(b[i + 1], b[i]) / reps;
    }
    sgd += ElapsedMs(s0, s1) / reps;
  }
  double tf = 0, tb = 0;
  std::printf("  %-10s %-14s %-20s %9s %9s\n", "layer", "type", "output", "fwd ms", "bwd ms");
  for (int i = 0; i < nl; ++i) {
    LayerEntry& e = net.layers()[i];
    std::printf("  %-10s %-14s %-20s %9.3f %9.3f\n", e.layer->name().c_str(), e.layer->type(),
                net.blob(e.outputs[0]).shape().ToString().c_str(), fwd[i], bwd[i]);
    tf += fwd[i];
    tb += bwd[i];
  }
  std::printf("  %-10s %-14s %-20s %9.3f %9.3f   sgd %.3f ms, total %.3f ms\n", "total", "", "", tf,
              tb, sgd, tf + tb + sgd);
  for (auto& e : f) cudaEventDestroy(e);
  for (auto& e : b) cudaEventDestroy(e);
  cudaEventDestroy(s0);
  cudaEventDestroy(s1);
}

// Random images and labels, written to the device once.
void WriteSyntheticInputs(Net& net) {
  Tensor& data = net.blob("data");
  Tensor& label = net.blob("label");
  const int classes = static_cast<int>(net.blob("probs").c());
  std::vector<float> img(data.size()), lab(label.size());
  const uint64_t key = MixKey(1, static_cast<uint64_t>(RandomPurpose::kSynthetic));
  for (size_t i = 0; i < img.size(); ++i) img[i] = PhiloxNormal(key, 0, i);
  for (size_t i = 0; i < lab.size(); ++i)
    lab[i] = static_cast<float>(static_cast<int>(PhiloxUniform(key, 1, i) * classes) % classes);
  data.CopyFromHost(img);
  label.CopyFromHost(lab);
}

// --bf16_activations as it applies: on in bf16 precision unless --nobf16_activations.
bool Bf16Storage() {
  Precision p = Precision::kFP32;
  return absl::GetFlag(FLAGS_bf16_activations) &&
         ParsePrecision(absl::GetFlag(FLAGS_precision), &p) && p == Precision::kBF16;
}

// The model on the GPU at this batch with --memory_plan and --recompute, its parameters
// initialised and its inputs written (WriteSyntheticInputs); prints the plan's sizes.
// Null, with a message, when the step does not fit the device.
std::unique_ptr<Net> BuildSyntheticNet(const std::string& model, int64_t batch,
                                       const Fusions& fusions) {
  ModelOptions mo;
  auto built = BuildModel(model, mo);
  CHECK(built.ok()) << built.status();
  std::unique_ptr<Net> net = std::move(*built);
  net->set_memory_plan(absl::GetFlag(FLAGS_memory_plan) == MemoryPlanMode::kOn);
  net->set_recompute(absl::GetFlag(FLAGS_recompute));
  net->set_fusions(fusions);
  net->set_bf16_storage(Bf16Storage());
  const absl::Status st = net->Build(batch, Device::kCUDA);
  if (absl::IsResourceExhausted(st)) {
    std::printf("%s batch %lld: does not fit: %s\n", model.c_str(), static_cast<long long>(batch),
                std::string(st.message()).c_str());
    std::fflush(stdout);
    return nullptr;
  }
  CHECK(st.ok()) << st;
  std::printf(
      "memory plan %s, recompute %s: activations+gradients %.1f MiB (%.1f MiB with one "
      "buffer each)\n",
      AbslUnparseFlag(absl::GetFlag(FLAGS_memory_plan)).c_str(),
      AbslUnparseFlag(absl::GetFlag(FLAGS_recompute)).c_str(),
      net->memory_plan().planned_bytes() / 1048576.0,
      net->memory_plan().unshared_bytes() / 1048576.0);
  net->InitParams(1);
  WriteSyntheticInputs(*net);
  return net;
}

// Whether a --conv_config runs at this precision: a configuration of its math, mma with
// tf32 or bf16, wgmma with bf16, auto with any.
bool ConvConfigFits(const std::string& name, Precision precision) {
  const cuda::MathMode math = precision == Precision::kFP32   ? cuda::MathMode::kFP32
                              : precision == Precision::kTF32 ? cuda::MathMode::kTF32
                                                              : cuda::MathMode::kBF16;
  if (const cuda::ConvConfig* c = cuda::FindConvConfig(name)) return c->math == math;
  if (name == "mma") return math != cuda::MathMode::kFP32;
  if (name == "wgmma") return math == cuda::MathMode::kBF16;
  return true;
}

// Whether a --conv_config asks for the wgmma kernels.
bool WantsWgmma(const std::string& name) {
  const cuda::ConvConfig* c = cuda::FindConvConfig(name);
  return name == "wgmma" || (c != nullptr && c->family == cuda::ConvFamily::kWgmma);
}

// --precision, --fusions, --bf16_activations and --conv_config, before anything looks for a
// GPU: false (with one line on stderr) when they do not parse or do not go together.
bool ParseModeFlags(bool bf16_activations_given, Precision* precision, Fusions* fusions) {
  if (!ParsePrecision(absl::GetFlag(FLAGS_precision), precision)) {
    std::fprintf(stderr, "bench_train: --precision must be fp32, tf32 or bf16, not %s\n",
                 absl::GetFlag(FLAGS_precision).c_str());
    return false;
  }
  const absl::StatusOr<Fusions> parsed = ParseFusions(absl::GetFlag(FLAGS_fusions));
  if (!parsed.ok()) {
    std::fprintf(stderr, "bench_train: --fusions: %s\n",
                 std::string(parsed.status().message()).c_str());
    return false;
  }
  *fusions = *parsed;
  if (absl::GetFlag(FLAGS_bf16_activations) && *precision != Precision::kBF16 &&
      bf16_activations_given) {
    std::fprintf(stderr, "bench_train: --bf16_activations needs --precision=bf16\n");
    return false;
  }
  const std::string config = absl::GetFlag(FLAGS_conv_config);
  if (!config.empty()) {
    if (absl::Status s = cuda::SetConvConfig(config); !s.ok()) {
      std::fprintf(stderr, "bench_train: --conv_config: %s\n", std::string(s.message()).c_str());
      return false;
    }
    if (!ConvConfigFits(config, *precision)) {
      std::fprintf(stderr, "bench_train: --conv_config=%s does not run at --precision=%s\n",
                   config.c_str(), PrecisionName(*precision));
      return false;
    }
  }
  return true;
}

// Appends the result lines to --json (if given); refuses an HDF5 file and reports a failed
// write (output_file.h). The exit code: 0, or 1 after one line on stderr.
int WriteJsonLines(const std::vector<std::string>& lines) {
  const std::string json = absl::GetFlag(FLAGS_json);
  if (json.empty()) return 0;
  AppendFile f;
  absl::Status s = f.Open(json, "--json");
  for (size_t i = 0; s.ok() && i < lines.size(); ++i) s = f.WriteLine(lines[i]);
  if (s.ok()) s = f.Close();
  if (!s.ok()) {
    std::fprintf(stderr, "bench_train: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}

int Main(bool bf16_activations_given) {
  Precision precision;
  Fusions fusions;
  if (!ParseModeFlags(bf16_activations_given, &precision, &fusions)) return 2;
  if (!cuda::Available()) {
    std::fprintf(stderr, "bench_train: no CUDA device\n");
    return 1;
  }
  absl::Status st = cuda::RegisterBackend(0);
  CHECK(st.ok()) << st;
  st = OpsFor(Device::kCUDA).SetPrecision(precision);
  CHECK(st.ok()) << st;
  if (WantsWgmma(cuda::ConvConfigSetting()) && !cuda::TcWgmmaAvailable()) {
    std::fprintf(stderr,
                 "bench_train: --conv_config=%s: no wgmma here (build with "
                 "-DCMAKE_CUDA_ARCHITECTURES=90a and run on a compute capability 9.0 GPU)\n",
                 cuda::ConvConfigSetting().c_str());
    return 2;
  }
  const bool wgmma = precision == Precision::kBF16 && cuda::WgmmaConvolutions();
  std::printf("precision: %s%s%s (convolutions: %s)\n", PrecisionName(precision),
              Bf16Storage() ? ", bf16 activations" : "", wgmma ? ", wgmma convolutions" : "",
              cuda::ConvConfigSetting().c_str());
  std::printf("device: %s\n", cuda::DeviceDescription().c_str());
  const std::string model = absl::GetFlag(FLAGS_model);
  const float lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  std::vector<std::string> lines;
  for (absl::string_view bs : absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes), ',')) {
    const int64_t batch = std::stoll(std::string(bs));
    const std::unique_ptr<Net> built = BuildSyntheticNet(model, batch, fusions);
    if (built == nullptr) continue;
    Net& net = *built;
    SgdOptions so;
    so.momentum = 0.9f;
    so.weight_decay = 5e-4f;
    SgdOptimizer opt(so);
    const bool graphs = absl::GetFlag(FLAGS_cuda_graphs) != CudaGraphs::kOff;
    std::optional<cuda::StepGraph> graph;
    if (graphs) graph.emplace();
    // The trainer's step code (train_step.h), on inputs already in the net's blobs: one
    // replica, so no gradient sync and no feed.
    Tensor totals = NewResultTotals(Device::kCUDA);
    TrainingStepParts parts;
    parts.net = &net;
    parts.optimizer = &opt;
    parts.totals = &totals;
    parts.graph = graph ? &*graph : nullptr;
    parts.context = [batch](int64_t step) { return Context(step, batch); };
    TrainingStep training_step(std::move(parts));
    auto step_fn = [&](int64_t step) {
      StepScalars v;
      v.step = step;
      v.lr = lr;
      absl::Status s = training_step.Enqueue(v);
      CHECK(s.ok()) << s;
    };
    // A graphed run needs two warm-up steps: the plain one, then the capture.
    for (int i = 0; i < std::max(warmup, graphs ? 2 : 0); ++i) step_fn(i);
    GetBackend(Device::kCUDA)->Synchronize();
    const double first_loss = OpsFor(Device::kCUDA).Sum(net.blob("loss")) / batch;
    cuda::ResetPeakMemoryStats();
    const size_t mallocs_before = cuda::GetMemoryStats().device_allocations;
    std::vector<cudaEvent_t> ev(steps + 1);
    for (auto& e : ev) COLONNADE_CUDA_CHECK(cudaEventCreate(&e));
    COLONNADE_CUDA_CHECK(cudaEventRecord(ev[0], Stream()));
    for (int i = 0; i < steps; ++i) {
      step_fn(warmup + i);
      COLONNADE_CUDA_CHECK(cudaEventRecord(ev[i + 1], Stream()));
    }
    COLONNADE_CUDA_CHECK(cudaEventSynchronize(ev[steps]));
    COLONNADE_CUDA_CHECK(cudaGetLastError());
    std::vector<double> per(steps);
    for (int i = 0; i < steps; ++i) per[i] = ElapsedMs(ev[i], ev[i + 1]);
    const double total_ms = ElapsedMs(ev[0], ev[steps]);
    for (auto& e : ev) cudaEventDestroy(e);
    std::sort(per.begin(), per.end());
    const double last_loss = OpsFor(Device::kCUDA).Sum(net.blob("loss")) / batch;
    const cuda::MemoryStats mem = cuda::GetMemoryStats();
    const double ips = batch * steps / (total_ms * 1e-3);
    std::printf(
        "%s %s graphs %s batch %lld: %.0f img/s (%.2f ms/step mean, %.2f median) | peak device "
        "memory %.2f "
        "GiB "
        "in use, %.2f GiB reserved | cudaMalloc calls during timed steps: %zu | loss %.4f -> "
        "%.4f\n",
        model.c_str(), PrecisionName(precision), graphs ? "on" : "off",
        static_cast<long long>(batch), ips, total_ms / steps, per[steps / 2],
        mem.peak_bytes_in_use / 1073741824.0, mem.peak_bytes_reserved / 1073741824.0,
        mem.device_allocations - mallocs_before, first_loss, last_loss);
    std::fflush(stdout);
    lines.push_back(absl::StrFormat(
        "{\"impl\": \"colonnade\", \"model\": \"%s\", \"mode\": \"%s\", \"batch\": %d, "
        "\"img_per_s\": %.1f, "
        "\"ms_per_step_mean\": %.3f, \"ms_per_step_median\": %.3f, \"peak_in_use_bytes\": %d, "
        "\"peak_reserved_bytes\": %d, \"mallocs_in_timed_steps\": %d, \"loss_first\": %s, "
        "\"loss_last\": %s, \"memory_plan\": \"%s\", \"recompute\": \"%s\", "
        "\"cuda_graphs\": %s, \"fusions\": \"%s\", \"activations\": \"%s\", \"wgmma\": %s, "
        "\"conv_config\": \"%s\", \"device\": \"%s\"}",
        model, PrecisionName(precision), batch, ips, total_ms / steps, per[steps / 2],
        mem.peak_bytes_in_use, mem.peak_bytes_reserved, mem.device_allocations - mallocs_before,
        JsonNumber(first_loss, 5), JsonNumber(last_loss, 5),
        AbslUnparseFlag(absl::GetFlag(FLAGS_memory_plan)),
        AbslUnparseFlag(absl::GetFlag(FLAGS_recompute)), graphs ? "true" : "false",
        FusionsName(net.fusions()), net.bf16_storage() ? "bf16" : "float32",
        wgmma ? "true" : "false", cuda::ConvConfigSetting(), cuda::DeviceDescription()));
    if (absl::GetFlag(FLAGS_breakdown)) Breakdown(net, batch, opt, lr);
  }
  return WriteJsonLines(lines);
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  const colonnade::Cli cli = {
      "bench_train", "src/apps/bench_train",
      "times the whole training step (forward, backward, SGD) of a model on one GPU: images "
      "per second and peak device memory, on synthetic inputs.\n\n"
      "  bench_train --model=alexnet --batch_sizes=128,256 --steps=30 --json=train.json"};
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli)) return *code;
  return colonnade::Main(colonnade::FlagGiven(argc, argv, "bf16_activations"));
}
