// The results of a step added to running totals on the device (core/ops/results.h,
// core/results.h): the loss sum and the top-1 / top-5 counts, one launch per step, so the host
// copies a few bytes when it reports instead of every step's probabilities. Kernel, launcher
// (ops/results.h) and the CudaOps method.
//
// Shapes: probs K x N (class-major), labels and loss N floats, totals one ResultTotals. Mapping:
// a block per 32 images, a thread per (image, class stripe); partials in double per block, the
// last block to finish adding them in block order (deterministic: the same bits whatever the
// blocks' timing). See ResultsKernel below.

#include <cstdint>

#include "core/log.h"
#include "core/op_shapes.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernel_common.h"
#include "cuda/ops/results.h"

namespace colonnade::cuda {
namespace {

// ---- results (core/results.h) ---------------------------------------------------------------
// Kernel ResultsKernel: block b ranks images [32b, 32b + 32) (CountCorrect's rule): thread
// (warp w, lane) compares image 32b + lane's label probability with classes w, w + 8, ...,
// so the K x 32 probabilities are read by 8 warps at once, each load a coalesced row of 32
// images; the block's loss sum and top-1/top-5 counts go to part[3b .. 3b + 2]. The last
// block to finish (a counter in the totals, the threadFenceReduction pattern) adds the
// partials in block order to the totals: one launch, and the same bits for the same
// inputs whatever the blocks' timing.
constexpr int kResultImages = 32;
constexpr int kResultWarps = kBlock / 32;
struct ResultsParams {
  const float* probs;  // K x N
  const float* labels;
  const float* loss;
  int64_t k, n;
  double* part;  // 3 per block
  int64_t step;
  const int64_t* step_on_device;  // a graphed step's number (StepScalars), else null
  ResultTotals* totals;
};
__device__ void AddStepToTotals(const ResultsParams& p) {
  double loss = 0.0, top1 = 0.0, top5 = 0.0;
  for (unsigned b = 0; b < gridDim.x; ++b) {
    loss += p.part[3 * b];
    top1 += p.part[3 * b + 1];
    top5 += p.part[3 * b + 2];
  }
  ResultTotals& t = *p.totals;
  t.loss_sum += loss;
  t.top1 += top1;
  t.top5 += top5;
  t.last_loss_sum = loss;
  t.steps += 1;
  if (!std::isfinite(loss)) {
    if (t.nonfinite_steps == 0) {
      t.first_nonfinite_step = p.step_on_device != nullptr ? *p.step_on_device : p.step;
      t.first_nonfinite_loss = loss;
    }
    t.nonfinite_steps += 1;
  }
  t.blocks_done = 0;  // for the next launch
}
__global__ void __launch_bounds__(kBlock) ResultsKernel(const ResultsParams p) {
  __shared__ int ranked_above[kResultWarps][kResultImages];
  __shared__ double sh[kBlock];
  __shared__ bool last_block;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kResultImages + lane;
  const int64_t label = j < p.n ? static_cast<int64_t>(p.labels[j]) : -1;
  const bool ranked = label >= 0 && label < p.k;  // else wrong (as CountCorrect)
  int better = 0;
  if (ranked) {
    const float pl = p.probs[label * p.n + j];
    for (int64_t c = warp; c < p.k; c += kResultWarps) {
      const float q = p.probs[c * p.n + j];
      better += (q > pl || (q == pl && c < label)) ? 1 : 0;
    }
  }
  ranked_above[warp][lane] = better;
  __syncthreads();
  double loss = 0.0, top1 = 0.0, top5 = 0.0;
  if (warp == 0 && j < p.n) {
    loss = p.loss[j];
    int above = 0;
    for (int w = 0; w < kResultWarps; ++w) above += ranked_above[w][lane];
    top1 = ranked && above == 0 ? 1.0 : 0.0;
    top5 = ranked && above < 5 ? 1.0 : 0.0;
  }
  loss = BlockSum(loss, sh);
  top1 = BlockSum(top1, sh);
  top5 = BlockSum(top5, sh);
  if (threadIdx.x == 0) {
    p.part[3 * blockIdx.x] = loss;
    p.part[3 * blockIdx.x + 1] = top1;
    p.part[3 * blockIdx.x + 2] = top5;
    __threadfence();  // the partials are visible before the count says so
    last_block = atomicAdd(&p.totals->blocks_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (last_block && threadIdx.x == 0) {
    __threadfence();
    AddStepToTotals(p);
  }
}

}  // namespace

// ---- launchers -------------------------------------------------------------------------------

void AccumulateResultsGpu(const DeviceContext& ctx, const float* probs, const float* labels,
                          const float* loss, int64_t k, int64_t n, int64_t step,
                          const int64_t* step_on_device, void* totals) {
  const int blocks = static_cast<int>(std::max<int64_t>(1, CeilDiv(n, kResultImages)));
  Scratch part(ctx.alloc, sizeof(double) * 3 * blocks);
  const ResultsParams p{probs,
                        labels,
                        loss,
                        k,
                        n,
                        part.d(),
                        step,
                        step_on_device,
                        static_cast<ResultTotals*>(totals)};
  Launch(ResultsKernel, dim3(blocks), dim3(kBlock), ctx.stream, p);
}

// ---- CudaOps methods ---------------------------------------------------------------------------

void CudaOps::AccumulateResults(const Tensor& probs, const Tensor& labels,
                                const Tensor& loss_per_image, int64_t step,
                                const int64_t* step_on_device, Tensor& totals) {
  const op_shapes::SoftmaxDims d = op_shapes::Results(probs, labels, loss_per_image, totals);
  AccumulateResultsGpu(ctx_, probs.data(), labels.data(), loss_per_image.data(), d.classes, d.batch,
                       step, step_on_device, totals.data());
}

}  // namespace colonnade::cuda
