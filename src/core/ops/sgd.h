// The optimiser family: the fused SGD update with momentum and weight decay. Parameters; the
// CPU reference is in sgd.cc (CpuOps), the CUDA kernel in src/cuda/ops/sgd.cu.
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
};

}  // namespace colonnade
