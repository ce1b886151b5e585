// Launchers of the pooling family (ops/pool.cu): raw device pointers, queued on ctx.stream.
#pragma once

#include "core/ops/pool.h"
#include "cuda/kernels.h"

namespace colonnade::cuda {

void PoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int h, int w, int n,
                    int oh, int ow, const PoolParams& p);
void PoolBackwardGpu(const DeviceContext& ctx, const float* x, const float* y, const float* dy,
                     float* dx, int c, int h, int w, int n, int oh, int ow, const PoolParams& p);
// The same with each CHWN tensor stored as float or bf16 (bf16 activation storage,
// docs/PRECISION.md): xt is the storage of x and dx, yt of y and dy. Loads widen bf16 to
// float, stores round to nearest even, and the arithmetic is the float kernels' own: with
// float storage these are the float launchers above (which call them) bit for bit; with
// bf16 they give the float kernels' results on the widened inputs, rounded once at the
// store. Max-pool backward refuses xt float with yt bf16 (a rounded maximum no longer
// equals its pixel, so the argmax could not be found again; Net never binds it).
void PoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                    StorageType yt, int c, int h, int w, int n, int oh, int ow,
                    const PoolParams& p);
void PoolBackwardGpu(const DeviceContext& ctx, const void* x, const void* y, const void* dy,
                     void* dx, StorageType xt, StorageType yt, int c, int h, int w, int n, int oh,
                     int ow, const PoolParams& p);
// Max pooling that keeps a record for its backward (windows of at most 256 pixels,
// core/ops/pool.h's MaxPoolRecordFits): the forward also writes each window's argmax, the offset of
// its first maximum in row-major order within the unclipped window, as a bf16 (exact: below 256;
// rec has y's shape, 2 bytes an element), and the backward routes dy to those pixels (a gather per
// input pixel over its windows in (oy, ox) order, as PoolBackwardGpu's max pooling) without reading
// x or y: y and dx are bit for bit those of PoolForwardGpu and PoolBackwardGpu. relu_y (the
// forward's y, storage yt, or null): x is a ReLU's output and dx goes on into it
// (Ops::PoolBackward's relu_dx): the windows whose maximum is not above 0 pass nothing (their
// argmax pixel is then not above 0 either, and a pixel above 0 is only ever routed dy by windows
// whose maximum it is), so dx leaves masked, bit for bit.
void MaxPoolForwardArgGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                          StorageType yt, void* rec, int c, int h, int w, int n, int oh, int ow,
                          const PoolParams& p);
void MaxPoolBackwardArgGpu(const DeviceContext& ctx, const void* rec, const void* dy,
                           StorageType yt, void* dx, StorageType xt, int c, int h, int w, int n,
                           int oh, int ow, const PoolParams& p, const void* relu_y = nullptr);
void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const float* x, float* y, int c, int hw,
                             int n);
void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const float* dy, float* dx, int c, int hw,
                              int n);
// The same with x and dx stored as xt, y and dy as yt (the double sum from the widened x).
void GlobalAvgPoolForwardGpu(const DeviceContext& ctx, const void* x, StorageType xt, void* y,
                             StorageType yt, int c, int hw, int n);
void GlobalAvgPoolBackwardGpu(const DeviceContext& ctx, const void* dy, StorageType yt, void* dx,
                              StorageType xt, int c, int hw, int n);

}  // namespace colonnade::cuda
