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
  if (threadIdx.x == 0) {
    const int label = static_cast<int>(p.labels[img]);
    const float z = (label >= 0 && label < p.k) ? p.logits[int64_t(label) * p.n + img] : NAN;
    p.loss[img] = static_cast<float>(log(s) - (static_cast<double>(z) - mx));
  }
}
// Kernel SoftmaxXentBackwardKernel: dlogits[k][n] = scale * (probs[k][n] - [k == label[n]]).
__global__ void SoftmaxXentBackwardKernel(const XentParams p) {
  GRID_STRIDE_LOOP(i, int64_t(p.k) * p.n) {
    const int64_t k = i / p.n, img = i % p.n;
    const float onehot = static_cast<int64_t>(p.labels[img]) == k ? 1.0f : 0.0f;
    p.dlogits[i] = p.scale * (p.probs_in[i] - onehot);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void SoftmaxCrossEntropyForwardGpu(const DeviceContext& ctx, const float* logits,
                                   const float* labels, float* probs, float* loss, int k, int n) {
  XentParams p{};
  p.logits = logits;
  p.labels = labels;
  p.probs = probs;
  p.loss = loss;
  p.k = k;
  p.n = n;
  Launch(SoftmaxXentForwardKernel, dim3(n), dim3(kBlock), ctx.stream, p);
}

void SoftmaxCrossEntropyBackwardGpu(const DeviceContext& ctx, const float* probs,
                                    const float* labels, float scale, float* dlogits, int k,
                                    int n) {
  XentParams p{};
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
                                         Tensor& loss_per_image) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(logits, labels, probs, &loss_per_image, "SoftmaxCrossEntropyForward");
  if (d.batch == 0) return;  // nothing to launch (as on the CPU)
  SoftmaxCrossEntropyForwardGpu(ctx_, logits.data(), labels.data(), probs.data(),
                                loss_per_image.data(), I32(d.classes, "classes"),
                                I32(d.batch, "batch"));
}

void CudaOps::SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                          Tensor& dlogits) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(probs, labels, dlogits, nullptr, "SoftmaxCrossEntropyBackward");
  if (d.batch == 0) return;
  SoftmaxCrossEntropyBackwardGpu(ctx_, probs.data(), labels.data(), scale, dlogits.data(),
                                 I32(d.classes, "classes"), I32(d.batch, "batch"));
}

}  // namespace colonnade::cuda
