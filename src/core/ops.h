// Ops: every numerical operation a layer or the optimizer needs, on one device.
//
// Layers never touch memory directly; they call Ops, so the same layer runs on the CPU
// reference (CpuOps) or the GPU (cuda::CudaOps). All tensors passed to one call live on
// that Ops' device. Activations are CHWN (see tensor.h). Unless stated, outputs are
// overwritten (not accumulated) and must already have the right shape.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
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

// Pooling windows start at -pad and step by `stride`; the output covers the border as in
// cuda-convnet (ceil mode): out = ceil((in + 2*pad - size) / stride) + 1, and a window
// that runs past the image is clipped. Average pooling divides by the number of pixels
// of the window that lie inside the image.
// With ceil_mode false the output is floor((in + 2*pad - size) / stride) + 1 (PyTorch's
// default, used by torchvision's ResNet stem). y must have exactly that size, the one
// PoolLayer::Setup infers (every backend checks it: core/op_shapes.h).
struct PoolParams {
  enum Kind { kMax, kAvg };
  Kind kind = kMax;
  int size = 3;
  int stride = 2;
  int pad = 0;
  bool ceil_mode = true;
};
inline int64_t PoolOutSize(int64_t in, int size, int stride, int pad, bool ceil_mode = true) {
  int64_t span = in + 2 * pad - size;
  if (span <= 0) return 1;
  if (!ceil_mode) return span / stride + 1;
  int64_t out = (span + stride - 1) / stride + 1;
  // A last window that would start in the padding only is dropped.
  if ((out - 1) * stride >= in + pad) --out;
  return out;
}

// Local response normalisation across channels:
//   b_c = a_c / (k + alpha' * sum_{c' in window(c)} a_c'^2)^beta
// with window(c) = [c - size/2, c + size/2] (size is odd) clipped to the channel's group (groups >
// 1 keeps AlexNet's two columns independent), and alpha' = alpha (Krizhevsky et al. 2012: k = 2,
// alpha = 1e-4, beta = 0.75, size = 5) or alpha/size when alpha_over_size is set (cuda-convnet and
// PyTorch's convention, usually with k = 1).
struct LrnCrossParams {
  int size = 5;
  float alpha = 1e-4f;
  float beta = 0.75f;
  float k = 2.0f;
  bool alpha_over_size = false;
  int groups = 1;
};

// Response normalisation within a map (cuda-convnet's `rnorm`):
//   b = u / (k + (alpha / size^2) * sum_{size x size window} u^2)^beta
// The window of pixel (y, x) is [y - size/2, y - size/2 + size) (likewise for x), clipped
// to the image.
struct LrnWithinParams {
  int size = 3;
  float alpha = 5e-5f;
  float beta = 0.75f;
  float k = 1.0f;
};

// Dropout with inverted scaling: y = x * mask / (1 - p). The mask of an element is a
// pure function of (seed, step, global element index) drawn with Philox, so it is the
// same whatever (dp, mp) layout computes it. The global element index of local element
// (c, h, w, n) is ((c + channel_offset) * H + h) * W + w) * global_batch + n + image_offset,
// with channels counted in the full (unsplit) layer.
struct DropoutParams {
  float p = 0.5f;
  uint64_t seed = 0;  // already mixed with the layer's identity
  int64_t step = 0;
  // A CUDA-graph step (StepScalars): the kernel reads the step from here instead of `step`
  // (the same value, uploaded before each replay). Null: `step`. The CPU ignores it.
  const int64_t* step_on_device = nullptr;
  int64_t channel_offset = 0;
  int64_t image_offset = 0;
  int64_t global_batch = 0;  // 0 means the local batch
};

struct BatchNormParams {
  float eps = 1e-5f;
  float momentum = 0.1f;  // running = (1 - momentum) * running + momentum * batch
};

struct SgdParams {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  // A CUDA-graph step (StepScalars): the kernel uses lr = *lr_on_device * lr_mult, one
  // rounded FP32 product, the same bits as `lr` computed so on the host. Null: `lr`. The
  // CPU ignores it.
  const float* lr_on_device = nullptr;
  float lr_mult = 1.0f;
};

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

  // ---- element-wise and memory ------------------------------------------------
  virtual void Fill(Tensor& y, float value) = 0;
  // Same element count; between storage types (CUDA, bf16 storage) the values convert.
  virtual void Copy(const Tensor& x, Tensor& y) = 0;
  // y = alpha * x + beta * y; with beta == 0, y is not read (BLAS convention).
  virtual void Axpby(float alpha, const Tensor& x, float beta, Tensor& y) = 0;
  // y = a + b.
  virtual void Add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
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
  virtual void ConvLayerForward(const Tensor& x, const Tensor& w, const Tensor* b, bool relu,
                                Tensor& y, const ConvParams& p) {
    ConvForward(x, w, y, p);
    if (b) AddBias(y, *b);
    if (relu) ReluForward(y, y);
  }
  // Backward from dy, the gradient of y. With relu_y (the y of a forward with relu) the
  // gradient first passes the ReLU (dy where relu_y > 0, else 0: ReluBackward). Then dw,
  // db when not null, dx when not null (all overwritten).
  virtual void ConvLayerBackward(const Tensor& x, const Tensor& w, const Tensor* relu_y,
                                 const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                 const ConvParams& p) {
    Tensor masked;
    if (relu_y) {
      masked = Tensor(dy.shape(), device());
      ReluBackward(*relu_y, dy, masked);
    }
    const Tensor& g = relu_y ? masked : dy;
    ConvBackwardFilter(x, g, dw, p);
    if (db) BiasBackward(g, *db);
    if (dx) ConvBackwardData(g, w, *dx, p);
  }

  // ---- matrices (row-major), for fully connected layers --------------------------
  // C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T; A is M x K after op, B K x N.
  virtual void Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, const float* b, float beta, float* c) = 0;

  // ---- pooling --------------------------------------------------------------------
  virtual void PoolForward(const Tensor& x, Tensor& y, const PoolParams& p) = 0;
  // dx from x, y, dy (max pooling routes to the first maximum of each window).
  virtual void PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                            const PoolParams& p) = 0;
  // Max pooling with a record for the backward: `arg` (y's shape, bf16) is the backend's.
  // The CUDA kernels write each window's argmax there (the first maximum's offset in its
  // window) and the backward routes dy by it without reading x or y; the defaults leave it
  // untouched and run PoolForward / PoolBackward. Same bits either way.
  virtual void MaxPoolForwardArg(const Tensor& x, Tensor& y, Tensor& /*arg*/, const PoolParams& p) {
    PoolForward(x, y, p);
  }
  virtual void MaxPoolBackwardArg(const Tensor& x, const Tensor& y, const Tensor& /*arg*/,
                                  const Tensor& dy, Tensor& dx, const PoolParams& p) {
    PoolBackward(x, y, dy, dx, p);
  }
  // x C x H x W x N -> y C x 1 x 1 x N (mean over pixels).
  virtual void GlobalAvgPoolForward(const Tensor& x, Tensor& y) = 0;
  virtual void GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) = 0;

  // ---- normalisation ----------------------------------------------------------------
  // `denom` (same shape as x) receives k + alpha' * sum a^2, reused by backward. Where
  // LrnCrossRecomputesDenominator(p), `denom` may be an empty Tensor in both calls: the
  // forward then stores nothing and the backward computes the denominators again from x,
  // with the forward's bits (the CUDA backend: half-widths 1-4; the CPU always stores them).
  virtual bool LrnCrossRecomputesDenominator(const LrnCrossParams& /*p*/) const { return false; }
  virtual void LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom,
                               const LrnCrossParams& p) = 0;
  virtual void LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                const Tensor& dy, Tensor& dx, const LrnCrossParams& p) = 0;
  // Cross-channel LRN then max pooling, as one pass (Net fuses an LRN whose output only a
  // max pool reads: AlexNet's norm + pool): y = MaxPool(Lrn(x)) without storing Lrn(x) or
  // its denominator. `arg` (y's shape) is the backend's record for the backward: the CUDA
  // kernels write each window's argmax there (the pixel index iy * W + ix as a float); the
  // defaults leave it untouched and recompute. Backward writes dx, the gradient of x, from
  // x, the forward's y and arg, and dy. The defaults are the primitives (LRN into scratch,
  // pool; backward: LRN again, pool backward, LRN backward), and the fused kernels give
  // their bits exactly: the fusion changes no result.
  virtual void LrnMaxPoolForward(const Tensor& x, Tensor& y, Tensor& /*arg*/,
                                 const LrnCrossParams& lp, const PoolParams& pp) {
    Tensor norm(x.shape(), device()), denom(x.shape(), device());
    LrnCrossForward(x, norm, denom, lp);
    PoolForward(norm, y, pp);
  }
  virtual void LrnMaxPoolBackward(const Tensor& x, const Tensor& y, const Tensor& /*arg*/,
                                  const Tensor& dy, Tensor& dx, const LrnCrossParams& lp,
                                  const PoolParams& pp) {
    Tensor norm(x.shape(), device()), denom(x.shape(), device()), dnorm(x.shape(), device());
    LrnCrossForward(x, norm, denom, lp);
    PoolBackward(norm, y, dy, dnorm, pp);
    LrnCrossBackward(x, norm, denom, dnorm, dx, lp);
  }
  virtual void LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom,
                                const LrnWithinParams& p) = 0;
  virtual void LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                 const Tensor& dy, Tensor& dx, const LrnWithinParams& p) = 0;
  // Batch norm over H, W, N per channel. Training: uses batch statistics, writes
  // save_mean / save_invstd (C elements) and updates running_mean / running_var
  // (unbiased variance); y = (x - save_mean) * save_scale + beta per channel, where
  // save_scale (C elements) is the float gamma * invstd it used (kept so that
  // BatchNormApply can write the same y again). Inference: uses the running statistics.
  virtual void BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     Tensor& y, Tensor& running_mean, Tensor& running_var,
                                     Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                     const BatchNormParams& p) = 0;
  // y = (x - mean) * scale + shift per channel, with the training forward's exact float
  // arithmetic: given its save_mean, save_scale and beta, bitwise the y it wrote (the
  // recomputation of batch-norm outputs in the backward pass, docs/MEMORY.md).
  virtual void BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                              const Tensor& shift, Tensor& y) = 0;
  virtual void BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     const Tensor& running_mean, const Tensor& running_var,
                                     Tensor& y, const BatchNormParams& p) = 0;
  virtual void BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                 const Tensor& save_invstd, const Tensor& dy, Tensor& dx,
                                 Tensor& dgamma, Tensor& dbeta) = 0;

  // Batch norm then ReLU as one pass (Net fuses a batch norm whose output the next layer
  // rectifies in place: GoogLeNet's and the ResNets' conv + bn + relu). The defaults are the
  // primitives in this order; the CUDA backend rectifies in the normalising pass and masks
  // dy as its backward reads it, the same bits.
  // Training forward: BatchNormForwardTrain, then y = max(y, 0).
  virtual void BatchNormReluForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         Tensor& y, Tensor& running_mean, Tensor& running_var,
                                         Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                         const BatchNormParams& p) {
    BatchNormForwardTrain(x, gamma, beta, y, running_mean, running_var, save_mean, save_invstd,
                          save_scale, p);
    ReluForward(y, y);
  }
  // BatchNormApply, then y = max(y, 0): the fused training forward's y again.
  virtual void BatchNormReluApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                                  const Tensor& shift, Tensor& y) {
    BatchNormApply(x, mean, scale, shift, y);
    ReluForward(y, y);
  }
  // Backward from dy, the gradient of relu_y = max(batch norm(x), 0): dy passes the ReLU
  // (ReluBackward), then BatchNormBackward.
  virtual void BatchNormReluBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                     const Tensor& save_invstd, const Tensor& relu_y,
                                     const Tensor& dy, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
    Tensor masked(dy.shape(), device());
    ReluBackward(relu_y, dy, masked);
    BatchNormBackward(x, gamma, save_mean, save_invstd, masked, dx, dgamma, dbeta);
  }

  // y = max(a + b, 0) (Net fuses a residual sum with the in-place ReLU after it). Default:
  // Add, then ReluForward.
  virtual void AddRelu(const Tensor& a, const Tensor& b, Tensor& y) {
    Add(a, b, y);
    ReluForward(y, y);
  }

  // ---- activations -------------------------------------------------------------------
  virtual void ReluForward(const Tensor& x, Tensor& y) = 0;                      // may alias
  virtual void ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;  // may alias
  // mask receives the kept/dropped scale (0 or 1/(1-p)) of each element.
  virtual void DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) = 0;
  virtual void DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) = 0;

  // ---- loss ------------------------------------------------------------------------------
  // logits K x 1 x 1 x N (or K x N), labels 1 x N (class indices stored as floats).
  // probs receives the softmax; loss_per_image (N) the cross-entropy -log p[label].
  virtual void SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                          Tensor& loss_per_image) = 0;
  // dlogits = scale * (probs - onehot(labels)); scale is usually 1 / global batch.
  virtual void SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                           Tensor& dlogits) = 0;

  // ---- results (core/results.h) ----------------------------------------------------------
  // Adds one step's results to `totals` (a kResultTotalsFloats tensor holding a
  // ResultTotals, on this device): the sum of loss_per_image (N), the top-1 and top-5
  // correct counts of probs (K x N, the softmax) for labels (N), as CountCorrect counts
  // them, and, when the step's loss sum is not finite, `step` (*step_on_device in a
  // graphed step, as DropoutParams::step_on_device) as the first non-finite one if none
  // was. Deterministic: the same inputs give the same totals bit for bit on one device.
  virtual void AccumulateResults(const Tensor& probs, const Tensor& labels,
                                 const Tensor& loss_per_image, int64_t step,
                                 const int64_t* step_on_device, Tensor& totals) = 0;

  // ---- optimiser --------------------------------------------------------------------------
  // Fused SGD with momentum and L2 weight decay (Krizhevsky et al. 2012, sec. 5):
  //   v = momentum * v - lr * (grad + weight_decay * w);  w = w + v
  virtual void SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) = 0;

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
