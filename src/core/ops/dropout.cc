// The dropout family's shape rule and CPU reference (dropout.h; the CUDA kernel:
// src/cuda/ops/dropout.cu).
#include "core/ops/dropout.h"

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"
#include "core/philox.h"

namespace colonnade {
using cpu::ParallelFor;
using op_shapes::SameSize;

namespace op_shapes {

void Dropout(const Tensor& x, const Tensor& y, const Tensor& mask, const DropoutParams& p) {
  CHWN(x, "Dropout x");
  SameSize(x, y, "Dropout y");
  SameSize(x, mask, "Dropout mask");
  const int64_t gb = p.global_batch > 0 ? p.global_batch : x.n();
  CHECK(p.image_offset >= 0 && p.image_offset + x.n() <= gb)
      << "dropout: images [" << p.image_offset << ", " << p.image_offset + x.n()
      << ") outside the global batch of " << gb;
}

}  // namespace op_shapes

// The dropout mask, bit for bit what every implementation (the CUDA kernel too) computes
// for local element (c, h, w, n) of a C x H x W x N tensor:
//   gb    = p.global_batch > 0 ? p.global_batch : N
//   index = (((c + p.channel_offset) * H + h) * W + w) * gb + n + p.image_offset  (uint64)
//   u     = PhiloxUniform(p.seed, p.step, index)   // key seed, counter (step, index)
//   mask  = u < p.p ? 0.0f : 1.0f / (1.0f - p.p)   // dropped with probability p
//   y     = x * mask
// Parallel over (c, h, w) rows of N images.
void CpuOps::DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) {
  op_shapes::Dropout(x, y, mask, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n();
  const int64_t gb = p.global_batch > 0 ? p.global_batch : N;
  const float keep_scale = 1.0f / (1.0f - p.p);
  const float* xs = x.data();
  float* ys = y.data();
  float* ms = mask.data();
  ParallelFor(C * H * W, N * 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // r = (c*H + h)*W + w
      const int64_t c = r / (H * W), hw = r % (H * W);
      const uint64_t base =
          static_cast<uint64_t>(((c + p.channel_offset) * H * W + hw) * gb + p.image_offset);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = r * N + n;
        const float u = PhiloxUniform(p.seed, static_cast<uint64_t>(p.step), base + n);
        const float m = keep_scale * static_cast<float>(u >= p.p);  // 0 when dropped
        ms[i] = m;
        ys[i] = xs[i] * m;
      }
    }
  });
}

// dx = dy * mask (the mask already holds 0 or 1/(1-p)).
void CpuOps::DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  SameSize(dy, mask, "DropoutBackward mask");
  SameSize(dy, dx, "DropoutBackward dx");
  const float* g = dy.data();
  const float* m = mask.data();
  float* d = dx.data();
  ParallelFor(dy.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] = g[i] * m[i];
  });
}

}  // namespace colonnade
