// CachingAllocator: device memory for tensors and scratch, cached by size so that a
// training step makes no cudaMalloc/cudaFree calls once it has run once.
//
// Blocks are never split; a request takes the smallest cached block of at least its size
// and at most 25% larger, else a new cudaMalloc. All kernels run on the backend's one
// stream, so a block freed while queued kernels still use it is safe to hand out again:
// the next user's work is queued behind them. When cudaMalloc fails, the cache is
// released (after a device synchronise) and the allocation retried once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

namespace colonnade::cuda {

class CachingAllocator {
 public:
  CachingAllocator() = default;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* Allocate(size_t bytes);  // aborts when the device is out of memory
  void Free(void* ptr);
  // Returns every cached (unused) block to the device.
  void ReleaseCached();

  // A captured CUDA graph (step_graph.h) replays with the addresses its capture used, so
  // a block freed during the capture (an Ops call's Scratch) must not be handed to anyone
  // outside the graph while the graph lives: between BeginCapturePool and EndCapturePool
  // freed blocks go to the capture's pool instead of the cache, and allocations are
  // served from that pool first (a reuse inside one capture is stream-ordered, as ever).
  // EndCapturePool returns the pool's blocks; ReleaseCapturePool, when the graph is
  // destroyed, puts them back in the cache. One capture at a time.
  void BeginCapturePool();
  std::multimap<size_t, void*> EndCapturePool();
  void ReleaseCapturePool(const std::multimap<size_t, void*>& pool);

  size_t bytes_in_use() const;
  size_t peak_bytes_in_use() const;
  size_t bytes_reserved() const;
  size_t peak_bytes_reserved() const;
  size_t num_device_allocations() const;  // cudaMalloc calls so far
  void ResetPeaks();

 private:
  static size_t RoundUp(size_t bytes);
  // Takes a block for `size` bytes from `from` (at most 25% larger), or null.
  void* TakeFrom(std::multimap<size_t, void*>& from, size_t size);
  void ReleaseCachedLocked();

  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;
  std::multimap<size_t, void*> free_;
  bool capturing_ = false;
  std::multimap<size_t, void*> capture_free_;  // the open capture's freed blocks
  size_t in_use_ = 0, peak_in_use_ = 0, reserved_ = 0, peak_reserved_ = 0;
  size_t mallocs_ = 0;
};

// A scratch buffer from the allocator for the duration of one Ops call.
class Scratch {
 public:
  Scratch(CachingAllocator* a, size_t bytes) : a_(a), p_(bytes ? a->Allocate(bytes) : nullptr) {}
  ~Scratch() {
    if (p_) a_->Free(p_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* f() const { return static_cast<float*>(p_); }
  double* d() const { return static_cast<double*>(p_); }

 private:
  CachingAllocator* a_;
  void* p_;
};

}  // namespace colonnade::cuda
