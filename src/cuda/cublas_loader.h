// cuBLAS is loaded on its first call, not at program start (cublas_loader.cc says why).
#pragma once

#include <string>

namespace colonnade::cuda {

// Loads cuBLAS if it is not loaded yet (no GPU needed) and returns why it cannot be used:
// empty when the library and every entry point Colonnade calls were found.
std::string CublasLoadError();

}  // namespace colonnade::cuda
