#include "cuda/autotune.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/log.h"

namespace colonnade::cuda {

KernelAutotuner::KernelAutotuner(const char* env, std::vector<int> candidates, int emulated)
    : env_(env), candidates_(std::move(candidates)), emulated_(emulated) {}

void KernelAutotuner::Force(int version) {
  CHECK(version == 0 ||
        std::find(candidates_.begin(), candidates_.end(), version) != candidates_.end())
      << (env_ ? env_ : "autotuner") << ": no kernel version " << version;
  std::lock_guard<std::mutex> lock(mu_);
  forced_ = version;
}

int KernelAutotuner::Choose(cudaStream_t stream, const std::vector<int>& key,
                            const std::function<void(int)>& run) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (forced_ < 0) {
      const char* e = env_ == nullptr ? nullptr : std::getenv(env_);
      const std::string v = e == nullptr ? "" : e;
      forced_ = 0;
      for (int c : candidates_)
        if (v == "v" + std::to_string(c)) forced_ = c;
    }
    if (forced_ != 0) return forced_;
    auto it = chosen_.find(key);
    if (it != chosen_.end()) return it->second;
  }
  // Inside a CUDA-graph capture nothing can be timed (the launches are recorded, not run,
  // and waiting for an event is forbidden): the untimed version, not remembered. The step
  // graph's warm-up step runs every shape once before its capture, so this is a fallback.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  COLONNADE_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return emulated_;
  // Timed without the lock, so other threads' kernels are not held up behind the race.
  const int best = Race(stream, run);
  std::lock_guard<std::mutex> lock(mu_);
  chosen_[key] = best;
  return best;
}

int KernelAutotuner::Race(cudaStream_t stream, const std::function<void(int)>& run) const {
#if defined(COLONNADE_CUDA_EMULATE)
  (void)stream;
  (void)run;
  return emulated_;
#else
  const size_t n = candidates_.size();
  std::vector<cudaEvent_t> e(n + 1);
  for (auto& x : e) COLONNADE_CUDA_CHECK(cudaEventCreate(&x));
  for (int v : candidates_) run(v);  // first launches load the modules
  COLONNADE_CUDA_CHECK(cudaEventRecord(e[0], stream));
  for (size_t i = 0; i < n; ++i) {
    for (int r = 0; r < 3; ++r) run(candidates_[i]);
    COLONNADE_CUDA_CHECK(cudaEventRecord(e[i + 1], stream));
  }
  COLONNADE_CUDA_CHECK(cudaEventSynchronize(e[n]));
  int best = candidates_[0];
  float best_ms = 1e30f;
  for (size_t i = 0; i < n; ++i) {
    float ms = 0;
    COLONNADE_CUDA_CHECK(cudaEventElapsedTime(&ms, e[i], e[i + 1]));
    if (ms < best_ms) {
      best_ms = ms;
      best = candidates_[i];
    }
  }
  for (auto& x : e) COLONNADE_CUDA_CHECK(cudaEventDestroy(x));
  return best;
#endif
}

}  // namespace colonnade::cuda
