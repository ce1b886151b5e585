// The pooling family: max and average pooling over windows (cuda-convnet's ceil mode or
// PyTorch's floor mode) and global average pooling. Parameters, output size and the shape rule
// every backend checks; the CPU reference is in pool.cc (CpuOps), the CUDA kernels in
// src/cuda/ops/pool.cu.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace colonnade {

// Pooling windows start at -pad and step by `stride`; the output covers the border as in
// cuda-convnet (ceil mode): out = ceil((in + 2*pad - size) / stride) + 1, and a window
// that runs past the image is clipped. Average pooling divides by the number of pixels
// of the window that lie inside the image.
// With ceil_mode false the output is floor((in + 2*pad - size) / stride) + 1 (PyTorch's
// default, used by torchvision's ResNet stem). y must have exactly that size, the one
// PoolLayer::Setup infers (every backend checks it: op_shapes::Pool).
struct PoolParams {
  enum Kind { kMax, kAvg };
  Kind kind = kMax;
  int size = 3;
  int stride = 2;
  int pad = 0;
  bool ceil_mode = true;
};
inline int64_t PoolOutSize(int64_t in, int size, int stride, int pad, bool ceil_mode = true) {
  int64_t span = in + 2 * pad - size;
  if (span <= 0) return 1;
  if (!ceil_mode) return span / stride + 1;
  int64_t out = (span + stride - 1) / stride + 1;
  // A last window that would start in the padding only is dropped.
  if ((out - 1) * stride >= in + pad) --out;
  return out;
}

// Max pooling whose windows (at most 256 pixels) fit the argmax record of Ops::PoolForward:
// each window's argmax as its offset in the window, stored as a bf16 (exact below 256).
inline bool MaxPoolRecordFits(const PoolParams& p) {
  return p.kind == PoolParams::kMax && p.size * p.size <= 256;
}

// Shape rules (core/op_shapes.h says how every backend applies them).
namespace op_shapes {
// PoolForward: valid parameters (size >= 1, stride >= 1, 0 <= pad < size, so that every
// window holds a pixel) and y = C x PoolOutSize(H) x PoolOutSize(W) x N in the params'
// ceil or floor mode, exactly what PoolLayer::Setup infers.
void Pool(const Tensor& x, const Tensor& y, const PoolParams& p);
// PoolBackward: as Pool, and dy shaped as y, dx as x.
void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                  const PoolParams& p);
// GlobalAvgPool forward (x, y) and backward (dx, dy): x C x H x W x N, y C x 1 x 1 x N.
void GlobalAvgPool(const Tensor& x, const Tensor& y, const char* what);
}  // namespace op_shapes

}  // namespace colonnade
