// The SGD update (core/ops/sgd.h: plain, Nesterov, LARS), the LARS norms, and the step's scalars
// block a graphed step reads (StepScalars, core/ops.h: the learning rate here, dropout's and the
// results' step). Kernels, launchers (ops/sgd.h) and the CudaOps method.
//
// Shapes: w, grad, velocity n floats (a parameter, any layout). Mapping: a grid-stride loop, one
// thread per element (SgdKernel), or up to 48 tensors per launch, a block per 2,048 elements of
// one (SgdManyKernel, the optimiser's step); each product and sum rounded separately (__fmul_rn,
// __fadd_rn; and the file is built --fmad=false), as CpuOps's, so the update is the CPU's bit for
// bit. In a graphed step lr = *lr_on_device * lr_mult, one rounded product, as the host computes
// it.

#include <climits>
#include <cstdint>
#include <vector>

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
// The rate of one tensor's update: lr (or *lr_on_device * lr_mult in a graphed step: one
// rounded product, as the host's `lr * lr_mult` that makes lr), times LARS's trust ratio.
__device__ __forceinline__ float SgdRate(float lr, const float* lr_on_device, float lr_mult,
                                         const float* lars_norms, float lars_eta, float wd) {
  float r = lr_on_device ? __fmul_rn(*lr_on_device, lr_mult) : lr;
  if (lars_norms) r = __fmul_rn(r, LarsTrustGpu(lars_norms, lars_eta, wd));
  return r;
}
// One element's update, each product and sum rounded as CpuOps::SgdUpdate rounds it.
__device__ __forceinline__ void SgdElement(float* w_, const float* g_, float* v_, int64_t i,
                                           float lr, float momentum, float wd, bool nesterov) {
  const float w = w_[i];
  const float grad = __fadd_rn(g_[i], __fmul_rn(wd, w));
  const float step = __fmul_rn(lr, grad);
  const float v = __fsub_rn(__fmul_rn(momentum, v_[i]), step);
  v_[i] = v;
  w_[i] = nesterov ? __fadd_rn(w, __fsub_rn(__fmul_rn(momentum, v), step)) : __fadd_rn(w, v);
}
__global__ void SgdKernel(const SgdKernelParams p) {
  const float lr = SgdRate(p.lr, p.lr_on_device, p.lr_mult, p.lars_norms, p.lars_eta, p.wd);
  GRID_STRIDE_LOOP(i, p.n) { SgdElement(p.w, p.g, p.v, i, lr, p.momentum, p.wd, p.nesterov); }
}

// Kernel SgdManyKernel: SgdKernel's update for up to kSgdManyTensors tensors in one launch.
// Each block takes kSgdChunk consecutive elements of one tensor: tensor t owns blocks
// [first[t], first[t + 1]), found by a binary search over the launch's table; every element's
// arithmetic is SgdKernel's, so the results are its bits. The table travels as the kernel's
// parameters (about 3.6 KiB of the 4 KiB allowed), so a captured step graph holds it.
constexpr int kSgdManyTensors = 48;
constexpr int kSgdChunk = 8 * kBlock;  // elements per block
struct SgdManyEntry {
  float* w;
  const float* g;
  float* v;
  const float* lr_on_device;
  const float* lars_norms;
  int64_t n;
  float lr, lr_mult, momentum, wd, lars_eta;
  int nesterov;
};
struct SgdManyParams {
  SgdManyEntry e[kSgdManyTensors];
  int first[kSgdManyTensors + 1];  // first[count]: the grid's size
  int count;
};
__global__ void SgdManyKernel(const SgdManyParams p) {
  int lo = 0, hi = p.count - 1;  // the last t with first[t] <= blockIdx.x
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.first[mid] <= static_cast<int>(blockIdx.x)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const SgdManyEntry& e = p.e[lo];
  const float lr = SgdRate(e.lr, e.lr_on_device, e.lr_mult, e.lars_norms, e.lars_eta, e.wd);
  const int64_t begin = static_cast<int64_t>(blockIdx.x - p.first[lo]) * kSgdChunk;
  const int64_t end = begin + kSgdChunk < e.n ? begin + kSgdChunk : e.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += kBlock)
    SgdElement(e.w, e.g, e.v, i, lr, e.momentum, e.wd, e.nesterov != 0);
}
static_assert(sizeof(SgdManyParams) <= 4000, "SgdManyParams fits the kernel parameter space");

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

void SgdUpdateManyGpu(const DeviceContext& ctx, const std::vector<SgdManyUpdate>& updates) {
  size_t i = 0;
  while (i < updates.size()) {
    SgdManyParams p{};
    int64_t blocks = 0;
    for (; i < updates.size() && p.count < kSgdManyTensors; ++i) {
      const SgdManyUpdate& u = updates[i];
      if (u.n <= 0) continue;
      const int64_t b = CeilDiv(u.n, int64_t(kSgdChunk));
      CHECK_LE(b, INT32_MAX) << "SgdUpdateMany: a tensor of " << u.n << " floats";
      if (blocks + b > INT32_MAX) break;  // the next launch takes it
      p.first[p.count] = static_cast<int>(blocks);
      p.e[p.count++] = SgdManyEntry{u.w,
                                    u.grad,
                                    u.v,
                                    u.p.lr_on_device,
                                    u.p.lars_norms,
                                    u.n,
                                    u.p.lr,
                                    u.p.lr_mult,
                                    u.p.momentum,
                                    u.p.weight_decay,
                                    u.p.lars_eta,
                                    u.p.nesterov ? 1 : 0};
      blocks += b;
    }
    if (p.count == 0) continue;
    p.first[p.count] = static_cast<int>(blocks);
    Launch(SgdManyKernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlock), ctx.stream, p);
  }
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

void CudaOps::SgdUpdateMany(const std::vector<SgdTensor>& updates) {
  std::vector<SgdManyUpdate> raw;
  raw.reserve(updates.size());
  for (const SgdTensor& u : updates) {
    SameSize(*u.w, *u.grad, "SgdUpdateMany grad");
    SameSize(*u.w, *u.velocity, "SgdUpdateMany velocity");
    raw.push_back(SgdManyUpdate{u.w->data(), u.grad->data(), u.velocity->data(), u.w->size(), u.p});
  }
  SgdUpdateManyGpu(ctx_, raw);
}

void CudaOps::SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) {
  SameSize(w, grad, "SquaredNorms grad");
  CHECK_EQ(norms2.size(), 2) << "SquaredNorms: norms2 must hold 2 floats";
  SquaredNormsGpu(ctx_, w.data(), grad.data(), w.size(), norms2.data());
}

}  // namespace colonnade::cuda
