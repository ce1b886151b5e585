// bench_layers: AlexNet's convolution layers, forward / backward-data / backward-filter, our
// CHWN kernels next to cuDNN on the same shapes in the same run (a benchmark program, not a
// timed test).
//
//   bench_layers --batch_sizes=128,256 --csv=layers.csv
//
// --precision=fp32 (default): our FP32 kernels; cuDNN runs in strict FP32: the convolution
// descriptors ask for CUDNN_FMA_MATH (no tensor cores, so no TF32) and every chosen
// algorithm's reported math type is checked.
// --precision=tf32 | bf16: our tensor-core kernels (src/cuda/conv/mma.cu, wgmma.cu; tf32 on float
// tensors, bf16 on bf16 tensors, FP32 master filters, FP32 dw) next to cuDNN with
// CUDNN_TENSOR_OP_MATH in the same mode (tf32: float tensors; bf16: bf16 tensors and
// filters, FP32 compute type); each of our results is checked against our FP32 kernels on the
// same (bf16-representable) inputs: ||ours - fp32|| / ||fp32|| under 1e-2 (bf16) or 2e-3
// (tf32), the bounds of tests/cuda/conv_tc_test.cc; a failure makes the exit code 1.
//
//   bench_layers --precision=bf16 --batch_sizes=128,256 --csv=layers_bf16.csv
//
// Each of our configurations of the precision's families (src/cuda/conv/catalogue.h: simt_*
// in fp32, mma_tf32_* in tf32, mma_bf16_* and wgmma_* in bf16; --conv_configs names a subset)
// is timed forced, where it runs the layer, next to the automatic choice ("ours", what training
// runs; COLONNADE_CONV_CONFIG applies to it as to the trainer).
//
// Both of cuDNN's layouts are timed (NCHW and NHWC), each with the best algorithm its find
// API reports (cudnnFind*AlgorithmEx, which runs them). The card's ceilings are measured
// first: a device-to-device copy (bytes read + written per second), a cuBLAS SGEMM (8192^3,
// pedantic FP32) and, for tf32/bf16, cublasGemmEx 8192^3 in that mode. Times are medians
// over --iters runs, timed with CUDA events on one stream.

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "apps/cli.h"
#include "apps/output_file.h"
#include "core/backend.h"
#include "core/layers.h"
#include "core/log.h"
#include "core/models.h"
#include "core/ops.h"
#include "core/philox.h"
#include "cuda/cuda_backend.h"
#include "cuda/conv/conv.h"
#include "cuda/cuda_ops.h"
#include "cuda/kernels.h"
#include "cuda/port.h"

ABSL_FLAG(std::string, model, "alexnet", "model whose convolution layers are timed");
ABSL_FLAG(std::string, batch_sizes, "128,256", "comma-separated batch sizes");
ABSL_FLAG(int, iters, 20, "timed repetitions per kernel (median reported)");
ABSL_FLAG(int, warmup, 3, "untimed repetitions first");
ABSL_FLAG(bool, cudnn, true, "also time cuDNN (NCHW and NHWC)");
ABSL_FLAG(std::string, csv, "", "write the results here as CSV");
ABSL_FLAG(int64_t, cudnn_workspace_mb, 2048, "largest cuDNN workspace allowed (MiB)");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32 (our FP32 kernels, cuDNN FMA math), tf32 or bf16 (our tensor-core kernels, "
          "cuDNN tensor-op math in the same mode)");
ABSL_FLAG(std::string, conv_configs, "",
          "comma-separated convolution configurations (src/cuda/conv/catalogue.h, the names "
          "COLONNADE_CONV_CONFIG takes) to time forced, each where it runs; empty: every "
          "configuration of the precision's families");

namespace colonnade {
namespace {

#define CUDNN_CHECK(expr)                                                            \
  do {                                                                               \
    cudnnStatus_t st_ = (expr);                                                      \
    CHECK(st_ == CUDNN_STATUS_SUCCESS) << #expr << ": " << cudnnGetErrorString(st_); \
  } while (0)

// A cuDNN call that may refuse a configuration (bf16 in a layout it does not support):
// prints the status and gives up on this timing (NaN) instead of aborting the benchmark.
#define CUDNN_SOFT(expr)                                                 \
  do {                                                                   \
    cudnnStatus_t st_ = (expr);                                          \
    if (st_ != CUDNN_STATUS_SUCCESS) {                                   \
      std::fprintf(stderr, "%s: %s\n", #expr, cudnnGetErrorString(st_)); \
      *algo = "unsupported";                                             \
      return NAN;                                                        \
    }                                                                    \
  } while (0)

cudaStream_t Stream() { return static_cast<cudaStream_t>(cuda::ComputeStream()); }

// Median time in ms of `fn` (queued on Stream()), each run bracketed by events.
template <typename Fn>
double TimeMs(Fn&& fn, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) fn();
  COLONNADE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
  std::vector<cudaEvent_t> ev(iters + 1);
  for (auto& e : ev) COLONNADE_CUDA_CHECK(cudaEventCreate(&e));
  COLONNADE_CUDA_CHECK(cudaEventRecord(ev[0], Stream()));
  for (int i = 0; i < iters; ++i) {
    fn();
    COLONNADE_CUDA_CHECK(cudaEventRecord(ev[i + 1], Stream()));
  }
  COLONNADE_CUDA_CHECK(cudaEventSynchronize(ev[iters]));
  COLONNADE_CUDA_CHECK(cudaGetLastError());
  std::vector<double> t(iters);
  for (int i = 0; i < iters; ++i) {
    float ms = 0;
    COLONNADE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
    t[i] = ms;
  }
  for (auto& e : ev) COLONNADE_CUDA_CHECK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[iters / 2];
}

void FillRandom(Tensor& t, uint64_t seed) {
  std::vector<float> v(t.size());
  const uint64_t key = MixKey(seed, 99);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 2.0f * PhiloxUniform(key, 0, i) - 1.0f;
  t.CopyFromHost(v);
}

enum class Precision { kFP32, kTF32, kBF16 };

// Random values in [-1, 1) in a buffer that holds float or (for bf16) twice as many bf16.
void FillRandomAs(Tensor& t, uint64_t seed, Precision prec) {
  if (prec != Precision::kBF16) {
    FillRandom(t, seed);
    return;
  }
  Tensor f(Shape{t.size() * 2}, Device::kCUDA);
  FillRandom(f, seed);
  const cuda::DeviceContext& ctx = dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)).context();
  cuda::FloatToBf16Gpu(ctx, f.data(), t.data(), f.size());
}

struct Ceilings {
  double copy_tbs = 0, sgemm_tflops = 0;
  double tc_tflops = NAN;  // cublasGemmEx 8192^3 in the tensor-core mode (tf32 / bf16)
};

#define CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                           \
    cublasStatus_t st_ = (expr);                                                                 \
    CHECK(st_ == CUBLAS_STATUS_SUCCESS) << #expr << ": cuBLAS status " << static_cast<int>(st_); \
  } while (0)

Ceilings MeasureCeilings(int iters, Precision prec) {
  Ceilings c;
  const size_t bytes = size_t(2) << 30;  // 2 GiB each way: far beyond the 60 MB L2
  Tensor a(Shape{int64_t(bytes / 4)}, Device::kCUDA), b(Shape{int64_t(bytes / 4)}, Device::kCUDA);
  OpsFor(Device::kCUDA).Fill(a, 1.0f);
  double ms = TimeMs(
      [&] {
        COLONNADE_CUDA_CHECK(
            cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, Stream()));
      },
      2, iters);
  c.copy_tbs = 2.0 * bytes / (ms * 1e-3) / 1e12;
  const int64_t n = 8192;
  Tensor x(Shape{n, n}, Device::kCUDA), y(Shape{n, n}, Device::kCUDA),
      z(Shape{n, n}, Device::kCUDA);
  FillRandom(x, 1);
  FillRandom(y, 2);
  Ops& ops = OpsFor(Device::kCUDA);  // cuBLAS, pedantic FP32
  ms = TimeMs([&] { ops.Gemm(false, false, n, n, n, 1.0f, x.data(), y.data(), 0.0f, z.data()); }, 2,
              std::max(3, iters / 4));
  c.sgemm_tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  if (prec != Precision::kFP32) {
    cublasHandle_t h;
    CUBLAS_CHECK(cublasCreate(&h));
    CUBLAS_CHECK(cublasSetStream(h, Stream()));
    const bool bf16 = prec == Precision::kBF16;
    Tensor xb(Shape{n * n / 2}, Device::kCUDA), yb(Shape{n * n / 2}, Device::kCUDA);
    const cuda::DeviceContext& ctx = dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)).context();
    cuda::FloatToBf16Gpu(ctx, x.data(), xb.data(), n * n);
    cuda::FloatToBf16Gpu(ctx, y.data(), yb.data(), n * n);
    const float one = 1.0f, zero = 0.0f;
    const void* a = bf16 ? static_cast<const void*>(xb.data()) : x.data();
    const void* b = bf16 ? static_cast<const void*>(yb.data()) : y.data();
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
    ms = TimeMs(
        [&] {
          CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, t, n, b, t, n,
                                    &zero, z.data(), CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT));
        },
        2, std::max(3, iters / 4));
    c.tc_tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
    cublasDestroy(h);
  }
  return c;
}

const char* MathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor_op_conv";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
}

// One convolution in cuDNN in one layout, with buffers of its own.
class CudnnConv {
 public:
  CudnnConv(cudnnHandle_t h, bool nhwc, int n, int c, int hh, int ww, int f, const ConvParams& p,
            int oh, int ow, size_t max_ws, Precision prec = Precision::kFP32)
      : h_(h), max_ws_(max_ws), prec_(prec) {
    const cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    // bf16: bf16 tensors and filters, FP32 compute; tf32 and fp32: float everywhere.
    const cudnnDataType_t dt = prec == Precision::kBF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const int64_t per = prec == Precision::kBF16 ? 2 : 1;  // elements per float of storage
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&xd_));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&yd_));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&wd_));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd_));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd_, fmt, dt, n, c, hh, ww));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(yd_, fmt, dt, n, f, oh, ow));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(wd_, dt, fmt, f, c / p.groups, p.kernel_h, p.kernel_w));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd_, p.pad, p.pad, p.stride, p.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(cd_, p.groups));
    // Strict FP32: FMA kernels only (CUDNN_DEFAULT_MATH would allow TF32 tensor cores).
    // tf32 / bf16: tensor-op math.
    CUDNN_CHECK(cudnnSetConvolutionMathType(
        cd_, prec == Precision::kFP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    auto buffer = [&](int64_t elements) {
      return Tensor(Shape{(elements + per - 1) / per}, Device::kCUDA);
    };
    x_ = buffer(int64_t(n) * c * hh * ww);
    dx_ = Tensor(x_.shape(), Device::kCUDA);
    y_ = buffer(int64_t(n) * f * oh * ow);
    dy_ = Tensor(y_.shape(), Device::kCUDA);
    w_ = buffer(int64_t(f) * (c / p.groups) * p.kernel_h * p.kernel_w);
    dw_ = Tensor(w_.shape(), Device::kCUDA);
    FillRandomAs(x_, 3, prec);
    FillRandomAs(dy_, 4, prec);
    FillRandomAs(w_, 5, prec);
    ws_ = Tensor(Shape{int64_t(max_ws_ / 4)}, Device::kCUDA);
  }
  ~CudnnConv() {
    cudnnDestroyTensorDescriptor(xd_);
    cudnnDestroyTensorDescriptor(yd_);
    cudnnDestroyFilterDescriptor(wd_);
    cudnnDestroyConvolutionDescriptor(cd_);
  }

  // Returns the median ms of the best FMA algorithm for op 0 fwd, 1 bwd data, 2 bwd filter,
  // and its name in `algo`.
  double Time(int op, int warmup, int iters, std::string* algo) {
    const float one = 1.0f, zero = 0.0f;
    const int kMax = 16;
    int got = 0;
    // Each search starts from the constructor's math type (a previous op set its winner's).
    CUDNN_CHECK(cudnnSetConvolutionMathType(
        cd_, prec_ == Precision::kFP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
    if (op == 0) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      CUDNN_SOFT(cudnnFindConvolutionForwardAlgorithmEx(h_, xd_, x_.data(), wd_, w_.data(), cd_,
                                                        yd_, y_.data(), kMax, &got, perf,
                                                        ws_.data(), max_ws_));
      int best = Pick(perf, got, algo, "fwd");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      // The math type the search used for this algorithm; a configuration cuDNN then still
      // refuses (bf16 in some layouts) is reported as unsupported, not a crash.
      CUDNN_SOFT(cudnnSetConvolutionMathType(cd_, perf[best].mathType));
      CUDNN_SOFT(cudnnConvolutionForward(h_, &one, xd_, x_.data(), wd_, w_.data(), cd_, a,
                                         ws_.data(), ws, &zero, yd_, y_.data()));
      return TimeMs(
          [&] {
            CUDNN_CHECK(cudnnConvolutionForward(h_, &one, xd_, x_.data(), wd_, w_.data(), cd_, a,
                                                ws_.data(), ws, &zero, yd_, y_.data()));
          },
          warmup, iters);
    } else if (op == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      CUDNN_SOFT(cudnnFindConvolutionBackwardDataAlgorithmEx(h_, wd_, w_.data(), yd_, dy_.data(),
                                                             cd_, xd_, dx_.data(), kMax, &got, perf,
                                                             ws_.data(), max_ws_));
      int best = Pick(perf, got, algo, "bwd_data");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      // The math type the search used for this algorithm; a configuration cuDNN then still
      // refuses (bf16 in some layouts) is reported as unsupported, not a crash.
      CUDNN_SOFT(cudnnSetConvolutionMathType(cd_, perf[best].mathType));
      CUDNN_SOFT(cudnnConvolutionBackwardData(h_, &one, wd_, w_.data(), yd_, dy_.data(), cd_, a,
                                              ws_.data(), ws, &zero, xd_, dx_.data()));
      return TimeMs(
          [&] {
            CUDNN_CHECK(cudnnConvolutionBackwardData(h_, &one, wd_, w_.data(), yd_, dy_.data(), cd_,
                                                     a, ws_.data(), ws, &zero, xd_, dx_.data()));
          },
          warmup, iters);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      CUDNN_SOFT(cudnnFindConvolutionBackwardFilterAlgorithmEx(h_, xd_, x_.data(), yd_, dy_.data(),
                                                               cd_, wd_, dw_.data(), kMax, &got,
                                                               perf, ws_.data(), max_ws_));
      int best = Pick(perf, got, algo, "bwd_filter");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      // The math type the search used for this algorithm; a configuration cuDNN then still
      // refuses (bf16 in some layouts) is reported as unsupported, not a crash.
      CUDNN_SOFT(cudnnSetConvolutionMathType(cd_, perf[best].mathType));
      CUDNN_SOFT(cudnnConvolutionBackwardFilter(h_, &one, xd_, x_.data(), yd_, dy_.data(), cd_, a,
                                                ws_.data(), ws, &zero, wd_, dw_.data()));
      return TimeMs(
          [&] {
            CUDNN_CHECK(cudnnConvolutionBackwardFilter(h_, &one, xd_, x_.data(), yd_, dy_.data(),
                                                       cd_, a, ws_.data(), ws, &zero, wd_,
                                                       dw_.data()));
          },
          warmup, iters);
    }
  }

 private:
  // The fastest successful result (results come sorted by time); in FP32 one that uses no
  // tensor cores.
  template <typename Perf>
  int Pick(const Perf* perf, int got, std::string* algo, const char* op) {
    for (int i = 0; i < got; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (prec_ == Precision::kFP32 &&
          (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
           perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION)) {
        std::fprintf(stderr, "cuDNN %s offered algo %d with %s math: skipped (TF32 off)\n", op,
                     static_cast<int>(perf[i].algo), MathName(perf[i].mathType));
        continue;
      }
      *algo = absl::StrFormat("%d/%s/%.0fMB", static_cast<int>(perf[i].algo),
                              MathName(perf[i].mathType), perf[i].memory / 1048576.0);
      return i;
    }
    *algo = "none";
    return -1;
  }

  cudnnHandle_t h_;
  size_t max_ws_;
  Precision prec_;
  cudnnTensorDescriptor_t xd_, yd_;
  cudnnFilterDescriptor_t wd_;
  cudnnConvolutionDescriptor_t cd_;
  Tensor x_, dx_, y_, dy_, w_, dw_, ws_;
};

struct Row {
  std::string layer, op, shape;
  int batch;
  double flops, bytes;
  double ours_ms, nchw_ms, nhwc_ms;
  std::string nchw_algo, nhwc_algo;
  double rel_err = NAN;  // tf32 / bf16: ours against our FP32 kernels
  std::string config;    // the configuration ours ran, vector loads, split-K
  // Each timed configuration forced (NaN where it does not run the layer's problem).
  std::vector<double> config_ms;
  double wgmma_err = NAN;  // the largest error of the wgmma configurations against our FP32
};

// Sizes of a convolution from its input and output shapes.
cuda::ConvDims DimsOf(const Shape& xs, const Shape& ys) {
  cuda::ConvDims d;
  d.n = static_cast<int>(xs.n());
  d.c = static_cast<int>(xs.c());
  d.h = static_cast<int>(xs.h());
  d.w = static_cast<int>(xs.w());
  d.f = static_cast<int>(ys.c());
  d.oh = static_cast<int>(ys.h());
  d.ow = static_cast<int>(ys.w());
  return d;
}

// The configurations to time: --conv_configs, or every one of the precision's families.
absl::StatusOr<std::vector<const cuda::ConvConfig*>> TimedConfigs(Precision prec) {
  const cuda::MathMode math = prec == Precision::kFP32   ? cuda::MathMode::kFP32
                              : prec == Precision::kTF32 ? cuda::MathMode::kTF32
                                                         : cuda::MathMode::kBF16;
  std::vector<const cuda::ConvConfig*> r;
  const std::string list = absl::GetFlag(FLAGS_conv_configs);
  if (list.empty()) {
    for (const cuda::ConvConfig& c : cuda::ConvCatalogue())
      if (c.math == math) r.push_back(&c);
    return r;
  }
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    const cuda::ConvConfig* c = cuda::FindConvConfig(name);
    if (c == nullptr) {
      std::vector<std::string> names;
      for (const cuda::ConvConfig& k : cuda::ConvCatalogue()) names.push_back(k.name);
      return absl::InvalidArgumentError(absl::StrCat("--conv_configs: no configuration '", name,
                                                     "': one of ", absl::StrJoin(names, ", ")));
    }
    if (c->math != math) {
      return absl::InvalidArgumentError(absl::StrCat("--conv_configs: ", name, " is ",
                                                     cuda::MathModeName(c->math), ", not ",
                                                     absl::GetFlag(FLAGS_precision)));
    }
    r.push_back(c);
  }
  return r;
}

// ||a - b|| / ||b|| over two device float buffers.
double RelErrGpu(const float* a, const float* b, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  COLONNADE_CUDA_CHECK(cudaStreamSynchronize(Stream()));
  COLONNADE_CUDA_CHECK(cudaMemcpy(x.data(), a, n * 4, cudaMemcpyDeviceToHost));
  COLONNADE_CUDA_CHECK(cudaMemcpy(y.data(), b, n * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return std::sqrt(num / den);
}

// Our tensor-core kernels on one layer: x, dy in bf16 (bf16 mode) or float (tf32 mode),
// FP32 master w, FP32 dw. Times op 0 fwd, 1 bwd data, 2 bwd filter and checks it against
// our FP32 kernels on the same values.
class TcLayer {
 public:
  TcLayer(Precision prec, const Shape& xs, const Shape& ys, const Shape& wshape,
          const ConvParams& p)
      : prec_(prec),
        p_(p),
        xs_(xs),
        ys_(ys),
        ws_(wshape),
        ctx_(dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)).context()) {
    const bool bf16 = prec == Precision::kBF16;
    st_ = bf16 ? cuda::StorageType::kBF16 : cuda::StorageType::kFloat;
    auto act = [&](const Shape& s) {
      return Tensor(Shape{bf16 ? (s.elements() + 1) / 2 : s.elements()}, Device::kCUDA);
    };
    // Float values first; bf16 mode rounds them and takes the rounded values back, so that
    // the FP32 reference sees exactly what our kernels see.
    xf_ = Tensor(xs, Device::kCUDA);
    dyf_ = Tensor(ys, Device::kCUDA);
    w_ = Tensor(wshape, Device::kCUDA);
    FillRandom(xf_, 6);
    FillRandom(dyf_, 7);
    FillRandom(w_, 8);
    x_ = act(xs);
    dy_ = act(ys);
    y_ = act(ys);
    dx_ = act(xs);
    dw_ = Tensor(wshape, Device::kCUDA);
    if (bf16) {
      cuda::FloatToBf16Gpu(ctx_, xf_.data(), x_.data(), xs.elements());
      cuda::Bf16ToFloatGpu(ctx_, x_.data(), xf_.data(), xs.elements());
      cuda::FloatToBf16Gpu(ctx_, dyf_.data(), dy_.data(), ys.elements());
      cuda::Bf16ToFloatGpu(ctx_, dy_.data(), dyf_.data(), ys.elements());
    } else {
      x_ = xf_;
      dy_ = dyf_;
    }
    d_ = DimsOf(xs, ys);
  }

  cuda::ConvLaunchInfo Run(int op) {
    cuda::TcConvArgs a;
    a.dims = d_;
    a.conv = p_;
    a.math = prec_ == Precision::kBF16 ? cuda::MathMode::kBF16 : cuda::MathMode::kTF32;
    a.w = w_.data();
    if (op == 0) {
      a.x = {x_.data(), st_};
      a.y = {y_.data(), st_};
      return cuda::ConvForwardTc(ctx_, a);
    }
    if (op == 1) {
      a.dy = {dy_.data(), st_};
      a.dx = {dx_.data(), st_};
      return cuda::ConvBackwardDataTc(ctx_, a);
    }
    a.x = {x_.data(), st_};
    a.dy = {dy_.data(), st_};
    a.dw = dw_.data();
    return cuda::ConvBackwardFilterTc(ctx_, a);
  }

  // Runs op once more and compares it with our FP32 kernels.
  double Check(int op) {
    Run(op);
    Ops& ops = OpsFor(Device::kCUDA);
    const Shape& s = op == 0 ? ys_ : op == 1 ? xs_ : ws_;
    Tensor ref(s, Device::kCUDA), got(s, Device::kCUDA);
    if (op == 0) ops.ConvForward(xf_, w_, ref, p_);
    if (op == 1) ops.ConvBackwardData(dyf_, w_, ref, p_);
    if (op == 2) ops.ConvBackwardFilter(xf_, dyf_, ref, p_);
    const Tensor& out = op == 0 ? y_ : op == 1 ? dx_ : dw_;
    if (op == 2 || prec_ != Precision::kBF16) {
      got.CopyFrom(out.Reshaped(s));
    } else {
      cuda::Bf16ToFloatGpu(ctx_, out.data(), got.data(), s.elements());
    }
    return RelErrGpu(got.data(), ref.data(), s.elements());
  }

 private:
  Precision prec_;
  ConvParams p_;
  Shape xs_, ys_, ws_;
  const cuda::DeviceContext& ctx_;
  cuda::StorageType st_;
  cuda::ConvDims d_{};
  Tensor xf_, dyf_, w_, x_, dy_, y_, dx_, dw_;
};

// Long because it is the benchmark read top to bottom: the card's ceilings, then every
// layer and batch size timed for our kernels and cuDNN's two layouts, then the table. Only
// a GPU run can show that a split leaves the table unchanged.
int Main() {
  const std::string pname = absl::GetFlag(FLAGS_precision);
  Precision prec;
  if (pname == "fp32") {
    prec = Precision::kFP32;
  } else if (pname == "tf32") {
    prec = Precision::kTF32;
  } else if (pname == "bf16") {
    prec = Precision::kBF16;
  } else {
    std::fprintf(stderr, "bench_layers: --precision must be fp32, tf32 or bf16, not %s\n",
                 pname.c_str());
    return 2;
  }
  const absl::StatusOr<std::vector<const cuda::ConvConfig*>> timed = TimedConfigs(prec);
  if (!timed.ok()) {
    std::fprintf(stderr, "bench_layers: %s\n", std::string(timed.status().message()).c_str());
    return 2;
  }
  const std::vector<const cuda::ConvConfig*>& configs = *timed;
  if (!cuda::Available()) {
    std::fprintf(stderr, "bench_layers: no CUDA device\n");
    return 1;
  }
  const bool tc = prec != Precision::kFP32;
  absl::Status st = cuda::RegisterBackend(0);
  CHECK(st.ok()) << st;
  // Strict FP32 for every library in fp32 mode; tf32 mode needs TF32 allowed.
  if (!tc) setenv("NVIDIA_TF32_OVERRIDE", "0", 0);
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup);
  std::printf("device: %s\n", cuda::DeviceDescription().c_str());
  std::printf("precision: %s\n", pname.c_str());
  const Ceilings ceil = MeasureCeilings(iters, prec);
  std::printf("ceilings: copy %.2f TB/s (read+write), cuBLAS SGEMM 8192^3 FP32 %.1f TFLOP/s",
              ceil.copy_tbs, ceil.sgemm_tflops);
  if (tc) std::printf(", cublasGemmEx 8192^3 %s %.1f TFLOP/s", pname.c_str(), ceil.tc_tflops);
  std::printf("\n");
  std::fflush(stdout);
  const double tol = prec == Precision::kBF16 ? 1e-2 : 2e-3;  // tests/cuda/conv_tc_test.cc
  const cuda::DeviceContext& ctx = dynamic_cast<cuda::CudaOps&>(OpsFor(Device::kCUDA)).context();

  cudnnHandle_t h = nullptr;
  if (absl::GetFlag(FLAGS_cudnn)) {
    CUDNN_CHECK(cudnnCreate(&h));
    CUDNN_CHECK(cudnnSetStream(h, Stream()));
    if (!tc) {
      std::printf("cuDNN %zu, math type FMA (TF32 off)\n", cudnnGetVersion());
    } else {
      std::printf("cuDNN %zu, math type tensor_op, %s data, FP32 compute\n", cudnnGetVersion(),
                  prec == Precision::kBF16 ? "bf16" : "float (tf32)");
    }
  }
  std::vector<Row> rows;
  int failures = 0;
  for (absl::string_view bs : absl::StrSplit(absl::GetFlag(FLAGS_batch_sizes), ',')) {
    const int batch = std::stoi(std::string(bs));
    ModelOptions mo;
    auto net = BuildModel(absl::GetFlag(FLAGS_model), mo);
    CHECK(net.ok()) << net.status();
    st = (*net)->Build(batch, Device::kCUDA);
    CHECK(st.ok()) << st;
    for (LayerEntry& e : (*net)->layers()) {
      auto* conv = dynamic_cast<ConvLayer*>(e.layer.get());
      if (!conv) continue;
      const Shape xs = (*net)->blob(e.inputs[0]).shape();
      const Shape ys = (*net)->blob(e.outputs[0]).shape();
      const ConvParams p = conv->conv_params();
      const double flops = 2.0 * ys.elements() * (xs.c() / p.groups) * p.kernel_h * p.kernel_w;
      const std::string shape =
          absl::StrFormat("%dx%dx%d->%dx%dx%d k%d s%d p%d g%d", xs.c(), xs.h(), xs.w(), ys.c(),
                          ys.h(), ys.w(), p.kernel_h, p.stride, p.pad, p.groups);
      std::unique_ptr<CudnnConv> nchw, nhwc;
      if (h) {
        const size_t ws = size_t(absl::GetFlag(FLAGS_cudnn_workspace_mb)) << 20;
        nchw = std::make_unique<CudnnConv>(h, false, batch, xs.c(), xs.h(), xs.w(), ys.c(), p,
                                           ys.h(), ys.w(), ws, prec);
        nhwc = std::make_unique<CudnnConv>(h, true, batch, xs.c(), xs.h(), xs.w(), ys.c(), p,
                                           ys.h(), ys.w(), ws, prec);
      }
      std::unique_ptr<TcLayer> tcl;
      Tensor x, y, dy, dx, w, dw;
      if (tc) {
        tcl = std::make_unique<TcLayer>(prec, xs, ys, conv->weight().value.shape(), p);
      } else {
        x = Tensor(xs, Device::kCUDA);
        y = Tensor(ys, Device::kCUDA);
        dy = Tensor(ys, Device::kCUDA);
        dx = Tensor(xs, Device::kCUDA);
        w = Tensor(conv->weight().value.shape(), Device::kCUDA);
        dw = Tensor(w.shape(), Device::kCUDA);
        FillRandom(x, 6);
        FillRandom(dy, 7);
        FillRandom(w, 8);
      }
      const char* names[3] = {"fwd", "bwd_data", "bwd_filter"};
      for (int op = 0; op < 3; ++op) {
        Row r;
        r.layer = conv->name();
        r.op = names[op];
        r.shape = shape;
        r.batch = batch;
        r.flops = flops;
        // Fewest bytes: each tensor read or written once, activations in the storage type
        // (bf16: 2 bytes), filters FP32 (read as masters), dw FP32.
        const double ab = prec == Precision::kBF16 ? 2.0 : 4.0;
        const double xb = xs.elements() * ab, yb = ys.elements() * ab,
                     wb = conv->weight().value.size() * 4.0;
        r.bytes = op == 0 ? xb + wb + yb : op == 1 ? yb + wb + xb : xb + yb + wb;
        // Our kernels: op on the tensor cores or in FP32 (the FP32 launchers of CudaOps).
        const cuda::ConvDims d = DimsOf(xs, ys);
        auto run = [&]() -> cuda::ConvLaunchInfo {
          if (tc) return tcl->Run(op);
          if (op == 0) return cuda::ConvForwardGpu(ctx, d, p, x.data(), w.data(), y.data());
          if (op == 1) return cuda::ConvBackwardDataGpu(ctx, d, p, dy.data(), w.data(), dx.data());
          return cuda::ConvBackwardFilterGpu(ctx, d, p, x.data(), dy.data(), dw.data());
        };
        r.config_ms.assign(configs.size(), NAN);
        for (size_t i = 0; i < configs.size(); ++i) {  // each configuration forced
          const cuda::ScopedConvConfig forced(configs[i]->name);
          if (std::string(run().config) != configs[i]->name) continue;  // not for this problem
          r.config_ms[i] = TimeMs(run, warmup, iters);
          if (configs[i]->family == cuda::ConvFamily::kWgmma) {
            const double e = tcl->Check(op);
            r.wgmma_err = std::isnan(r.wgmma_err) ? e : std::fmax(r.wgmma_err, e);
            if (!(e < tol)) ++failures;
          }
        }
        cuda::ConvLaunchInfo li;  // the automatic choice: what training uses
        r.ours_ms = TimeMs([&] { li = run(); }, warmup, iters);
        r.config = absl::StrFormat("%s%s%s", li.config, li.vec ? " vec" : " scalar",
                                   op == 2 ? absl::StrFormat(" split %d", li.splits) : "");
        if (tc) {
          r.rel_err = tcl->Check(op);
          if (!(r.rel_err < tol)) ++failures;
        }
        r.nchw_ms = r.nhwc_ms = NAN;
        if (h) {
          r.nchw_ms = nchw->Time(op, warmup, iters, &r.nchw_algo);
          r.nhwc_ms = nhwc->Time(op, warmup, iters, &r.nhwc_algo);
        }
        const double best = std::fmin(r.nchw_ms, r.nhwc_ms);
        std::string forced;  // "name ms" of each configuration that ran
        for (size_t i = 0; i < configs.size(); ++i)
          if (!std::isnan(r.config_ms[i]))
            absl::StrAppendFormat(&forced, " %s %.3f", configs[i]->name, r.config_ms[i]);
        std::printf(
            "%-6s b%-4d %-10s %-36s ours %8.3f ms %6.2f TFLOP/s (%s)%s | cuDNN NCHW %8.3f ms "
            "(%s) NHWC %8.3f ms (%s) | ours/best %.2f |%s",
            r.layer.c_str(), batch, r.op.c_str(), r.shape.c_str(), r.ours_ms,
            flops / (r.ours_ms * 1e9), r.config.c_str(),
            tc ? absl::StrFormat(" err %.1e %s", r.rel_err, r.rel_err < tol ? "ok" : "FAIL").c_str()
               : "",
            r.nchw_ms, r.nchw_algo.c_str(), r.nhwc_ms, r.nhwc_algo.c_str(), r.ours_ms / best,
            forced.c_str());
        if (!std::isnan(r.wgmma_err)) std::printf(" | wgmma err %.1e", r.wgmma_err);
        std::printf("\n");
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  if (h) cudnnDestroy(h);

  // Summary: TFLOP/s against the measured GEMM ceiling of the mode, GB/s against the copy
  // ceiling.
  const double peak = tc ? ceil.tc_tflops : ceil.sgemm_tflops;
  std::printf(
      "\n| layer | batch | op | ours ms | ours TFLOP/s | %% of %s | ours GB/s | cuDNN NCHW ms | "
      "cuDNN NHWC ms | ours / best cuDNN |%s\n|---|---|---|---|---|---|---|---|---|---|%s\n",
      tc ? (pname + " GEMM").c_str() : "SGEMM", tc ? " rel err vs FP32 |" : "", tc ? "---|" : "");
  for (const Row& r : rows) {
    const double tf = r.flops / (r.ours_ms * 1e9);
    std::printf("| %s | %d | %s | %.3f | %.1f | %.0f%% | %.0f | %.3f | %.3f | %.2f |",
                r.layer.c_str(), r.batch, r.op.c_str(), r.ours_ms, tf, 100.0 * tf / peak,
                r.bytes / (r.ours_ms * 1e6), r.nchw_ms, r.nhwc_ms,
                r.ours_ms / std::fmin(r.nchw_ms, r.nhwc_ms));
    if (tc) std::printf(" %.1e |", r.rel_err);
    std::printf("\n");
  }
  const std::string csv = absl::GetFlag(FLAGS_csv);
  if (!csv.empty()) {
    // One ms_<configuration> column per timed configuration (catalogue.h's names).
    std::string text =
        "layer,batch,op,shape,gflop,min_mbytes,ours_ms,ours_tflops,cudnn_nchw_ms,cudnn_nchw_algo,"
        "cudnn_nhwc_ms,cudnn_nhwc_algo,copy_tbs,sgemm_tflops,precision,config";
    if (tc) text += ",tc_gemm_tflops,rel_err_vs_fp32,wgmma_rel_err";
    for (const cuda::ConvConfig* c : configs) absl::StrAppend(&text, ",ms_", c->name);
    text += "\n";
    for (const Row& r : rows) {
      text += absl::StrFormat(
          "%s,%d,%s,%s,%.3f,%.1f,%.4f,%.2f,%.4f,%s,%.4f,%s,%.2f,%.1f,%s,%s", r.layer, r.batch, r.op,
          r.shape, r.flops / 1e9, r.bytes / 1e6, r.ours_ms, r.flops / (r.ours_ms * 1e9), r.nchw_ms,
          r.nchw_algo, r.nhwc_ms, r.nhwc_algo, ceil.copy_tbs, ceil.sgemm_tflops, pname, r.config);
      if (tc) {
        absl::StrAppendFormat(&text, ",%.1f,%.2e,%.2e", ceil.tc_tflops, r.rel_err, r.wgmma_err);
      }
      for (double ms : r.config_ms) absl::StrAppendFormat(&text, ",%.4f", ms);
      text += "\n";
    }
    // Replaces an earlier table, never a checkpoint, dataset or device (output_file.h).
    if (absl::Status s = WriteTextOutputFile(csv, "--csv", ExistingOutput::kReplaceText, text);
        !s.ok()) {
      std::fprintf(stderr, "bench_layers: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  if (failures > 0) {
    std::fprintf(stderr, "bench_layers: %d results outside the %s bound %.0e\n", failures,
                 pname.c_str(), tol);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  const colonnade::Cli cli = {
      "bench_layers", "src/apps/bench_layers",
      "times the convolution layers of a model (forward, backward-data, backward-filter): "
      "our CHWN kernels next to cuDNN (NCHW and NHWC) on the same shapes.\n\n"
      "  bench_layers --batch_sizes=128,256 --csv=layers.csv\n"
      "  bench_layers --precision=bf16 --batch_sizes=128,256 --csv=layers_bf16.csv"};
  if (std::optional<int> code = colonnade::ParseCommandLine(argc, argv, cli)) return *code;
  return colonnade::Main();
}
