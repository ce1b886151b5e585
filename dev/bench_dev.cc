// bench_dev: times the kernel versions kept in dev/ against what the main path runs, on one
// GPU, and checks that they give the same bits (a mismatch ends the program with exit 1).
//
//   bench_dev [lrn_pool] [pool_backward] [--batch=N]     (default: both, batches 128 and 256)
//
// lrn_pool: AlexNet's norm1 + pool1 and norm2 + pool2 (two columns), fused forward versions 1
// and 2 and the fused backward (dev/lrn_pool) against the unfused LRN and max pool as training
// runs them (denominators recomputed, the pool's argmax record), float and bf16 storage.
// pool_backward: AlexNet's three max pools, max-pool backward version 2 (dev/pool_backward)
// against the main path's version 3 (no record) and the recorded backward training runs.
// Times are milliseconds per call, the mean of 20 calls after one warm-up call (device
// fences, core/backend.h). The fused kernels are compared bit for bit with float storage (in
// bf16 the unfused pool's input is the rounded LRN output, the fused one's the FP32 value).
// Record results under experiments/ with the commit and the GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_ops.h"
#include "dev/lrn_pool/lrn_pool.h"
#include "dev/pool_backward/pool_backward.h"

namespace colonnade {
namespace {

constexpr int kReps = 20;

Ops& Gpu() { return OpsFor(Device::kCUDA); }
const cuda::DeviceContext& Ctx() { return dynamic_cast<cuda::CudaOps&>(Gpu()).context(); }
cuda::StorageType StorageOf(const Tensor& t) { return cuda::StorageOf(t); }

// Milliseconds per call of f, over kReps calls after a warm-up.
double TimeMs(const std::function<void()>& f) {
  Backend* b = GetBackend(Device::kCUDA);
  f();
  std::unique_ptr<Fence> start = b->RecordFence(Backend::FenceUse::kTimed);
  for (int i = 0; i < kReps; ++i) f();
  std::unique_ptr<Fence> end = b->RecordFence(Backend::FenceUse::kTimed);
  end->Wait();
  return end->MillisecondsSince(*start) / kReps;
}

Tensor Random(const Shape& s, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(s.elements()));
  for (float& e : v) e = u(rng);
  Tensor g(s, Device::kCUDA, t);
  g.CopyFromHost(v);
  return g;
}

bool Same(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.ToHost(), y = b.ToHost();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

struct PoolLayerShape {
  const char* name;
  int c, hw, groups;  // groups: the LRN's (AlexNet's two columns)
};
const PoolLayerShape kAlexNetPools[] = {
    {"pool1", 96, 55, 2}, {"pool2", 256, 27, 2}, {"pool3", 256, 13, 2}};

bool BenchLrnPool(int batch) {
  bool ok = true;
  LrnCrossParams lp;  // AlexNet's: size 5, k 2, alpha 1e-4, beta 0.75
  lp.groups = 2;
  PoolParams pp;  // 3 x 3 windows at stride 2
  std::printf("\nLRN + max pool, batch %d (ms per call)\n", batch);
  std::printf("%-6s %-5s %9s %9s %9s | %9s %9s\n", "layer", "store", "unfused", "fused v1",
              "fused v2", "unf. bwd", "fused bwd");
  for (const PoolLayerShape& l : kAlexNetPools) {
    if (std::strcmp(l.name, "pool3") == 0) continue;  // no LRN before pool3
    for (DType t : {DType::kFloat32, DType::kBF16}) {
      const int oh = static_cast<int>(PoolOutSize(l.hw, pp.size, pp.stride, pp.pad));
      const Shape xs{l.c, l.hw, l.hw, batch}, ys{l.c, oh, oh, batch};
      Tensor x = Random(xs, t, 1), dy = Random(ys, t, 2);
      Tensor norm(xs, Device::kCUDA, t), dnorm(xs, Device::kCUDA, t), dx(xs, Device::kCUDA, t);
      Tensor y(ys, Device::kCUDA, t), fy(ys, Device::kCUDA, t),
          rec(ys, Device::kCUDA, DType::kBF16);
      Tensor arg(ys, Device::kCUDA), denom;  // empty: recomputed in the backward, as training
      const double unfused = TimeMs([&] {
        Gpu().LrnCrossForward(x, norm, denom, lp);
        Gpu().PoolForward(norm, y, pp, &rec);
      });
      double fused[2];
      for (int v : {1, 2}) {
        fused[v - 1] = TimeMs([&] {
          cuda::dev::LrnMaxPoolForwardGpu(Ctx(), x.raw(), StorageOf(x), fy.raw(), StorageOf(fy),
                                          arg.data(), l.c, l.hw, l.hw, batch, oh, oh, lp, pp, v);
        });
        if (t == DType::kFloat32 && !Same(fy, y)) {
          std::printf("MISMATCH: %s fused forward v%d differs from the unfused ops\n", l.name, v);
          ok = false;
        }
      }
      const double unfused_bwd = TimeMs([&] {
        Gpu().PoolBackward(norm, y, dy, dnorm, pp, &rec);
        Gpu().LrnCrossBackward(x, norm, denom, dnorm, dx, lp);
      });
      Tensor fdx(xs, Device::kCUDA, t);
      const double fused_bwd = TimeMs([&] {
        cuda::dev::LrnMaxPoolBackwardGpu(Ctx(), x.raw(), StorageOf(x), arg.data(), dy.raw(),
                                         StorageOf(dy), fdx.raw(), l.c, l.hw, l.hw, batch, oh, oh,
                                         lp, pp);
      });
      if (t == DType::kFloat32 && !Same(fdx, dx)) {
        std::printf("MISMATCH: %s fused backward differs from the unfused ops\n", l.name);
        ok = false;
      }
      std::printf("%-6s %-5s %9.3f %9.3f %9.3f | %9.3f %9.3f\n", l.name, DTypeName(t), unfused,
                  fused[0], fused[1], unfused_bwd, fused_bwd);
    }
  }
  return ok;
}

bool BenchPoolBackward(int batch) {
  bool ok = true;
  PoolParams pp;
  std::printf("\nmax-pool backward, batch %d (ms per call)\n", batch);
  std::printf("%-6s %-5s %9s %9s %9s\n", "layer", "store", "v2", "v3", "recorded");
  for (const PoolLayerShape& l : kAlexNetPools) {
    for (DType t : {DType::kFloat32, DType::kBF16}) {
      const int oh = static_cast<int>(PoolOutSize(l.hw, pp.size, pp.stride, pp.pad));
      const Shape xs{l.c, l.hw, l.hw, batch}, ys{l.c, oh, oh, batch};
      Tensor x = Random(xs, t, 3), dy = Random(ys, t, 4);
      Tensor y(ys, Device::kCUDA, t), rec(ys, Device::kCUDA, DType::kBF16);
      Gpu().PoolForward(x, y, pp, &rec);
      Tensor v2(xs, Device::kCUDA, t), v3(xs, Device::kCUDA, t), recorded(xs, Device::kCUDA, t);
      const double t2 = TimeMs([&] {
        cuda::dev::PoolBackwardV2Gpu(Ctx(), x.raw(), y.raw(), dy.raw(), v2.raw(), StorageOf(x),
                                     StorageOf(y), l.c, l.hw, l.hw, batch, oh, oh, pp);
      });
      const double t3 = TimeMs([&] { Gpu().PoolBackward(x, y, dy, v3, pp); });
      const double tr = TimeMs([&] { Gpu().PoolBackward(x, y, dy, recorded, pp, &rec); });
      if (!Same(v2, v3) || !Same(recorded, v3)) {
        std::printf("MISMATCH: %s max-pool backward versions differ\n", l.name);
        ok = false;
      }
      std::printf("%-6s %-5s %9.3f %9.3f %9.3f\n", l.name, DTypeName(t), t2, t3, tr);
    }
  }
  return ok;
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  using namespace colonnade;
  bool lrn_pool = false, pool_backward = false;
  std::vector<int> batches = {128, 256};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "lrn_pool") {
      lrn_pool = true;
    } else if (a == "pool_backward") {
      pool_backward = true;
    } else if (a.rfind("--batch=", 0) == 0 && std::atoi(a.c_str() + 8) > 0) {
      batches = {std::atoi(a.c_str() + 8)};
    } else {
      std::fprintf(stderr,
                   "bench_dev: unknown argument '%s' (lrn_pool, pool_backward, --batch=N)\n",
                   a.c_str());
      return 2;
    }
  }
  if (!lrn_pool && !pool_backward) lrn_pool = pool_backward = true;
  if (!cuda::Available() || !cuda::RegisterBackend(0).ok()) {
    std::fprintf(stderr, "bench_dev: no CUDA device\n");
    return 1;
  }
  bool ok = true;
  for (int batch : batches) {
    if (lrn_pool) ok = BenchLrnPool(batch) && ok;
    if (pool_backward) ok = BenchPoolBackward(batch) && ok;
  }
  return ok ? 0 : 1;
}
