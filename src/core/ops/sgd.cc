// The SGD update's CPU reference (sgd.h; the CUDA kernel: src/cuda/ops/sgd.cu).
#include "core/ops/sgd.h"

#include "core/cpu_ops.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::ParallelFor;
using op_shapes::SameSize;

// v = momentum v - lr (grad + weight_decay w);  w = w + v   (element-wise, in float).
void CpuOps::SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
  SameSize(w, grad, "SgdUpdate grad");
  SameSize(w, velocity, "SgdUpdate velocity");
  float* ws = w.data();
  const float* g = grad.data();
  float* v = velocity.data();
  ParallelFor(w.size(), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float vi = p.momentum * v[i] - p.lr * (g[i] + p.weight_decay * ws[i]);
      v[i] = vi;
      ws[i] += vi;
    }
  });
}

}  // namespace colonnade
