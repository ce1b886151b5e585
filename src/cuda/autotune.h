// The one autotuner of the CUDA backend, for kernels that come in interchangeable versions
// with bit-identical results: the SIMT forward / backward-data convolutions (the K slices of
// a row tile, conv/catalogue.cc), max-pool backward (ops_kernels.cu, versions 2 and 3) and
// the fused LRN + max-pool forward (ops_kernels.cu, versions 1 and 2). Which version is
// fastest depends on the problem's shape, so it is measured once per shape, on first use, and
// remembered for the life of the process.
//
// Tuning a key: every candidate is queued once (the first launches load the modules and
// warm the caches), then each candidate three times in a row between two events; the
// candidate with the least time wins, the earlier candidate on a tie. Every launch
// computes the same output, so tuning leaves the results as a plain run would. Since the
// versions are bit-identical, which one wins never changes a result, only the time.
//
// Forcing a version (tests, benchmarks): Force(v), or the environment variable named at
// construction set to "v<N>" for a candidate N (read on first use; any other value means
// tune). The convolutions' tuners have no variable (null): COLONNADE_CONV_CONFIG chooses
// before them (conv/catalogue.h). On the CPU emulator timings mean nothing: it runs a fixed
// version unless one is forced. A key first seen while its stream is capturing a CUDA graph
// is not timed either: it gets that same fixed version, and is tuned on its next uncaptured
// call.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "cuda/port.h"

namespace colonnade::cuda {

class KernelAutotuner {
 public:
  // `env`: the variable that forces a version, or null; `candidates`: the versions raced, in tie
  // order; `emulated`: the version run untimed (the emulator, a capture) when none is
  // forced.
  KernelAutotuner(const char* env, std::vector<int> candidates, int emulated);

  // 0 restores tuning (and overrides the environment); a candidate is always run.
  void Force(int version);

  // The version to run for the problem identified by `key`: the forced one, the cached
  // choice, or (first call of the key) the winner of timing `run(version)`, which queues
  // that version on `stream`. Thread-safe.
  int Choose(cudaStream_t stream, const std::vector<int>& key, const std::function<void(int)>& run);

 private:
  int Race(cudaStream_t stream, const std::function<void(int)>& run) const;

  const char* env_;
  const std::vector<int> candidates_;
  const int emulated_;
  std::mutex mu_;
  int forced_ = -1;  // -1: the environment has not been read yet; 0: tune
  std::map<std::vector<int>, int> chosen_;
};

}  // namespace colonnade::cuda
