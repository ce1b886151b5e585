// What the feed suites (feed_test.cc, feed_recipes_test.cc) share: device buffers (copies of
// host vectors, poisoned allocations of 0xFF bytes: NaN floats, read-backs, freed at the end
// of the test) and random inputs for an augmentation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/port.h"
#include "data/augment.h"

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

// A random mean image and channel mean (not integral, so the subtraction rounds) for `cfg`'s
// image size, then `n` random images of that size, drawn from `rng` in that order.
inline std::vector<uint8_t> RandomMeansAndPixels(data::AugmentConfig* cfg, int n,
                                                 std::mt19937* rng) {
  std::uniform_real_distribution<float> u(0.f, 255.f);
  const size_t image = static_cast<size_t>(cfg->height) * cfg->width * cfg->channels;
  cfg->mean_image.resize(image);
  for (float& m : cfg->mean_image) m = u(*rng);
  cfg->channel_mean.resize(cfg->channels);
  for (float& m : cfg->channel_mean) m = u(*rng);
  std::vector<uint8_t> pixels(image * n);
  for (uint8_t& p : pixels) p = static_cast<uint8_t>((*rng)() & 0xFF);
  return pixels;
}

}  // namespace colonnade
