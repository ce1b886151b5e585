// The index arithmetic of the implicit-GEMM convolutions over CHWN tensors, shared by every
// family (simt.cu, mma.cu, wgmma.cu): a GEMM column j = (oy, ox, img) with images innermost, a
// GEMM row k = (c, ky, kx) of the filter taps, and where a (tap, column) pair reads the
// gathered tensor. P is a kernel's parameter struct (common.h's GemmGeometry or WgradGeometry
// underneath); each function names the fields it reads.
#pragma once

#include <cstdint>

#include "cuda/port.h"

namespace colonnade::cuda {

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)

// Column jj of the gathered operand: the source pixel of tap (0, 0), the offset of that
// (possibly padded, so possibly negative) pixel, and whether jj < limit.
// Reads p.n, p.ow, p.w, p.stride, p.pad_h, p.pad_w, p.div_n, p.div_ow.
struct GatherColumn {
  int base, sy, sx;
  bool ok;
};
template <class P>
__device__ __forceinline__ GatherColumn MakeColumnBelow(const P& p, int jj, int limit) {
  GatherColumn col;
  col.ok = jj < limit;
  const int jc = col.ok ? jj : 0;
  const int pix = Div(jc, p.div_n);
  const int img = jc - pix * p.n;
  const int oy = Div(pix, p.div_ow);
  const int ox = pix - oy * p.ow;
  col.sy = oy * p.stride - p.pad_h;
  col.sx = ox * p.stride - p.pad_w;
  col.base = (col.sy * p.w + col.sx) * p.n + img;
  return col;
}
// The same below the GEMM's column count p.j.
template <class P>
__device__ __forceinline__ GatherColumn MakeColumn(const P& p, int jj) {
  return MakeColumnBelow(p, jj, p.j);
}

// Row k of the GEMM: filter tap (c, ky, kx), ok when k < p.k. Reads p.k, p.kh, p.kw,
// p.div_kw, p.div_khkw.
struct GatherTap {
  int c, ky, kx;
  bool ok;
};
template <class P>
__device__ __forceinline__ GatherTap MakeTap(const P& p, int k) {
  GatherTap t;
  t.ok = k < p.k;
  const int kc = t.ok ? k : 0;
  t.c = Div(kc, p.div_khkw);
  const int r = kc - t.c * (p.kh * p.kw);
  t.ky = Div(r, p.div_kw);
  t.kx = r - t.ky * p.kw;
  return t;
}

// Offset into the group's gathered tensor (hwn = h * w * n elements a channel) of (tap,
// column); *ok false for padding or either out of range.
template <class P>
__device__ __forceinline__ int GatherOffset(const P& p, int hwn, const GatherTap& t,
                                            const GatherColumn& col, bool* ok) {
  const int sy = col.sy + t.ky, sx = col.sx + t.kx;
  *ok = t.ok && col.ok && static_cast<unsigned>(sy) < static_cast<unsigned>(p.h) &&
        static_cast<unsigned>(sx) < static_cast<unsigned>(p.w);
  return t.c * hwn + col.base + (t.ky * p.w + t.kx) * p.n;
}

// Where output column jj goes, relative to the start of its output row: jj itself when
// p.plain, else pixel (out_oy + out_s * oy, out_ox + out_s * ox) of an out_h x out_w output
// (one stride phase of backward data).
template <class P>
__device__ __forceinline__ int64_t OutColumn(const P& p, int jj) {
  if (p.plain) return jj;
  const int pix = Div(jj, p.div_n);
  const int img = jj - pix * p.n;
  const int oy = Div(pix, p.div_ow);
  const int ox = pix - oy * p.ow;
  return (static_cast<int64_t>(p.out_oy + p.out_s * oy) * p.out_w + p.out_ox + p.out_s * ox) * p.n +
         img;
}

#endif  // COLONNADE_CUDA_EMULATE || __CUDACC__

}  // namespace colonnade::cuda
