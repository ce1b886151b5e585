#include "cuda/cuda_ops.h"

#include "core/log.h"
#include "core/op_shapes.h"

namespace colonnade::cuda {
namespace {

void CheckOnDevice(const Tensor& t, const char* what) {
  CHECK(t.device() == Device::kCUDA) << what << " must live on the GPU";
}
// Shape checks are shared with every other backend: core/op_shapes.h.
using op_shapes::SameSize;
int I32(int64_t v, const char* what) {
  CHECK(v >= 0 && v < (int64_t(1) << 31)) << what << " = " << v << " does not fit in 32 bits";
  return static_cast<int>(v);
}
// Per-channel inner size of a tensor viewed as C x (everything else).
int64_t Inner(const Tensor& t) { return t.shape().rank() == 0 ? 0 : t.size() / t.shape()[0]; }

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

StorageType StorageOf(const Tensor& t) {
  return t.is_bf16() ? StorageType::kBF16 : StorageType::kFloat;
}

// Tensors that must share a storage type (x and dx, y, dy and relu_y; an output aliasing an
// input): a kernel instantiation reads and writes each through one type.
void SameStorage(const Tensor& a, const char* a_name, const Tensor& b, const char* b_name,
                 const char* op) {
  CHECK(a.dtype() == b.dtype()) << op << ": " << a_name << " and " << b_name
                                << " must share a storage type (" << a_name << " "
                                << DTypeName(a.dtype()) << ", " << b_name << " "
                                << DTypeName(b.dtype()) << ")";
}
// y written in place over x (the same storage) must be of x's type.
void AliasSameStorage(const Tensor& x, const char* x_name, const Tensor& y, const char* op) {
  if (x.raw() == y.raw() && x.size() > 0) SameStorage(x, x_name, y, "y (in place)", op);
}
// Channel c0's first byte of a CHWN tensor (a block of channels is contiguous).
void* ChannelBytes(Tensor& t, int64_t c0) {
  return static_cast<char*>(t.raw()) + c0 * t.h() * t.w() * t.n() * DTypeBytes(t.dtype());
}
const void* ChannelBytes(const Tensor& t, int64_t c0) {
  return static_cast<const char*>(t.raw()) + c0 * t.h() * t.w() * t.n() * DTypeBytes(t.dtype());
}
// n elements from one channel block to another: bytes when the types agree, else converted
// (bf16 widened exactly, float rounded to nearest even).
void CopyChannelBlock(const DeviceContext& ctx, const void* from, StorageType from_type, void* to,
                      StorageType to_type, int64_t n) {
  if (n == 0) return;
  if (from_type == to_type) {
    const size_t bytes = static_cast<size_t>(n) * (from_type == StorageType::kBF16 ? 2 : 4);
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, ctx.stream));
  } else if (from_type == StorageType::kBF16) {
    Bf16ToFloatGpu(ctx, from, static_cast<float*>(to), n);
  } else {
    FloatToBf16Gpu(ctx, static_cast<const float*>(from), to, n);
  }
}

}  // namespace

void CudaOps::Fill(Tensor& y, float value) {
  CheckOnDevice(y, "Fill output");
  FillGpu(ctx_, y.raw(), StorageOf(y), y.size(), value);
}

void CudaOps::Copy(const Tensor& x, Tensor& y) {
  SameSize(x, y, "Copy");
  if (x.raw() == y.raw() || x.size() == 0) return;
  // Between storage types (a gradient passed on to an input stored otherwise): converting.
  if (x.is_bf16() && !y.is_bf16()) return Bf16ToFloatGpu(ctx_, x.raw(), y.data(), x.size());
  if (!x.is_bf16() && y.is_bf16()) return FloatToBf16Gpu(ctx_, x.data(), y.raw(), x.size());
  COLONNADE_CUDA_CHECK(
      cudaMemcpyAsync(y.raw(), x.raw(), x.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream));
}

void CudaOps::Axpby(float alpha, const Tensor& x, float beta, Tensor& y) {
  SameSize(x, y, "Axpby");
  AxpbyGpu(ctx_, alpha, x.data(), beta, y.data(), y.size());
}

void CudaOps::Add(const Tensor& a, const Tensor& b, Tensor& y) {
  SameSize(a, b, "Add");
  SameSize(a, y, "Add");
  AliasSameStorage(a, "a", y, "Add");
  AliasSameStorage(b, "b", y, "Add");
  AddGpu(ctx_, a.raw(), StorageOf(a), b.raw(), StorageOf(b), y.raw(), StorageOf(y), y.size());
}

void CudaOps::AddRelu(const Tensor& a, const Tensor& b, Tensor& y) {
  SameSize(a, b, "AddRelu");
  SameSize(a, y, "AddRelu");
  AliasSameStorage(a, "a", y, "AddRelu");
  AliasSameStorage(b, "b", y, "AddRelu");
  AddReluGpu(ctx_, a.raw(), StorageOf(a), b.raw(), StorageOf(b), y.raw(), StorageOf(y), y.size());
}

void CudaOps::CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsIn");
  CopyChannelBlock(ctx_, x.raw(), StorageOf(x), ChannelBytes(y, c0), StorageOf(y), x.size());
}

void CudaOps::CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsOut");
  CopyChannelBlock(ctx_, ChannelBytes(y, c0), StorageOf(y), x.raw(), StorageOf(x), x.size());
}

double CudaOps::Sum(const Tensor& x) {
  if (x.size() == 0) return 0.0;
  return SumGpu(ctx_, x.data(), x.size());
}

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
                               Tensor& y, const ConvParams& p) {
  RefuseBf16Storage({&x, &y}, "ConvLayerForward");
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
  ConvForwardTc(ctx_, a);
}

void CudaOps::ConvLayerBackward(const Tensor& x, const Tensor& w, const Tensor* relu_y,
                                const Tensor& dy, Tensor& dw, Tensor* db, Tensor* dx,
                                const ConvParams& p) {
  if (relu_y) SameSize(*relu_y, dy, "ConvLayerBackward relu_y");
  if (db) op_shapes::Bias(dy, *db, "ConvLayerBackward");
  RefuseBf16Storage({&x, relu_y, &dy, dx}, "ConvLayerBackward");
  CHECK(!relu_y || relu_y->dtype() == dy.dtype()) << "ConvLayerBackward: y and dy differ in type";
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
  if (dx) {
    a.dims = Dims(*dx, w, dy, p);
    a.x = TcInput{};
    a.dw = nullptr;
    a.w = w.data();
    a.dx = TcOutput{dx->raw(), StorageOf(*dx)};
    ConvBackwardDataTc(ctx_, a);
  }
}

void CudaOps::AddBias(Tensor& y, const Tensor& b) {
  op_shapes::Bias(y, b, "AddBias");
  AddBiasGpu(ctx_, y.data(), b.data(), y.shape()[0], Inner(y));
}

void CudaOps::BiasBackward(const Tensor& dy, Tensor& db) {
  op_shapes::Bias(dy, db, "BiasBackward");
  RowSumGpu(ctx_, dy.data(), db.data(), dy.shape()[0], Inner(dy));
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

void CudaOps::PoolForward(const Tensor& x, Tensor& y, const PoolParams& p) {
  op_shapes::Pool(x, y, p);
  PoolForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), I32(x.c(), "c"),
                 I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), I32(y.h(), "oh"),
                 I32(y.w(), "ow"), p);
}

void CudaOps::PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                           const PoolParams& p) {
  op_shapes::PoolBackward(x, y, dy, dx, p);
  CHECK(x.dtype() == dx.dtype() && y.dtype() == dy.dtype())
      << "PoolBackward: x and dx, y and dy must share a storage type (x " << DTypeName(x.dtype())
      << ", dx " << DTypeName(dx.dtype()) << ", y " << DTypeName(y.dtype()) << ", dy "
      << DTypeName(dy.dtype()) << ")";
  PoolBackwardGpu(ctx_, x.raw(), y.raw(), dy.raw(), dx.raw(), StorageOf(x), StorageOf(y),
                  I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                  I32(y.h(), "oh"), I32(y.w(), "ow"), p);
}

void CudaOps::MaxPoolForwardArg(const Tensor& x, Tensor& y, Tensor& arg, const PoolParams& p) {
  if (!MaxPoolRecordFits(p)) return PoolForward(x, y, p);
  op_shapes::Pool(x, y, p);
  op_shapes::SameSize(y, arg, "MaxPoolForwardArg (arg)");
  CHECK(arg.dtype() == DType::kBF16) << "MaxPoolForwardArg: the record is a bf16 tensor";
  MaxPoolForwardArgGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), arg.raw(),
                       I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                       I32(y.h(), "oh"), I32(y.w(), "ow"), p);
}

void CudaOps::MaxPoolBackwardArg(const Tensor& x, const Tensor& y, const Tensor& arg,
                                 const Tensor& dy, Tensor& dx, const PoolParams& p) {
  if (!MaxPoolRecordFits(p)) return PoolBackward(x, y, dy, dx, p);
  op_shapes::PoolBackward(x, y, dy, dx, p);
  op_shapes::SameSize(y, arg, "MaxPoolBackwardArg (arg)");
  CHECK(arg.dtype() == DType::kBF16) << "MaxPoolBackwardArg: the record is a bf16 tensor";
  CHECK(x.dtype() == dx.dtype() && y.dtype() == dy.dtype())
      << "MaxPoolBackwardArg: x and dx, y and dy must share a storage type (x "
      << DTypeName(x.dtype()) << ", dx " << DTypeName(dx.dtype()) << ", y " << DTypeName(y.dtype())
      << ", dy " << DTypeName(dy.dtype()) << ")";
  MaxPoolBackwardArgGpu(ctx_, arg.raw(), dy.raw(), StorageOf(dy), dx.raw(), StorageOf(dx),
                        I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                        I32(y.h(), "oh"), I32(y.w(), "ow"), p);
}

void CudaOps::GlobalAvgPoolForward(const Tensor& x, Tensor& y) {
  op_shapes::GlobalAvgPool(x, y, "GlobalAvgPoolForward");
  GlobalAvgPoolForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), I32(x.c(), "c"),
                          I32(x.h() * x.w(), "hw"), I32(x.n(), "n"));
}

void CudaOps::GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) {
  op_shapes::GlobalAvgPool(dx, dy, "GlobalAvgPoolBackward");
  GlobalAvgPoolBackwardGpu(ctx_, dy.raw(), StorageOf(dy), dx.raw(), StorageOf(dx), I32(dx.c(), "c"),
                           I32(dx.h() * dx.w(), "hw"), I32(dx.n(), "n"));
}

bool CudaOps::LrnCrossRecomputesDenominator(const LrnCrossParams& p) const {
  return cuda::LrnCrossRecomputesDenominator(p);
}

void CudaOps::LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnCrossParams& p) {
  const bool stored = !denom.empty();  // empty: the backward recomputes (ops.h)
  if (stored) {
    op_shapes::LrnCross(x, p, {&y, &denom}, "LrnCrossForward");
  } else {
    op_shapes::LrnCross(x, p, {&y}, "LrnCrossForward");
  }
  LrnCrossForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y),
                     stored ? denom.data() : nullptr, I32(x.c(), "c"),
                     I32(x.h() * x.w() * x.n(), "hwn"), p);
}

void CudaOps::LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                               const Tensor& dy, Tensor& dx, const LrnCrossParams& p) {
  const bool stored = !denom.empty();
  if (stored) {
    op_shapes::LrnCross(x, p, {&y, &denom, &dy, &dx}, "LrnCrossBackward");
  } else {
    op_shapes::LrnCross(x, p, {&y, &dy, &dx}, "LrnCrossBackward");
  }
  SameStorage(x, "x", dx, "dx", "LrnCrossBackward");
  SameStorage(y, "y", dy, "dy", "LrnCrossBackward");
  LrnCrossBackwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), stored ? denom.data() : nullptr,
                      dy.raw(), StorageOf(dy), dx.raw(), I32(x.c(), "c"),
                      I32(x.h() * x.w() * x.n(), "hwn"), p);
}

void CudaOps::LrnMaxPoolForward(const Tensor& x, Tensor& y, Tensor& arg, const LrnCrossParams& lp,
                                const PoolParams& pp) {
  if (!LrnMaxPoolFusable(lp, pp)) return Ops::LrnMaxPoolForward(x, y, arg, lp, pp);
  op_shapes::LrnCross(x, lp, {}, "LrnMaxPoolForward");
  op_shapes::Pool(x, y, pp);
  op_shapes::SameSize(y, arg, "LrnMaxPoolForward (arg)");
  LrnMaxPoolForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), arg.data(),
                       I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                       I32(y.h(), "oh"), I32(y.w(), "ow"), lp, pp);
}

void CudaOps::LrnMaxPoolBackward(const Tensor& x, const Tensor& y, const Tensor& arg,
                                 const Tensor& dy, Tensor& dx, const LrnCrossParams& lp,
                                 const PoolParams& pp) {
  if (!LrnMaxPoolFusable(lp, pp)) return Ops::LrnMaxPoolBackward(x, y, arg, dy, dx, lp, pp);
  op_shapes::LrnCross(x, lp, {&dx}, "LrnMaxPoolBackward");
  op_shapes::PoolBackward(x, y, dy, dx, pp);
  op_shapes::SameSize(y, arg, "LrnMaxPoolBackward (arg)");
  CHECK(x.dtype() == dx.dtype() && y.dtype() == dy.dtype())
      << "LrnMaxPoolBackward: x and dx, y and dy must share a storage type (x "
      << DTypeName(x.dtype()) << ", dx " << DTypeName(dx.dtype()) << ", y " << DTypeName(y.dtype())
      << ", dy " << DTypeName(dy.dtype()) << ")";
  LrnMaxPoolBackwardGpu(ctx_, x.raw(), StorageOf(x), arg.data(), dy.raw(), StorageOf(dy), dx.raw(),
                        I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"),
                        I32(y.h(), "oh"), I32(y.w(), "ow"), lp, pp);
}

void CudaOps::LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom,
                               const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom}, "LrnWithinForward");
  LrnWithinForwardGpu(ctx_, x.data(), y.data(), denom.data(), I32(x.c(), "c"), I32(x.h(), "h"),
                      I32(x.w(), "w"), I32(x.n(), "n"), p);
}

void CudaOps::LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                                const Tensor& dy, Tensor& dx, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom, &dy, &dx}, "LrnWithinBackward");
  LrnWithinBackwardGpu(ctx_, x.data(), y.data(), denom.data(), dy.data(), dx.data(),
                       I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), p);
}

void CudaOps::BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    Tensor& y, Tensor& running_mean, Tensor& running_var,
                                    Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                    const BatchNormParams& p) {
  BatchNormTrain(x, gamma, beta, y, running_mean, running_var, save_mean, save_invstd, save_scale,
                 p, false);
}

void CudaOps::BatchNormReluForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        Tensor& y, Tensor& running_mean, Tensor& running_var,
                                        Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                        const BatchNormParams& p) {
  BatchNormTrain(x, gamma, beta, y, running_mean, running_var, save_mean, save_invstd, save_scale,
                 p, true);
}

void CudaOps::BatchNormTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                             Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                             Tensor& save_invstd, Tensor& save_scale, const BatchNormParams& p,
                             bool relu) {
  op_shapes::BatchNorm(
      x, {&y}, {&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd, &save_scale},
      relu ? "BatchNormReluForwardTrain" : "BatchNormForwardTrain");
  BatchNormForwardTrainGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), beta.data(), y.raw(),
                           StorageOf(y), running_mean.data(), running_var.data(), save_mean.data(),
                           save_invstd.data(), save_scale.data(), I32(x.shape()[0], "c"), Inner(x),
                           p, relu);
}

void CudaOps::BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                             const Tensor& shift, Tensor& y) {
  op_shapes::BatchNorm(x, {&y}, {&mean, &scale, &shift}, "BatchNormApply");
  BatchNormApplyGpu(ctx_, x.raw(), StorageOf(x), mean.data(), scale.data(), shift.data(), y.raw(),
                    StorageOf(y), I32(x.shape()[0], "c"), Inner(x), false);
}

void CudaOps::BatchNormReluApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                                 const Tensor& shift, Tensor& y) {
  op_shapes::BatchNorm(x, {&y}, {&mean, &scale, &shift}, "BatchNormReluApply");
  BatchNormApplyGpu(ctx_, x.raw(), StorageOf(x), mean.data(), scale.data(), shift.data(), y.raw(),
                    StorageOf(y), I32(x.shape()[0], "c"), Inner(x), true);
}

void CudaOps::BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    Tensor& y, const BatchNormParams& p) {
  op_shapes::BatchNorm(x, {&y}, {&gamma, &beta, &running_mean, &running_var},
                       "BatchNormForwardInfer");
  BatchNormForwardInferGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), beta.data(),
                           running_mean.data(), running_var.data(), y.raw(), StorageOf(y),
                           I32(x.shape()[0], "c"), Inner(x), p);
}

void CudaOps::BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                const Tensor& save_invstd, const Tensor& dy, Tensor& dx,
                                Tensor& dgamma, Tensor& dbeta) {
  op_shapes::BatchNorm(x, {&dy, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                       "BatchNormBackward");
  SameStorage(x, "x", dx, "dx", "BatchNormBackward");
  BatchNormBackwardGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), save_mean.data(),
                       save_invstd.data(), nullptr, dy.raw(), StorageOf(dy), dx.raw(),
                       dgamma.data(), dbeta.data(), I32(x.shape()[0], "c"), Inner(x));
}

void CudaOps::BatchNormReluBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                                    const Tensor& save_invstd, const Tensor& relu_y,
                                    const Tensor& dy, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  op_shapes::BatchNorm(x, {&relu_y, &dy, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                       "BatchNormReluBackward");
  SameStorage(x, "x", dx, "dx", "BatchNormReluBackward");
  SameStorage(relu_y, "relu_y", dy, "dy", "BatchNormReluBackward");
  BatchNormBackwardGpu(ctx_, x.raw(), StorageOf(x), gamma.data(), save_mean.data(),
                       save_invstd.data(), relu_y.raw(), dy.raw(), StorageOf(dy), dx.raw(),
                       dgamma.data(), dbeta.data(), I32(x.shape()[0], "c"), Inner(x));
}

void CudaOps::ReluForward(const Tensor& x, Tensor& y) {
  SameSize(x, y, "ReluForward");
  AliasSameStorage(x, "x", y, "ReluForward");
  ReluForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), x.size());
}

void CudaOps::ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  SameSize(y, dy, "ReluBackward dy");
  SameSize(y, dx, "ReluBackward dx");
  SameStorage(y, "y", dy, "dy", "ReluBackward");
  AliasSameStorage(dy, "dy", dx, "ReluBackward");
  ReluBackwardGpu(ctx_, y.raw(), dy.raw(), StorageOf(dy), dx.raw(), StorageOf(dx), dx.size());
}

void CudaOps::DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) {
  op_shapes::Dropout(x, y, mask, p);
  AliasSameStorage(x, "x", y, "DropoutForward");
  DropoutForwardGpu(ctx_, x.raw(), StorageOf(x), y.raw(), StorageOf(y), mask.data(),
                    I32(x.c(), "c"), I32(x.h(), "h"), I32(x.w(), "w"), I32(x.n(), "n"), p);
}

void CudaOps::DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  SameSize(dy, mask, "DropoutBackward mask");
  SameSize(dy, dx, "DropoutBackward dx");
  AliasSameStorage(dy, "dy", dx, "DropoutBackward");
  MulGpu(ctx_, dy.raw(), StorageOf(dy), mask.data(), StorageType::kFloat, dx.raw(), StorageOf(dx),
         dx.size());
}

void CudaOps::SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                         Tensor& loss_per_image) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(logits, labels, probs, &loss_per_image, "SoftmaxCrossEntropyForward");
  if (d.batch == 0) return;  // nothing to launch (as on the CPU)
  SoftmaxCrossEntropyForwardGpu(ctx_, logits.data(), labels.data(), probs.data(),
                                loss_per_image.data(), I32(d.classes, "classes"),
                                I32(d.batch, "batch"));
}

void CudaOps::AccumulateResults(const Tensor& probs, const Tensor& labels,
                                const Tensor& loss_per_image, int64_t step,
                                const int64_t* step_on_device, Tensor& totals) {
  const op_shapes::SoftmaxDims d = op_shapes::Results(probs, labels, loss_per_image, totals);
  AccumulateResultsGpu(ctx_, probs.data(), labels.data(), loss_per_image.data(), d.classes, d.batch,
                       step, step_on_device, totals.data());
}

void CudaOps::SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                          Tensor& dlogits) {
  const op_shapes::SoftmaxDims d =
      op_shapes::Softmax(probs, labels, dlogits, nullptr, "SoftmaxCrossEntropyBackward");
  if (d.batch == 0) return;
  SoftmaxCrossEntropyBackwardGpu(ctx_, probs.data(), labels.data(), scale, dlogits.data(),
                                 I32(d.classes, "classes"), I32(d.batch, "batch"));
}

void CudaOps::SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
  SameSize(w, grad, "SgdUpdate grad");
  SameSize(w, velocity, "SgdUpdate velocity");
  SgdUpdateGpu(ctx_, w.data(), grad.data(), velocity.data(), w.size(), p);
}

void CudaOps::Synchronize() { COLONNADE_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream)); }

}  // namespace colonnade::cuda
