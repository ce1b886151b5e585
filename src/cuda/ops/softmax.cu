// Softmax with cross-entropy (core/ops/softmax.h). Kernels, launchers (ops/softmax.h) and the
// CudaOps methods.
//
// Shapes: logits, probs, dlogits K x N (class-major, images innermost: the CHWN K x 1 x 1 x N
// of the last layer), labels and the per-image loss N floats. Forward: one block per image
// (its classes are N apart), the max and the sum of exponentials as block reductions (the sum
// in double), then probs and the loss log(sum) - (z[label] - max), which never takes the log of
// an underflowed probability. Backward: a grid-stride loop, one thread per element of dlogits.

#include <cstdint>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/softmax.h"

namespace colonnade::cuda {
namespace {

// ---- softmax + cross-entropy ------------------------------------------------------------------
// Kernel SoftmaxXentForwardKernel: logits K x N (class-major, images innermost), labels N.
// One block per image: block max, block sum of exp, then probs and -log p[label] computed
// as log(sum) - (z[label] - max).
struct XentParams {
  const float* logits;
  const float* labels;
  const float* probs_in;
  float* probs;
  float* loss;
  float* dlogits;
  int k, n;
  float scale;
  double eps;                   // label smoothing (forward); 0: the plain loss
  float target_off, target_on;  // the smoothed targets (backward, SmoothTargets); 0 and 1 plain
};
__global__ void SoftmaxXentForwardKernel(const XentParams p) {
  __shared__ double shd[kBlock];
  __shared__ float shf[kBlock];
  const int img = blockIdx.x;
  float mx = -INFINITY;
  for (int k = threadIdx.x; k < p.k; k += kBlock) mx = fmaxf(mx, p.logits[int64_t(k) * p.n + img]);
  mx = BlockMax(mx, shf);
  double s = 0.0;
  for (int k = threadIdx.x; k < p.k; k += kBlock) s += expf(p.logits[int64_t(k) * p.n + img] - mx);
  s = BlockSum(s, shd);
  for (int k = threadIdx.x; k < p.k; k += kBlock) {
    const int64_t o = int64_t(k) * p.n + img;
    p.probs[o] = static_cast<float>(static_cast<double>(expf(p.logits[o] - mx)) / s);
  }
  // Label smoothing: sum_k (z_k - max) in double, only when asked (the plain loss keeps its
  // arithmetic); the CPU's formula, with the block's summation order.
  double zs = 0.0;
  if (p.eps != 0.0) {
    for (int k = threadIdx.x; k < p.k; k += kBlock)
      zs += static_cast<double>(p.logits[int64_t(k) * p.n + img]) - mx;
    zs = BlockSum(zs, shd);
  }
  if (threadIdx.x == 0) {
    const int label = static_cast<int>(p.labels[img]);
    const float z = (label >= 0 && label < p.k) ? p.logits[int64_t(label) * p.n + img] : NAN;
    const double zl = static_cast<double>(z) - mx;
    p.loss[img] = p.eps == 0.0 ? static_cast<float>(log(s) - zl)
                               : static_cast<float>(log(s) - (1.0 - p.eps) * zl - p.eps / p.k * zs);
  }
}
// Kernel SoftmaxXentBackwardKernel: dlogits[k][n] = scale * (probs[k][n] - target), target
// target_on when k == label[n], else target_off (1 and 0 without label smoothing).
__global__ void SoftmaxXentBackwardKernel(const XentParams p) {
  GRID_STRIDE_LOOP(i, int64_t(p.k) * p.n) {
    const int64_t k = i / p.n, img = i % p.n;
    const float target = static_cast<int64_t>(p.labels[img]) == k ? p.target_on : p.target_off;
    p.dlogits[i] = p.scale * (p.probs_in[i] - target);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n,
                                   float label_smoothing) {
  XentParams p{};
  p.eps = label_smoothing;
  p.logits = logits;
  p.labels = labels;
  p.probs = probs;
  p.loss = loss;
  p.k = k;
  p.n = n;
  Launch(SoftmaxXentForwardKernel, dim3(n), dim3(kBlock), ctx.stream, p);
}

void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k, int n,
                                    float label_smoothing) {
  XentParams p{};
  p.target_off = 0.0f;
  p.target_on = 1.0f;
  if (label_smoothing != 0.0f) {
    const SmoothedTargets t = SmoothTargets(label_smoothing, k);
    p.target_off = t.off;
    p.target_on = t.on;
  }
  p.probs_in = probs;
  p.labels = labels;
  p.dlogits = dlogits;
  p.k = k;
  p.n = n;
  p.scale = scale;
  Launch(SoftmaxXentBackwardKernel, GridFor(ctx, int64_t(k) * n), dim3(kBlock), ctx.stream, p);
}

// ---- CudaOps methods ---------------------------------------------------------------------------

void CudaOps::SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                         Tensor& loss_per_image, float label_smoothing) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(logits, labels, probs, &loss_per_image, "SoftmaxCrossEntropyForward");
  if (d.batch == 0) return;  // nothing to launch (as on the CPU)
  SoftmaxCrossEntropyForwardGpu(ctx_, logits.data(), labels.data(), probs.data(),
                                loss_per_image.data(), I32(d.classes, "classes"),
                                I32(d.batch, "batch"), label_smoothing);
}

void CudaOps::SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                          Tensor& dlogits, float label_smoothing) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(probs, labels, dlogits, nullptr, "SoftmaxCrossEntropyBackward");
  if (d.batch == 0) return;
  SoftmaxCrossEntropyBackwardGpu(ctx_, probs.data(), labels.data(), scale, dlogits.data(),
                                 I32(d.classes, "classes"), I32(d.batch, "batch"), label_smoothing);
}

}  // namespace colonnade::cuda
