// How much do 20 AlexNet training steps (batch 32, synthetic data, CPU backend) amplify a
// rounding-level difference? Trains twice from one seed, the second time with every initial
// weight moved by one ulp (up or down at random), and prints both losses per step and the
// relative difference of the accumulated weight updates (final - initial) per parameter.
// Results: results.txt. Build against a CPU build of colonnade_core, e.g.
//   g++ -O2 -std=c++17 -I src sensitivity.cc -o sensitivity build/src/core/libcolonnade_core.a \
//       -labsl_... -lopenblas -lpthread
//   COLONNADE_CPU_THREADS=1 ./sensitivity LR [STEPS] [fixed]   ("fixed": one batch every step)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>
#include "core/backend.h"
#include "core/models.h"
#include "core/optimizer.h"
#include "core/philox.h"
using namespace colonnade;
bool g_fixed = false;
std::vector<std::vector<float>> g_init, g_final;
std::vector<double> Run(bool perturb, float lr, int steps) {
  g_init.clear(); g_final.clear();
  ModelOptions o; o.input_size = 224; o.num_classes = 1000;
  auto net = std::move(*BuildModel("alexnet", o));
  (void)net->Build(32, Device::kCPU);
  net->InitParams(7);
  if (perturb) {  // one ulp on every 97th weight of fc6
    for (auto& np : net->params()) {  // one ulp up or down on every weight
      float* w = np.param->value.data();
      for (int64_t i = 0; i < np.param->value.size(); ++i)
        w[i] = std::nextafter(w[i], PhiloxUniform(99, 0, i) < 0.5f ? -1.0f : 1.0f);
    }
  }
  for (auto& np : net->params()) if (np.param->learnable) g_init.push_back(np.param->value.ToHost());
  SgdOptions so; SgdOptimizer opt(so);
  Tensor& data = net->blob("data"); Tensor& label = net->blob("label");
  const uint64_t key = MixKey(7, (uint64_t)RandomPurpose::kSynthetic);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> img(data.size()), lab(label.size());
    for (size_t i = 0; i < img.size(); ++i) img[i] = PhiloxNormal(key, g_fixed ? 0 : 2 * step, i);
    for (size_t i = 0; i < lab.size(); ++i) lab[i] = (float)((int)(PhiloxUniform(key, g_fixed ? 1 : 2 * step + 1, i) * 1000) % 1000);
    data.CopyFromHost(img); label.CopyFromHost(lab);
    RunContext ctx; ctx.seed = 7; ctx.step = step; ctx.global_batch = 32; ctx.loss_scale = 1.0f / 32;
    net->Forward(ctx);
    auto l = net->blob("loss").ToHost(); double s = 0; for (float v : l) s += v; losses.push_back(s / 32);
    net->Backward(ctx); opt.Step(*net, lr);
  }
  for (auto& np : net->params()) if (np.param->learnable) g_final.push_back(np.param->value.ToHost());
  return losses;
}
int main(int argc, char** argv) {
  float lr = argc > 1 ? atof(argv[1]) : 0.01f; int steps = argc > 2 ? atoi(argv[2]) : 20; g_fixed = argc > 3;
  auto a = Run(false, lr, steps);
  auto ia = g_init, fa = g_final;
  auto b = Run(true, lr, steps);
  auto fb = g_final;
  double d = 0, c = 0;
  for (size_t p = 0; p < fa.size(); ++p) {
    double dp = 0, cp = 0;
    for (size_t i = 0; i < fa[p].size(); ++i) { double e = (double)fb[p][i] - fa[p][i], u = (double)fa[p][i] - ia[p][i]; dp += e*e; cp += u*u; }
    printf("param %zu update rel diff %.2e\n", p, std::sqrt(dp / cp)); d += dp; c += cp;
  }
  printf("all params: weight update rel diff %.2e\n", std::sqrt(d / c));
  for (int i = 0; i < steps; ++i) printf("lr %g step %2d  %.7f %.7f  rel %.2e\n", lr, i, a[i], b[i], std::fabs(a[i]-b[i])/std::fabs(a[i]));
}
