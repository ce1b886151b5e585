// Softmax cross-entropy's CUDA kernels (src/cuda/ops/softmax.cu) against CpuOps.

#include "ops_test_util.h"

namespace colonnade {
namespace testing {
namespace {

TEST_F(CudaTest, SoftmaxCrossEntropy) {
  for (int k : {10, 1000}) {
    const int n = 33;
    Tensor logits = RandomCpu(Shape{k, 1, 1, n}, 131, -5.0f, 5.0f);
    Tensor labels(Shape{1, 1, 1, n}, Device::kCPU);
    for (int i = 0; i < n; ++i) labels.data()[i] = static_cast<float>((i * 7919) % k);
    Tensor probs(logits.shape(), Device::kCPU), loss(Shape{1, 1, 1, n}, Device::kCPU);
    Cpu().SoftmaxCrossEntropyForward(logits, labels, probs, loss);
    Tensor glabels = OnGpu(labels);
    Tensor gp = Poisoned(logits.shape(), Device::kCUDA), gl = Poisoned(loss.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyForward(OnGpu(logits), glabels, gp, gl);
    EXPECT_CLOSE(gp, probs) << k << " classes";
    EXPECT_CLOSE(gl, loss) << k << " classes";
    Tensor d(logits.shape(), Device::kCPU);
    Cpu().SoftmaxCrossEntropyBackward(probs, labels, 1.0f / n, d);
    Tensor gd = Poisoned(logits.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyBackward(OnGpu(probs), glabels, 1.0f / n, gd);
    EXPECT_BITWISE(gd, d) << k << " classes";
  }
}

// Label smoothing (--label_smoothing): the loss within the tolerance (the kernel sums
// z - max in its block's order), the gradient bit for bit (the same float targets).
TEST_F(CudaTest, SoftmaxCrossEntropyLabelSmoothing) {
  for (int k : {10, 1000}) {
    const int n = 33;
    const float eps = 0.1f;
    Tensor logits = RandomCpu(Shape{k, 1, 1, n}, 137, -5.0f, 5.0f);
    Tensor labels(Shape{1, 1, 1, n}, Device::kCPU);
    for (int i = 0; i < n; ++i) labels.data()[i] = static_cast<float>((i * 7919) % k);
    Tensor probs(logits.shape(), Device::kCPU), loss(Shape{1, 1, 1, n}, Device::kCPU);
    Cpu().SoftmaxCrossEntropyForward(logits, labels, probs, loss, eps);
    Tensor glabels = OnGpu(labels);
    Tensor gp = Poisoned(logits.shape(), Device::kCUDA), gl = Poisoned(loss.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyForward(OnGpu(logits), glabels, gp, gl, eps);
    EXPECT_CLOSE(gp, probs) << k << " classes";
    EXPECT_CLOSE(gl, loss) << k << " classes";
    Tensor d(logits.shape(), Device::kCPU);
    Cpu().SoftmaxCrossEntropyBackward(probs, labels, 1.0f / n, d, eps);
    Tensor gd = Poisoned(logits.shape(), Device::kCUDA);
    Gpu().SoftmaxCrossEntropyBackward(OnGpu(probs), glabels, 1.0f / n, gd, eps);
    EXPECT_BITWISE(gd, d) << k << " classes";
  }
}

}  // namespace
}  // namespace testing
}  // namespace colonnade
