// Host staging buffers for moving GPU tensors through MPI: page-locked (the CUDA backend's
// Backend::AllocateHostPinned) when a CUDA backend is registered, so the device copies
// run at full PCIe/NVLink-C2C speed, plain aligned memory otherwise. Buffers are cached
// and reused: pinning is slow.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace colonnade {

class StagingPool {
 public:
  StagingPool();
  ~StagingPool();
  // A buffer of at least `bytes`, returned to the pool when the last copy of the
  // pointer is dropped (the pool may be destroyed first; the buffer is then freed).
  std::shared_ptr<float> Get(size_t bytes);

  struct Buffer {
    void* ptr = nullptr;
    size_t capacity = 0;
    bool pinned = false;  // from the CUDA backend (freed there)
  };

 private:
  struct State {
    std::mutex mu;
    bool alive = true;
    std::vector<Buffer> free;
  };
  std::shared_ptr<State> state_;
};

}  // namespace colonnade
