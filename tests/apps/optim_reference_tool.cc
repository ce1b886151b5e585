// The optimiser's arithmetic on bare tensors, for tests/apps/optim_torch_test.py to compare
// with PyTorch and a LARS reference written from the paper. Reads float32 inputs from a raw
// file, writes float32 results to another (little-endian, no header):
//   optim_reference_tool sgd IN OUT STEPS N LR MOMENTUM WD NESTEROV LARS ETA IS_WEIGHT EMA
//     IN: w0[N], grad[STEPS][N]; OUT: w[N], velocity[N], ema[N] after STEPS updates through
//     SgdOptimizer::StepParam (the trainer's per-parameter update: Nesterov, LARS, weight
//     decay only on weights) and UpdateEmaOf after each (EMA 0: the shadow stays w0).
//   optim_reference_tool xent IN OUT K N EPS
//     IN: logits[K][N] (class-major, as the net's K x 1 x 1 x N), labels[N]; OUT: loss[N],
//     dlogits[K][N] of the mean loss (scale 1/N), through CpuOps's softmax cross-entropy.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu_ops.h"
#include "core/optimizer.h"

namespace colonnade {
namespace {

std::vector<float> ReadFloats(const char* path, size_t n) {
  std::vector<float> v(n);
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr || std::fread(v.data(), sizeof(float), n, f) != n) {
    std::fprintf(stderr, "optim_reference_tool: cannot read %zu floats from %s\n", n, path);
    std::exit(1);
  }
  std::fclose(f);
  return v;
}

void WriteFloats(const char* path, const std::vector<float>& v) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr || std::fwrite(v.data(), sizeof(float), v.size(), f) != v.size()) {
    std::fprintf(stderr, "optim_reference_tool: cannot write %s\n", path);
    std::exit(1);
  }
  std::fclose(f);
}

int Sgd(char** a) {
  const int steps = std::atoi(a[3]);
  const int64_t n = std::atoll(a[4]);
  const float lr = std::strtof(a[5], nullptr);
  SgdOptions o;
  o.momentum = std::strtof(a[6], nullptr);
  o.weight_decay = std::strtof(a[7], nullptr);
  o.nesterov = std::atoi(a[8]) != 0;
  o.lars = std::atoi(a[9]) != 0;
  o.lars_eta = std::strtof(a[10], nullptr);
  const bool is_weight = std::atoi(a[11]) != 0;
  const float ema = std::strtof(a[12], nullptr);
  const std::vector<float> in = ReadFloats(a[1], static_cast<size_t>(n) * (steps + 1));
  CpuOps ops;
  Param p;
  p.is_weight = is_weight;
  p.value = Tensor(Shape{n});
  p.grad = Tensor(Shape{n});
  p.velocity = Tensor(Shape{n});
  p.ema = Tensor(Shape{n});
  p.value.CopyFromHost(in.data(), n);
  p.ema.CopyFromHost(in.data(), n);
  ops.Fill(p.velocity, 0.0f);
  Tensor norms(Shape{2});
  SgdOptimizer opt(o);
  for (int s = 0; s < steps; ++s) {
    p.grad.CopyFromHost(in.data() + (s + 1) * n, n);
    opt.StepParam(ops, p, lr, nullptr, &norms);
    if (ema > 0) UpdateEmaOf(ops, p, ema);
  }
  std::vector<float> out = p.value.ToHost();
  for (float x : p.velocity.ToHost()) out.push_back(x);
  for (float x : p.ema.ToHost()) out.push_back(x);
  WriteFloats(a[2], out);
  return 0;
}

int Xent(char** a) {
  const int64_t k = std::atoll(a[3]), n = std::atoll(a[4]);
  const float eps = std::strtof(a[5], nullptr);
  const std::vector<float> in = ReadFloats(a[1], static_cast<size_t>(k * n + n));
  CpuOps ops;
  Tensor logits(Shape{k, 1, 1, n}), labels(Shape{1, 1, 1, n});
  Tensor probs(Shape{k, 1, 1, n}), loss(Shape{1, 1, 1, n}), d(Shape{k, 1, 1, n});
  logits.CopyFromHost(in.data(), k * n);
  labels.CopyFromHost(in.data() + k * n, n);
  ops.SoftmaxCrossEntropyForward(logits, labels, probs, loss, eps);
  ops.SoftmaxCrossEntropyBackward(probs, labels, 1.0f / static_cast<float>(n), d, eps);
  std::vector<float> out = loss.ToHost();
  for (float x : d.ToHost()) out.push_back(x);
  WriteFloats(a[2], out);
  return 0;
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "sgd" && argc == 14) return colonnade::Sgd(argv + 1);
  if (mode == "xent" && argc == 7) return colonnade::Xent(argv + 1);
  std::fprintf(stderr,
               "usage: optim_reference_tool sgd IN OUT STEPS N LR MOMENTUM WD NESTEROV LARS ETA "
               "IS_WEIGHT EMA\n       optim_reference_tool xent IN OUT K N EPS\n");
  return 2;
}
