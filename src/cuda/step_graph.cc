#include "cuda/step_graph.h"

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "cuda/caching_allocator.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/ops/sgd.h"
#include "cuda/port.h"

namespace colonnade::cuda {
namespace {

cudaStream_t Stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

StepGraph::StepGraph() : stream_(ComputeStream()) {
  CHECK(stream_ != nullptr && BackendAllocator() != nullptr)
      << "StepGraph needs the registered CUDA backend";
  scalars_ = static_cast<StepScalars*>(BackendAllocator()->Allocate(sizeof(StepScalars)));
}

StepGraph::~StepGraph() {
  Reset();
  BackendAllocator()->Free(scalars_);  // stream-ordered reuse, as every block
}

void StepGraph::Reset() {
  if (exec_ != nullptr) {
    // An in-flight launch completes first; its pool's blocks are reused behind it on the
    // same stream.
    COLONNADE_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)));
    exec_ = nullptr;
  }
  BackendAllocator()->ReleaseCapturePool(pool_);
  pool_.clear();
  graph_shape_ = -1;
  warm_shape_ = -1;
}

bool StepGraph::Capture(const std::function<void(const StepScalars* device)>& enqueue) {
  CachingAllocator& alloc = *BackendAllocator();
  alloc.BeginCapturePool();
  // Relaxed: other threads (the data pipeline pinning host memory) are not affected.
  COLONNADE_CUDA_CHECK(cudaStreamBeginCapture(Stream(stream_), cudaStreamCaptureModeRelaxed));
  enqueue(scalars_);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(Stream(stream_), &graph);
  pool_ = alloc.EndCapturePool();
  cudaGraphExec_t exec = nullptr;
  cudaError_t made = end;
  if (end == cudaSuccess) {
    made = cudaGraphInstantiate(&exec, graph, 0);
    COLONNADE_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  if (made != cudaSuccess) {
    (void)cudaGetLastError();
    error_ = absl::StrFormat("capturing the step as a CUDA graph failed (CUDA error %d: %s)",
                             static_cast<int>(made), cudaGetErrorString(made));
    alloc.ReleaseCapturePool(pool_);
    pool_.clear();
    return false;
  }
  exec_ = exec;
  ++captures_;
  return true;
}

StepRun StepGraph::Step(int64_t shape, const StepScalars& values,
                        const std::function<void(const StepScalars* device)>& enqueue) {
  if (!error_.empty()) {
    enqueue(nullptr);
    return StepRun::kPlain;
  }
  StepRun run = StepRun::kReplayed;
  if (exec_ == nullptr || graph_shape_ != shape) {
    if (warm_shape_ != shape) {  // a new shape: drop the old graph, warm up plainly
      Reset();
      warm_shape_ = shape;
      enqueue(nullptr);
      return StepRun::kPlain;
    }
    Reset();
    warm_shape_ = shape;
    if (!Capture(enqueue)) {
      LOG(WARNING) << error_ << "; the run continues without graphs";
      enqueue(nullptr);  // the capture ran nothing: the step runs now
      return StepRun::kPlain;
    }
    graph_shape_ = shape;
    run = StepRun::kCaptured;
  }
  SetStepScalarsGpu(Stream(stream_), scalars_, values);
  COLONNADE_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), Stream(stream_)));
  return run;
}

}  // namespace colonnade::cuda
