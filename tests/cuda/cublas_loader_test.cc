// cuBLAS is opened on its first call (src/cuda/cublas_loader.cc): the library the build
// named loads and exports every entry point the backend calls. No GPU needed, so CI runs it.
#include "cuda/cublas_loader.h"

#include "gtest/gtest.h"

namespace colonnade::cuda {
namespace {

TEST(CublasLoader, FindsTheLibraryAndEveryEntryPoint) { EXPECT_EQ(CublasLoadError(), ""); }

}  // namespace
}  // namespace colonnade::cuda
