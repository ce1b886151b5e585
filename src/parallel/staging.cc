#include "parallel/staging.h"

#include <cstdlib>

#include "core/log.h"

#ifdef COLONNADE_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace colonnade {
namespace {

void* AllocHost(size_t bytes) {
#ifdef COLONNADE_WITH_CUDA
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes) == cudaSuccess) return p;
  cudaGetLastError();  // clear; fall back to pageable memory (no GPU, or pinning refused)
#endif
  void* q = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  CHECK(q != nullptr) << "out of host memory allocating a " << bytes << "-byte staging buffer";
  return q;
}

void FreeHost(void* p) {
#ifdef COLONNADE_WITH_CUDA
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost) {
    cudaFreeHost(p);
    return;
  }
  cudaGetLastError();
#endif
  std::free(p);
}

}  // namespace

StagingPool::StagingPool() : state_(std::make_shared<State>()) {}

StagingPool::~StagingPool() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->alive = false;
  for (auto& [p, cap] : state_->free) FreeHost(p);
  state_->free.clear();
}

bool StagingPool::Pinned() {
#ifdef COLONNADE_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::shared_ptr<float> StagingPool::Get(size_t bytes) {
  if (bytes == 0) bytes = sizeof(float);
  void* ptr = nullptr;
  size_t cap = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    // Smallest cached buffer that fits.
    size_t best = state_->free.size();
    for (size_t i = 0; i < state_->free.size(); ++i) {
      if (state_->free[i].second >= bytes &&
          (best == state_->free.size() || state_->free[i].second < state_->free[best].second)) {
        best = i;
      }
    }
    if (best < state_->free.size()) {
      ptr = state_->free[best].first;
      cap = state_->free[best].second;
      state_->free.erase(state_->free.begin() + best);
    }
  }
  if (ptr == nullptr) {
    cap = bytes;
    ptr = AllocHost(cap);
  }
  std::shared_ptr<State> state = state_;
  return std::shared_ptr<float>(static_cast<float*>(ptr), [state, cap](float* p) {
    std::lock_guard<std::mutex> lock(state->mu);
    if (state->alive) {
      state->free.emplace_back(p, cap);
    } else {
      FreeHost(p);
    }
  });
}

}  // namespace colonnade
