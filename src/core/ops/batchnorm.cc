// The batch-norm family's shape rule and CPU reference (batchnorm.h; the CUDA kernels:
// src/cuda/ops/batchnorm.cu). The fused ReLU is the primitives' ReLU, applied after the batch
// norm (forward) or to dy before it (backward), so fused and unfused give the same bits.
#include "core/ops/batchnorm.h"

#include <cmath>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::ParallelFor;

namespace op_shapes {

void BatchNorm(const Tensor& x, std::initializer_list<const Tensor*> same,
               std::initializer_list<const Tensor*> per_channel, const char* what) {
  CHWN(x, what);
  AllSameSize(x, same, what);
  for (const Tensor* t : per_channel)
    CHECK_EQ(t->size(), x.c()) << what << ": per-channel tensor " << t->shape().ToString()
                               << " for " << x.shape().ToString();
}

}  // namespace op_shapes

// ---------------------------------------------------------------------------------------
// Batch normalisation: per channel over its contiguous H*W*N block; one thread per
// channel, statistics in double.
// ---------------------------------------------------------------------------------------

// y = (x - mean) * scale + shift over one channel's n values: the one expression of the
// training forward and of BatchNormApply, so both round alike (C++17 without extensions
// does not contract it into an FMA).
namespace {
void ApplyChannel(const float* x, int64_t n, float mean, float scale, float shift, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + shift;
}
}  // namespace

// mean = E[x], var = E[(x - mean)^2] (biased, used to normalise),
// invstd = 1 / sqrt(var + eps), y = gamma (x - mean) invstd + beta;
// running = (1 - momentum) running + momentum * batch, with the unbiased variance
// var * S / (S - 1) for running_var (S = H*W*N values per channel).
void CpuOps::BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   Tensor& y, Tensor& running_mean, Tensor& running_var,
                                   Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                   const BatchNormParams& p, bool relu, bool) {  // y always written
  op_shapes::BatchNorm(
      x, {&y}, {&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd, &save_scale},
      "BatchNormForwardTrain");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, 4 * S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* xv = xs + c * S;
      double sum = 0.0;
      for (int64_t i = 0; i < S; ++i) sum += xv[i];
      const double mean = sum / S;
      double ss = 0.0;
      for (int64_t i = 0; i < S; ++i) {
        const double d = xv[i] - mean;
        ss += d * d;
      }
      const double var = ss / S;
      const double invstd = 1.0 / std::sqrt(var + p.eps);
      const double unbiased = S > 1 ? ss / (S - 1) : var;
      // (x - mean) first: folding mean into a shift would cancel badly when |mean| >> std.
      const float meanf = static_cast<float>(mean), betaf = beta.data()[c];
      const float scale = static_cast<float>(gamma.data()[c] * invstd);
      ApplyChannel(xv, S, meanf, scale, betaf, ys + c * S);
      save_mean.data()[c] = meanf;
      save_invstd.data()[c] = static_cast<float>(invstd);
      save_scale.data()[c] = scale;
      running_mean.data()[c] =
          static_cast<float>((1.0 - p.momentum) * running_mean.data()[c] + p.momentum * mean);
      running_var.data()[c] =
          static_cast<float>((1.0 - p.momentum) * running_var.data()[c] + p.momentum * unbiased);
    }
  });
  if (relu) ReluForward(y, y);
}

void CpuOps::BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                            const Tensor& shift, Tensor& y, bool relu) {
  op_shapes::BatchNorm(x, {&y}, {&mean, &scale, &shift}, "BatchNormApply");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      ApplyChannel(x.data() + c * S, S, mean.data()[c], scale.data()[c], shift.data()[c],
                   y.data() + c * S);
  });
  if (relu) ReluForward(y, y);
}

// y = gamma (x - running_mean) / sqrt(running_var + eps) + beta.
void CpuOps::BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& running_mean, const Tensor& running_var, Tensor& y,
                                   const BatchNormParams& p) {
  op_shapes::BatchNorm(x, {&y}, {&gamma, &beta, &running_mean, &running_var},
                       "BatchNormForwardInfer");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var.data()[c]) + p.eps);
      const float scale = static_cast<float>(gamma.data()[c] * invstd);
      const float mean = running_mean.data()[c], betaf = beta.data()[c];
      const float* xv = xs + c * S;
      float* yv = ys + c * S;
      for (int64_t i = 0; i < S; ++i) yv[i] = (xv[i] - mean) * scale + betaf;
    }
  });
}

// With xhat = (x - mean) invstd (the training-mode statistics saved by forward):
//   dbeta = sum dy, dgamma = sum dy xhat,
//   dx = gamma invstd / S * (S dy - dbeta - xhat dgamma).
// With relu_y, dy first passes the ReLU into a scratch tensor (ReluBackward's bits); with
// mask_scale and mask_shift, through the mask of y computed again from x (ApplyChannel, the
// forward's arithmetic: the same bits), and relu_y is not read (the memory plan may not keep it).
void CpuOps::BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                               const Tensor& save_invstd, const Tensor* relu_y, const Tensor& dy,
                               Tensor& dx, Tensor& dgamma, Tensor& dbeta, const Tensor* mask_scale,
                               const Tensor* mask_shift) {
  Tensor masked;
  if (relu_y) {
    masked = Tensor(dy.shape(), Device::kCPU);
    if (mask_scale != nullptr && mask_shift != nullptr) {
      op_shapes::BatchNorm(x, {&dy}, {&save_mean, mask_scale, mask_shift},
                           "BatchNormBackward mask");
      Tensor y(x.shape(), Device::kCPU);  // before the ReLU: the same mask
      const int64_t C = x.c(), S = x.h() * x.w() * x.n();
      ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c)
          ApplyChannel(x.data() + c * S, S, save_mean.data()[c], mask_scale->data()[c],
                       mask_shift->data()[c], y.data() + c * S);
      });
      ReluBackward(y, dy, masked);
    } else {
      ReluBackward(*relu_y, dy, masked);
    }
  }
  const Tensor& g_in = relu_y ? masked : dy;
  op_shapes::BatchNorm(x, {&g_in, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                       "BatchNormBackward");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  const float* gs = g_in.data();
  float* dxs = dx.data();
  ParallelFor(C, 4 * S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double mean = save_mean.data()[c], invstd = save_invstd.data()[c];
      const float* xv = xs + c * S;
      const float* g = gs + c * S;
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for (int64_t i = 0; i < S; ++i) {
        sum_dy += g[i];
        sum_dy_xhat += g[i] * ((xv[i] - mean) * invstd);
      }
      dbeta.data()[c] = static_cast<float>(sum_dy);
      dgamma.data()[c] = static_cast<float>(sum_dy_xhat);
      const double k = gamma.data()[c] * invstd / S;
      float* d = dxs + c * S;
      for (int64_t i = 0; i < S; ++i) {
        const double xhat = (xv[i] - mean) * invstd;
        d[i] =
            static_cast<float>(k * (S * static_cast<double>(g[i]) - sum_dy - xhat * sum_dy_xhat));
      }
    }
  });
}

}  // namespace colonnade
