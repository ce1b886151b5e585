// Ops: every numerical operation a layer or the optimizer needs, on one device.
//
// Layers never touch memory directly; they call Ops, so the same layer runs on the CPU
// reference (CpuOps) or the GPU (cuda::CudaOps). All tensors passed to one call live on
// that Ops' device. Activations are CHWN (see tensor.h). Unless stated, outputs are
// overwritten (not accumulated) and must already have the right shape.
//
// A facade over the op families: each family's parameters and shape rule are in
// core/ops/<family>.h, its CPU reference in core/ops/<family>.cc, its CUDA kernels in
// src/cuda/ops/<family>.cu (docs/ARCHITECTURE.md, "Op families"). One virtual method per
// operation; a fused pass or a variant is an argument of its family's operation (relu of Add
// and the batch norms, the max pool's record), not a method of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/ops/batchnorm.h"
#include "core/ops/dropout.h"
#include "core/ops/eltwise.h"
#include "core/ops/lrn.h"
#include "core/ops/pool.h"
#include "core/ops/results.h"
#include "core/ops/sgd.h"
#include "core/ops/softmax.h"
#include "core/precision.h"
#include "core/results.h"
#include "core/tensor.h"

namespace colonnade {

// Convolution weights are stored in the canonical layout [F][C/groups][KH][KW]
// (the checkpoint layout too). Filter f belongs to group f / (F/groups) and sees
// input channels [g*C/groups, (g+1)*C/groups).
struct ConvParams {
  int kernel_h = 1, kernel_w = 1;
  int stride = 1;
  int pad = 0;
  int groups = 1;
};
// Output size of a convolution along one axis.
inline int64_t ConvOutSize(int64_t in, int kernel, int stride, int pad) {
  return (in + 2 * pad - kernel) / stride + 1;
}

// The values of a training step that change every step but are baked into the kernels'
// launch arguments when the step is captured as a CUDA graph (src/cuda/step_graph.h): the
// dropout masks' Philox step and the schedule's learning rate. A graphed step keeps one
// copy of this block in device memory, rewritten (stream-ordered) before each replay, and
// the kernels that need a value read it there (DropoutParams::step_on_device,
// SgdParams::lr_on_device). Plain steps pass the values as arguments, as always.
struct StepScalars {
  int64_t step = 0;  // RunContext::step
  float lr = 0.0f;   // the schedule's rate, before each parameter's lr_mult
  // The GPU feed's slot holding the step's batch (cuda::BatchFeed::Augment), read by the
  // augmentation kernel of a graphed step; unused otherwise.
  int32_t feed_slot = 0;
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual Device device() const = 0;

  // ---- element-wise and memory (core/ops/eltwise.h) -----------------------------------------
  virtual void Fill(Tensor& y, float value) = 0;
  // Same element count; between storage types (CUDA, bf16 storage) the values convert.
  virtual void Copy(const Tensor& x, Tensor& y) = 0;
  // y = alpha * x + beta * y; with beta == 0, y is not read (BLAS convention).
  virtual void Axpby(float alpha, const Tensor& x, float beta, Tensor& y) = 0;
  // y = a + b; with relu, y = max(a + b, 0) in the same pass (Net fuses a residual sum with
  // the in-place ReLU after it), bitwise the sum then ReluForward.
  virtual void Add(const Tensor& a, const Tensor& b, Tensor& y, bool relu) = 0;
  void Add(const Tensor& a, const Tensor& b, Tensor& y) { Add(a, b, y, false); }
  // An operand of AddNormalized: the tensor t itself, or (mean not null) the output of a
  // training batch norm whose input is t, recomputed as BatchNormApply(t, mean, scale, shift)
  // computes it and rounded to `stored`, the storage its output blob has.
  struct AddOperand {
    const Tensor* t = nullptr;
    const Tensor* mean = nullptr;
    const Tensor* scale = nullptr;
    const Tensor* shift = nullptr;
    DType stored = DType::kFloat32;
  };
  // y = a + b (then max(y, 0) with relu) with either operand a batch norm's output that was
  // never written (Net::Fusions::bn_add: a residual block's last batch norms and its sum in
  // one pass). Bitwise the unfused BatchNormApply + Add; the default is exactly those.
  virtual void AddNormalized(const AddOperand& a, const AddOperand& b, Tensor& y, bool relu) {
    auto value = [&](const AddOperand& o, Tensor& tmp) -> const Tensor& {
      if (o.mean == nullptr) return *o.t;
      tmp = Tensor(o.t->shape(), device(), o.stored);
      BatchNormApply(*o.t, *o.mean, *o.scale, *o.shift, tmp, false);
      return tmp;
    };
    Tensor ta, tb;
    const Tensor& va = value(a, ta);
    const Tensor& vb = value(b, tb);
    Add(va, vb, y, relu);
  }
  // Writes x (C1 x H x W x N) into channels [c0, c0 + C1) of y (C x H x W x N), or the
  // reverse for CopyChannelsOut. Contiguous blocks in CHWN.
  virtual void CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) = 0;
  virtual void CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) = 0;
  // Sum of all elements (synchronises; for tests and metrics).
  virtual double Sum(const Tensor& x) = 0;

  // ---- convolution: x C x H x W x N, w [F][C/g][KH][KW], y F x OH x OW x N ----------
  virtual void ConvForward(const Tensor& x, const Tensor& w, Tensor& y, const ConvParams& p) = 0;
  virtual void ConvBackwardData(const Tensor& dy, const Tensor& w, Tensor& dx,
                                const ConvParams& p) = 0;
  // dw = sum over images and pixels (overwrites).
  virtual void ConvBackwardFilter(const Tensor& x, const Tensor& dy, Tensor& dw,
                                  const ConvParams& p) = 0;
  // y[c, ...] += b[c] for a CHWN y and b of C elements.
  virtual void AddBias(Tensor& y, const Tensor& b) = 0;
  // db[c] = sum over H, W, N of dy[c, ...] (overwrites).
  virtual void BiasBackward(const Tensor& dy, Tensor& db) = 0;

  // A convolution layer's whole pass, which a backend may fuse (the CUDA backend's
  // tensor-core modes round x and dy to bf16 once for all the pass's products, add the bias
  // and apply the ReLU in the convolution's epilogue, and pass the gradient through the ReLU
  // while rounding it). The defaults are the primitives, in this order, so FP32 results are
  // those of the unfused layers bit for bit.
  // Forward: y = conv(x, w), then y += b when b is not null, then y = max(y, 0) when relu.
  // bn_sums: a training batch norm of y comes next (Net::Fusions::conv_bn); a backend may
  // leave y's per-channel sums for it (CudaOps: the wgmma epilogue's tile sums, which the next
  // BatchNormForwardTrain of this y uses instead of its two passes over y). Results stay
  // within the precision of the statistics (docs/PRECISION.md); the CPU ignores it.
  virtual void ConvLayerForward(const Tensor& x, const Tensor& w, const Tensor* b, bool relu,
                                Tensor& y, const ConvParams& p, bool bn_sums = false) {
    (void)bn_sums;
    ConvForward(x, w, y, p);
    if (b) AddBias(y, *b);
    if (relu) ReluForward(y, y);
  }
  // Backward from dy, the gradient of y. With relu_y (the y of a forward with relu) the
  // gradient first passes the ReLU (dy where relu_y > 0, else 0: ReluBackward). Then dw,
  // db when not null, dx when not null (all overwritten). relu_dx: x is the output of a ReLU
  // (in place, the layer before's; Net::Fusions::relu_grad) and dx goes on into it: dx is
  // written already passed through that ReLU (dx where x > 0, else 0), so that the layer
  // before reads it without its mask (relu_y null). The same bits as masking there; a backend
  // may do it in the convolution's epilogue (CudaOps, also leaving dx's per-channel sums for
  // that layer's bias gradient).
  // add_dx: dx holds the gradient other readers of x gave it already, and this layer's is
  // added (Net::Fusions::grad_add): dx = dx + (this layer's dx, as it would have been
  // stored), the same bits as writing a buffer of dx's type and Add(dx, it, dx) after. A
  // backend may add in the backward-data epilogue (CudaOps), reading dx once instead of a
  // pass over two tensors.
  virtual void ConvLayerBackward(const Tensor& x, const Tensor& w, const Tensor* relu_y,
                                 const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                 const ConvParams& p, bool relu_dx = false, bool add_dx = false) {
    Tensor masked;
    if (relu_y) {
      masked = Tensor(dy.shape(), device());
      ReluBackward(*relu_y, dy, masked);
    }
    const Tensor& g = relu_y ? masked : dy;
    ConvBackwardFilter(x, g, dw, p);
    if (db) BiasBackward(g, *db);
    if (dx) {
      Tensor own;
      Tensor& to = add_dx ? (own = Tensor(dx->shape(), device(), dx->dtype())) : *dx;
      ConvBackwardData(g, w, to, p);
      if (relu_dx) ReluBackward(x, to, to);
      if (add_dx) Add(*dx, to, *dx);
    }
  }

  // ---- matrices (row-major), for fully connected layers --------------------------
  // C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T; A is M x K after op, B K x N.
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;

  // ---- pooling (core/ops/pool.h) ----------------------------------------------------------
  // `record` (null: none), for max pooling with windows of at most 256 pixels
  // (MaxPoolRecordFits): y's shape, bf16. The forward writes each window's argmax there (the
  // first maximum's offset in its window; every backend, the same values), and the backward
  // given the same record routes dy by it without reading x, nor y unless relu_dx; without a
  // record the backward finds the maxima again from x and y. Same bits either way.
  virtual void PoolForward(const Tensor& x, Tensor& y, const PoolParams& p, Tensor* record) = 0;
  void PoolForward(const Tensor& x, Tensor& y, const PoolParams& p) {
    PoolForward(x, y, p, nullptr);
  }
  // dx from x, y, dy (max pooling routes to the first maximum of each window). relu_dx: as
  // ConvLayerBackward's (x is a ReLU's output; dx is written passed through it).
  virtual void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                            const PoolParams& p, const Tensor* record, bool relu_dx = false) = 0;
  void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                    const PoolParams& p) {
    PoolBackward(x, y, dy, dx, p, nullptr);
  }
  // x C x H x W x N -> y C x 1 x 1 x N (mean over pixels).
  virtual void GlobalAvgPoolForward(const Tensor& x, Tensor& y) = 0;
  virtual void GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) = 0;

  // ---- normalisation (core/ops/lrn.h, core/ops/batchnorm.h) ---------------------------------
  // `denom` receives k + alpha' * sum a^2 (x's shape), which the backward reads. Passed empty,
  // it is the backend's choice: where it computes the denominators again in the backward from
  // x, with the forward's bits (the CUDA backend: half-widths 1-4), it leaves `denom` empty and
  // stores nothing; otherwise it gives `denom` x's shape on this device and stores them. The
  // backward takes `denom` as the forward left it.
  virtual void LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom,
                               const LrnCrossParams& p) = 0;
  virtual void LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                const Tensor& dy, Tensor& dx, const LrnCrossParams& p) = 0;
  virtual void LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom,
                                const LrnWithinParams& p) = 0;
  virtual void LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                 const Tensor& dy, Tensor& dx, const LrnWithinParams& p) = 0;
  // Batch norm over H, W, N per channel. Training: uses batch statistics, writes
  // save_mean / save_invstd (C elements) and updates running_mean / running_var
  // (unbiased variance); y = (x - save_mean) * save_scale + beta per channel, where
  // save_scale (C elements) is the float gamma * invstd it used (kept so that
  // BatchNormApply can write the same y again). Inference: uses the running statistics.
  // With relu, y = max(y, 0) in the same pass (Net fuses a batch norm whose output the next
  // layer rectifies in place: GoogLeNet's and the ResNets' conv + bn + relu), bitwise the
  // batch norm then ReluForward.
  // write_y false: the statistics only (saved and running), y left as it is (its one reader
  // recomputes it: AddNormalized); a backend may still write it.
  virtual void BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     Tensor& y, Tensor& running_mean, Tensor& running_var,
                                     Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                     const BatchNormParams& p, bool relu, bool write_y = true) = 0;
  // y = (x - mean) * scale + shift per channel (then max(y, 0) with relu), with the training
  // forward's exact float arithmetic: given its save_mean, save_scale and beta, bitwise the y
  // it wrote (the recomputation of batch-norm outputs in the backward pass, docs/MEMORY.md).
  virtual void BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                              const Tensor& shift, Tensor& y, bool relu) = 0;
  virtual void BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     Tensor& y, const BatchNormParams& p) = 0;
  // With relu_y (the y of a forward with relu; null: none) dy first passes that ReLU
  // (ReluBackward), bitwise as if it had been masked apart. mask_scale and mask_shift (with
  // relu_y; may be null): the save_scale and beta of that forward, from which every backend
  // computes the mask again out of x (the forward's arithmetic and rounding: the same bits)
  // and does not read relu_y (BatchNormLayer: the memory plan does not keep it for this; CudaOps:
  // one tensor fewer read by both passes).
  virtual void BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                 const Tensor& save_invstd, const Tensor* relu_y, const Tensor& dy,
                                 Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                 const Tensor* mask_scale = nullptr,
                                 const Tensor* mask_shift = nullptr) = 0;

  // ---- activations (core/ops/eltwise.h, core/ops/dropout.h) -------------------------------
  virtual void ReluForward(const Tensor& x, Tensor& y) = 0;                      // may alias
  virtual void ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;  // may alias
  // ReluBackward into two gradients (a residual sum's two inputs, AddLayer with its fused
  // ReLU); a backend may write both in one pass. Either may alias dy.
  virtual void ReluBackwardTwice(const Tensor& y, const Tensor& dy, Tensor& dx0, Tensor& dx1) {
    ReluBackward(y, dy, dx0);
    ReluBackward(y, dy, dx1);  // dy masked already when dx0 aliases it: the same values
  }
  // A training batch norm whose backward reads dx next (BnSumsOperand: its x, save_mean and
  // save_invstd as BatchNormBackward gets them).
  struct BnSumsOperand {
    const Tensor* x = nullptr;
    const Tensor* mean = nullptr;
    const Tensor* invstd = nullptr;
  };
  // ReluBackward(y, dy, dx) of a residual sum whose inputs share the gradient dx and include
  // the outputs of batch norms a and b (b may be null; Net::Fusions::add_bn_sums): a backend
  // may also take, in the same pass, the sums each such batch norm's backward needs from dx
  // (sum dx and sum dx * xhat) and leave them for its next BatchNormBackward of that x and
  // dx, which then skips its own pass over both (the same terms in the same order: bitwise).
  // Nothing may write dx in between. The default: ReluBackward alone.
  virtual void ReluBackwardBnSums(const Tensor& y, const Tensor& dy, Tensor& dx,
                                  const BnSumsOperand& a, const BnSumsOperand* b) {
    (void)a;
    (void)b;
    ReluBackward(y, dy, dx);
  }
  // mask receives the kept/dropped scale (0 or 1/(1-p)) of each element.
  virtual void DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) = 0;
  virtual void DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) = 0;

  // ---- loss (core/ops/softmax.h) ----------------------------------------------------------
  // logits K x 1 x 1 x N (or K x N), labels 1 x N (class indices stored as floats).
  // probs receives the softmax; loss_per_image (N) the cross-entropy -log p[label].
  // With label_smoothing eps > 0 (--label_smoothing; PyTorch's
  // CrossEntropyLoss(label_smoothing=eps)) the target is eps/K on every class plus 1 - eps on
  // the label: loss = (1 - eps) (-log p[label]) + eps/K sum_k -log p[k]. eps == 0 is the plain
  // cross-entropy, bit for bit (softmax.h: SmoothedTargets).
  virtual void SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                          Tensor& loss_per_image, float label_smoothing) = 0;
  void SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                  Tensor& loss_per_image) {
    SoftmaxCrossEntropyForward(logits, labels, probs, loss_per_image, 0.0f);
  }
  // dlogits = scale * (probs - target), target = onehot(labels) (smoothed as above); scale is
  // usually 1 / global batch.
  virtual void SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                           Tensor& dlogits, float label_smoothing) = 0;
  void SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                   Tensor& dlogits) {
    SoftmaxCrossEntropyBackward(probs, labels, scale, dlogits, 0.0f);
  }

  // ---- results (core/ops/results.h, core/results.h) ---------------------------------------
  // Adds one step's results to `totals` (a kResultTotalsFloats tensor holding a
  // ResultTotals, on this device): the sum of loss_per_image (N), the top-1 and top-5
  // correct counts of probs (K x N, the softmax) for labels (N), as CountCorrect counts
  // them, and, when the step's loss sum is not finite, `step` (*step_on_device in a
  // graphed step, as DropoutParams::step_on_device) as the first non-finite one if none
  // was. Deterministic: the same inputs give the same totals bit for bit on one device.
  virtual void AccumulateResults(const Tensor& probs, const Tensor& labels,
                                 const Tensor& loss_per_image, int64_t step,
                                 const int64_t* step_on_device, Tensor& totals) = 0;

  // ---- optimiser (core/ops/sgd.h) ---------------------------------------------------------
  // Fused SGD with momentum and L2 weight decay (Krizhevsky et al. 2012, sec. 5):
  //   v = momentum * v - lr * (grad + weight_decay * w);  w = w + v
  // With p.nesterov the weights take the look-ahead step w = w + momentum * v - lr * (grad +
  // weight_decay * w) (v the new velocity); with p.lars_norms the rate is lr * the LARS trust
  // ratio of the tensor (core/ops/sgd.h).
  virtual void SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) = 0;
  // The same update for many tensors at once, each with its own SgdParams (SgdOptimizer::Step
  // passes every learnable parameter of a step): bit for bit a SgdUpdate per tensor, in any
  // order (the tensors are distinct). Here one SgdUpdate each; the CUDA backend updates up to
  // 48 tensors per launch (SgdManyKernel; a step had one launch per parameter: ResNet-50's 161
  // launches of a few microseconds each, most of them over tensors of a few hundred floats).
  struct SgdTensor {
    Tensor* w;
    const Tensor* grad;
    Tensor* velocity;
    SgdParams p;
  };
  virtual void SgdUpdateMany(const std::vector<SgdTensor>& updates) {
    for (const SgdTensor& u : updates) SgdUpdate(*u.w, *u.grad, *u.velocity, u.p);
  }
  // norms2[0] = sum of w^2, norms2[1] = sum of grad^2 (a 2-element tensor on this device),
  // each accumulated in double and rounded once to float, in an order fixed by the sizes
  // alone (deterministic; no host synchronisation, so a graphed step may hold it): the LARS
  // trust ratio's inputs (SgdParams::lars_norms).
  virtual void SquaredNorms(const Tensor& w, const Tensor& grad, Tensor& norms2) = 0;

  // Waits until all work queued by this Ops has finished.
  virtual void Synchronize() = 0;

  // Selects the arithmetic of the convolutions and products that follow (core/precision.h).
  // A backend without tensor cores computes in FP32 only and refuses anything else.
  virtual absl::Status SetPrecision(Precision p) {
    if (p == Precision::kFP32) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "precision %s needs the CUDA backend (--device=cuda); this device computes in fp32 only",
        PrecisionName(p)));
  }
};

}  // namespace colonnade
