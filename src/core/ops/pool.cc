// The pooling family's shape rules and CPU reference (pool.h; the CUDA kernels:
// src/cuda/ops/pool.cu).
#include "core/ops/pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_ops.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
using cpu::MaxNoBranch;
using cpu::ParallelFor;

// ---- shape rules (op_shapes) ------------------------------------------------------------
namespace op_shapes {

void Pool(const Tensor& x, const Tensor& y, const PoolParams& p) {
  CHWN(x, "pool input");
  CHWN(y, "pool output");
  CHECK(p.size >= 1 && p.stride >= 1 && p.pad >= 0 && p.pad < p.size)
      << "pool size " << p.size << " stride " << p.stride << " pad " << p.pad;
  const int64_t oh = PoolOutSize(x.h(), p.size, p.stride, p.pad, p.ceil_mode);
  const int64_t ow = PoolOutSize(x.w(), p.size, p.stride, p.pad, p.ceil_mode);
  CHECK(y.c() == x.c() && y.n() == x.n() && y.h() == oh && y.w() == ow)
      << "pool " << x.shape().ToString() << " -> " << y.shape().ToString() << " (size " << p.size
      << ", stride " << p.stride << ", pad " << p.pad << (p.ceil_mode ? ", ceil" : ", floor")
      << " mode: expected " << oh << "x" << ow << ")";
}

void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                  const PoolParams& p) {
  Pool(x, y, p);
  SameSize(y, dy, "PoolBackward dy");
  SameSize(x, dx, "PoolBackward dx");
}

void GlobalAvgPool(const Tensor& x, const Tensor& y, const char* what) {
  CHWN(x, what);
  CHECK(y.shape() == Shape::CHWN(x.c(), 1, 1, x.n()))
      << what << ": " << x.shape().ToString() << " vs " << y.shape().ToString() << ", expected "
      << x.c() << "x1x1x" << x.n();
}

}  // namespace op_shapes

// ---- CPU reference (cuda-convnet ceil mode, clipped windows; see pool.h) -------------------
namespace {
// Window [o*stride - pad, o*stride - pad + size) clipped to [0, in).
inline void PoolWindow(int64_t o, int64_t in, const PoolParams& p, int64_t* lo, int64_t* hi) {
  int64_t start = o * p.stride - p.pad;
  *lo = std::max<int64_t>(start, 0);
  *hi = std::min<int64_t>(start + p.size, in);
}
}  // namespace

// Parallel over (channel, output row) pairs, which write disjoint rows of y. For each
// output pixel the N images are reduced together over the window's in-image pixels. With a
// record (max pooling, MaxPoolRecordFits), each window's argmax as the backward without one
// finds it (the first pixel in row-major order equal to the maximum, else the clipped window's
// first), stored as its offset in the unclipped window, a bf16 (exact below 256), as the CUDA
// backend stores it.
void CpuOps::PoolForward(const Tensor& x, Tensor& y, const PoolParams& p, Tensor* record) {
  op_shapes::Pool(x, y, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), OH = y.h(), OW = y.w();
  const float* xs = x.data();
  float* ys = y.data();
  uint16_t* rec = nullptr;
  if (record != nullptr && MaxPoolRecordFits(p)) {
    op_shapes::SameSize(y, *record, "PoolForward (record)");
    CHECK(record->dtype() == DType::kBF16) << "PoolForward: the record is a bf16 tensor";
    rec = static_cast<uint16_t*>(record->raw());
  }
  ParallelFor(C * OH, OW * N * p.size * p.size, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / OH, oy = r % OH;
      int64_t y0, y1;
      PoolWindow(oy, H, p, &y0, &y1);
      const float* xc = xs + c * H * W * N;
      for (int64_t ox = 0; ox < OW; ++ox) {
        int64_t x0, x1;
        PoolWindow(ox, W, p, &x0, &x1);
        float* out = ys + ((c * OH + oy) * OW + ox) * N;
        const int64_t count = (y1 - y0) * (x1 - x0);
        if (count <= 0) {  // cannot happen with pad < size; keep the output defined
          std::fill(out, out + N, 0.0f);
          continue;
        }
        if (p.kind == PoolParams::kMax) {
          std::memcpy(out, xc + (y0 * W + x0) * N, N * sizeof(float));
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float* v = xc + (iy * W + ix) * N;
              for (int64_t n = 0; n < N; ++n) out[n] = MaxNoBranch(out[n], v[n]);
            }
          if (rec != nullptr) {
            uint16_t* r = rec + ((c * OH + oy) * OW + ox) * N;
            const int64_t wy = oy * p.stride - p.pad, wx = ox * p.stride - p.pad;
            for (int64_t n = 0; n < N; ++n) {
              int64_t first = (y0 - wy) * p.size + x0 - wx;
              bool found = false;
              for (int64_t iy = y0; iy < y1 && !found; ++iy)
                for (int64_t ix = x0; ix < x1 && !found; ++ix)
                  if (xc[(iy * W + ix) * N + n] == out[n]) {
                    first = (iy - wy) * p.size + ix - wx;
                    found = true;
                  }
              r[n] = FloatToBf16Bits(static_cast<float>(first));
            }
          }
        } else {
          std::fill(out, out + N, 0.0f);
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float* v = xc + (iy * W + ix) * N;
              for (int64_t n = 0; n < N; ++n) out[n] += v[n];
            }
          const float inv = 1.0f / static_cast<float>(count);
          for (int64_t n = 0; n < N; ++n) out[n] *= inv;
        }
      }
    }
  });
}

// Max: dy of each window goes to the FIRST input pixel, in row-major window order (iy
// outer, ix inner), whose value equals the window's output, i.e. the first maximum.
// Avg: dy / (in-image pixel count) goes to every in-image pixel of the window.
// Windows overlap, so the split is over channels only: a thread owns dx of its channels.
namespace {
// Max pooling's backward by the forward's record, reading neither x nor y (relu_y: the
// forward's y when dx goes on into a ReLU, Ops::PoolBackward's relu_dx): dy of each window,
// in (oy, ox) order, to the pixel its record names, as the search in CpuOps::PoolBackward
// adds them. With relu_y, windows whose maximum is not above 0 pass nothing: their pixel is
// not above 0 either and gets only such windows' dy, so this is the ReLU's mask bit for bit.
void MaxPoolBackwardRecorded(const Tensor& record, const Tensor* relu_y, const Tensor& dy,
                             Tensor& dx, const PoolParams& p) {
  const int64_t C = dx.c(), H = dx.h(), W = dx.w(), N = dx.n(), OH = dy.h(), OW = dy.w();
  const uint16_t* rec = static_cast<const uint16_t*>(record.raw());
  const float* ys = relu_y != nullptr ? relu_y->data() : nullptr;
  const float* dys = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, H * W * N, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* dxc = dxs + c * H * W * N;
      std::fill(dxc, dxc + H * W * N, 0.0f);
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          const int64_t o = ((c * OH + oy) * OW + ox) * N;
          for (int64_t n = 0; n < N; ++n) {
            if (ys != nullptr && !(ys[o + n] > 0.0f)) continue;
            const int64_t off = static_cast<int64_t>(Bf16BitsToFloat(rec[o + n]));
            const int64_t iy = oy * p.stride - p.pad + off / p.size;
            const int64_t ix = ox * p.stride - p.pad + off % p.size;
            dxc[(iy * W + ix) * N + n] += dys[o + n];
          }
        }
    }
  });
}
}  // namespace

void CpuOps::PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                          const PoolParams& p, const Tensor* record, bool relu_dx) {
  op_shapes::PoolBackward(x, y, dy, dx, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), OH = y.h(), OW = y.w();
  if (record != nullptr && MaxPoolRecordFits(p)) {
    op_shapes::SameSize(y, *record, "PoolBackward (record)");
    CHECK(record->dtype() == DType::kBF16) << "PoolBackward: the record is a bf16 tensor";
    return MaxPoolBackwardRecorded(*record, relu_dx ? &y : nullptr, dy, dx, p);
  }
  const float* xs = x.data();
  const float* ys = y.data();
  const float* dys = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, H * W * N * p.size, [&](int64_t c0, int64_t c1) {
    std::vector<int32_t> first(N);  // per image: window pixel that receives dy
    for (int64_t c = c0; c < c1; ++c) {
      const float* xc = xs + c * H * W * N;
      float* dxc = dxs + c * H * W * N;
      std::fill(dxc, dxc + H * W * N, 0.0f);
      for (int64_t oy = 0; oy < OH; ++oy) {
        int64_t y0, y1;
        PoolWindow(oy, H, p, &y0, &y1);
        for (int64_t ox = 0; ox < OW; ++ox) {
          int64_t x0, x1;
          PoolWindow(ox, W, p, &x0, &x1);
          const int64_t o = ((c * OH + oy) * OW + ox) * N;
          const float* yv = ys + o;
          const float* g = dys + o;
          if (p.kind == PoolParams::kMax) {
            // Scan the window backwards, keeping the latest (so finally the first in
            // forward order) pixel equal to the maximum; branch-free selects.
            std::fill(first.begin(), first.end(), static_cast<int32_t>(y0 * W + x0));
            for (int64_t iy = y1 - 1; iy >= y0; --iy)
              for (int64_t ix = x1 - 1; ix >= x0; --ix) {
                const int32_t pix = static_cast<int32_t>(iy * W + ix);
                const float* xv = xc + pix * N;
                for (int64_t n = 0; n < N; ++n) {
                  const int32_t eq = -static_cast<int32_t>(xv[n] == yv[n]);
                  first[n] = (pix & eq) | (first[n] & ~eq);
                }
              }
            for (int64_t n = 0; n < N; ++n) dxc[first[n] * N + n] += g[n];
          } else {
            const int64_t count = (y1 - y0) * (x1 - x0);
            if (count <= 0) continue;
            const float inv = 1.0f / static_cast<float>(count);
            for (int64_t iy = y0; iy < y1; ++iy)
              for (int64_t ix = x0; ix < x1; ++ix) {
                float* d = dxc + (iy * W + ix) * N;
                for (int64_t n = 0; n < N; ++n) d[n] += g[n] * inv;
              }
          }
        }
      }
    }
  });
  if (relu_dx) ReluBackward(x, dx, dx);
}

// y[c][n] = mean over the H*W pixels of x[c][.][.][n], accumulated in double per image.
void CpuOps::GlobalAvgPoolForward(const Tensor& x, Tensor& y) {
  op_shapes::GlobalAvgPool(x, y, "GlobalAvgPoolForward");
  const int64_t C = x.c(), P = x.h() * x.w(), N = x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, P * N, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(N);
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t q = 0; q < P; ++q) {
        const float* v = xs + (c * P + q) * N;
        for (int64_t n = 0; n < N; ++n) acc[n] += v[n];
      }
      for (int64_t n = 0; n < N; ++n) ys[c * N + n] = static_cast<float>(acc[n] / P);
    }
  });
}

// dx[c][.][.][n] = dy[c][n] / (H*W).
void CpuOps::GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) {
  op_shapes::GlobalAvgPool(dx, dy, "GlobalAvgPoolBackward");
  const int64_t C = dx.c(), P = dx.h() * dx.w(), N = dx.n();
  const float* g = dy.data();
  float* d = dx.data();
  const float inv = 1.0f / static_cast<float>(P);
  ParallelFor(C, P * N, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t q = 0; q < P; ++q)
        for (int64_t n = 0; n < N; ++n) d[(c * P + q) * N + n] = g[c * N + n] * inv;
  });
}

}  // namespace colonnade
