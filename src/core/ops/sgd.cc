// The SGD update's CPU reference (sgd.h; the CUDA kernel: src/cuda/ops/sgd.cu).
#include "core/ops/sgd.h"

#include <cmath>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::ParallelFor;
using op_shapes::SameSize;

namespace {

// The LARS trust ratio from the squared norms (sgd.h), each operation rounded in float (the
// kernel: LarsTrustGpu, the same operations).
float LarsTrust(const float* norms2, float eta, float wd) {
  const float wn = std::sqrt(norms2[0]);
  const float gn = std::sqrt(norms2[1]);
  if (!(wn > 0.0f && gn > 0.0f)) return 1.0f;
  const float num = eta * wn;
  const float den = gn + wd * wn;
  return num / den;
}

}  // namespace

// v = momentum v - lr (grad + weight_decay w);  w = w + v   (element-wise, in float); with
// Nesterov w = w + (momentum v - lr (grad + weight_decay w)); with LARS lr = lr * trust.
void CpuOps::SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
  SameSize(w, grad, "SgdUpdate grad");
  SameSize(w, velocity, "SgdUpdate velocity");
  float* ws = w.data();
  const float* g = grad.data();
  float* v = velocity.data();
  const float lr = p.lars_norms ? p.lr * LarsTrust(p.lars_norms, p.lars_eta, p.weight_decay) : p.lr;
  if (p.nesterov) {
    ParallelFor(w.size(), 4, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float step = lr * (g[i] + p.weight_decay * ws[i]);
        const float vi = p.momentum * v[i] - step;
        v[i] = vi;
        ws[i] += p.momentum * vi - step;
      }
    });
    return;
  }
  ParallelFor(w.size(), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float vi = p.momentum * v[i] - lr * (g[i] + p.weight_decay * ws[i]);
      v[i] = vi;
      ws[i] += vi;
    }
  });
}

// Sums of squares in double, serially in index order: deterministic for any thread count.
void CpuOps::SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) {
  SameSize(w, grad, "SquaredNorms grad");
  CHECK_EQ(norms2.size(), 2) << "SquaredNorms: norms2 must hold 2 floats";
  const float* ws = w.data();
  const float* g = grad.data();
  double sw = 0.0, sg = 0.0;
  for (int64_t i = 0; i < w.size(); ++i) {
    sw += static_cast<double>(ws[i]) * ws[i];
    sg += static_cast<double>(g[i]) * g[i];
  }
  norms2.data()[0] = static_cast<float>(sw);
  norms2.data()[1] = static_cast<float>(sg);
}

}  // namespace colonnade
