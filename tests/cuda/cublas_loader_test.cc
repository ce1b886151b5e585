// cuBLAS is opened on its first call (src/cuda/cublas_loader.cc): the library the build
// named loads and exports every entry point the backend calls (no GPU needed, so CI runs
// it), and on a GPU the calls reach it: a handle, a stream, the math mode, an SGEMM with a
// known product, GemmEx in bf16.
#include "cuda/cublas_loader.h"

#include <cuda_bf16.h>

#include <vector>

#include "cuda/port.h"
#include "gpu_test.h"
#include "gtest/gtest.h"

namespace colonnade::cuda {
namespace {

TEST(CublasLoader, FindsTheLibraryAndEveryEntryPoint) { EXPECT_EQ(CublasLoadError(), ""); }

class CublasGpu : public GpuTest {};

TEST_F(CublasGpu, CallsReachTheLibrary) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  EXPECT_EQ(cublasSetStream(h, stream), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
  // Column-major 2 x 2: C = A B with A = [1 3; 2 4], B = [5 7; 6 8] -> C = [23 31; 34 46].
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 12 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, a.data(), 4 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d + 4, b.data(), 4 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const float one = 1, zero = 0;
  EXPECT_EQ(
      cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, d, 2, d + 4, 2, &zero, d + 8, 2),
      CUBLAS_STATUS_SUCCESS);
  std::vector<float> c(4);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.data(), d + 8, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(c, (std::vector<float>{23, 34, 31, 46}));
  // The same product through GemmEx with bf16 operands (exact in bf16), float out.
  std::vector<__nv_bfloat16> ab(8);
  for (int i = 0; i < 4; ++i) ab[i] = __float2bfloat16(a[i]), ab[4 + i] = __float2bfloat16(b[i]);
  __nv_bfloat16* dh = nullptr;
  ASSERT_EQ(cudaMalloc(&dh, 8 * sizeof(__nv_bfloat16)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dh, ab.data(), 8 * sizeof(__nv_bfloat16), cudaMemcpyHostToDevice),
            cudaSuccess);
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, dh, CUDA_R_16BF, 2, dh + 4,
                         CUDA_R_16BF, 2, &zero, d + 8, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(c.data(), d + 8, 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(c, (std::vector<float>{23, 34, 31, 46}));
  EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
  cudaFree(dh);
  cudaFree(d);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace colonnade::cuda
