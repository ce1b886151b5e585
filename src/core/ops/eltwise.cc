// The element-wise family's shape rules and CPU reference (eltwise.h; the CUDA kernels:
// src/cuda/ops/eltwise.cu).
#include "core/ops/eltwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::ParallelFor;
using cpu::SelectIf;
using op_shapes::SameSize;

namespace op_shapes {

void CopyChannels(const Tensor& part, int64_t c0, const Tensor& whole, const char* what) {
  CHWN(part, what);
  CHWN(whole, what);
  CHECK(part.h() == whole.h() && part.w() == whole.w() && part.n() == whole.n() && c0 >= 0 &&
        c0 + part.c() <= whole.c())
      << what << " " << part.shape().ToString() << " at " << c0 << " of "
      << whole.shape().ToString();
}

void Bias(const Tensor& y, const Tensor& b, const char* what) {
  CHECK_GE(y.shape().rank(), 1) << what << ": scalar " << y.shape().ToString();
  CHECK_EQ(b.size(), y.shape()[0])
      << what << ": bias of " << b.size() << " for " << y.shape().ToString();
}

}  // namespace op_shapes

void CpuOps::Fill(Tensor& y, float value) {
  float* d = y.data();
  ParallelFor(y.size(), 1, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, value); });
}

void CpuOps::Copy(const Tensor& x, Tensor& y) {
  SameSize(x, y, "Copy");
  if (x.data() == y.data() || x.size() == 0) return;
  std::memcpy(y.data(), x.data(), x.bytes());
}

// y = alpha x + beta y. As in BLAS, beta == 0 means y is not read (so stale NaNs in a
// fresh buffer do not leak). x may alias y.
void CpuOps::Axpby(float alpha, const Tensor& x, float beta, Tensor& y) {
  SameSize(x, y, "Axpby");
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(x.size(), 2, [&](int64_t b, int64_t e) {
    if (beta == 0.0f) {
      for (int64_t i = b; i < e; ++i) ys[i] = alpha * xs[i];
    } else {
      for (int64_t i = b; i < e; ++i) ys[i] = alpha * xs[i] + beta * ys[i];
    }
  });
}

// y = a + b; y may alias a or b (the Net accumulates gradients this way). The fused ReLU is
// ReluForward in place after the sum.
void CpuOps::Add(const Tensor& a, const Tensor& b, Tensor& y, bool relu) {
  SameSize(a, b, "Add");
  SameSize(a, y, "Add");
  const float* as = a.data();
  const float* bs = b.data();
  float* ys = y.data();
  ParallelFor(a.size(), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) ys[i] = as[i] + bs[i];
  });
  if (relu) ReluForward(y, y);
}

// In CHWN a range of channels is one contiguous block, so concatenation along channels
// is a single memcpy per input.
void CpuOps::CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsIn");
  if (x.size() == 0) return;
  std::memcpy(y.data() + c0 * y.h() * y.w() * y.n(), x.data(), x.bytes());
}

void CpuOps::CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsOut");
  if (x.size() == 0) return;
  std::memcpy(x.data(), y.data() + c0 * y.h() * y.w() * y.n(), x.bytes());
}

// Double-precision sum over fixed blocks of 64Ki elements added in block order, so the
// result does not depend on the thread count.
double CpuOps::Sum(const Tensor& x) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t n = x.size();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks, 0.0);
  const float* d = x.data();
  ParallelFor(blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      for (int64_t i = b * kBlock, e = std::min(n, (b + 1) * kBlock); i < e; ++i) s += d[i];
      partial[b] = s;
    }
  });
  double s = 0.0;
  for (double v : partial) s += v;
  return s;
}

// y[c][...] += b[c]: each channel is one contiguous block of H*W*N.
void CpuOps::AddBias(Tensor& y, const Tensor& b) {
  op_shapes::Bias(y, b, "AddBias");
  const int64_t C = y.shape()[0], S = y.size() / std::max<int64_t>(C, 1);
  float* ys = y.data();
  const float* bs = b.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float v = bs[c];
      float* d = ys + c * S;
      for (int64_t i = 0; i < S; ++i) d[i] += v;
    }
  });
}

// db[c] = sum of channel c's block, accumulated in double (one thread per channel).
void CpuOps::BiasBackward(const Tensor& dy, Tensor& db) {
  op_shapes::Bias(dy, db, "BiasBackward");
  const int64_t C = dy.shape()[0], S = dy.size() / std::max<int64_t>(C, 1);
  const float* d = dy.data();
  float* out = db.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0.0;
      const float* src = d + c * S;
      for (int64_t i = 0; i < S; ++i) s += src[i];
      out[c] = static_cast<float>(s);
    }
  });
}

// y = max(x, 0); x and y may be the same buffer (in-place ReLU).
void CpuOps::ReluForward(const Tensor& x, Tensor& y) {
  SameSize(x, y, "ReluForward");
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(x.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ys[i] = SelectIf(xs[i] > 0.0f, xs[i]);
  });
}

// dx = dy where y > 0, else 0 (y is the output, so this works after an in-place forward).
void CpuOps::ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  SameSize(y, dy, "ReluBackward dy");
  SameSize(y, dx, "ReluBackward dx");
  const float* ys = y.data();
  const float* gs = dy.data();
  float* d = dx.data();
  ParallelFor(y.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] = SelectIf(ys[i] > 0.0f, gs[i]);
  });
}

}  // namespace colonnade
