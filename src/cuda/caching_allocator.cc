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

void* CachingAllocator::TakeFrom(std::multimap<size_t, void*>& from, size_t size) {
  auto it = from.lower_bound(size);
  if (it == from.end() || it->first > size + size / 4) return nullptr;
  void* p = it->second;
  const size_t got = it->first;
  from.erase(it);
  live_[p] = got;
  in_use_ += got;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  return p;
}

void* CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (capturing_) {
    if (void* p = TakeFrom(capture_free_, size)) return p;
  }
  if (void* p = TakeFrom(free_, size)) return p;
  // During a capture the GPU allows this in relaxed mode; the emulator refuses it (the
  // warm-up step should have cached every block the step needs).
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
  (capturing_ ? capture_free_ : free_).emplace(it->second, ptr);
  live_.erase(it);
}

void CachingAllocator::BeginCapturePool() {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(!capturing_) << "one capture at a time";
  capturing_ = true;
}

std::multimap<size_t, void*> CachingAllocator::EndCapturePool() {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK(capturing_) << "EndCapturePool without BeginCapturePool";
  capturing_ = false;
  // The pool's blocks stay reserved (counted as in use: the graph uses them) until
  // ReleaseCapturePool.
  for (const auto& [size, p] : capture_free_) in_use_ += size;
  peak_in_use_ = std::max(peak_in_use_, in_use_);
  std::multimap<size_t, void*> pool;
  pool.swap(capture_free_);
  return pool;
}

void CachingAllocator::ReleaseCapturePool(const std::multimap<size_t, void*>& pool) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [size, p] : pool) {
    in_use_ -= size;
    free_.emplace(size, p);
  }
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
