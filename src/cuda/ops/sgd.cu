// The SGD update (core/ops/sgd.h: plain, Nesterov, LARS), the LARS norms, and the step's scalars
// block a graphed step reads (StepScalars, core/ops.h: the learning rate here, dropout's and the
// results' step). Kernels, launchers (ops/sgd.h) and the CudaOps method.
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
// Kernel SgdKernel: v = momentum*v - lr*(grad + wd*w); w = w + v (Nesterov: w = w + momentum*v
// - lr*(grad + wd*w)), element-wise over n; with LARS lr = lr * trust (LarsTrustGpu).
// Each product and sum is rounded separately (no FMA contraction), as on the CPU.
struct SgdKernelParams {
  float* w;
  const float* g;
  float* v;
  int64_t n;
  float lr, momentum, wd;
  const float* lr_on_device;  // a CUDA-graph step: lr = *lr_on_device * lr_mult (StepScalars)
  float lr_mult;
  bool nesterov;
  const float* lars_norms;  // LARS: ||w||^2, ||g||^2 on the device (SquaredNormsKernel)
  float lars_eta;
};
// The LARS trust ratio (core/ops/sgd.h), the CPU's LarsTrust operation for operation.
__device__ __forceinline__ float LarsTrustGpu(const float* norms2, float eta, float wd) {
  const float wn = __fsqrt_rn(norms2[0]);
  const float gn = __fsqrt_rn(norms2[1]);
  if (!(wn > 0.0f && gn > 0.0f)) return 1.0f;
  return __fdiv_rn(__fmul_rn(eta, wn), __fadd_rn(gn, __fmul_rn(wd, wn)));
}
__global__ void SgdKernel(const SgdKernelParams p) {
  // One rounded product, as the host's `lr * lr_mult` that makes p.lr: the same bits.
  float lr = p.lr_on_device ? __fmul_rn(*p.lr_on_device, p.lr_mult) : p.lr;
  if (p.lars_norms) lr = __fmul_rn(lr, LarsTrustGpu(p.lars_norms, p.lars_eta, p.wd));
  GRID_STRIDE_LOOP(i, p.n) {
    const float w = p.w[i];
    const float grad = __fadd_rn(p.g[i], __fmul_rn(p.wd, w));
    const float step = __fmul_rn(lr, grad);
    const float v = __fsub_rn(__fmul_rn(p.momentum, p.v[i]), step);
    p.v[i] = v;
    p.w[i] = p.nesterov ? __fadd_rn(w, __fsub_rn(__fmul_rn(p.momentum, v), step)) : __fadd_rn(w, v);
  }
}

// Kernel SquaredNormsKernel: out[0] = sum w^2, out[1] = sum g^2 over n. One block: each thread
// sums the elements i = tid (mod kBlock) in double in index order, then BlockSum's fixed tree:
// the same bits on every run (the order depends on n alone). One block streams a tensor at a
// fraction of the device's bandwidth; LARS runs it once per parameter tensor and step.
struct NormsParams {
  const float* w;
  const float* g;
  int64_t n;
  float* out;
};
__global__ void SquaredNormsKernel(const NormsParams p) {
  __shared__ double sh[kBlock];
  double sw = 0.0, sg = 0.0;
  for (int64_t i = threadIdx.x; i < p.n; i += kBlock) {
    const double w = p.w[i], g = p.g[i];
    sw = __dadd_rn(sw, __dmul_rn(w, w));
    sg = __dadd_rn(sg, __dmul_rn(g, g));
  }
  sw = BlockSum(sw, sh);
  sg = BlockSum(sg, sh);
  if (threadIdx.x == 0) {
    p.out[0] = static_cast<float>(sw);
    p.out[1] = static_cast<float>(sg);
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
  p.nesterov = sp.nesterov;
  p.lars_norms = sp.lars_norms;
  p.lars_eta = sp.lars_eta;
  Launch(SgdKernel, GridFor(ctx, n), dim3(kBlock), ctx.stream, p);
}

void SquaredNormsGpu(const DeviceContext& ctx, const float* w, const float* grad, int64_t n,
                     float* out) {
  Launch(SquaredNormsKernel, dim3(1), dim3(kBlock), ctx.stream, NormsParams{w, grad, n, out});
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

void CudaOps::SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) {
  SameSize(w, grad, "SquaredNorms grad");
  CHECK_EQ(norms2.size(), 2) << "SquaredNorms: norms2 must hold 2 floats";
  SquaredNormsGpu(ctx_, w.data(), grad.data(), w.size(), norms2.data());
}

}  // namespace colonnade::cuda
