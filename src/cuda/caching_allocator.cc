#include "cuda/caching_allocator.h"

#include <algorithm>

#include "core/log.h"
#include "cuda/port.h"

namespace colonnade::cuda {

size_t CachingAllocator::RoundUp(size_t bytes) {
  if (bytes == 0) bytes = 1;
  const size_t q = bytes < (size_t(1) << 20) ? 512 : (size_t(64) << 10);
  return (bytes + q - 1) / q * q;
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 4) {
    void* p = it->second;
    size_t got = it->first;
    free_.erase(it);
    live_[p] = got;
    in_use_ += got;
    peak_in_use_ = std::max(peak_in_use_, in_use_);
    return p;
  }
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error state
    COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
    ReleaseCachedLocked();
    err = cudaMalloc(&p, size);
  }
  CHECK(err == cudaSuccess) << "out of device memory allocating " << size << " bytes (" << reserved_
                            << " bytes reserved, " << in_use_
                            << " in use): " << cudaGetErrorString(err);
  ++mallocs_;
  reserved_ += size;
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  live_[p] = size;
  in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return p;
}

void CachingAllocator::Free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  CHECK(it != live_.end()) << "freeing a pointer this allocator did not hand out";
  in_use_ -= it->second;
  free_.emplace(it->second, ptr);
  live_.erase(it);
}

void CachingAllocator::ReleaseCachedLocked() {
  for (auto& [size, p] : free_) {
    COLONNADE_CUDA_CHECK(cudaFree(p));
    reserved_ -= size;
  }
  free_.clear();
}

void CachingAllocator::ReleaseCached() {
  COLONNADE_CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCachedLocked();
}

size_t CachingAllocator::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}
size_t CachingAllocator::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_in_use_;
}
size_t CachingAllocator::bytes_reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}
size_t CachingAllocator::peak_bytes_reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_reserved_;
}
size_t CachingAllocator::num_device_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return mallocs_;
}
void CachingAllocator::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  peak_in_use_ = in_use_;
  peak_reserved_ = reserved_;
}

}  // namespace colonnade::cuda
