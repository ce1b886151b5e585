// CpuOps: the host reference of every Ops call (see ops.h for the contracts).
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
#include "core/philox.h"

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

// Calls fn(begin, end) on a partition of [0, n) into at most CpuThreads() contiguous
// ranges. `cost` is a rough per-item cost in element operations, used only to decide
// whether splitting is worth it. Runs inline when nested inside another ParallelFor, when
// another thread is using the pool, or when the work is small.
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

// Per-thread scratch memory that grows and is kept, so that steady-state training does
// not pay for page faults on every call. Separate slots for buffers that are live at the
// same time on one thread (the caller of a conv holds kCol while it also runs pool tasks
// that use kTask).
enum ScratchSlot { kScratchCol = 0, kScratchTask = 1, kScratchSlots = 2 };
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

// ---------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------

// Shape checks are shared with every other backend: core/op_shapes.h.
using op_shapes::SameSize;

int BlasInt(int64_t v) {
  CHECK(v >= 0 && v <= INT_MAX) << "GEMM dimension " << v << " does not fit a BLAS int";
  return static_cast<int>(v);
}

// cond ? v : 0 without a branch: the conditions here (signs of activations, window
// maxima) are data-dependent coin flips, and a mispredicted branch per element costs
// several times the arithmetic.
inline float SelectIf(bool cond, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  bits &= 0u - static_cast<uint32_t>(cond);
  std::memcpy(&v, &bits, sizeof(bits));
  return v;
}

inline float MaxNoBranch(float a, float b) {
  const bool take_b = b > a;
  return SelectIf(take_b, b) + SelectIf(!take_b, a);  // one of the two terms is +0
}

// d^-beta; beta = 0.75 (AlexNet, cuda-convnet) avoids powf: 1 / (sqrt(d) * d^(1/4)).
inline float PowNegBeta(float d, float beta) {
  if (beta == 0.75f) return 1.0f / (std::sqrt(d) * std::sqrt(std::sqrt(d)));
  return std::pow(d, -beta);
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

// ---------------------------------------------------------------------------------------
// Pooling geometry: window [o*stride - pad, o*stride - pad + size) clipped to [0, in).
// ---------------------------------------------------------------------------------------
inline void PoolWindow(int64_t o, int64_t in, const PoolParams& p, int64_t* lo, int64_t* hi) {
  int64_t start = o * p.stride - p.pad;
  *lo = std::max<int64_t>(start, 0);
  *hi = std::min<int64_t>(start + p.size, in);
}

// Box sum along one axis of a CHWN block, vectorised over the contiguous inner run:
//   out[o][j] = sum_{i in [o + off, o + off + size) ∩ [0, len)} in[i][j]
// for o in [0, len), where rows are `inner` floats apart ("in" and "out" are
// `outer` x len x inner arrays).
void BoxSum(const float* in, float* out, int64_t outer, int64_t len, int64_t inner, int64_t off,
            int64_t size) {
  for (int64_t a = 0; a < outer; ++a) {
    const float* src = in + a * len * inner;
    float* dst = out + a * len * inner;
    for (int64_t o = 0; o < len; ++o) {
      float* d = dst + o * inner;
      std::fill(d, d + inner, 0.0f);
      const int64_t lo = std::max<int64_t>(0, o + off), hi = std::min<int64_t>(len, o + off + size);
      for (int64_t i = lo; i < hi; ++i) {
        const float* s = src + i * inner;
        for (int64_t j = 0; j < inner; ++j) d[j] += s[j];
      }
    }
  }
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
// Element-wise and memory
// ---------------------------------------------------------------------------------------

void CpuOps::Fill(Tensor& y, float value) {
  float* d = y.data();
  ParallelFor(y.size(), 1, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, value); });
}

void CpuOps::Copy(const Tensor& x, Tensor& y) {
  SameSize(x, y, "Copy");
  if (x.data() == y.data() || x.size() == 0) return;
  std::memcpy(y.data(), x.data(), x.bytes());
}

// y = alpha x + beta y. As in BLAS, beta == 0 means y is not read (so stale NaNs in a
// fresh buffer do not leak). x may alias y.
void CpuOps::Axpby(float alpha, const Tensor& x, float beta, Tensor& y) {
  SameSize(x, y, "Axpby");
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(x.size(), 2, [&](int64_t b, int64_t e) {
    if (beta == 0.0f) {
      for (int64_t i = b; i < e; ++i) ys[i] = alpha * xs[i];
    } else {
      for (int64_t i = b; i < e; ++i) ys[i] = alpha * xs[i] + beta * ys[i];
    }
  });
}

// y = a + b; y may alias a or b (the Net accumulates gradients this way).
void CpuOps::Add(const Tensor& a, const Tensor& b, Tensor& y) {
  SameSize(a, b, "Add");
  SameSize(a, y, "Add");
  const float* as = a.data();
  const float* bs = b.data();
  float* ys = y.data();
  ParallelFor(a.size(), 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) ys[i] = as[i] + bs[i];
  });
}

// In CHWN a range of channels is one contiguous block, so concatenation along channels
// is a single memcpy per input.
void CpuOps::CopyChannelsIn(const Tensor& x, int64_t c0, Tensor& y) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsIn");
  if (x.size() == 0) return;
  std::memcpy(y.data() + c0 * y.h() * y.w() * y.n(), x.data(), x.bytes());
}

void CpuOps::CopyChannelsOut(const Tensor& y, int64_t c0, Tensor& x) {
  op_shapes::CopyChannels(x, c0, y, "CopyChannelsOut");
  if (x.size() == 0) return;
  std::memcpy(x.data(), y.data() + c0 * y.h() * y.w() * y.n(), x.bytes());
}

// Double-precision sum over fixed blocks of 64Ki elements added in block order, so the
// result does not depend on the thread count.
double CpuOps::Sum(const Tensor& x) {
  constexpr int64_t kBlock = 1 << 16;
  const int64_t n = x.size();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks, 0.0);
  const float* d = x.data();
  ParallelFor(blocks, kBlock, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      double s = 0.0;
      for (int64_t i = b * kBlock, e = std::min(n, (b + 1) * kBlock); i < e; ++i) s += d[i];
      partial[b] = s;
    }
  });
  double s = 0.0;
  for (double v : partial) s += v;
  return s;
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

// y[c][...] += b[c]: each channel is one contiguous block of H*W*N.
void CpuOps::AddBias(Tensor& y, const Tensor& b) {
  op_shapes::Bias(y, b, "AddBias");
  const int64_t C = y.shape()[0], S = y.size() / std::max<int64_t>(C, 1);
  float* ys = y.data();
  const float* bs = b.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float v = bs[c];
      float* d = ys + c * S;
      for (int64_t i = 0; i < S; ++i) d[i] += v;
    }
  });
}

// db[c] = sum of channel c's block, accumulated in double (one thread per channel).
void CpuOps::BiasBackward(const Tensor& dy, Tensor& db) {
  op_shapes::Bias(dy, db, "BiasBackward");
  const int64_t C = dy.shape()[0], S = dy.size() / std::max<int64_t>(C, 1);
  const float* d = dy.data();
  float* out = db.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0.0;
      const float* src = d + c * S;
      for (int64_t i = 0; i < S; ++i) s += src[i];
      out[c] = static_cast<float>(s);
    }
  });
}

// Row-major GEMM with packed leading dimensions (lda = K or M, ldb = N or K, ldc = N).
void CpuOps::Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, const float* b, float beta, float* c) {
  Sgemm(trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

// ---------------------------------------------------------------------------------------
// Pooling (cuda-convnet ceil mode, clipped windows; see ops.h)
// ---------------------------------------------------------------------------------------

// Parallel over (channel, output row) pairs, which write disjoint rows of y. For each
// output pixel the N images are reduced together over the window's in-image pixels.
void CpuOps::PoolForward(const Tensor& x, Tensor& y, const PoolParams& p) {
  op_shapes::Pool(x, y, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), OH = y.h(), OW = y.w();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C * OH, OW * N * p.size * p.size, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r / OH, oy = r % OH;
      int64_t y0, y1;
      PoolWindow(oy, H, p, &y0, &y1);
      const float* xc = xs + c * H * W * N;
      for (int64_t ox = 0; ox < OW; ++ox) {
        int64_t x0, x1;
        PoolWindow(ox, W, p, &x0, &x1);
        float* out = ys + ((c * OH + oy) * OW + ox) * N;
        const int64_t count = (y1 - y0) * (x1 - x0);
        if (count <= 0) {  // cannot happen with pad < size; keep the output defined
          std::fill(out, out + N, 0.0f);
          continue;
        }
        if (p.kind == PoolParams::kMax) {
          std::memcpy(out, xc + (y0 * W + x0) * N, N * sizeof(float));
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float* v = xc + (iy * W + ix) * N;
              for (int64_t n = 0; n < N; ++n) out[n] = MaxNoBranch(out[n], v[n]);
            }
        } else {
          std::fill(out, out + N, 0.0f);
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix) {
              const float* v = xc + (iy * W + ix) * N;
              for (int64_t n = 0; n < N; ++n) out[n] += v[n];
            }
          const float inv = 1.0f / static_cast<float>(count);
          for (int64_t n = 0; n < N; ++n) out[n] *= inv;
        }
      }
    }
  });
}

// Max: dy of each window goes to the FIRST input pixel, in row-major window order (iy
// outer, ix inner), whose value equals the window's output, i.e. the first maximum.
// Avg: dy / (in-image pixel count) goes to every in-image pixel of the window.
// Windows overlap, so the split is over channels only: a thread owns dx of its channels.
void CpuOps::PoolBackward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                          const PoolParams& p) {
  op_shapes::PoolBackward(x, y, dy, dx, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), OH = y.h(), OW = y.w();
  const float* xs = x.data();
  const float* ys = y.data();
  const float* dys = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, H * W * N * p.size, [&](int64_t c0, int64_t c1) {
    std::vector<int32_t> first(N);  // per image: window pixel that receives dy
    for (int64_t c = c0; c < c1; ++c) {
      const float* xc = xs + c * H * W * N;
      float* dxc = dxs + c * H * W * N;
      std::fill(dxc, dxc + H * W * N, 0.0f);
      for (int64_t oy = 0; oy < OH; ++oy) {
        int64_t y0, y1;
        PoolWindow(oy, H, p, &y0, &y1);
        for (int64_t ox = 0; ox < OW; ++ox) {
          int64_t x0, x1;
          PoolWindow(ox, W, p, &x0, &x1);
          const int64_t o = ((c * OH + oy) * OW + ox) * N;
          const float* yv = ys + o;
          const float* g = dys + o;
          if (p.kind == PoolParams::kMax) {
            // Scan the window backwards, keeping the latest (so finally the first in
            // forward order) pixel equal to the maximum; branch-free selects.
            std::fill(first.begin(), first.end(), static_cast<int32_t>(y0 * W + x0));
            for (int64_t iy = y1 - 1; iy >= y0; --iy)
              for (int64_t ix = x1 - 1; ix >= x0; --ix) {
                const int32_t pix = static_cast<int32_t>(iy * W + ix);
                const float* xv = xc + pix * N;
                for (int64_t n = 0; n < N; ++n) {
                  const int32_t eq = -static_cast<int32_t>(xv[n] == yv[n]);
                  first[n] = (pix & eq) | (first[n] & ~eq);
                }
              }
            for (int64_t n = 0; n < N; ++n) dxc[first[n] * N + n] += g[n];
          } else {
            const int64_t count = (y1 - y0) * (x1 - x0);
            if (count <= 0) continue;
            const float inv = 1.0f / static_cast<float>(count);
            for (int64_t iy = y0; iy < y1; ++iy)
              for (int64_t ix = x0; ix < x1; ++ix) {
                float* d = dxc + (iy * W + ix) * N;
                for (int64_t n = 0; n < N; ++n) d[n] += g[n] * inv;
              }
          }
        }
      }
    }
  });
}

// y[c][n] = mean over the H*W pixels of x[c][.][.][n], accumulated in double per image.
void CpuOps::GlobalAvgPoolForward(const Tensor& x, Tensor& y) {
  op_shapes::GlobalAvgPool(x, y, "GlobalAvgPoolForward");
  const int64_t C = x.c(), P = x.h() * x.w(), N = x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, P * N, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(N);
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t q = 0; q < P; ++q) {
        const float* v = xs + (c * P + q) * N;
        for (int64_t n = 0; n < N; ++n) acc[n] += v[n];
      }
      for (int64_t n = 0; n < N; ++n) ys[c * N + n] = static_cast<float>(acc[n] / P);
    }
  });
}

// dx[c][.][.][n] = dy[c][n] / (H*W).
void CpuOps::GlobalAvgPoolBackward(const Tensor& dy, Tensor& dx) {
  op_shapes::GlobalAvgPool(dx, dy, "GlobalAvgPoolBackward");
  const int64_t C = dx.c(), P = dx.h() * dx.w(), N = dx.n();
  const float* g = dy.data();
  float* d = dx.data();
  const float inv = 1.0f / static_cast<float>(P);
  ParallelFor(C, P * N, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t q = 0; q < P; ++q)
        for (int64_t n = 0; n < N; ++n) d[(c * P + q) * N + n] = g[c * N + n] * inv;
  });
}

// ---------------------------------------------------------------------------------------
// Local response normalisation across channels (see LrnCrossParams)
//
// Channels are S = H*W*N floats apart, so the work is split over blocks of positions
// s in [0, S): each block computes every channel at its positions, reading the channel
// window with unit stride.
// ---------------------------------------------------------------------------------------
namespace {
constexpr int64_t kLrnBlock = 256;

struct LrnCrossGeom {
  int64_t C, S, Cg, half;
  float alpha;  // alpha' (already divided by size if alpha_over_size)
  // Window of channel c: [c - size/2, c + size/2] clipped to c's group. The relation is
  // symmetric (j in window(c) <=> c in window(j)), which the backward pass uses.
  void Window(int64_t c, int64_t* lo, int64_t* hi) const {
    const int64_t g0 = c / Cg * Cg;
    *lo = std::max(g0, c - half);
    *hi = std::min(g0 + Cg - 1, c + half);
  }
};

LrnCrossGeom MakeLrnCrossGeom(const Tensor& x, const LrnCrossParams& p) {
  LrnCrossGeom g;
  g.C = x.c();
  g.S = x.h() * x.w() * x.n();
  g.Cg = g.C / p.groups;
  g.half = p.size / 2;
  g.alpha = p.alpha_over_size ? p.alpha / static_cast<float>(p.size) : p.alpha;
  return g;
}
}  // namespace

// denom[c][s] = k + alpha' * sum_{c' in window(c)} x[c'][s]^2;  y = x * denom^-beta.
void CpuOps::LrnCrossForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnCrossParams& p) {
  op_shapes::LrnCross(x, p, {&y, &denom}, "LrnCrossForward");
  const LrnCrossGeom g = MakeLrnCrossGeom(x, p);
  const float* xs = x.data();
  float* ys = y.data();
  float* ds = denom.data();
  const int64_t blocks = (g.S + kLrnBlock - 1) / kLrnBlock;
  ParallelFor(blocks, kLrnBlock * g.C * p.size, [&](int64_t b0, int64_t b1) {
    float acc[kLrnBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s0 = b * kLrnBlock, len = std::min(kLrnBlock, g.S - s0);
      for (int64_t c = 0; c < g.C; ++c) {
        int64_t lo, hi;
        g.Window(c, &lo, &hi);
        std::fill(acc, acc + len, 0.0f);
        for (int64_t c2 = lo; c2 <= hi; ++c2) {
          const float* v = xs + c2 * g.S + s0;
          for (int64_t i = 0; i < len; ++i) acc[i] += v[i] * v[i];
        }
        const float* xv = xs + c * g.S + s0;
        float* yv = ys + c * g.S + s0;
        float* dv = ds + c * g.S + s0;
        for (int64_t i = 0; i < len; ++i) {
          const float d = p.k + g.alpha * acc[i];
          dv[i] = d;
          yv[i] = xv[i] * PowNegBeta(d, p.beta);
        }
      }
    }
  });
}

// With y_c = x_c d_c^-beta and d_c = k + alpha' sum_{j in window(c)} x_j^2:
//   dx_j = dy_j d_j^-beta - 2 alpha' beta x_j sum_{c in window(j)} dy_c y_c / d_c
// (window symmetry turns "all c whose window holds j" into window(j)).
void CpuOps::LrnCrossBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                              const Tensor& dy, Tensor& dx, const LrnCrossParams& p) {
  op_shapes::LrnCross(x, p, {&y, &denom, &dy, &dx}, "LrnCrossBackward");
  const LrnCrossGeom g = MakeLrnCrossGeom(x, p);
  const float* xs = x.data();
  const float* ys = y.data();
  const float* ds = denom.data();
  const float* gs = dy.data();
  float* dxs = dx.data();
  const float scale = 2.0f * g.alpha * p.beta;
  const int64_t blocks = (g.S + kLrnBlock - 1) / kLrnBlock;
  ParallelFor(blocks, kLrnBlock * g.C * p.size, [&](int64_t b0, int64_t b1) {
    // ratio[c][i] = dy * y / denom for the block, all channels (read by neighbours).
    float* ratio = Scratch(kScratchTask, g.C * kLrnBlock);
    float acc[kLrnBlock];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t s0 = b * kLrnBlock, len = std::min(kLrnBlock, g.S - s0);
      for (int64_t c = 0; c < g.C; ++c) {
        const int64_t o = c * g.S + s0;
        float* r = ratio + c * kLrnBlock;
        for (int64_t i = 0; i < len; ++i) r[i] = gs[o + i] * ys[o + i] / ds[o + i];
      }
      for (int64_t j = 0; j < g.C; ++j) {
        int64_t lo, hi;
        g.Window(j, &lo, &hi);
        std::fill(acc, acc + len, 0.0f);
        for (int64_t c = lo; c <= hi; ++c) {
          const float* r = ratio + c * kLrnBlock;
          for (int64_t i = 0; i < len; ++i) acc[i] += r[i];
        }
        const int64_t o = j * g.S + s0;
        for (int64_t i = 0; i < len; ++i)
          dxs[o + i] = gs[o + i] * PowNegBeta(ds[o + i], p.beta) - scale * xs[o + i] * acc[i];
      }
    }
  });
}

// ---------------------------------------------------------------------------------------
// Response normalisation within a map (cuda-convnet rnorm; see LrnWithinParams)
//
// Per channel (the parallel unit), the window sum of squares is a 2-D box filter,
// computed separably (along x, then along y) with the N images as the contiguous inner
// run. Window of pixel y: [y - size/2, y - size/2 + size) clipped to [0, H).
// ---------------------------------------------------------------------------------------
// denom = k + alpha/size^2 * sum_{window} x^2;  y = x * denom^-beta.
void CpuOps::LrnWithinForward(const Tensor& x, Tensor& y, Tensor& denom, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom}, "LrnWithinForward");
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), S = H * W * N;
  const int64_t off = -(p.size / 2);
  const float a = p.alpha / static_cast<float>(p.size * p.size);
  const float* xs = x.data();
  float* ys = y.data();
  float* ds = denom.data();
  ParallelFor(C, S * p.size * 2, [&](int64_t c0, int64_t c1) {
    float* sq = Scratch(kScratchTask, 2 * S);
    float* rows = sq + S;
    for (int64_t c = c0; c < c1; ++c) {
      const float* xv = xs + c * S;
      for (int64_t i = 0; i < S; ++i) sq[i] = xv[i] * xv[i];
      BoxSum(sq, rows, H, W, N, off, p.size);      // along x: H outer, W along, N inner
      BoxSum(rows, sq, 1, H, W * N, off, p.size);  // along y: whole rows of W*N
      float* yv = ys + c * S;
      float* dv = ds + c * S;
      for (int64_t i = 0; i < S; ++i) {
        const float d = p.k + a * sq[i];
        dv[i] = d;
        yv[i] = xv[i] * PowNegBeta(d, p.beta);
      }
    }
  });
}

// dx_q = dy_q d_q^-beta - 2 (alpha/size^2) beta x_q sum_{p : q in window(p)} dy_p y_p / d_p.
// q is in window(p) iff p is in [q + size/2 - size + 1, q + size/2]: the transposed
// window (the same one for odd sizes), again summed separably.
void CpuOps::LrnWithinBackward(const Tensor& x, const Tensor& y, const Tensor& denom,
                               const Tensor& dy, Tensor& dx, const LrnWithinParams& p) {
  op_shapes::LrnWithin(x, p, {&y, &denom, &dy, &dx}, "LrnWithinBackward");
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n(), S = H * W * N;
  const int64_t off = p.size / 2 - p.size + 1;
  const float scale = 2.0f * p.alpha / static_cast<float>(p.size * p.size) * p.beta;
  const float* xs = x.data();
  const float* ys = y.data();
  const float* ds = denom.data();
  const float* gs = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, S * p.size * 2, [&](int64_t c0, int64_t c1) {
    float* r = Scratch(kScratchTask, 2 * S);
    float* rows = r + S;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t o = c * S;
      for (int64_t i = 0; i < S; ++i) r[i] = gs[o + i] * ys[o + i] / ds[o + i];
      BoxSum(r, rows, H, W, N, off, p.size);
      BoxSum(rows, r, 1, H, W * N, off, p.size);
      for (int64_t i = 0; i < S; ++i)
        dxs[o + i] = gs[o + i] * PowNegBeta(ds[o + i], p.beta) - scale * xs[o + i] * r[i];
    }
  });
}

// ---------------------------------------------------------------------------------------
// Batch normalisation: per channel over its contiguous H*W*N block; one thread per
// channel, statistics in double.
// ---------------------------------------------------------------------------------------

// y = (x - mean) * scale + shift over one channel's n values: the one expression of the
// training forward and of BatchNormApply, so both round alike (C++17 without extensions
// does not contract it into an FMA).
namespace {
void ApplyChannel(const float* x, int64_t n, float mean, float scale, float shift, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * scale + shift;
}
}  // namespace

// mean = E[x], var = E[(x - mean)^2] (biased, used to normalise),
// invstd = 1 / sqrt(var + eps), y = gamma (x - mean) invstd + beta;
// running = (1 - momentum) running + momentum * batch, with the unbiased variance
// var * S / (S - 1) for running_var (S = H*W*N values per channel).
void CpuOps::BatchNormForwardTrain(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   Tensor& y, Tensor& running_mean, Tensor& running_var,
                                   Tensor& save_mean, Tensor& save_invstd, Tensor& save_scale,
                                   const BatchNormParams& p) {
  op_shapes::BatchNorm(
      x, {&y}, {&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd, &save_scale},
      "BatchNormForwardTrain");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, 4 * S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* xv = xs + c * S;
      double sum = 0.0;
      for (int64_t i = 0; i < S; ++i) sum += xv[i];
      const double mean = sum / S;
      double ss = 0.0;
      for (int64_t i = 0; i < S; ++i) {
        const double d = xv[i] - mean;
        ss += d * d;
      }
      const double var = ss / S;
      const double invstd = 1.0 / std::sqrt(var + p.eps);
      const double unbiased = S > 1 ? ss / (S - 1) : var;
      // (x - mean) first: folding mean into a shift would cancel badly when |mean| >> std.
      const float meanf = static_cast<float>(mean), betaf = beta.data()[c];
      const float scale = static_cast<float>(gamma.data()[c] * invstd);
      ApplyChannel(xv, S, meanf, scale, betaf, ys + c * S);
      save_mean.data()[c] = meanf;
      save_invstd.data()[c] = static_cast<float>(invstd);
      save_scale.data()[c] = scale;
      running_mean.data()[c] =
          static_cast<float>((1.0 - p.momentum) * running_mean.data()[c] + p.momentum * mean);
      running_var.data()[c] =
          static_cast<float>((1.0 - p.momentum) * running_var.data()[c] + p.momentum * unbiased);
    }
  });
}

void CpuOps::BatchNormApply(const Tensor& x, const Tensor& mean, const Tensor& scale,
                            const Tensor& shift, Tensor& y) {
  op_shapes::BatchNorm(x, {&y}, {&mean, &scale, &shift}, "BatchNormApply");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      ApplyChannel(x.data() + c * S, S, mean.data()[c], scale.data()[c], shift.data()[c],
                   y.data() + c * S);
  });
}

// y = gamma (x - running_mean) / sqrt(running_var + eps) + beta.
void CpuOps::BatchNormForwardInfer(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& running_mean, const Tensor& running_var, Tensor& y,
                                   const BatchNormParams& p) {
  op_shapes::BatchNorm(x, {&y}, {&gamma, &beta, &running_mean, &running_var},
                       "BatchNormForwardInfer");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(C, S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var.data()[c]) + p.eps);
      const float scale = static_cast<float>(gamma.data()[c] * invstd);
      const float mean = running_mean.data()[c], betaf = beta.data()[c];
      const float* xv = xs + c * S;
      float* yv = ys + c * S;
      for (int64_t i = 0; i < S; ++i) yv[i] = (xv[i] - mean) * scale + betaf;
    }
  });
}

// With xhat = (x - mean) invstd (the training-mode statistics saved by forward):
//   dbeta = sum dy, dgamma = sum dy xhat,
//   dx = gamma invstd / S * (S dy - dbeta - xhat dgamma).
void CpuOps::BatchNormBackward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                               const Tensor& save_invstd, const Tensor& dy, Tensor& dx,
                               Tensor& dgamma, Tensor& dbeta) {
  op_shapes::BatchNorm(x, {&dy, &dx}, {&gamma, &save_mean, &save_invstd, &dgamma, &dbeta},
                       "BatchNormBackward");
  const int64_t C = x.c(), S = x.h() * x.w() * x.n();
  const float* xs = x.data();
  const float* gs = dy.data();
  float* dxs = dx.data();
  ParallelFor(C, 4 * S, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const double mean = save_mean.data()[c], invstd = save_invstd.data()[c];
      const float* xv = xs + c * S;
      const float* g = gs + c * S;
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for (int64_t i = 0; i < S; ++i) {
        sum_dy += g[i];
        sum_dy_xhat += g[i] * ((xv[i] - mean) * invstd);
      }
      dbeta.data()[c] = static_cast<float>(sum_dy);
      dgamma.data()[c] = static_cast<float>(sum_dy_xhat);
      const double k = gamma.data()[c] * invstd / S;
      float* d = dxs + c * S;
      for (int64_t i = 0; i < S; ++i) {
        const double xhat = (xv[i] - mean) * invstd;
        d[i] =
            static_cast<float>(k * (S * static_cast<double>(g[i]) - sum_dy - xhat * sum_dy_xhat));
      }
    }
  });
}

// ---------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------

// y = max(x, 0); x and y may be the same buffer (in-place ReLU).
void CpuOps::ReluForward(const Tensor& x, Tensor& y) {
  SameSize(x, y, "ReluForward");
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(x.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ys[i] = SelectIf(xs[i] > 0.0f, xs[i]);
  });
}

// dx = dy where y > 0, else 0 (y is the output, so this works after an in-place forward).
void CpuOps::ReluBackward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  SameSize(y, dy, "ReluBackward dy");
  SameSize(y, dx, "ReluBackward dx");
  const float* ys = y.data();
  const float* gs = dy.data();
  float* d = dx.data();
  ParallelFor(y.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] = SelectIf(ys[i] > 0.0f, gs[i]);
  });
}

// The dropout mask, bit for bit what every implementation (the CUDA kernel too) computes
// for local element (c, h, w, n) of a C x H x W x N tensor:
//   gb    = p.global_batch > 0 ? p.global_batch : N
//   index = (((c + p.channel_offset) * H + h) * W + w) * gb + n + p.image_offset  (uint64)
//   u     = PhiloxUniform(p.seed, p.step, index)   // key seed, counter (step, index)
//   mask  = u < p.p ? 0.0f : 1.0f / (1.0f - p.p)   // dropped with probability p
//   y     = x * mask
// Parallel over (c, h, w) rows of N images.
void CpuOps::DropoutForward(const Tensor& x, Tensor& y, Tensor& mask, const DropoutParams& p) {
  op_shapes::Dropout(x, y, mask, p);
  const int64_t C = x.c(), H = x.h(), W = x.w(), N = x.n();
  const int64_t gb = p.global_batch > 0 ? p.global_batch : N;
  const float keep_scale = 1.0f / (1.0f - p.p);
  const float* xs = x.data();
  float* ys = y.data();
  float* ms = mask.data();
  ParallelFor(C * H * W, N * 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {  // r = (c*H + h)*W + w
      const int64_t c = r / (H * W), hw = r % (H * W);
      const uint64_t base =
          static_cast<uint64_t>(((c + p.channel_offset) * H * W + hw) * gb + p.image_offset);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t i = r * N + n;
        const float u = PhiloxUniform(p.seed, static_cast<uint64_t>(p.step), base + n);
        const float m = keep_scale * static_cast<float>(u >= p.p);  // 0 when dropped
        ms[i] = m;
        ys[i] = xs[i] * m;
      }
    }
  });
}

// dx = dy * mask (the mask already holds 0 or 1/(1-p)).
void CpuOps::DropoutBackward(const Tensor& dy, const Tensor& mask, Tensor& dx) {
  SameSize(dy, mask, "DropoutBackward mask");
  SameSize(dy, dx, "DropoutBackward dx");
  const float* g = dy.data();
  const float* m = mask.data();
  float* d = dx.data();
  ParallelFor(dy.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) d[i] = g[i] * m[i];
  });
}

// ---------------------------------------------------------------------------------------
// Softmax cross-entropy. logits are a K x N row-major matrix (class k of image n at
// k*N + n), so the per-image reductions run over a column; they are done for all images
// at once, row by row, to keep the accesses unit-stride.
// ---------------------------------------------------------------------------------------
namespace {
int64_t LabelOf(const float* labels, int64_t n, int64_t K) {
  const float v = labels[n];
  const int64_t l = static_cast<int64_t>(v);
  CHECK(static_cast<float>(l) == v && l >= 0 && l < K)
      << "label " << v << " of image " << n << " is not a class index in [0, " << K << ")";
  return l;
}
}  // namespace

// probs = exp(z - max) / sum exp(z - max);  loss = log(sum exp(z - max)) - (z_label - max),
// which never takes the log of an underflowed probability.
void CpuOps::SoftmaxCrossEntropyForward(const Tensor& logits, const Tensor& labels, Tensor& probs,
                                        Tensor& loss_per_image) {
  const op_shapes::SoftmaxDims dims =
      op_shapes::Softmax(logits, labels, probs, &loss_per_image, "SoftmaxCrossEntropyForward");
  const int64_t N = dims.batch, K = dims.classes;
  const float* z = logits.data();
  float* pr = probs.data();
  std::vector<float> mx(N, -INFINITY);
  std::vector<double> sum(N, 0.0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) mx[n] = std::max(mx[n], z[k * N + n]);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const float e = std::exp(z[k * N + n] - mx[n]);
      pr[k * N + n] = e;
      sum[n] += e;
    }
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) pr[k * N + n] = static_cast<float>(pr[k * N + n] / sum[n]);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = LabelOf(labels.data(), n, K);
    loss_per_image.data()[n] =
        static_cast<float>(std::log(sum[n]) - (static_cast<double>(z[l * N + n]) - mx[n]));
  }
}

// dlogits = scale * (probs - onehot(label)).
void CpuOps::SoftmaxCrossEntropyBackward(const Tensor& probs, const Tensor& labels, float scale,
                                         Tensor& dlogits) {
  const op_shapes::SoftmaxDims dims =
      op_shapes::Softmax(probs, labels, dlogits, nullptr, "SoftmaxCrossEntropyBackward");
  const int64_t N = dims.batch, K = dims.classes;
  const float* pr = probs.data();
  float* d = dlogits.data();
  for (int64_t i = 0; i < K * N; ++i) d[i] = scale * pr[i];
  for (int64_t n = 0; n < N; ++n) {
    const int64_t l = LabelOf(labels.data(), n, K);
    d[l * N + n] = scale * (pr[l * N + n] - 1.0f);
  }
}

// ---------------------------------------------------------------------------------------
// Optimiser
// ---------------------------------------------------------------------------------------

// The step's loss sum by Sum (the order the trainer's host-side sums always had, so CPU
// runs log the same bits), its correct counts by CountCorrect.
void CpuOps::AccumulateResults(const Tensor& probs, const Tensor& labels,
                               const Tensor& loss_per_image, int64_t step,
                               const int64_t* /*step_on_device*/, Tensor& totals) {
  const op_shapes::SoftmaxDims d = op_shapes::Results(probs, labels, loss_per_image, totals);
  ResultTotals* t = reinterpret_cast<ResultTotals*>(totals.data());
  const double loss = Sum(loss_per_image);
  t->loss_sum += loss;
  CountCorrect(probs.data(), labels.data(), d.classes, d.batch, &t->top1, &t->top5);
  t->last_loss_sum = loss;
  t->steps += 1;
  if (!std::isfinite(loss)) {
    if (t->nonfinite_steps == 0) {
      t->first_nonfinite_step = step;
      t->first_nonfinite_loss = loss;
    }
    t->nonfinite_steps += 1;
  }
}

// v = momentum v - lr (grad + weight_decay w);  w = w + v   (element-wise, in float).
void CpuOps::SgdUpdate(Tensor& w, const Tensor& grad, Tensor& velocity, const SgdParams& p) {
  SameSize(w, grad, "SgdUpdate grad");
  SameSize(w, velocity, "SgdUpdate velocity");
  float* ws = w.data();
  const float* g = grad.data();
  float* v = velocity.data();
  ParallelFor(w.size(), 4, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float vi = p.momentum * v[i] - p.lr * (g[i] + p.weight_decay * ws[i]);
      v[i] = vi;
      ws[i] += vi;
    }
  });
}

}  // namespace colonnade
