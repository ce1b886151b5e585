// CpuOps: the host reference of every Ops call (see ops.h for the contracts). This file holds
// what every family shares (the thread pool, ParallelFor, per-thread scratch: ops/cpu_common.h)
// and the convolutions and GEMM; each other family's CPU reference is in core/ops/<family>.cc.
//
// Layout reminders used throughout this file (see tensor.h):
//   activations  CHWN, batch innermost: element (c, h, w, n) is at ((c*H + h)*W + w)*N + n,
//                so one channel is a contiguous block of S = H*W*N floats and one pixel
//                of one channel is a contiguous run of N floats;
//   conv weights [F][C/groups][KH][KW] (the canonical/checkpoint layout);
//   matrices     row-major.
//
// Threading. GEMMs are handed to OpenBLAS, which runs its own threads. Everything else is
// split with ParallelFor over a small persistent pool (CpuThreads() threads, the caller
// being one of them). The two are never nested: no pool task calls a GEMM, and a GEMM is
// only called between pool phases, so the machine is never oversubscribed. Every
// parallel loop writes disjoint outputs and each output element is computed by one fixed
// formula (reductions over a fixed order), so outside the GEMMs results do not depend on
// the thread count (bitwise; tests/core/cpu_ops_test.cc checks it).
#include "core/cpu_ops.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"
#include "core/log.h"
#include "core/op_shapes.h"
#include "core/ops/cpu_common.h"

namespace colonnade {
namespace {

// ---------------------------------------------------------------------------------------
// Threads
// ---------------------------------------------------------------------------------------

// A fixed set of workers that run the tasks of one job at a time. The caller of Run is a
// worker too, so a pool for T threads starts T - 1 std::threads.
class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, tasks) and returns when all have finished.
  void Run(int tasks, const std::function<void(int)>& fn) {
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->tasks = tasks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = job;
      ++generation_;
    }
    work_cv_.notify_all();
    Work(*job);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return job->done.load() == tasks; });
    job_.reset();
  }

 private:
  // One Run call. A worker that wakes late may still hold a finished job: it finds no
  // task left to claim and never touches `fn`, which may be gone by then.
  struct Job {
    const std::function<void(int)>* fn = nullptr;
    int tasks = 0;
    std::atomic<int> next{0};
    std::atomic<int> done{0};
  };

  void Work(Job& job) {
    InPool guard;
    for (int i; (i = job.next.fetch_add(1)) < job.tasks;) {
      (*job.fn)(i);
      if (job.done.fetch_add(1) + 1 == job.tasks) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }

  void WorkerLoop() {
    uint64_t seen = 0;
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_); });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      Work(*job);
    }
  }

 public:
  // Marks the current thread as running pool tasks, so that a nested ParallelFor runs
  // inline instead of waiting on the pool it is part of.
  struct InPool {
    InPool() : saved(active) { active = true; }
    ~InPool() { active = saved; }
    bool saved;
    static thread_local bool active;
  };

 private:
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::shared_ptr<Job> job_;
  uint64_t generation_ = 0;
  bool stop_ = false;
};
thread_local bool ThreadPool::InPool::active = false;

std::atomic<int> g_threads{0};       // 0: not decided yet
std::mutex g_pool_mu;                // held while a ParallelFor uses the pool
std::unique_ptr<ThreadPool> g_pool;  // guarded by g_pool_mu
pid_t g_pool_pid = 0;                // process that started g_pool's threads
std::atomic<size_t> g_conv_scratch_bytes{size_t{16} << 20};

int DefaultThreads() {
  // Programs refuse a malformed value at start-up (CheckEnvironment); a library user gets
  // the warning.
  absl::StatusOr<std::optional<int64_t>> env = EnvInt("COLONNADE_CPU_THREADS");
  if (env.ok() && env->has_value()) return static_cast<int>(**env);
  if (!env.ok()) LOG(WARNING) << "ignoring it: " << env.status().message();
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

// Below this many elements (times the per-element cost factor) a loop runs inline: waking
// a worker costs a few microseconds.
constexpr int64_t kMinParallelWork = 1 << 15;

}  // namespace

namespace cpu {

void ParallelFor(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = CpuThreads();
  int64_t chunks = std::min<int64_t>(threads, n);
  if (n * std::max<int64_t>(cost, 1) < kMinParallelWork) chunks = 1;
  if (chunks <= 1 || ThreadPool::InPool::active) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(g_pool_mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    fn(0, n);
    return;
  }
  // A forked child inherits the pool object but not its threads: abandon it (its
  // destructor would wait for threads that do not exist in this process).
  if (g_pool && g_pool_pid != getpid()) (void)g_pool.release();
  if (!g_pool || g_pool->threads() != threads) {
    g_pool = std::make_unique<ThreadPool>(threads);
    g_pool_pid = getpid();
  }
  g_pool->Run(static_cast<int>(chunks), [&](int i) { fn(n * i / chunks, n * (i + 1) / chunks); });
}

float* Scratch(ScratchSlot slot, int64_t floats) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t size = 0;
  };
  thread_local Buffer buffers[kScratchSlots];
  Buffer& b = buffers[slot];
  if (b.size < floats) {
    b.data.reset(new float[floats]);
    b.size = floats;
  }
  return b.data.get();
}

}  // namespace cpu

namespace {

using cpu::kScratchCol;
using cpu::ParallelFor;
using cpu::Scratch;

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

int BlasInt(int64_t v) {
  CHECK(v >= 0 && v <= INT_MAX) << "GEMM dimension " << v << " does not fit a BLAS int";
  return static_cast<int>(v);
}

// Row-major C (m x n, ldc) = alpha op(A) op(B) + beta C with explicit leading dimensions.
void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // BLAS would leave C scaled by beta; do the same explicitly (beta = 0 overwrites).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              BlasInt(m), BlasInt(n), BlasInt(k), alpha, a, BlasInt(lda), b, BlasInt(ldb), beta, c,
              BlasInt(ldc));
}

// ---------------------------------------------------------------------------------------
// Convolution geometry and im2col / col2im in CHWN
// ---------------------------------------------------------------------------------------

struct ConvGeom {
  int64_t C, H, W, N;  // input
  int64_t F, OH, OW;   // output
  int64_t KH, KW, stride, pad, groups;
  int64_t Cg, Fg;  // channels and filters per group
  int64_t K;       // Cg * KH * KW: rows of the column matrix
  int64_t P;       // OH * OW output pixels
  // 1x1, stride 1, no padding: the column matrix of a group is its input block itself.
  bool pointwise() const { return KH == 1 && KW == 1 && stride == 1 && pad == 0; }
};

ConvGeom MakeConvGeom(const Tensor& x, const Tensor& w, const Tensor& y, const ConvParams& p) {
  op_shapes::Conv(x, w, y, p);
  ConvGeom g;
  g.C = x.c();
  g.H = x.h();
  g.W = x.w();
  g.N = x.n();
  g.F = y.c();
  g.OH = y.h();
  g.OW = y.w();
  g.KH = p.kernel_h;
  g.KW = p.kernel_w;
  g.stride = p.stride;
  g.pad = p.pad;
  g.groups = p.groups;
  g.Cg = g.C / g.groups;
  g.Fg = g.F / g.groups;
  g.K = g.Cg * g.KH * g.KW;
  g.P = g.OH * g.OW;
  return g;
}

// Output pixels per chunk so that the K x (pixels*N) column matrix fits the scratch
// budget; the chunks are then evened out so that the last one is not a sliver.
int64_t ConvChunkPixels(const ConvGeom& g) {
  const int64_t budget = static_cast<int64_t>(CpuConvScratchBytes() / sizeof(float));
  int64_t per_pixel = g.K * g.N;
  int64_t chunk = std::max<int64_t>(1, budget / std::max<int64_t>(per_pixel, 1));
  chunk = std::min(chunk, g.P);
  int64_t chunks = (g.P + chunk - 1) / chunk;
  return (g.P + chunks - 1) / chunks;
}

// Range of output columns ox in [0, OW) whose input column ox*stride - pad + kx lies in
// [0, W); returned as [lo, hi) (empty when lo >= hi).
inline void ValidOutRange(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t k,
                          int64_t* lo, int64_t* hi) {
  // ox*stride - pad + k >= 0  <=>  ox >= ceil((pad - k) / stride)
  int64_t a = pad - k;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  // ox*stride - pad + k <= in - 1  <=>  ox <= floor((in - 1 + pad - k) / stride)
  int64_t b = in - 1 + pad - k;
  *hi = b < 0 ? 0 : std::min(out, b / stride + 1);
  *lo = std::min(*lo, out);
}

// im2col for one group and the output pixels [p0, p1):
//   col[k][(p - p0)*N + n] = x_g[c][oy*s - pad + ky][ox*s - pad + kx][n]   (0 outside)
// with k = (c*KH + ky)*KW + kx and p = oy*OW + ox. Because N is innermost in both x and
// col, every (k, pixel) entry is a contiguous run of N floats, and for stride 1 a whole
// output row is one contiguous copy. Parallel over the rows k of col.
void Im2Col(const ConvGeom& g, const float* xg, int64_t p0, int64_t p1, float* col) {
  const int64_t N = g.N, len = (p1 - p0) * N;
  ParallelFor(g.K, len, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t c = k / (g.KH * g.KW), ky = (k / g.KW) % g.KH, kx = k % g.KW;
      const float* xc = xg + c * g.H * g.W * N;
      float* dst = col + k * len;
      int64_t lo, hi;
      ValidOutRange(g.OW, g.W, g.stride, g.pad, kx, &lo, &hi);
      for (int64_t p = p0; p < p1;) {
        const int64_t oy = p / g.OW, ox0 = p % g.OW;
        const int64_t ox1 = std::min(g.OW, ox0 + (p1 - p));  // this row's part of the chunk
        const int64_t iy = oy * g.stride - g.pad + ky;
        if (iy < 0 || iy >= g.H) {
          std::memset(dst, 0, (ox1 - ox0) * N * sizeof(float));
        } else {
          const float* xrow = xc + iy * g.W * N;
          const int64_t a = std::max(ox0, std::min(lo, ox1));  // first valid in [ox0, ox1)
          const int64_t b = std::max(a, std::min(hi, ox1));    // end of valid
          std::memset(dst, 0, (a - ox0) * N * sizeof(float));
          if (g.stride == 1) {
            std::memcpy(dst + (a - ox0) * N, xrow + (a - g.pad + kx) * N,
                        (b - a) * N * sizeof(float));
          } else {
            for (int64_t ox = a; ox < b; ++ox)
              std::memcpy(dst + (ox - ox0) * N, xrow + (ox * g.stride - g.pad + kx) * N,
                          N * sizeof(float));
          }
          std::memset(dst + (b - ox0) * N, 0, (ox1 - b) * N * sizeof(float));
        }
        dst += (ox1 - ox0) * N;
        p += ox1 - ox0;
      }
    }
  });
}

// col2im, the adjoint of Im2Col: dx_g[c][iy][ix][n] += dcol[k][(p - p0)*N + n] over every
// (k, p) that Im2Col would have read from (c, iy, ix). Parallel over input channels c:
// all rows k of one channel go to one thread, so no two threads write one element.
void Col2ImAdd(const ConvGeom& g, const float* dcol, int64_t p0, int64_t p1, float* dxg) {
  const int64_t N = g.N, len = (p1 - p0) * N;
  ParallelFor(g.Cg, g.KH * g.KW * len, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      float* dxc = dxg + c * g.H * g.W * N;
      for (int64_t ky = 0; ky < g.KH; ++ky) {
        for (int64_t kx = 0; kx < g.KW; ++kx) {
          const float* src = dcol + ((c * g.KH + ky) * g.KW + kx) * len;
          int64_t lo, hi;
          ValidOutRange(g.OW, g.W, g.stride, g.pad, kx, &lo, &hi);
          for (int64_t p = p0; p < p1;) {
            const int64_t oy = p / g.OW, ox0 = p % g.OW;
            const int64_t ox1 = std::min(g.OW, ox0 + (p1 - p));
            const int64_t iy = oy * g.stride - g.pad + ky;
            if (iy >= 0 && iy < g.H) {
              float* dxrow = dxc + iy * g.W * N;
              const int64_t a = std::max(ox0, std::min(lo, ox1));
              const int64_t b = std::max(a, std::min(hi, ox1));
              for (int64_t ox = a; ox < b; ++ox) {
                float* d = dxrow + (ox * g.stride - g.pad + kx) * N;
                const float* s = src + (ox - ox0) * N;
                for (int64_t n = 0; n < N; ++n) d[n] += s[n];
              }
            }
            src += (ox1 - ox0) * N;
            p += ox1 - ox0;
          }
        }
      }
    }
  });
}

}  // namespace

void ParallelRanges(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn) {
  ParallelFor(n, cost, fn);
}

// ---------------------------------------------------------------------------------------
// Thread settings
// ---------------------------------------------------------------------------------------

// COLONNADE_CPU_THREADS replaces the default (hardware concurrency); an explicit
// SetCpuThreads call (e.g. from a command-line flag) replaces both. OpenBLAS is given the
// same count, so that a GEMM uses the cores the pool uses, never more.
int CpuThreads() {
  int t = g_threads.load();
  if (t > 0) return t;
  static std::once_flag once;
  std::call_once(once, [] {
    int expected = 0;
    g_threads.compare_exchange_strong(expected, DefaultThreads());
    openblas_set_num_threads(g_threads.load());
  });
  return g_threads.load();
}

void SetCpuThreads(int n) {
  CHECK_GE(n, 1) << "SetCpuThreads";
  CpuThreads();  // run the one-time default first so it cannot overwrite n later
  std::lock_guard<std::mutex> lock(g_pool_mu);  // waits for a running ParallelFor
  g_threads = n;
  if (g_pool && g_pool_pid != getpid()) (void)g_pool.release();  // see ParallelFor
  g_pool.reset();  // rebuilt with n threads on next use
  openblas_set_num_threads(n);
}

size_t CpuConvScratchBytes() { return g_conv_scratch_bytes.load(); }
void SetCpuConvScratchBytes(size_t bytes) {
  g_conv_scratch_bytes = std::max<size_t>(bytes, sizeof(float));
}

// ---------------------------------------------------------------------------------------
// Convolution: chunked im2col + SGEMM per group.
//
// For group g, with col built for output pixels [p0, p1) (N innermost):
//   y_g[F/g][(p1-p0)*N] = W_g[F/g][K] * col[K][(p1-p0)*N],   K = C/g * KH * KW
// W_g is rows [g*F/g, (g+1)*F/g) of the [F][C/g][KH][KW] weight seen as an F x K matrix,
// and the product lands directly in CHWN: y_g rows are channels, columns are (pixel,
// image) pairs in memory order, so the chunk's output is the column range [p0*N, p1*N)
// of the F/g x (OH*OW*N) matrix y_g (leading dimension OH*OW*N).
// ---------------------------------------------------------------------------------------

void CpuOps::ConvForward(const Tensor& x, const Tensor& w, Tensor& y, const ConvParams& p) {
  const ConvGeom g = MakeConvGeom(x, w, y, p);
  const int64_t PN = g.P * g.N;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const float* xg = x.data() + grp * g.Cg * g.H * g.W * g.N;
    const float* wg = w.data() + grp * g.Fg * g.K;
    float* yg = y.data() + grp * g.Fg * PN;
    if (g.pointwise()) {  // col == x_g
      Sgemm(false, false, g.Fg, PN, g.K, 1.0f, wg, g.K, xg, PN, 0.0f, yg, PN);
      continue;
    }
    const int64_t chunk = ConvChunkPixels(g);
    float* col = Scratch(kScratchCol, g.K * chunk * g.N);
    for (int64_t p0 = 0; p0 < g.P; p0 += chunk) {
      const int64_t p1 = std::min(g.P, p0 + chunk), len = (p1 - p0) * g.N;
      Im2Col(g, xg, p0, p1, col);
      Sgemm(false, false, g.Fg, len, g.K, 1.0f, wg, g.K, col, len, 0.0f, yg + p0 * g.N, PN);
    }
  }
}

// dcol[K][chunk] = W_g^T[K][F/g] * dy_g[F/g][chunk], then col2im adds dcol into dx.
void CpuOps::ConvBackwardData(const Tensor& dy, const Tensor& w, Tensor& dx, const ConvParams& p) {
  const ConvGeom g = MakeConvGeom(dx, w, dy, p);
  const int64_t PN = g.P * g.N;
  if (!g.pointwise()) Fill(dx, 0.0f);  // col2im accumulates; padding-only pixels stay 0
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    float* dxg = dx.data() + grp * g.Cg * g.H * g.W * g.N;
    const float* wg = w.data() + grp * g.Fg * g.K;
    const float* dyg = dy.data() + grp * g.Fg * PN;
    if (g.pointwise()) {
      Sgemm(true, false, g.K, PN, g.Fg, 1.0f, wg, g.K, dyg, PN, 0.0f, dxg, PN);
      continue;
    }
    const int64_t chunk = ConvChunkPixels(g);
    float* dcol = Scratch(kScratchCol, g.K * chunk * g.N);
    for (int64_t p0 = 0; p0 < g.P; p0 += chunk) {
      const int64_t p1 = std::min(g.P, p0 + chunk), len = (p1 - p0) * g.N;
      Sgemm(true, false, g.K, len, g.Fg, 1.0f, wg, g.K, dyg + p0 * g.N, PN, 0.0f, dcol, len);
      Col2ImAdd(g, dcol, p0, p1, dxg);
    }
  }
}

// dW_g[F/g][K] = sum over chunks of dy_g[F/g][chunk] * col[K][chunk]^T (first chunk
// overwrites, later ones accumulate through GEMM's beta).
void CpuOps::ConvBackwardFilter(const Tensor& x, const Tensor& dy, Tensor& dw,
                                const ConvParams& p) {
  const ConvGeom g = MakeConvGeom(x, dw, dy, p);
  const int64_t PN = g.P * g.N;
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const float* xg = x.data() + grp * g.Cg * g.H * g.W * g.N;
    const float* dyg = dy.data() + grp * g.Fg * PN;
    float* dwg = dw.data() + grp * g.Fg * g.K;
    if (g.pointwise()) {
      Sgemm(false, true, g.Fg, g.K, PN, 1.0f, dyg, PN, xg, PN, 0.0f, dwg, g.K);
      continue;
    }
    const int64_t chunk = ConvChunkPixels(g);
    float* col = Scratch(kScratchCol, g.K * chunk * g.N);
    for (int64_t p0 = 0; p0 < g.P; p0 += chunk) {
      const int64_t p1 = std::min(g.P, p0 + chunk), len = (p1 - p0) * g.N;
      Im2Col(g, xg, p0, p1, col);
      Sgemm(false, true, g.Fg, g.K, len, 1.0f, dyg + p0 * g.N, PN, col, len, p0 == 0 ? 0.0f : 1.0f,
            dwg, g.K);
    }
  }
}

// Row-major GEMM with packed leading dimensions (lda = K or M, ldb = N or K, ldc = N).
void CpuOps::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  Sgemm(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

}  // namespace colonnade
