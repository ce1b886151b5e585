// bench_layers: AlexNet's convolution layers, forward / backward-data / backward-filter, our
// CHWN kernels next to cuDNN on the same shapes in the same run (a benchmark program, not a
// timed test).
//
//   bench_layers --batch_sizes=128,256 --csv=layers.csv
//
// cuDNN runs in strict FP32: the convolution descriptors ask for CUDNN_FMA_MATH (no tensor
// cores, so no TF32) and every chosen algorithm's reported math type is checked. Both of
// cuDNN's layouts are timed (NCHW and NHWC), each with the best algorithm its find API
// reports (cudnnFind*AlgorithmEx, which runs them). The card's two ceilings are measured
// first: a device-to-device copy (bytes read + written per second) and a cuBLAS SGEMM
// (8192^3, pedantic FP32). Times are medians over --iters runs, timed with CUDA events on
// one stream.

#include <cudnn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "apps/output_file.h"
#include "core/backend.h"
#include "core/layers.h"
#include "core/log.h"
#include "core/models.h"
#include "core/ops.h"
#include "core/philox.h"
#include "cuda/cuda_backend.h"
#include "cuda/kernels.h"
#include "cuda/port.h"

ABSL_FLAG(std::string, model, "alexnet", "model whose convolution layers are timed");
ABSL_FLAG(std::string, batch_sizes, "128,256", "comma-separated batch sizes");
ABSL_FLAG(int, iters, 20, "timed repetitions per kernel (median reported)");
ABSL_FLAG(int, warmup, 3, "untimed repetitions first");
ABSL_FLAG(bool, cudnn, true, "also time cuDNN (NCHW and NHWC)");
ABSL_FLAG(std::string, csv, "", "write the results here as CSV");
ABSL_FLAG(int64_t, cudnn_workspace_mb, 2048, "largest cuDNN workspace allowed (MiB)");

namespace colonnade {
namespace {

#define CUDNN_CHECK(expr)                                                                   \
  do {                                                                                      \
    cudnnStatus_t st_ = (expr);                                                             \
    CHECK(st_ == CUDNN_STATUS_SUCCESS) << #expr << ": " << cudnnGetErrorString(st_);        \
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

struct Ceilings {
  double copy_tbs = 0, sgemm_tflops = 0;
};

Ceilings MeasureCeilings(int iters) {
  Ceilings c;
  const size_t bytes = size_t(2) << 30;  // 2 GiB each way: far beyond the 60 MB L2
  Tensor a(Shape{int64_t(bytes / 4)}, Device::kCUDA), b(Shape{int64_t(bytes / 4)}, Device::kCUDA);
  OpsFor(Device::kCUDA).Fill(a, 1.0f);
  double ms = TimeMs([&] {
    COLONNADE_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, Stream()));
  }, 2, iters);
  c.copy_tbs = 2.0 * bytes / (ms * 1e-3) / 1e12;
  const int64_t n = 8192;
  Tensor x(Shape{n, n}, Device::kCUDA), y(Shape{n, n}, Device::kCUDA), z(Shape{n, n}, Device::kCUDA);
  FillRandom(x, 1);
  FillRandom(y, 2);
  Ops& ops = OpsFor(Device::kCUDA);  // cuBLAS, pedantic FP32
  ms = TimeMs([&] { ops.Gemm(false, false, n, n, n, 1.0f, x.data(), y.data(), 0.0f, z.data()); }, 2,
              std::max(3, iters / 4));
  c.sgemm_tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  return c;
}

const char* MathName(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor_op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor_op_conv";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

// One convolution in cuDNN in one layout, with buffers of its own.
class CudnnConv {
 public:
  CudnnConv(cudnnHandle_t h, bool nhwc, int n, int c, int hh, int ww, int f, const ConvParams& p,
            int oh, int ow, size_t max_ws)
      : h_(h), max_ws_(max_ws) {
    const cudnnTensorFormat_t fmt = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&xd_));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&yd_));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&wd_));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd_));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(xd_, fmt, CUDNN_DATA_FLOAT, n, c, hh, ww));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(yd_, fmt, CUDNN_DATA_FLOAT, n, f, oh, ow));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(wd_, CUDNN_DATA_FLOAT, fmt, f, c / p.groups, p.kernel_h,
                                           p.kernel_w));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd_, p.pad, p.pad, p.stride, p.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(cd_, p.groups));
    // Strict FP32: FMA kernels only (CUDNN_DEFAULT_MATH would allow TF32 tensor cores).
    CUDNN_CHECK(cudnnSetConvolutionMathType(cd_, CUDNN_FMA_MATH));
    x_ = Tensor(Shape{int64_t(n) * c * hh * ww}, Device::kCUDA);
    dx_ = Tensor(x_.shape(), Device::kCUDA);
    y_ = Tensor(Shape{int64_t(n) * f * oh * ow}, Device::kCUDA);
    dy_ = Tensor(y_.shape(), Device::kCUDA);
    w_ = Tensor(Shape{int64_t(f) * (c / p.groups) * p.kernel_h * p.kernel_w}, Device::kCUDA);
    dw_ = Tensor(w_.shape(), Device::kCUDA);
    FillRandom(x_, 3);
    FillRandom(dy_, 4);
    FillRandom(w_, 5);
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
    if (op == 0) {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h_, xd_, x_.data(), wd_, w_.data(), cd_,
                                                         yd_, y_.data(), kMax, &got, perf,
                                                         ws_.data(), max_ws_));
      int best = Pick(perf, got, algo, "fwd");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      return TimeMs([&] {
        CUDNN_CHECK(cudnnConvolutionForward(h_, &one, xd_, x_.data(), wd_, w_.data(), cd_, a,
                                            ws_.data(), ws, &zero, yd_, y_.data()));
      }, warmup, iters);
    } else if (op == 1) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h_, wd_, w_.data(), yd_, dy_.data(),
                                                              cd_, xd_, dx_.data(), kMax, &got,
                                                              perf, ws_.data(), max_ws_));
      int best = Pick(perf, got, algo, "bwd_data");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      return TimeMs([&] {
        CUDNN_CHECK(cudnnConvolutionBackwardData(h_, &one, wd_, w_.data(), yd_, dy_.data(), cd_, a,
                                                 ws_.data(), ws, &zero, xd_, dx_.data()));
      }, warmup, iters);
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h_, xd_, x_.data(), yd_,
                                                                dy_.data(), cd_, wd_, dw_.data(),
                                                                kMax, &got, perf, ws_.data(),
                                                                max_ws_));
      int best = Pick(perf, got, algo, "bwd_filter");
      if (best < 0) return NAN;
      const auto a = perf[best].algo;
      const size_t ws = perf[best].memory;
      return TimeMs([&] {
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(h_, &one, xd_, x_.data(), yd_, dy_.data(), cd_,
                                                   a, ws_.data(), ws, &zero, wd_, dw_.data()));
      }, warmup, iters);
    }
  }

 private:
  // The fastest successful result that uses no tensor cores (results come sorted by time).
  template <typename Perf>
  int Pick(const Perf* perf, int got, std::string* algo, const char* op) {
    for (int i = 0; i < got; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
          perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
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
  double v1_ms = NAN, v2_ms = NAN, v3_ms = NAN;  // fwd / bwd data: each kernel version forced
  std::string nchw_algo, nhwc_algo;
};

int Main() {
  if (!cuda::Available()) {
    std::fprintf(stderr, "bench_layers: no CUDA device\n");
    return 1;
  }
  absl::Status st = cuda::RegisterBackend(0);
  CHECK(st.ok()) << st;
  setenv("NVIDIA_TF32_OVERRIDE", "0", 0);
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup);
  std::printf("device: %s\n", cuda::DeviceDescription().c_str());
  const Ceilings ceil = MeasureCeilings(iters);
  std::printf("ceilings: copy %.2f TB/s (read+write), cuBLAS SGEMM 8192^3 FP32 %.1f TFLOP/s\n",
              ceil.copy_tbs, ceil.sgemm_tflops);
  std::fflush(stdout);

  cudnnHandle_t h = nullptr;
  if (absl::GetFlag(FLAGS_cudnn)) {
    CUDNN_CHECK(cudnnCreate(&h));
    CUDNN_CHECK(cudnnSetStream(h, Stream()));
    std::printf("cuDNN %zu, math type FMA (TF32 off)\n", cudnnGetVersion());
  }
  Ops& ops = OpsFor(Device::kCUDA);
  std::vector<Row> rows;
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
      Tensor x(xs, Device::kCUDA), y(ys, Device::kCUDA), dy(ys, Device::kCUDA),
          dx(xs, Device::kCUDA);
      Tensor w(conv->weight().value.shape(), Device::kCUDA), dw(w.shape(), Device::kCUDA);
      FillRandom(x, 6);
      FillRandom(dy, 7);
      FillRandom(w, 8);
      const double flops = 2.0 * ys.elements() * (xs.c() / p.groups) * p.kernel_h * p.kernel_w;
      const std::string shape = absl::StrFormat(
          "%dx%dx%d->%dx%dx%d k%d s%d p%d g%d", xs.c(), xs.h(), xs.w(), ys.c(), ys.h(), ys.w(),
          p.kernel_h, p.stride, p.pad, p.groups);
      std::unique_ptr<CudnnConv> nchw, nhwc;
      if (h) {
        const size_t ws = size_t(absl::GetFlag(FLAGS_cudnn_workspace_mb)) << 20;
        nchw = std::make_unique<CudnnConv>(h, false, batch, xs.c(), xs.h(), xs.w(), ys.c(), p,
                                           ys.h(), ys.w(), ws);
        nhwc = std::make_unique<CudnnConv>(h, true, batch, xs.c(), xs.h(), xs.w(), ys.c(), p,
                                           ys.h(), ys.w(), ws);
      }
      const char* names[3] = {"fwd", "bwd_data", "bwd_filter"};
      for (int op = 0; op < 3; ++op) {
        Row r;
        r.layer = conv->name();
        r.op = names[op];
        r.shape = shape;
        r.batch = batch;
        r.flops = flops;
        const double xb = xs.elements() * 4.0, yb = ys.elements() * 4.0, wb = w.size() * 4.0;
        r.bytes = op == 0 ? xb + wb + yb : op == 1 ? yb + wb + xb : xb + yb + wb;
        if (op == 0 || op == 1) {
          auto run = [&] {
            if (op == 0) ops.ConvForward(x, w, y, p); else ops.ConvBackwardData(dy, w, dx, p);
          };
          cuda::SetConvGemmVersion(1);
          r.v1_ms = TimeMs(run, warmup, iters);
          cuda::SetConvGemmVersion(2);
          r.v2_ms = TimeMs(run, warmup, iters);
          cuda::SetConvGemmVersion(3);
          r.v3_ms = TimeMs(run, warmup, iters);
          cuda::SetConvGemmVersion(0);  // what training uses: the faster, chosen per shape
          r.ours_ms = TimeMs(run, warmup, iters);
        } else {
          r.ours_ms = TimeMs([&] { ops.ConvBackwardFilter(x, dy, dw, p); }, warmup, iters);
        }
        r.nchw_ms = r.nhwc_ms = NAN;
        if (h) {
          r.nchw_ms = nchw->Time(op, warmup, iters, &r.nchw_algo);
          r.nhwc_ms = nhwc->Time(op, warmup, iters, &r.nhwc_algo);
        }
        const double best = std::fmin(r.nchw_ms, r.nhwc_ms);
        std::printf("%-6s b%-4d %-10s %-36s ours %8.3f ms %6.2f TFLOP/s | cuDNN NCHW %8.3f ms "
                    "(%s) NHWC %8.3f ms (%s) | ours/best %.2f | v1 %.3f v2 %.3f v3 %.3f\n",
                    r.layer.c_str(), batch, r.op.c_str(), r.shape.c_str(), r.ours_ms,
                    flops / (r.ours_ms * 1e9), r.nchw_ms, r.nchw_algo.c_str(), r.nhwc_ms,
                    r.nhwc_algo.c_str(), r.ours_ms / best, r.v1_ms, r.v2_ms, r.v3_ms);
        std::fflush(stdout);
        rows.push_back(r);
      }
    }
  }
  if (h) cudnnDestroy(h);

  // Summary: TFLOP/s against the measured SGEMM ceiling, GB/s against the copy ceiling.
  std::printf("\n| layer | batch | op | ours ms | ours TFLOP/s | %% of SGEMM | ours GB/s | cuDNN NCHW ms | "
              "cuDNN NHWC ms | ours / best cuDNN |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const double tf = r.flops / (r.ours_ms * 1e9);
    std::printf("| %s | %d | %s | %.3f | %.1f | %.0f%% | %.0f | %.3f | %.3f | %.2f |\n",
                r.layer.c_str(), r.batch, r.op.c_str(), r.ours_ms, tf,
                100.0 * tf / ceil.sgemm_tflops, r.bytes / (r.ours_ms * 1e6), r.nchw_ms, r.nhwc_ms,
                r.ours_ms / std::fmin(r.nchw_ms, r.nhwc_ms));
  }
  const std::string csv = absl::GetFlag(FLAGS_csv);
  if (!csv.empty()) {
    std::string text =
        "layer,batch,op,shape,gflop,min_mbytes,ours_ms,ours_tflops,cudnn_nchw_ms,cudnn_nchw_algo,"
        "cudnn_nhwc_ms,cudnn_nhwc_algo,copy_tbs,sgemm_tflops,ours_v1_ms,ours_v2_ms,ours_v3_ms\n";
    for (const Row& r : rows)
      text += absl::StrFormat(
          "%s,%d,%s,%s,%.3f,%.1f,%.4f,%.2f,%.4f,%s,%.4f,%s,%.2f,%.1f,%.4f,%.4f,%.4f\n", r.layer,
          r.batch, r.op, r.shape, r.flops / 1e9, r.bytes / 1e6, r.ours_ms,
          r.flops / (r.ours_ms * 1e9), r.nchw_ms, r.nchw_algo, r.nhwc_ms, r.nhwc_algo,
          ceil.copy_tbs, ceil.sgemm_tflops, r.v1_ms, r.v2_ms, r.v3_ms);
    // Replaces an earlier table, never a checkpoint, dataset or device (output_file.h).
    if (absl::Status s = WriteTextOutputFile(csv, "--csv", ExistingOutput::kReplaceText, text);
        !s.ok()) {
      std::fprintf(stderr, "bench_layers: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace colonnade

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return colonnade::Main();
}
