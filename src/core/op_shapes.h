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
// backend that has them. This file holds the building blocks and the convolutions' rule; each
// other family's rule sits with its parameters in core/ops/<family>.h (defined in
// core/ops/<family>.cc), all in this namespace.
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
// Every tensor in `same` holds as many elements as x.
void AllSameSize(const Tensor& x, std::initializer_list<const Tensor*> same, const char* what);

// ---- per operation (argument order as in ops.h) ----------------------------------------------
// Any of the three convolutions: x C x H x W x N (the input, or dx), w [F][C/g][KH][KW],
// y F x OH x OW x N (the output, or dy) with OH, OW from ConvOutSize.
void Conv(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p);

// The other families' rules are declared with their parameters, in core/ops/<family>.h (pooling,
// LRN, batch norm, dropout, softmax, results, the element-wise bias and channel blocks).

}  // namespace colonnade::op_shapes
