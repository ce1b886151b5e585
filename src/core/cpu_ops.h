// CpuOps: the reference implementation of Ops on the host, in float32, threaded over
// channels/images where it matters; GEMM through CBLAS (OpenBLAS). It is both the CPU
// training backend and the reference every CUDA kernel is tested against. Each family's
// methods are defined in core/ops/<family>.cc beside its parameters and shape rule; the
// convolutions, GEMM and the thread pool in cpu_ops.cc.
#pragma once

#include <functional>

#include <cstddef>

#include "core/ops.h"

namespace colonnade {

class CpuOps : public Ops {
 public:
  using Ops::Add;
  using Ops::PoolBackward;
  using Ops::PoolForward;
  using Ops::SoftmaxCrossEntropyBackward;
  using Ops::SoftmaxCrossEntropyForward;
  Device device() const override { return Device::kCPU; }
  void Fill(Tensor& y, float value) override;
  void Copy(const Tensor& x, Tensor& y) override;
  void Axpby(float alpha, const Tensor& x, float beta, Tensor& y) override;
  void Add(const Tensor& a, const Tensor& b, Tensor& y, bool relu) override;
  void CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) override;
  void CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) override;
  double Sum(const Tensor& x) override;
  void ConvForward(const Tensor& x, const Tensor& w, Tensor& y, const ConvParams& p) override;
  void ConvBackwardData(const Tensor& dy, const Tensor& w, Tensor& dx,
                        const ConvParams& p) override;
  void ConvBackwardFilter(const Tensor& x, const Tensor& dy, Tensor& dw,
                          const ConvParams& p) override;
  void AddBias(Tensor& y, const Tensor& b) override;
  void BiasBackward(const Tensor& dy, Tensor& db) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  // With a record (max pooling, MaxPoolRecordFits): the forward writes it, the backward routes
  // dy by it without reading x (nor y unless relu_dx), as CudaOps does (ops.h).
  void PoolForward(const Tensor& x, Tensor& y, const PoolParams& p, Tensor* record) override;
  void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    const PoolParams& p, const Tensor* record, bool relu_dx = false) override;
  void GlobalAvgPoolForward(const Tensor& x, Tensor& y) override;
  void GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) override;
  // Always stores the denominators (an empty `denom` is given x's shape).
  void LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnCrossParams& p) override;
  void LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom, const Tensor& dy,
                        Tensor& dx, const LrnCrossParams& p) override;
  void LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom,
                        const LrnWithinParams& p) override;
  void LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom, const Tensor& dy,
                         Tensor& dx, const LrnWithinParams& p) override;
  void BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                             Tensor& save_invstd, Tensor& save_scale, const BatchNormParams& p,
                             bool relu, bool write_y = true) override;
  void BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale, const Tensor& shift,
                      Tensor& y, bool relu) override;
  void BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             const Tensor& running_mean, const Tensor& running_var, Tensor& y,
                             const BatchNormParams& p) override;
  void BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, const Tensor* relu_y, const Tensor& dy,
                         Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                         const Tensor* mask_scale = nullptr,
                         const Tensor* mask_shift = nullptr) override;
  void ReluForward(const Tensor& x, Tensor& y) override;
  void ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) override;
  void DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) override;
  void DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) override;
  void SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                  Tensor& loss_per_image, float label_smoothing) override;
  void SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                   Tensor& dlogits, float label_smoothing) override;
  void AccumulateResults(const Tensor& probs, const Tensor& labels, const Tensor& loss_per_image,
                         int64_t step, const int64_t* step_on_device, Tensor& totals) override;
  void SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) override;
  void SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) override;
  void Synchronize() override {}
};

// Number of worker threads CpuOps uses (default: hardware concurrency; the
// COLONNADE_CPU_THREADS environment variable overrides).
int CpuThreads();
void SetCpuThreads(int n);
// Calls fn(begin, end) on a partition of [0, n) over CpuOps' thread pool (inline when the
// work is small, `cost` being a rough per-item cost in element operations, or when called
// from inside the pool). For loops whose items are independent, so that the result does
// not depend on the partition (e.g. parameter initialisation keyed by element index).
void ParallelRanges(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn);

// Upper bound, in bytes, of the im2col scratch buffer one convolution call uses on the
// CPU (default 16 MiB); the output pixels are processed in chunks that fit it. Exposed so
// that tests can force many small chunks on small shapes.
size_t CpuConvScratchBytes();
void SetCpuConvScratchBytes(size_t bytes);

}  // namespace colonnade
