// Shape validation of every Ops call, shared by all backends (CpuOps, cuda::CudaOps) so that
// they accept exactly the same calls: each Ops method calls its check first, then computes.
// Before this module each backend had its own checks and they had drifted apart (the CPU
// accepted any pooling output whose windows start inside the image, the GPU only the size
// of PoolOutSize; the GPU did not check pooling parameters, LRN sizes, batch-norm vectors,
// dropout offsets or convolution strides at all).
//
// The rule each check enforces is the one the layers' shape inference (layers.cc Setup)
// produces and ops.h documents. A failed check is a programming error, not bad user input
// (Setup has already turned that into a Status), so it aborts through CHECK with a message
// naming the operation and the shapes. Device placement and 32-bit limits stay with the
// backend that has them.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/ops.h"
#include "core/tensor.h"

namespace colonnade::op_shapes {

// ---- building blocks -----------------------------------------------------------------------
// a and b hold the same number of elements.
void SameSize(const Tensor& a, const Tensor& b, const char* what);
// t is a rank-4 (C x H x W x N) activation.
void CHWN(const Tensor& t, const char* what);

// ---- per operation (argument order as in ops.h) ----------------------------------------------
// CopyChannelsIn/Out: `part` (C1 x H x W x N) is channels [c0, c0 + C1) of `whole`.
void CopyChannels(const Tensor& part, int64_t c0, const Tensor& whole, const char* what);

// Any of the three convolutions: x C x H x W x N (the input, or dx), w [F][C/g][KH][KW],
// y F x OH x OW x N (the output, or dy) with OH, OW from ConvOutSize.
void Conv(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p);

// AddBias / BiasBackward: b has one element per channel (first dimension) of y.
void Bias(const Tensor& y, const Tensor& b, const char* what);

// PoolForward: valid parameters (size >= 1, stride >= 1, 0 <= pad < size, so that every
// window holds a pixel) and y = C x PoolOutSize(H) x PoolOutSize(W) x N in the params'
// ceil or floor mode, exactly what PoolLayer::Setup infers.
void Pool(const Tensor& x, const Tensor& y, const PoolParams& p);
// PoolBackward: as Pool, and dy shaped as y, dx as x.
void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx,
                  const PoolParams& p);

// GlobalAvgPool forward (x, y) and backward (dx, dy): x C x H x W x N, y C x 1 x 1 x N.
void GlobalAvgPool(const Tensor& x, const Tensor& y, const char* what);

// LRN across channels: x CHWN, size >= 1, groups >= 1 dividing the channels; every tensor
// in `same` (y, denom, dy, dx) shaped as x.
void LrnCross(const Tensor& x, const LrnCrossParams& p, std::initializer_list<const Tensor*> same,
              const char* what);
// LRN within a map: x CHWN, size >= 1; every tensor in `same` shaped as x.
void LrnWithin(const Tensor& x, const LrnWithinParams& p, std::initializer_list<const Tensor*> same,
               const char* what);

// Batch norm: x CHWN, every tensor in `same` (y, or dy and dx) shaped as x, every tensor in
// `per_channel` (gamma, beta, running and saved statistics, their gradients) of C elements.
void BatchNorm(const Tensor& x, std::initializer_list<const Tensor*> same,
               std::initializer_list<const Tensor*> per_channel, const char* what);

// DropoutForward: x CHWN, y and mask shaped as x, and the local images
// [image_offset, image_offset + N) inside the global batch.
void Dropout(const Tensor& x, const Tensor& y, const Tensor& mask, const DropoutParams& p);

// Softmax cross-entropy: scores (logits, or probs) K x ... x N with the batch last,
// labels of N elements, `same` (probs, or dlogits) shaped as scores, loss (forward only;
// may be null) of N elements. Returns {K, N}.
struct SoftmaxDims {
  int64_t classes, batch;
};
SoftmaxDims Softmax(const Tensor& scores, const Tensor& labels, const Tensor& same,
                    const Tensor* loss, const char* what);
// AccumulateResults: probs K x ... x N, labels and loss of N elements, totals of
// kResultTotalsFloats (core/results.h). Returns {K, N}.
SoftmaxDims Results(const Tensor& probs, const Tensor& labels, const Tensor& loss,
                    const Tensor& totals);

}  // namespace colonnade::op_shapes
