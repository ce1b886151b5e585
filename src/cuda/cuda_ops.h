// CudaOps: the Ops interface on one GPU. Convolutions use the hand-written CHWN kernels of
// conv/ (FP32: conv/simt.cu), fully connected products cuBLAS in strict FP32 (no TF32:
// pedantic math mode), every other family the kernels of src/cuda/ops/<family>.cu, where its
// methods are defined too (this class's declarations are the list; cuda_ops.cc holds the
// convolutions, GEMM and precision). Every call is queued on one stream and returns without
// waiting, except Sum (which returns a value) and Synchronize. set_conv_math moves the
// convolutions onto the tensor-core kernels (conv/mma.cu, wgmma.cu).
#pragma once

#include <initializer_list>
#include <memory>
#include <vector>

#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops.h"
#include "cuda/caching_allocator.h"
#include "cuda/conv/conv.h"
#include "cuda/kernels.h"
// The launchers of each family (their kernels: ops/<family>.cu).
#include "cuda/ops/batchnorm.h"
#include "cuda/ops/dropout.h"
#include "cuda/ops/eltwise.h"
#include "cuda/ops/lrn.h"
#include "cuda/ops/pool.h"
#include "cuda/ops/results.h"
#include "cuda/ops/sgd.h"
#include "cuda/ops/softmax.h"

namespace colonnade::cuda {

class CudaOps : public Ops {
 public:
  using Ops::Add;
  using Ops::PoolBackward;
  using Ops::PoolForward;
  using Ops::SoftmaxCrossEntropyBackward;
  using Ops::SoftmaxCrossEntropyForward;
  CudaOps(const DeviceContext& ctx, cublasHandle_t blas) : ctx_(ctx), blas_(blas) {}
  Device device() const override { return Device::kCUDA; }
  const DeviceContext& context() const { return ctx_; }

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
  // In the tensor-core modes the bias and ReLU run in the forward epilogue; in bf16, x and
  // dy are rounded to bf16 copies once per pass (dy on its way through the ReLU's mask) so
  // that every product of the pass loads half the bytes through the kernels' cp.async path
  // instead of converting float operands tile by tile. kFP32: the primitives' arithmetic
  // (the ReLU's gradient in a scratch buffer), bit for bit the unfused layers.
  // bn_sums: the tile sums of a staged wgmma forward wait in pending_sums_ for the
  // BatchNormForwardTrain of this y (and only it: any other batch norm, or a later
  // convolution, drops them).
  void ConvLayerForward(const Tensor& x, const Tensor& w, const Tensor* b, bool relu, Tensor& y,
                        const ConvParams& p, bool bn_sums = false) override;
  void ConvLayerBackward(const Tensor& x, const Tensor& w, const Tensor* relu_y, const Tensor& dy,
                         Tensor& dw, Tensor* db, Tensor* dx, const ConvParams& p,
                         bool relu_dx = false, bool add_dx = false) override;
  void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override;
  void PoolForward(const Tensor& x, Tensor& y, const PoolParams& p, Tensor* record) override;
  void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    const PoolParams& p, const Tensor* record, bool relu_dx = false) override;
  void GlobalAvgPoolForward(const Tensor& x, Tensor& y) override;
  void GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) override;
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
  void ReluBackwardTwice(const Tensor& y, const Tensor& dy, Tensor& dx0, Tensor& dx1) override;
  void ReluBackwardBnSums(const Tensor& y, const Tensor& dy, Tensor& dx, const BnSumsOperand& a,
                          const BnSumsOperand* b) override;
  void AddNormalized(const AddOperand& a, const AddOperand& b, Tensor& y, bool relu) override;
  void DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) override;
  void DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) override;
  void SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                  Tensor& loss_per_image, float label_smoothing) override;
  void SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                   Tensor& dlogits, float label_smoothing) override;
  void AccumulateResults(const Tensor& probs, const Tensor& labels, const Tensor& loss_per_image,
                         int64_t step, const int64_t* step_on_device, Tensor& totals) override;
  void SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) override;
  void SgdUpdateMany(const std::vector<SgdTensor>& updates) override;
  void SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) override;
  void Synchronize() override;
  // kFP32: the FP32 kernels and cuBLAS in pedantic FP32 (bitwise as always); kTF32 / kBF16:
  // convolutions on the tensor-core kernels in that math mode, fully connected products
  // through cuBLAS's TF32 tensor-core math in both (bf16 products are future work).
  absl::Status SetPrecision(Precision p) override;

  // Convolutions on the tensor cores in this math mode (kTF32 or kBF16: the float tensors
  // are rounded on their way into the tensor cores, FP32 accumulation; conv/tensor_core.cu),
  // or the FP32 kernels (kFP32, the default: results bitwise as always). SetPrecision sets it for
  // runs; tests set it alone.
  void set_conv_math(MathMode m) { conv_math_ = m; }
  MathMode conv_math() const { return conv_math_; }
  // Training batch norms that took their statistics from the convolution before them
  // (ConvLayerForward's bn_sums), since construction: tests and benchmarks.
  int64_t batch_norms_from_conv_sums() const { return bn_from_conv_sums_; }
  // Bias gradients taken from the tile sums of the backward data after them (relu_dx).
  int64_t biases_from_dx_sums() const { return biases_from_dx_sums_; }
  // Batch-norm backwards that took their sums from the residual sum's backward before them
  // (ReluBackwardBnSums).
  int64_t batch_norms_from_sum_sums() const { return bn_from_sum_sums_; }

 private:
  DeviceContext ctx_;
  cublasHandle_t blas_;
  MathMode conv_math_ = MathMode::kFP32;
  // A convolution's per-channel tile sums (ConvLayerForward with bn_sums) for the batch norm of
  // its output `y` (data pointer, channels): consumed, or dropped, by the next
  // BatchNormForwardTrain.
  struct PendingSums {
    std::unique_ptr<Scratch> sums;
    const void* y = nullptr;
    int64_t channels = 0, inner = 0;
    int tiles = 0;
  };
  PendingSums pending_sums_;
  int64_t bn_from_conv_sums_ = 0;
  // The tile sums of a backward data under relu_dx (dx = the y field) for the bias gradient of
  // the convolution whose dy it is: consumed, or dropped, by the next ConvLayerBackward.
  PendingSums pending_dx_sums_;
  int64_t biases_from_dx_sums_ = 0;
  // The backward sums a residual sum's backward took for the batch norm of input x whose dy is
  // that sum's gradient (ReluBackwardBnSums): consumed by that BatchNormBackward, dropped by the
  // next ConvLayerForward (a new step) or a newer entry for the same x.
  struct PendingBnSums {
    const void* x = nullptr;
    const void* dy = nullptr;
    BnSumsLayout layout;
    std::unique_ptr<Scratch> part;
  };
  std::vector<PendingBnSums> pending_bn_sums_;
  int64_t bn_from_sum_sums_ = 0;

  // A float tensor as a tensor-core operand: bf16 math reads a bf16 copy made into `copy`
  // (scratch for the rest of the Ops call); tf32 math reads the tensor itself.
  // A convolution operand: a bf16 tensor as it is; a float tensor in bf16 math rounded
  // into `copy`; otherwise the float tensor.
  TcInput TcOperand(const Tensor& t, std::unique_ptr<Scratch>& copy);
  // Ends the process when a bf16-stored tensor reaches a convolution outside bf16 math.
  void RefuseBf16Storage(std::initializer_list<const Tensor*> ts, const char* op) const;
};

// ---- what the CudaOps methods of every family check and convert -------------------------------
inline void CheckOnDevice(const Tensor& t, const char* what) {
  CHECK(t.device() == Device::kCUDA) << what << " must live on the GPU";
}
// The kernels index in 32 bits where they can.
inline int I32(int64_t v, const char* what) {
  CHECK(v >= 0 && v < (int64_t(1) << 31)) << what << " = " << v << " does not fit in 32 bits";
  return static_cast<int>(v);
}
// Per-channel inner size of a tensor viewed as C x (everything else).
inline int64_t Inner(const Tensor& t) {
  return t.shape().rank() == 0 ? 0 : t.size() / t.shape()[0];
}
inline StorageType StorageOf(const Tensor& t) {
  return t.is_bf16() ? StorageType::kBF16 : StorageType::kFloat;
}
// Tensors that must share a storage type (x and dx, y, dy and relu_y; an output aliasing an
// input): a kernel instantiation reads and writes each through one type.
inline void SameStorage(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                        const char* op) {
  CHECK(a.dtype() == b.dtype()) << op << ": " << a_name << " and " << b_name
                                << " must share a storage type (" << a_name << " "
                                << DTypeName(a.dtype()) << ", " << b_name << " "
                                << DTypeName(b.dtype()) << ")";
}
// y written in place over x (the same storage) must be of x's type.
inline void AliasSameStorage(const Tensor& x, const char* x_name, const Tensor& y, const char* op) {
  if (x.raw() == y.raw() && x.size() > 0) SameStorage(x, x_name, y, "y (in place)", op);
}

}  // namespace colonnade::cuda
