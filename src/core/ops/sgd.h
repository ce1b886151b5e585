// The optimiser family: the fused SGD update with momentum and weight decay, its Nesterov and
// LARS variants. Parameters; the CPU reference is in sgd.cc (CpuOps), the CUDA kernel in
// src/cuda/ops/sgd.cu.
#pragma once

namespace colonnade {

struct SgdParams {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  // A CUDA-graph step (StepScalars): the kernel uses lr = *lr_on_device * lr_mult, one
  // rounded FP32 product, the same bits as `lr` computed so on the host. Null: `lr`. The
  // CPU ignores it.
  const float* lr_on_device = nullptr;
  float lr_mult = 1.0f;
  // Nesterov momentum (--nesterov): with d = grad + weight_decay * w,
  //   v = momentum * v - lr * d;  w = w + (momentum * v - lr * d)
  // which, at a constant lr, is torch.optim.SGD(nesterov=True) with its buffer b = -v / lr
  // (w -= lr * (d + momentum * b)). False: w = w + v, the plain update, unchanged.
  bool nesterov = false;
  // LARS (You et al. 2017, --optimizer=lars): non-null, the tensor's squared norms on this
  // Ops' device, lars_norms[0] = ||w||^2 and [1] = ||grad||^2 (Ops::SquaredNorms, before the
  // update), and the rate becomes lr * trust with
  //   trust = eta * ||w|| / (||grad|| + weight_decay * ||w||)   (1 when either norm is 0)
  // as MLPerf's reference LARS (TensorFlow's LARSOptimizer, epsilon 0) computes it, each
  // operation rounded in float: LarsTrust below.
  const float* lars_norms = nullptr;
  float lars_eta = 0.001f;
};

}  // namespace colonnade
