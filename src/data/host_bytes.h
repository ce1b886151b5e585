// A host byte buffer: what a Batch carries when it holds uint8 source pixels instead of a
// float tensor (core's Tensor is float-only, and its element count, bytes() and shape
// would all lie about a byte buffer). Copies share the storage, as Tensor copies do; the
// last copy frees it. The memory may be page-locked (pinned): the allocator decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace colonnade::data {

class HostBytes {
 public:
  HostBytes() = default;
  // `n` bytes of ordinary heap memory (uninitialised).
  explicit HostBytes(size_t n)
      : buf_(new uint8_t[n > 0 ? n : 1], std::default_delete<uint8_t[]>()), size_(n) {}
  // Adopts `p` (`n` bytes); `release(p)` runs when the last copy goes away.
  HostBytes(void* p, size_t n, std::function<void(void*)> release)
      : buf_(static_cast<uint8_t*>(p), [release](uint8_t* q) { release(q); }), size_(n) {}

  uint8_t* data() const { return buf_.get(); }
  size_t size() const { return size_; }
  bool empty() const { return buf_ == nullptr; }

 private:
  std::shared_ptr<uint8_t> buf_;
  size_t size_ = 0;
};

// Returns a host byte buffer of the given size; the pinned allocator of uint8 batches.
using HostBytesAllocator = std::function<HostBytes(size_t)>;

}  // namespace colonnade::data
