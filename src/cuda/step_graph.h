// StepGraph: one training step's device work (forward, backward, gradient sync when it is
// a no-op, optimizer) recorded once as a CUDA graph and replayed every step, so a step
// costs one graph launch instead of hundreds of kernel launches: small nets on a fast GPU
// are bound by the host's launch rate, not by the GPU.
//
//   cuda::StepGraph graph;
//   for (step ...) {
//     copy a host batch into the net's input blobs (outside the graph), or, with the GPU
//     feed, values.feed_slot = feed.BeginProduce(n) (its Augment runs inside)
//     graph.Step(net.builds(), values, [&](const StepScalars* dev) {
//       RunContext ctx = ...; ctx.step = step; ctx.device_scalars = dev;
//       net.Forward(ctx); net.Backward(ctx); opt.Step(net, lr, dev ? &dev->lr : nullptr);
//       ops.AccumulateResults(..., dev ? &dev->step : nullptr, totals);
//     });
//   }
//
// How a step runs, by its `shape` (anything the recorded addresses and launch geometry
// depend on: the trainer passes Net::builds(), which changes whenever a Build may have
// moved a buffer):
//   a new shape      a plain step: `enqueue(nullptr)` queues the work as always, with the
//                    step's values as launch arguments. It is the warm-up: every buffer
//                    the step allocates is then cached and every autotuned kernel version
//                    chosen, so the capture that follows allocates and times nothing.
//   the next step    captured: `enqueue(device scalars)` is recorded on the compute stream
//                    (cudaStreamBeginCapture, relaxed mode: nothing runs), instantiated,
//                    then replayed as below.
//   every later one  replayed: the step's StepScalars are written to the device block by a
//                    one-thread kernel (stream-ordered, values as launch arguments), then
//                    the graph is launched. Kernels whose values change per step (dropout's
//                    Philox step, SGD's learning rate, the feed's slot, the results' step)
//                    read them from that block; every other launch argument is the same
//                    every step by construction.
// The recorded work must not allocate, free or synchronise with the host; blocks freed
// during the capture stay the graph's (CachingAllocator::BeginCapturePool). Results are
// bitwise those of plain steps (tests/cuda/step_graph_test.cc).
//
// In a build without CUDA the class exists and always runs plain steps (kAvailable false).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "core/ops.h"

namespace colonnade::cuda {

enum class StepRun { kPlain, kCaptured, kReplayed };

#if defined(COLONNADE_WITH_CUDA) && COLONNADE_WITH_CUDA

class StepGraph {
 public:
  static constexpr bool kAvailable = true;
  // Needs the registered CUDA backend (RegisterBackend): its compute stream and allocator.
  StepGraph();
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Queues one step (see above); returns how it ran. A failed capture (a forbidden call in
  // `enqueue`) runs the step plainly, turns the graph off for good and sets error().
  StepRun Step(int64_t shape, const StepScalars& values,
               const std::function<void(const StepScalars* device)>& enqueue);
  // Destroys the graph (the next step of any shape is a plain warm-up again).
  void Reset();
  int64_t captures() const { return captures_; }
  // Why graphs were turned off (empty while they are on).
  const std::string& error() const { return error_; }

 private:
  bool Capture(const std::function<void(const StepScalars* device)>& enqueue);

  void* stream_;                    // cudaStream_t
  StepScalars* scalars_ = nullptr;  // device
  void* exec_ = nullptr;            // cudaGraphExec_t
  std::multimap<size_t, void*> pool_;
  int64_t graph_shape_ = -1, warm_shape_ = -1;
  int64_t captures_ = 0;
  std::string error_;
};

#else

class StepGraph {
 public:
  static constexpr bool kAvailable = false;
  StepRun Step(int64_t, const StepScalars&,
               const std::function<void(const StepScalars* device)>& enqueue) {
    enqueue(nullptr);
    return StepRun::kPlain;
  }
  void Reset() {}
  int64_t captures() const { return 0; }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

#endif

}  // namespace colonnade::cuda
