// The SGD update (core/ops/sgd.h) and the step's scalars block a graphed step reads
// (StepScalars, core/ops.h: the learning rate here, dropout's and the results' step). Kernels,
// launchers (ops/sgd.h) and the CudaOps method.
//
// Shapes: w, grad, velocity n floats (a parameter, any layout). Mapping: a grid-stride loop, one
// thread per element; each product and sum rounded separately (__fmul_rn, __fadd_rn; and the
// file is built --fmad=false), as CpuOps's, so the update is the CPU's bit for bit. In a graphed
// step lr = *lr_on_device * lr_mult, one rounded product, as the host computes it.

#include <cstdint>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/sgd.h"

namespace colonnade::cuda {
namespace {

// ---- SGD ----------------------------------------------------------------------------------------
// Kernel SgdKernel: v = momentum*v - lr*(grad + wd*w); w = w + v, element-wise over n.
// Each product and sum is rounded separately (no FMA contraction), as on the CPU.
struct SgdKernelParams {
  float* w;
  const float* g;
  float* v;
  int64_t n;
  float lr, momentum, wd;
  const float* lr_on_device;  // a CUDA-graph step: lr = *lr_on_device * lr_mult (StepScalars)
  float lr_mult;
};
__global__ void SgdKernel(const SgdKernelParams p) {
  // One rounded product, as the host's `lr * lr_mult` that makes p.lr: the same bits.
  const float lr = p.lr_on_device ? __fmul_rn(*p.lr_on_device, p.lr_mult) : p.lr;
  GRID_STRIDE_LOOP(i, p.n) {
    const float w = p.w[i];
    const float grad = __fadd_rn(p.g[i], __fmul_rn(p.wd, w));
    const float v = __fsub_rn(__fmul_rn(p.momentum, p.v[i]), __fmul_rn(lr, grad));
    p.v[i] = v;
    p.w[i] = __fadd_rn(w, v);
  }
}

// Kernel SetStepScalarsKernel: one thread writes a step's StepScalars block. Queued on the
// compute stream before each replay of a step graph: the values travel as launch
// arguments, so no host buffer has to outlive the call.
struct StepScalarsParams {
  StepScalars* out;
  StepScalars v;
};
__global__ void SetStepScalarsKernel(const StepScalarsParams p) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *p.out = p.v;
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void SgdUpdateGpu(const DeviceContext& ctx, float* w, const float* grad, float* v, int64_t n,
                  const SgdParams& sp) {
  SgdKernelParams p{w, grad, v, n, sp.lr, sp.momentum, sp.weight_decay};
  p.lr_on_device = sp.lr_on_device;
  p.lr_mult = sp.lr_mult;
  Launch(SgdKernel, GridFor(ctx, n), dim3(kBlock), ctx.stream, p);
}

void SetStepScalarsGpu(cudaStream_t stream, StepScalars* out, const StepScalars& v) {
  Launch(SetStepScalarsKernel, dim3(1), dim3(32), stream, StepScalarsParams{out, v});
}

// ---- CudaOps methods ---------------------------------------------------------------------------

using op_shapes::SameSize;

void CudaOps::SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
  SameSize(w, grad, "SgdUpdate grad");
  SameSize(w, velocity, "SgdUpdate velocity");
  SgdUpdateGpu(ctx_, w.data(), grad.data(), velocity.data(), w.size(), p);
}

}  // namespace colonnade::cuda
