// The tensor maps of the TMA-fed wgmma tiles (tma_map.cc). Internal to src/cuda/conv.
#pragma once

#include <cstdint>

#include "cuda/tc_port.h"

namespace colonnade::cuda::conv {

// A TMA map of the dense bf16 tensor `base` of rank (1-5) dimensions dims (innermost first),
// read in boxes of `box` elements (box[0] = 64: one 128-byte line, the 128-byte swizzle of
// the wgmma layouts), zero outside it.
tc::TmaMap MakeTmaMap(const void* base, int rank, const int64_t* dims, const int* box);
// The 3-D map of a G x rows x cols matrix per group, in boxes of box_rows x box_cols.
tc::TmaMap MakeMatrixMap(const void* base, int64_t cols, int64_t rows, int64_t groups, int box_cols,
                         int box_rows);

}  // namespace colonnade::cuda::conv
