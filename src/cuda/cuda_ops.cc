// CudaOps: the convolutions (conv_kernels.cu, conv_tc_kernels.cu), the fully connected GEMMs
// through cuBLAS, precision and synchronisation. Every other family's methods are defined with
// its kernels in ops/<family>.cu.
#include "cuda/cuda_ops.h"

#include "core/log.h"
#include "core/op_shapes.h"

namespace colonnade::cuda {
namespace {

using op_shapes::SameSize;

ConvDims Dims(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  op_shapes::Conv(x, w, y, p);
  ConvDims d;
  d.n = I32(x.n(), "batch");
  d.c = I32(x.c(), "channels");
  d.h = I32(x.h(), "height");
  d.w = I32(x.w(), "width");
  d.f = I32(y.c(), "filters");
  d.oh = I32(y.h(), "output height");
  d.ow = I32(y.w(), "output width");
  return d;
}

}  // namespace

void CudaOps::ConvForward(const Tensor& x, const Tensor& w, Tensor& y, const ConvParams& p) {
  if (conv_math_ != MathMode::kFP32) {
    TcConvArgs a;
    a.dims = Dims(x, w, y, p);
    a.conv = p;
    a.math = conv_math_;
    a.x.data = x.data();
    a.w = w.data();
    a.y.data = y.data();
    ConvForwardTc(ctx_, a);
    return;
  }
  ConvForwardGpu(ctx_, Dims(x, w, y, p), p, x.data(), w.data(), y.data());
}

void CudaOps::ConvBackwardData(const Tensor& dy, const Tensor& w, Tensor& dx, const ConvParams& p) {
  if (conv_math_ != MathMode::kFP32) {
    TcConvArgs a;
    a.dims = Dims(dx, w, dy, p);
    a.conv = p;
    a.math = conv_math_;
    a.dy.data = dy.data();
    a.w = w.data();
    a.dx.data = dx.data();
    ConvBackwardDataTc(ctx_, a);
    return;
  }
  ConvBackwardDataGpu(ctx_, Dims(dx, w, dy, p), p, dy.data(), w.data(), dx.data());
}

void CudaOps::ConvBackwardFilter(const Tensor& x, const Tensor& dy, Tensor& dw,
                                 const ConvParams& p) {
  if (conv_math_ != MathMode::kFP32) {
    TcConvArgs a;
    a.dims = Dims(x, dw, dy, p);
    a.conv = p;
    a.math = conv_math_;
    a.x.data = x.data();
    a.dy.data = dy.data();
    a.dw = dw.data();
    ConvBackwardFilterTc(ctx_, a);
    return;
  }
  ConvBackwardFilterGpu(ctx_, Dims(x, dw, dy, p), p, x.data(), dy.data(), dw.data());
}

TcInput CudaOps::TcOperand(const Tensor& t, std::unique_ptr<Scratch>& copy) {
  if (t.is_bf16()) return TcInput{t.raw(), StorageType::kBF16};  // bf16 storage: as it is
  if (conv_math_ != MathMode::kBF16) return TcInput{t.data(), StorageType::kFloat};
  copy = std::make_unique<Scratch>(ctx_.alloc, static_cast<size_t>(t.size()) * 2);
  FloatToBf16Gpu(ctx_, t.data(), copy->f(), t.size());
  return TcInput{copy->f(), StorageType::kBF16};
}

void CudaOps::RefuseBf16Storage(std::initializer_list<const Tensor*> ts, const char* op) const {
  if (conv_math_ == MathMode::kBF16) return;
  for (const Tensor* t : ts) {
    CHECK(t == nullptr || !t->is_bf16())
        << op << ": a bf16 tensor (" << t->shape().ToString() << ") in " << MathModeName(conv_math_)
        << " precision; bf16 activation storage needs --precision=bf16";
  }
}

void CudaOps::ConvLayerForward(const Tensor& x, const Tensor& w, const Tensor* b, bool relu,
                               Tensor& y, const ConvParams& p, bool bn_sums) {
  RefuseBf16Storage({&x, &y}, "ConvLayerForward");
  pending_sums_ = PendingSums{};
  pending_dx_sums_ = PendingSums{};
  pending_bn_sums_.clear();
  if (conv_math_ == MathMode::kFP32) return Ops::ConvLayerForward(x, w, b, relu, y, p);
  if (b) op_shapes::Bias(y, *b, "ConvLayerForward");
  std::unique_ptr<Scratch> xb;
  TcConvArgs a;
  a.dims = Dims(x, w, y, p);
  a.conv = p;
  a.math = conv_math_;
  a.x = TcOperand(x, xb);
  a.w = w.data();
  a.bias = b ? b->data() : nullptr;
  a.relu = relu;
  a.y = TcOutput{y.raw(), StorageOf(y)};
  std::unique_ptr<Scratch> sums;
  if (bn_sums) {
    sums = std::make_unique<Scratch>(ctx_.alloc, sizeof(float) * size_t(StatsCapacity(a.dims)));
    a.stats = sums->f();
  }
  const ConvLaunchInfo info = ConvForwardTc(ctx_, a);
  if (bn_sums && info.stats_tiles > 0) {
    pending_sums_.sums = std::move(sums);
    pending_sums_.y = y.raw();
    pending_sums_.channels = y.shape()[0];
    pending_sums_.inner = Inner(y);
    pending_sums_.tiles = info.stats_tiles;
  }
}

void CudaOps::ConvLayerBackward(const Tensor& x, const Tensor& w, const Tensor* relu_y,
                                const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                const ConvParams& p, bool relu_dx, bool add_dx) {
  if (relu_y) SameSize(*relu_y, dy, "ConvLayerBackward relu_y");
  if (db) op_shapes::Bias(dy, *db, "ConvLayerBackward");
  RefuseBf16Storage({&x, relu_y, &dy, dx}, "ConvLayerBackward");
  CHECK(!relu_y || relu_y->dtype() == dy.dtype()) << "ConvLayerBackward: y and dy differ in type";
  CHECK(!relu_dx || dx != nullptr) << "ConvLayerBackward: relu_dx without dx";
  CHECK(!add_dx || dx != nullptr) << "ConvLayerBackward: add_dx without dx";
  // add_dx: the tensor-core epilogue adds dx's values where the GEMMs write all of dx and, under
  // relu_dx, mask it themselves (bf16 dx stored as x: TcConvArgs::dx_mask); otherwise this
  // layer's dx goes to a tensor of dx's type and an Add pass follows, as in Ops' default.
  if (add_dx) {
    const bool in_epilogue = conv_math_ != MathMode::kFP32 &&
                             BackwardDataCoversDx(Dims(*dx, w, dy, p), p) &&
                             (!relu_dx || (x.dtype() == dx->dtype() && dx->is_bf16()));
    if (!in_epilogue) {
      Tensor own(dx->shape(), Device::kCUDA, dx->dtype());
      ConvLayerBackward(x, w, relu_y, dy, dw, db, &own, p, relu_dx, false);
      Add(*dx, own, *dx);
      return;
    }
  }
  // The bias gradient from the tile sums the layer after this one left with dy (its backward
  // data under relu_dx): no pass over dy for it.
  PendingSums dy_sums = std::move(pending_dx_sums_);
  pending_dx_sums_ = PendingSums{};
  if (db && !relu_y && dy_sums.sums && dy_sums.y == dy.raw() && dy_sums.channels == dy.shape()[0] &&
      dy_sums.inner == Inner(dy)) {
    TileSumsGpu(ctx_, dy_sums.sums->f(), dy_sums.tiles, db->data(), dy.shape()[0]);
    ++biases_from_dx_sums_;
    db = nullptr;
  }
  // The gradient after the ReLU, g. bf16: straight into the bf16 operand, the bias gradient
  // summed in the same pass (GradToBf16Gpu reads y and dy once, writes 2 bytes). Otherwise
  // a float scratch (FP32: ReluBackward's very bits) and BiasBackward's row sums.
  std::unique_ptr<Scratch> masked, dyb, xb;
  const float* g = nullptr;  // fp32 and tf32: the float gradient after the mask
  TcInput g_operand;
  if (dy.is_bf16()) {
    // bf16 storage: dy is an operand as it is, unless a ReLU's mask must pass over it first
    // (one pass reading 2 + 2 bytes, writing 2); the bias gradient is summed on the way.
    const void* operand = dy.raw();
    if (relu_y) {
      dyb = std::make_unique<Scratch>(ctx_.alloc, static_cast<size_t>(dy.size()) * 2);
      operand = dyb->f();
    }
    if (relu_y || db) {
      GradToBf16Gpu(ctx_, dy.raw(), relu_y ? relu_y->raw() : nullptr, StorageType::kBF16,
                    relu_y ? dyb->f() : nullptr, db ? db->data() : nullptr, dy.shape()[0],
                    Inner(dy));
    }
    g_operand = TcInput{operand, StorageType::kBF16};
  } else if (conv_math_ == MathMode::kBF16) {
    dyb = std::make_unique<Scratch>(ctx_.alloc, static_cast<size_t>(dy.size()) * 2);
    GradToBf16Gpu(ctx_, dy.data(), relu_y ? relu_y->data() : nullptr, dyb->f(),
                  db ? db->data() : nullptr, dy.shape()[0], Inner(dy));
    g_operand = TcInput{dyb->f(), StorageType::kBF16};
  } else {
    g = dy.data();
    g_operand = TcInput{g, StorageType::kFloat};
    if (relu_y) {
      masked = std::make_unique<Scratch>(ctx_.alloc, static_cast<size_t>(dy.size()) * 4);
      ReluBackwardGpu(ctx_, relu_y->data(), dy.data(), masked->f(), dy.size());
      g = masked->f();
      g_operand = TcInput{g, StorageType::kFloat};
    }
    if (db) RowSumGpu(ctx_, g, db->data(), dy.shape()[0], Inner(dy));
  }
  if (conv_math_ == MathMode::kFP32) {
    ConvBackwardFilterGpu(ctx_, Dims(x, dw, dy, p), p, x.data(), g, dw.data());
    if (dx) ConvBackwardDataGpu(ctx_, Dims(*dx, w, dy, p), p, g, w.data(), dx->data());
    if (relu_dx) ReluBackward(x, *dx, *dx);
    return;
  }
  TcConvArgs a;
  a.dims = Dims(x, dw, dy, p);
  a.conv = p;
  a.math = conv_math_;
  a.dy = g_operand;
  a.x = TcOperand(x, xb);
  a.dw = dw.data();
  ConvBackwardFilterTc(ctx_, a);
  xb.reset();  // x's copy is needed no more: its memory may serve backward data's scratch
  if (!dx) return;
  a.dims = Dims(*dx, w, dy, p);
  a.x = TcInput{};
  a.dw = nullptr;
  a.w = w.data();
  a.dx = TcOutput{dx->raw(), StorageOf(*dx)};
  a.dx_add = add_dx;
  // relu_dx: the mask in the epilogue (x as stored, when dx is stored alike), with dx's tile
  // sums left for the bias gradient of the layer that wrote x; else a pass after.
  std::unique_ptr<Scratch> sums;
  if (relu_dx && x.dtype() == dx->dtype()) {
    a.dx_mask = TcInput{x.raw(), StorageOf(x)};
    sums = std::make_unique<Scratch>(ctx_.alloc, sizeof(float) * size_t(StatsCapacityDx(a.dims)));
    a.stats = sums->f();
  }
  const ConvLaunchInfo info = ConvBackwardDataTc(ctx_, a);
  if (relu_dx && !info.masked) ReluBackward(x, *dx, *dx);
  if (sums && info.stats_tiles > 0) {
    pending_dx_sums_.sums = std::move(sums);
    pending_dx_sums_.y = dx->raw();
    pending_dx_sums_.channels = dx->shape()[0];
    pending_dx_sums_.inner = Inner(*dx);
    pending_dx_sums_.tiles = info.stats_tiles;
  }
}

absl::Status CudaOps::SetPrecision(Precision p) {
  switch (p) {
    case Precision::kFP32:
      conv_math_ = MathMode::kFP32;
      break;
    case Precision::kTF32:
      conv_math_ = MathMode::kTF32;
      break;
    case Precision::kBF16:
      conv_math_ = MathMode::kBF16;
      break;
  }
  // Pedantic keeps FP32 products strict even under NVIDIA_TF32_OVERRIDE; the TF32 mode
  // lets cuBLAS round the operands to TF32 on the tensor cores, accumulating in FP32.
  COLONNADE_CUBLAS_CHECK(cublasSetMathMode(
      blas_, p == Precision::kFP32 ? CUBLAS_PEDANTIC_MATH : CUBLAS_TF32_TENSOR_OP_MATH));
  return absl::OkStatus();
}

void CudaOps::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, const float* b, float beta, float* c) {
  // Row-major C (m x n) is column-major C^T: C^T = op(B)^T op(A)^T, so B goes first.
  const int lda = I32(trans_a ? m : k, "gemm lda");
  const int ldb = I32(trans_b ? k : n, "gemm ldb");
  COLONNADE_CUBLAS_CHECK(cublasSgemm(blas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, I32(n, "gemm n"),
                                     I32(m, "gemm m"), I32(k, "gemm k"), &alpha, b, ldb, a, lda,
                                     &beta, c, I32(n, "gemm ldc")));
}

void CudaOps::Synchronize() { COLONNADE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }

}  // namespace colonnade::cuda
