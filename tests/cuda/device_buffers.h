// Device buffers for the GPU tests: copies of host vectors, poisoned allocations (0xFF bytes:
// NaN floats) and read-backs, freed at the end of the test. Shared by the feed suites.
#pragma once

#include <algorithm>
#include <vector>

#include "cuda/port.h"

namespace colonnade {

class DeviceBuffers {
 public:
  ~DeviceBuffers() {
    for (void* p : ptrs_) COLONNADE_CUDA_CHECK(cudaFree(p));
  }
  template <typename T>
  T* Upload(const std::vector<T>& v) {
    T* p = Alloc<T>(v.size());
    COLONNADE_CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    // A pageable cudaMemcpy may return before its DMA lands, ordered only on the legacy
    // stream, which the backend's non-blocking stream does not wait for: finish it.
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    return p;
  }
  template <typename T>
  T* Alloc(size_t n, int poison = 0xFF) {  // 0xFF bytes: NaN floats
    void* p = nullptr;
    COLONNADE_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
    COLONNADE_CUDA_CHECK(cudaMemset(p, poison, std::max<size_t>(n, 1) * sizeof(T)));
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());  // cudaMemset is asynchronous (legacy stream)
    ptrs_.push_back(p);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> v(n);
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    COLONNADE_CUDA_CHECK(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  std::vector<void*> ptrs_;
};

}  // namespace colonnade
