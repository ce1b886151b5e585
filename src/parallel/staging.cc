#include "parallel/staging.h"

#include <cstdlib>

#include "core/backend.h"
#include "core/log.h"

namespace colonnade {
namespace {

// Page-locked memory from the CUDA backend (Backend::AllocateHostPinned) when one is
// registered, which is the case whenever GPU tensors are staged; plain aligned memory
// otherwise (no GPU, or pinning refused).
StagingPool::Buffer AllocHost(size_t bytes) {
  if (Backend* cuda = GetBackend(Device::kCUDA)) {
    if (void* p = cuda->AllocateHostPinned(bytes)) return {p, bytes, true};
  }
  void* q = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  CHECK(q != nullptr) << "out of host memory allocating a " << bytes << "-byte staging buffer";
  return {q, bytes, false};
}

void FreeHost(const StagingPool::Buffer& b) {
  if (b.pinned) {
    GetBackend(Device::kCUDA)->FreeHostPinned(b.ptr);
  } else {
    std::free(b.ptr);
  }
}

}  // namespace

StagingPool::StagingPool() : state_(std::make_shared<State>()) {}

StagingPool::~StagingPool() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->alive = false;
  for (const Buffer& b : state_->free) FreeHost(b);
  state_->free.clear();
}

std::shared_ptr<float> StagingPool::Get(size_t bytes) {
  if (bytes == 0) bytes = sizeof(float);
  Buffer buf;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // Smallest cached buffer that fits.
    size_t best = state_->free.size();
    for (size_t i = 0; i < state_->free.size(); ++i) {
      if (state_->free[i].capacity >= bytes &&
          (best == state_->free.size() || state_->free[i].capacity < state_->free[best].capacity)) {
        best = i;
      }
    }
    if (best < state_->free.size()) {
      buf = state_->free[best];
      state_->free.erase(state_->free.begin() + best);
    }
  }
  if (buf.ptr == nullptr) buf = AllocHost(bytes);
  std::shared_ptr<State> state = state_;
  return std::shared_ptr<float>(static_cast<float*>(buf.ptr), [state, buf](float*) {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->alive) {
      state->free.push_back(buf);
    } else {
      FreeHost(buf);
    }
  });
}

}  // namespace colonnade
