// Launchers of the results family (ops/results.cu): raw device pointers, queued on ctx.stream.
#pragma once

#include <cstdint>

#include "cuda/kernels.h"

namespace colonnade::cuda {

// One step's loss sum and top-1/top-5 counts added to the ResultTotals at `totals`
// (core/results.h, Ops::AccumulateResults): probs K x N, labels and loss N.
void AccumulateResultsGpu(const DeviceContext& ctx, const float* probs, const float* labels,
                          const float* loss, int64_t k, int64_t n, int64_t step,
                          const int64_t* step_on_device, void* totals);

}  // namespace colonnade::cuda
