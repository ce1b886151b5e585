// Kernels of the GPU feed (feed_kernels.cu): the device half of the batch pipeline's uint8
// output. They take plain parameter structs rather than the data module's types (this
// module depends on core only); src/apps/device_feed.cc translates. See docs/DATA.md,
// "The GPU feed", and batch_feed.h for the class that drives them.
#pragma once

#include <cstdint>

#include "cuda/feed_types.h"
#include "cuda/port.h"

namespace colonnade::cuda {

// out (C x crop_h x crop_w x n, CHWN float) = the augmented, normalised batch of the n
// source images (n x H x W x C uint8, image j at j*H*W*C) with their augments, both from
// `src` (FeedSource: direct buffers, or a graphed step's slot):
//   out[c][y][x][j] = (src_j[sy][sx][c] - mean[sy][sx][c] + light_j[c]) * scale
// with sy = y0 + y, sx = x0 + x (x0 + crop_w - 1 - x mirrored), 0.0f where (sy, sx) is
// outside the image or in the cutout square; the kChannel mean enters as (light -
// channel_mean) like the CPU's. With g.resize the source value is the bilinear value of
// the augment's box at the output pixel (core/bilinear.h) and the mean is read at the
// nearest source pixel.
// Bitwise equal to data::WriteImageCHWN / WriteChunkCHWN (each operation rounded on its
// own). The same launch copies the batch's n labels to `labels_out` (unless null).
// Queued on `stream`.
void AugmentBatchGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src, int n,
                     float* out, float* labels_out);
// out (C x crop_h x crop_w x n) = ten-crop view `view` (0..9, TenCropView in feed_types.h)
// of every source image: AugmentBatchGpu's kernel with TenCropView's origin and mirror
// flag for every image and no lighting, i.e. data::TenCrops' view `view` of the normalised
// full images, bit for bit; labels as AugmentBatchGpu. Queued on `stream`.
void TenCropViewGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src, int view,
                    int n, float* out, float* labels_out);
// out (C x crop_h x crop_w x n) = every source image under the one augmentation `view`
// (an evaluation view: the centre crop, resized or not, and its mirror for --eval_views=2;
// a ten-crop view) instead of the batch's augments; labels as AugmentBatchGpu.
void ViewGpu(cudaStream_t stream, const FeedGeometry& g, const FeedSource& src,
             const FeedAugment& view, int n, float* out, float* labels_out);
// out (n x H x W x C uint8) = the synthetic images indices[0..n) (device, n), bitwise
// equal to SyntheticDataset::Read. Queued on `stream`.
void SyntheticImagesGpu(cudaStream_t stream, const SyntheticGeometry& g, const int64_t* indices,
                        int n, uint8_t* out);

// out (n x bytes) = the images indices[0..n) (device) of `pool` (images of `bytes` bytes
// each, image i at i * bytes): the synthetic feed's gather from its device-resident pool.
// Queued on `stream`.
void GatherImagesGpu(cudaStream_t stream, const uint8_t* pool, const int64_t* indices, int n,
                     int64_t bytes, uint8_t* out);
}  // namespace colonnade::cuda
