// cuBLAS loaded on first use (dlopen) instead of at program start.
//
// Why: libcublas.so needs libcublasLt.so (540 MB in CUDA 13), and loading the two, with
// their relocations and static initialisers, cost every process that linked them about
// 0.4 s of CPU before main() (experiments/ci_time: a bare program linking cuBLAS 0.43 s,
// one without 0.00 s). Every trainer process paid it: `trainer --help`, CPU runs, each
// rank of a CPU job under mpirun, none of which calls cuBLAS.
//
// How: src/ calls six cuBLAS entry points (cublas_v2.h maps four of them to their _v2
// names). They are defined here, hidden (they cannot interpose on the library's own calls),
// and forward to the library's functions, resolved once on the first call. The program is
// not linked against libcublas; a missing library is reported on the first call, naming it
// and the fix, and the call returns CUBLAS_STATUS_NOT_INITIALIZED (COLONNADE_CUBLAS_CHECK
// then stops the program with the call's text).
#include <dlfcn.h>

#include <cstdio>
#include <mutex>
#include <string>

#include "cuda/cublas_loader.h"
#include "cuda/port.h"

#ifndef COLONNADE_CUBLAS_SONAME
#error "COLONNADE_CUBLAS_SONAME must name the cuBLAS library (src/cuda/CMakeLists.txt)"
#endif
#ifndef COLONNADE_CUBLAS_PATH
#define COLONNADE_CUBLAS_PATH COLONNADE_CUBLAS_SONAME
#endif

namespace colonnade::cuda {
namespace {

// The library's functions, by the names it exports.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  // cublas_api.h overloads cublasGemmEx for C++ callers, so decltype cannot name it.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType, int, const void*, cudaDataType,
                            int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                            cublasGemmAlgo_t) = nullptr;
  std::string error;  // empty once every function resolved
};

template <typename F>
bool Resolve(void* lib, const char* name, F* f, std::string* error) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (*f == nullptr && error->empty()) *error = std::string("no symbol ") + name;
  return *f != nullptr;
}

Cublas LoadOnce() {
  Cublas c;
  // The soname first, so LD_LIBRARY_PATH and the loader's cache decide as they would for a
  // linked library; then the path the build found.
  void* lib = dlopen(COLONNADE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) lib = dlopen(COLONNADE_CUBLAS_PATH, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    c.error = std::string("cannot load ") + COLONNADE_CUBLAS_SONAME + " (" +
              (why ? why : "dlopen failed") +
              "): install the CUDA toolkit's cuBLAS of that version, or add its lib "
              "directory to LD_LIBRARY_PATH";
    return c;
  }
  Resolve(lib, "cublasCreate_v2", &c.create, &c.error);
  Resolve(lib, "cublasDestroy_v2", &c.destroy, &c.error);
  Resolve(lib, "cublasSetStream_v2", &c.set_stream, &c.error);
  Resolve(lib, "cublasSetMathMode", &c.set_math_mode, &c.error);
  Resolve(lib, "cublasSgemm_v2", &c.sgemm, &c.error);
  Resolve(lib, "cublasGemmEx", &c.gemm_ex, &c.error);
  if (!c.error.empty()) c.error = std::string(COLONNADE_CUBLAS_SONAME) + ": " + c.error;
  return c;
}

const Cublas& Library() {
  static const Cublas c = LoadOnce();
  return c;
}

// The library, or nullptr after saying once why not.
const Cublas* Loaded() {
  const Cublas& c = Library();
  if (c.error.empty()) return &c;
  static std::once_flag told;
  std::call_once(told, [&c] { std::fprintf(stderr, "cuBLAS: %s\n", c.error.c_str()); });
  return nullptr;
}

}  // namespace

std::string CublasLoadError() { return Library().error; }

}  // namespace colonnade::cuda

// The entry points, with the signatures of cublas_api.h.
#define COLONNADE_HIDDEN __attribute__((visibility("hidden")))
using colonnade::cuda::Loaded;

extern "C" {

COLONNADE_HIDDEN cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  const auto* c = Loaded();
  return c ? c->create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

COLONNADE_HIDDEN cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  const auto* c = Loaded();
  return c ? c->destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

COLONNADE_HIDDEN cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  const auto* c = Loaded();
  return c ? c->set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}

COLONNADE_HIDDEN cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  const auto* c = Loaded();
  return c ? c->set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}

COLONNADE_HIDDEN cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                               cublasOperation_t transb, int m, int n, int k,
                                               const float* alpha, const float* A, int lda,
                                               const float* B, int ldb, const float* beta, float* C,
                                               int ldc) {
  const auto* c = Loaded();
  return c ? c->sgemm(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

COLONNADE_HIDDEN cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                             cublasOperation_t transb, int m, int n, int k,
                                             const void* alpha, const void* A, cudaDataType Atype,
                                             int lda, const void* B, cudaDataType Btype, int ldb,
                                             const void* beta, void* C, cudaDataType Ctype, int ldc,
                                             cublasComputeType_t computeType,
                                             cublasGemmAlgo_t algo) {
  const auto* c = Loaded();
  return c ? c->gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
                        C, Ctype, ldc, computeType, algo)
           : CUBLAS_STATUS_NOT_INITIALIZED;
}

}  // extern "C"
