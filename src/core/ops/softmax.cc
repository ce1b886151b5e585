// The softmax cross-entropy's shape rule and CPU reference (softmax.h; the CUDA kernels:
// src/cuda/ops/softmax.cu).
#include "core/ops/softmax.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"

namespace colonnade {

namespace op_shapes {

SoftmaxDims Softmax(const Tensor& scores, const Tensor& labels, const Tensor& same,
                    const Tensor* loss, const char* what) {
  CHECK_GE(scores.shape().rank(), 1) << what << ": scalar scores";
  SoftmaxDims d;
  d.batch = scores.shape()[scores.shape().rank() - 1];
  d.classes = scores.size() / std::max<int64_t>(d.batch, 1);
  CHECK_EQ(labels.size(), d.batch) << what << ": labels " << labels.shape().ToString()
                                   << " for scores " << scores.shape().ToString();
  SameSize(scores, same, what);
  if (loss != nullptr) {
    CHECK_EQ(loss->size(), d.batch) << what << ": loss " << loss->shape().ToString()
                                    << " for scores " << scores.shape().ToString();
  }
  return d;
}

}  // namespace op_shapes

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy. logits are a K x N row-major matrix (class k of image n at
// k*N + n), so the per-image reductions run over a column; they are done for all images
// at once, row by row, to keep the accesses unit-stride.
// ---------------------------------------------------------------------------------------
namespace {
int64_t LabelOf(const float* labels, int64_t n, int64_t K) {
  const float v = labels[n];
  const int64_t l = static_cast<int64_t>(v);
  CHECK(static_cast<float>(l) == v && l >= 0 && l < K)
      << "label " << v << " of image " << n << " is not a class index in [0, " << K << ")";
  return l;
}
}  // namespace

// probs = exp(z - max) / sum exp(z - max);  loss = log(sum exp(z - max)) - (z_label - max),
// which never takes the log of an underflowed probability. With label smoothing eps, in
// double: loss = log(sum) - (1 - eps) (z_label - max) - eps/K sum_k (z_k - max), which is
// (1 - eps) (-log p_label) + eps/K sum_k (-log p_k) without a log of any probability.
void CpuOps::SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                        Tensor& loss_per_image, float label_smoothing) {
  const op_shapes::SoftmaxDims dims =
      op_shapes::Softmax(logits, labels, probs, &loss_per_image, "SoftmaxCrossEntropyForward");
  const int64_t N = dims.batch, K = dims.classes;
  const float* z = logits.data();
  float* pr = probs.data();
  std::vector<float> mx(N, -INFINITY);
  std::vector<double> sum(N, 0.0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) mx[n] = std::max(mx[n], z[k * N + n]);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const float e = std::exp(z[k * N + n] - mx[n]);
      pr[k * N + n] = e;
      sum[n] += e;
    }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) pr[k * N + n] = static_cast<float>(pr[k * N + n] / sum[n]);
  // sum_k (z_k - max), only with smoothing (eps == 0 keeps the plain loss's arithmetic).
  std::vector<double> zsum(label_smoothing != 0.0f ? N : 0, 0.0);
  if (label_smoothing != 0.0f) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) zsum[n] += static_cast<double>(z[k * N + n]) - mx[n];
  }
  const double eps = label_smoothing;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = LabelOf(labels.data(), n, K);
    const double zl = static_cast<double>(z[l * N + n]) - mx[n];
    loss_per_image.data()[n] =
        label_smoothing == 0.0f
            ? static_cast<float>(std::log(sum[n]) - zl)
            : static_cast<float>(std::log(sum[n]) - (1.0 - eps) * zl - eps / K * zsum[n]);
  }
}

// dlogits = scale * (probs - onehot(label)); smoothed: scale * (probs - target), target
// SmoothTargets' off, and on at the label.
void CpuOps::SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                         Tensor& dlogits, float label_smoothing) {
  const op_shapes::SoftmaxDims dims =
      op_shapes::Softmax(probs, labels, dlogits, nullptr, "SoftmaxCrossEntropyBackward");
  const int64_t N = dims.batch, K = dims.classes;
  const float* pr = probs.data();
  float* d = dlogits.data();
  if (label_smoothing != 0.0f) {
    const SmoothedTargets t = SmoothTargets(label_smoothing, K);
    for (int64_t i = 0; i < K * N; ++i) d[i] = scale * (pr[i] - t.off);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t l = LabelOf(labels.data(), n, K);
      d[l * N + n] = scale * (pr[l * N + n] - t.on);
    }
    return;
  }
  for (int64_t i = 0; i < K * N; ++i) d[i] = scale * pr[i];
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = LabelOf(labels.data(), n, K);
    d[l * N + n] = scale * (pr[l * N + n] - 1.0f);
  }
}

}  // namespace colonnade
