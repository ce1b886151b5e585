// The host side of the TMA-fed wgmma tiles (wgmma.cu, LaunchGemm / LaunchWgrad): the tensor
// maps their loader thread reads boxes through, made for each launch. On the GPU the driver's
// cuTensorMapEncodeTiled writes the opaque CUtensorMap (fetched through the runtime, so
// nothing links libcuda); on the emulator an emu::TmaMap holds the same description in the
// clear (src/cuda/emu/emu_runtime.h, TmaLoad).

#include "cuda/conv/tma_map.h"

#include <cstdint>

#if !defined(COLONNADE_CUDA_EMULATE)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#endif

#include "core/log.h"
#include "cuda/port.h"

namespace colonnade::cuda::conv {

#if defined(COLONNADE_CUDA_EMULATE)
tc::TmaMap MakeTmaMap(const void* base, int rank, const int64_t* dims, const int* box) {
  tc::TmaMap m{};
  m.base = base;
  m.rank = rank;
  uint64_t stride = 2;
  for (int i = 0; i < rank; ++i) {
    m.dim[i] = uint64_t(dims[i]);
    m.box[i] = uint32_t(box[i]);
    if (i > 0) m.stride[i - 1] = stride;
    stride *= uint64_t(dims[i]);
  }
  m.elem_bytes = 2;
  m.swizzle128 = true;
  return m;
}
#else
tc::TmaMap MakeTmaMap(const void* base, int rank, const int64_t* dims, const int* box) {
  // The driver's encoder through the runtime (no link against libcuda), looked up once.
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    COLONNADE_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                          cudaEnableDefault, &found));
    CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr)
        << "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)";
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  tc::TmaMap m{};
  cuuint64_t d[5], strides[4];
  cuuint32_t b[5], unit[5];
  cuuint64_t stride = 2;
  for (int i = 0; i < rank; ++i) {
    d[i] = cuuint64_t(dims[i]);
    b[i] = cuuint32_t(box[i]);
    unit[i] = 1;
    if (i > 0) strides[i - 1] = stride;
    stride *= d[i];
  }
  const CUresult r =
      encode(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, cuuint32_t(rank), const_cast<void*>(base), d,
             strides, b, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  CHECK(r == CUDA_SUCCESS) << "cuTensorMapEncodeTiled failed (" << int(r) << ") for a rank-" << rank
                           << " bf16 tensor at " << base << ", innermost " << dims[0] << ", box "
                           << box[0] << " x " << box[1];
  return m;
}
#endif
tc::TmaMap MakeMatrixMap(const void* base, int64_t cols, int64_t rows, int64_t groups, int box_cols,
                         int box_rows) {
  const int64_t dims[3] = {cols, rows, groups};
  const int box[3] = {box_cols, box_rows, 1};
  return MakeTmaMap(base, 3, dims, box);
}

}  // namespace colonnade::cuda::conv
