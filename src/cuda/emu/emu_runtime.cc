#include "cuda/emu/emu_runtime.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <vector>

uint3 threadIdx;
uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

// ---- fiber context switch ------------------------------------------------------------------
// On x86-64 a switch saves the callee-saved registers and the stack pointer and restores the
// other fiber's (no system call: ucontext's swapcontext also saves the signal mask, a
// system call per switch, which dominated the run time of kernels with warp-collective
// instructions). Elsewhere ucontext.
#if defined(__x86_64__)
extern "C" void colonnade_emu_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .globl colonnade_emu_switch
  .type colonnade_emu_switch, @function
colonnade_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size colonnade_emu_switch, .-colonnade_emu_switch
)");
struct Context {
  void* sp = nullptr;
};
// A fresh context that starts `entry` (which must never return) on `stack`.
inline void MakeContext(Context& c, char* stack, size_t bytes, void (*entry)()) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                              // entry's (unused) return address slot
  *--sp = reinterpret_cast<void*>(entry);       // colonnade_emu_switch's `ret` goes here
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp, rbx, r12-r15
  c.sp = sp;
}
inline void SwitchContext(Context& from, Context& to) { colonnade_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};
inline void MakeContext(Context& c, char* stack, size_t bytes, void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
inline void SwitchContext(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

namespace colonnade::emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
// The fibers' stacks, kept from launch to launch: a fresh 256 KiB each was an mmap, page faults
// and an munmap per thread and launch (the emulator's tests launch thousands of kernels).
std::vector<std::unique_ptr<char[]>> g_stacks;
constexpr int kWarp = 32;
constexpr int kMaxWarps = 32;  // 1024 threads

struct PendingCopy {
  void* dst;
  const void* src;
  int bytes, src_bytes;
};

void Land(const PendingCopy& c) {
  if (c.src_bytes > 0) std::memcpy(c.dst, c.src, static_cast<size_t>(c.src_bytes));
  if (c.bytes > c.src_bytes)
    std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, static_cast<size_t>(c.bytes - c.src_bytes));
}

// A wgmma issued and not yet retired (see WgmmaBf16 below).
struct PendingWgmma {
  float* d;
  int n;
  uint64_t desc_a, desc_b;
  bool trans_b;     // B MN-major (else K-major)
  bool chained;     // an earlier pending op writes d: start from its result
  float c_in[128];  // else: the accumulators as they were at the issue
};
// The accumulators of a register array with wgmma ops in flight: the array itself reads NaN
// until its last pending op retires, so the chain of ops is computed here.
struct WgmmaShadow {
  float* d;
  int n;
  float v[128];
};

// The group bookkeeping cp.async and wgmma share: operations issued since the last commit,
// then the committed groups, oldest first; a wait retires the oldest groups in order.
template <class Op>
struct AsyncGroups {
  std::vector<Op> open;
  std::vector<std::vector<Op>> groups;

  void Commit() {
    groups.push_back(std::move(open));
    open.clear();
  }
  // Retires groups, oldest first, until at most `newest_pending` remain: retire(group).
  template <class Retire>
  void Wait(int newest_pending, const Retire& retire) {
    const size_t keep = static_cast<size_t>(newest_pending < 0 ? 0 : newest_pending);
    while (groups.size() > keep) {
      std::vector<Op> g = std::move(groups.front());
      groups.erase(groups.begin());
      retire(g);
    }
  }
  // Whether any operation in flight, committed or not, satisfies pred.
  template <class Pred>
  bool Any(const Pred& pred) const {
    for (const Op& o : open)
      if (pred(o)) return true;
    for (const auto& g : groups)
      for (const Op& o : g)
        if (pred(o)) return true;
    return false;
  }
  bool empty() const { return open.empty() && groups.empty(); }
  void clear() {
    open.clear();
    groups.clear();
  }
};

struct Fiber {
  // kSpin: waits on an mbarrier phase (queued again behind the ready threads);
  // kNamedBarrier: at bar.sync named, named_count.
  enum State { kReady, kBlockBarrier, kWarpBarrier, kSpin, kNamedBarrier, kDone };
  Context ctx;
  char* stack = nullptr;  // one of g_stacks
  uint3 tid;
  unsigned warp = 0, lane = 0;
  State state = kReady;
  uint64_t collectives = 0;  // warp-collective instructions executed (picks a deposit slot)
  AsyncGroups<PendingCopy> copies;     // cp.async
  AsyncGroups<PendingWgmma> wgmmas;    // wgmma.mma_async
  std::vector<WgmmaShadow> wg_shadow;  // per accumulator array in flight
  unsigned named = 0, named_count = 0;  // the named barrier it waits at
};

// An arrival of cp.async.mbarrier.arrive.noinc not made yet: it is made once the copies its
// thread issued before it have landed (they land with it).
// A TMA copy (TmaLoad3D) is one too, whose landing completes `tx` bytes instead of arriving.
struct DeferredArrive {
  const Fiber* owner;
  std::vector<PendingCopy> copies;
  uint64_t* bar;
  int64_t tx = 0;
};

Context g_sched;
Fiber* g_current = nullptr;
const std::function<void()>* g_body = nullptr;
int g_order = 2;
std::mt19937 g_rng(12345);
std::mt19937 g_copy_rng(777);
alignas(1024) unsigned char g_dynamic_smem[kDynamicSharedBytes];
size_t g_dynamic_bytes = 0;

// What one lane brings to a warp-collective instruction. Two slots per warp, used
// alternately: a lane can only reach collective i+2 after every lane has left the
// rendezvous of collective i+1, hence after every lane has read collective i's slot.
struct Deposit {
  int op;
  uint32_t a[4], b[2];
  float c[4];  // mma: the accumulator in
  const void* addr;
};
Deposit g_deposit[kMaxWarps][2][kWarp];
// mma: the warp's D fragments of a rendezvous, computed once by the first of its lanes to run
// after it (the others read theirs), keyed by block serial and the warp's collective count.
float g_mma_d[kMaxWarps][2][kWarp][4];
uint64_t g_mma_key[kMaxWarps][2];
uint64_t g_block_serial = 0;  // blocks run so far (the keys of g_mma_d)
std::vector<DeferredArrive> g_deferred;  // the running block's, oldest first
// Each mbarrier's transaction bytes still expected in its current phase (expect_tx minus the
// TMA bytes landed); the running block's.
std::map<const uint64_t*, int64_t> g_tx;
uint64_t g_mbar_arrivals = 0;            // arrivals made so far (the scheduler's progress)

void FlushCopies(Fiber& f) {
  for (auto& g : f.copies.groups)
    for (const PendingCopy& c : g) Land(c);
  for (const PendingCopy& c : f.copies.open) Land(c);
  f.copies.clear();
}

[[noreturn]] void Trampoline() {
  (*g_body)();
  FlushCopies(*g_current);  // copies never waited for still land before the kernel ends
  if (!g_current->wgmmas.empty() || !g_current->wg_shadow.empty()) {
    std::fprintf(stderr, "emu: thread %u ends with wgmma operations not waited for\n",
                 g_current->warp * 32 + g_current->lane);
    std::abort();
  }
  g_current->state = Fiber::kDone;
  SwitchContext(g_current->ctx, g_sched);
  std::abort();  // a finished fiber is never resumed
}

Fiber& Current(const char* what) {
  if (g_current == nullptr) {
    std::fprintf(stderr, "emu: %s outside a kernel\n", what);
    std::abort();
  }
  return *g_current;
}

// Deposits this lane's operands, waits until all lanes of the warp have, and returns the
// warp's deposits (indexed by lane).
const Deposit* WarpRendezvous(const Deposit& mine) {
  Fiber& f = Current("warp-collective instruction");
  if ((f.warp + 1) * kWarp > blockDim.x * blockDim.y * blockDim.z) {
    std::fprintf(stderr, "emu: warp-collective instruction in a partial warp\n");
    std::abort();
  }
  const unsigned slot = static_cast<unsigned>(f.collectives++ & 1);
  Deposit* warp = g_deposit[f.warp][slot];
  warp[f.lane] = mine;
  f.state = Fiber::kWarpBarrier;
  SwitchContext(f.ctx, g_sched);
  // Every lane against lane 0 (a lane that differs from it reports): the same verdict as
  // every pair, in 32 comparisons a warp instead of 1,024.
  if (warp[0].op != mine.op) {
    std::fprintf(stderr, "emu: warp %u: lanes %u and 0 execute different collectives (%d, %d)\n",
                 f.warp, f.lane, mine.op, warp[0].op);
    std::abort();
  }
  return warp;
}

void Reorder(std::vector<unsigned>& v, int phase) {
  if (g_order == 1 || (g_order == 2 && phase % 3 == 1)) std::reverse(v.begin(), v.end());
  if (g_order == 2 && phase % 3 == 2) std::shuffle(v.begin(), v.end(), g_rng);
}

float Bf16(uint32_t reg, int half) {
  return __uint_as_float(half ? (reg & 0xffff0000u) : (reg << 16));
}
// The tensor cores read a .tf32 operand register as its sign, exponent and 10 leading
// significand bits: the 13 low bits are ignored (the kernel rounds with cvt.rna first).
float Tf32(uint32_t reg) { return __uint_as_float(reg & 0xffffe000u); }

}  // namespace

void SetScheduleOrder(int order) { g_order = order; }

unsigned char* DynamicShared() { return g_dynamic_smem; }

void SetDynamicSharedBytes(size_t bytes) {
  if (bytes > kDynamicSharedBytes) {
    std::fprintf(stderr, "emu: %zu bytes of dynamic shared memory requested, limit %zu\n", bytes,
                 kDynamicSharedBytes);
    std::abort();
  }
  g_dynamic_bytes = bytes;
}

void SyncThreads() {
  if (g_current == nullptr) return;  // called outside a launch
  g_current->state = Fiber::kBlockBarrier;
  SwitchContext(g_current->ctx, g_sched);
}

// ---- cp.async -------------------------------------------------------------------------------
void CpAsync(void* dst, const void* src, int bytes, int src_bytes) {
  Fiber& f = Current("cp.async");
  const PendingCopy c{dst, src, bytes, src_bytes};
  if (g_copy_rng() & 1) Land(c); else f.copies.open.push_back(c);  // lands now, or at its wait
}
void CpAsyncCommit() { Current("cp.async.commit_group").copies.Commit(); }
void LandDeferred(size_t i);
void CpAsyncWait(int newest_pending) {
  Fiber& f = Current("cp.async.wait_group");
  f.copies.Wait(newest_pending, [](const std::vector<PendingCopy>& g) {
    for (const PendingCopy& c : g) Land(c);
  });
  // The copies before an arrive-on have landed by now too (and so the arrival is made).
  for (size_t i = g_deferred.size(); i-- > 0;)
    if (g_deferred[i].owner == &f && g_deferred[i].tx == 0) {
      LandDeferred(i);
      break;
    }
}

// ---- mbarrier, named barriers ----------------------------------------------------------------
// The object: bits 0-19 the arrivals still pending in the current phase, 20-39 the count it
// was initialised with, 40 the current phase's parity, 48-63 a tag (poisoned or never
// initialised shared memory has none).
namespace {
constexpr uint64_t kMbarTag = uint64_t(0xB4A7) << 48;
constexpr uint64_t kMbarField = (uint64_t(1) << 20) - 1;
bool MbarTagged(uint64_t v) { return (v & (uint64_t(0xffff) << 48)) == kMbarTag; }
uint64_t MbarValue(const uint64_t* bar, const char* what) {
  const uint64_t v = *bar;
  if (!MbarTagged(v)) {
    std::fprintf(stderr, "emu: %s on an mbarrier at %p that was never initialised\n", what,
                 static_cast<const void*>(bar));
    std::abort();
  }
  return v;
}
// Stores the barrier with `pending` arrivals left; with none left and no transaction bytes
// outstanding the phase completes, and the next one expects as many arrivals.
void StoreMbar(uint64_t* bar, uint64_t v, uint64_t pending) {
  const uint64_t expected = (v >> 20) & kMbarField;
  uint64_t phase = (v >> 40) & 1;
  auto tx = g_tx.find(bar);
  if (pending == 0 && (tx == g_tx.end() || tx->second == 0)) {
    phase ^= 1;
    pending = expected;
  }
  *bar = kMbarTag | (phase << 40) | (expected << 20) | pending;
  ++g_mbar_arrivals;
}
void ArriveOn(uint64_t* bar, const char* what) {
  const uint64_t v = MbarValue(bar, what);
  if ((v & kMbarField) == 0) {
    std::fprintf(stderr, "emu: %s on an mbarrier at %p whose arrivals are all made (its phase "
                 "waits for transaction bytes)\n", what, static_cast<void*>(bar));
    std::abort();
  }
  StoreMbar(bar, v, (v & kMbarField) - 1);
}
// `bytes` of a TMA copy have landed.
void CompleteTx(uint64_t* bar, int64_t bytes) {
  const uint64_t v = MbarValue(bar, "cp.async.bulk.tensor complete_tx");
  int64_t& tx = g_tx[bar];
  tx -= bytes;
  if (tx < 0) {
    std::fprintf(stderr, "emu: %lld more transaction bytes landed on the mbarrier at %p than "
                 "expect_tx announced\n", static_cast<long long>(-tx), static_cast<void*>(bar));
    std::abort();
  }
  StoreMbar(bar, v, v & kMbarField);
}
}  // namespace

// Lands deferred arrival i and every earlier one of its thread (a thread's cp.async copies
// before an arrive-on are all before the later ones), oldest first. A TMA copy lands alone:
// bulk copies complete in no order, among themselves or with the thread's cp.async.
void LandDeferred(size_t i) {
  const Fiber* owner = g_deferred[i].owner;
  const bool bulk = g_deferred[i].tx > 0;
  std::vector<DeferredArrive> mine;
  size_t kept = 0;
  for (size_t k = 0; k < g_deferred.size(); ++k) {
    if (bulk ? k == i
             : (k <= i && g_deferred[k].owner == owner && g_deferred[k].tx == 0)) {
      mine.push_back(std::move(g_deferred[k]));
    } else {
      if (kept != k) g_deferred[kept] = std::move(g_deferred[k]);  // (a self-move empties it)
      ++kept;
    }
  }
  g_deferred.resize(kept);
  for (DeferredArrive& d : mine) {
    for (const PendingCopy& c : d.copies) Land(c);
    if (d.tx > 0)
      CompleteTx(d.bar, d.tx);
    else
      ArriveOn(d.bar, "cp.async.mbarrier.arrive");
  }
}

void MbarInit(uint64_t* bar, unsigned count) {
  const uint64_t v = *bar;
  if (MbarTagged(v) && (v & kMbarField) != ((v >> 20) & kMbarField)) {
    std::fprintf(stderr, "emu: mbarrier at %p initialised again with arrivals pending\n",
                 static_cast<void*>(bar));
    std::abort();
  }
  if (count == 0 || count > kMbarField) {
    std::fprintf(stderr, "emu: mbarrier count %u\n", count);
    std::abort();
  }
  *bar = kMbarTag | (uint64_t(count) << 20) | count;
  g_tx.erase(bar);
}
void MbarArrive(uint64_t* bar) {
  Current("mbarrier.arrive");
  ArriveOn(bar, "mbarrier.arrive");
}
void MbarWait(uint64_t* bar, unsigned parity) {
  Fiber& f = Current("mbarrier.try_wait");
  while (((MbarValue(bar, "mbarrier.try_wait") >> 40) & 1) == (parity & 1)) {
    // Copies in flight land in any order between threads: one of them, sometimes.
    if (!g_deferred.empty() && (g_copy_rng() & 1)) {
      LandDeferred(g_copy_rng() % g_deferred.size());
      continue;
    }
    f.state = Fiber::kSpin;
    SwitchContext(f.ctx, g_sched);
  }
}
void CpAsyncMbarArrive(uint64_t* bar) {
  Fiber& f = Current("cp.async.mbarrier.arrive");
  MbarValue(bar, "cp.async.mbarrier.arrive");
  DeferredArrive d{&f, {}, bar};
  // Every copy this thread has in flight (the groups stay, emptied: wait_group still counts
  // them), then the arrival: at once sometimes, else later.
  for (auto& g : f.copies.groups) {
    d.copies.insert(d.copies.end(), g.begin(), g.end());
    g.clear();
  }
  d.copies.insert(d.copies.end(), f.copies.open.begin(), f.copies.open.end());
  f.copies.open.clear();
  g_deferred.push_back(std::move(d));
  if (g_copy_rng() % 4 == 0) LandDeferred(g_deferred.size() - 1);
}
void MbarArriveExpectTx(uint64_t* bar, unsigned bytes) {
  Current("mbarrier.arrive.expect_tx");
  MbarValue(bar, "mbarrier.arrive.expect_tx");
  g_tx[bar] += bytes;
  ArriveOn(bar, "mbarrier.arrive.expect_tx");
}
void TmaLoad(void* dst, const TmaMap* map, const int* coords, uint64_t* bar) {
  Fiber& f = Current("cp.async.bulk.tensor");
  MbarValue(bar, "cp.async.bulk.tensor");
  const uint32_t base = SharedAddress(dst);
  const uint32_t eb = map->elem_bytes, row_bytes = map->box[0] * eb;
  if (base % 128 != 0 || reinterpret_cast<uintptr_t>(map->base) % 16 != 0 ||
      row_bytes % 16 != 0 || (map->swizzle128 && row_bytes != 128) || map->rank < 1 ||
      map->rank > 5) {
    std::fprintf(stderr, "emu: cp.async.bulk.tensor: shared address %u (128-byte aligned?), "
                 "global %p (16?), box row of %u bytes (128 with the swizzle), rank %d\n", base,
                 map->base, row_bytes, map->rank);
    std::abort();
  }
  DeferredArrive d{&f, {}, bar, 0};
  int64_t co[5] = {0, 0, 0, 0, 0};
  uint32_t box[5] = {1, 1, 1, 1, 1};
  uint64_t dim[5] = {1, 1, 1, 1, 1};
  for (int i = 0; i < map->rank; ++i) {
    co[i] = coords[i];
    box[i] = map->box[i];
    dim[i] = map->dim[i];
  }
  auto inside = [&](int axis, int64_t i) { return i >= 0 && static_cast<uint64_t>(i) < dim[axis]; };
  const auto* src = static_cast<const unsigned char*>(map->base);
  uint32_t offset = 0;  // bytes of the box in its row-major order
  int64_t i[5];
  for (i[4] = 0; i[4] < box[4]; ++i[4])
    for (i[3] = 0; i[3] < box[3]; ++i[3])
      for (i[2] = 0; i[2] < box[2]; ++i[2])
        for (i[1] = 0; i[1] < box[1]; ++i[1]) {
          bool row = true;
          int64_t row_at = 0;  // bytes of the row's first element past its innermost index
          for (int a = 1; a < 5; ++a) {
            row = row && inside(a, co[a] + i[a]);
            if (a < map->rank) row_at += (co[a] + i[a]) * int64_t(map->stride[a - 1]);
          }
          for (uint32_t x = 0; x < box[0]; x += 16 / eb, offset += 16) {
            uint32_t addr = base + offset;
            if (map->swizzle128) addr ^= ((addr >> 7) & 7) << 4;
            unsigned char* to = static_cast<unsigned char*>(dst) + (addr - base);
            for (uint32_t e = 0; e < 16 / eb; ++e) {  // element by element: the tensor's edge
              const bool in = row && inside(0, co[0] + x + e);
              const unsigned char* from = in ? src + row_at + (co[0] + x + e) * eb : nullptr;
              d.copies.push_back(
                  {to + e * eb, from, static_cast<int>(eb), in ? static_cast<int>(eb) : 0});
            }
          }
        }
  d.tx = offset;
  g_deferred.push_back(std::move(d));
  if (g_copy_rng() % 4 == 0) LandDeferred(g_deferred.size() - 1);
}
void NamedBarrierSync(unsigned id, unsigned count) {
  Fiber& f = Current("bar.sync");
  if (id == 0 || id > 15 || count == 0 || count % kWarp != 0 ||
      count > blockDim.x * blockDim.y * blockDim.z) {
    std::fprintf(stderr, "emu: bar.sync %u, %u in a block of %u threads\n", id, count,
                 blockDim.x * blockDim.y * blockDim.z);
    std::abort();
  }
  f.named = id;
  f.named_count = count;
  f.state = Fiber::kNamedBarrier;
  SwitchContext(f.ctx, g_sched);
}

// ---- warp-collective matrix instructions ------------------------------------------------------
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 / mma.m16n8k8"). For lane l:
// group = l >> 2, tig = l % 4 (thread in group). A is 16 x K row-major, B is K x 8 column-major,
// C and D are 16 x 8.
//
// m16n8k16 .bf16 (each .b32 register holds two bf16, the lower-numbered element in bits 0-15):
//   A regs a[0..3] = elements a0..a7:  a0,a1: (group,     2*tig + {0,1})
//                                      a2,a3: (group + 8, 2*tig + {0,1})
//                                      a4,a5: (group,     2*tig + 8 + {0,1})
//                                      a6,a7: (group + 8, 2*tig + 8 + {0,1})
//   B regs b[0..1] = elements b0..b3:  b0,b1: (k = 2*tig + {0,1},     n = group)
//                                      b2,b3: (k = 2*tig + 8 + {0,1}, n = group)
// m16n8k8 .tf32 (one element per register):
//   A: a0: (group, tig)  a1: (group + 8, tig)  a2: (group, tig + 4)  a3: (group + 8, tig + 4)
//   B: b0: (k = tig, n = group)  b1: (k = tig + 4, n = group)
// C/D (.f32, both shapes): c0,c1: (group, 2*tig + {0,1})  c2,c3: (group + 8, 2*tig + {0,1})
//
// So lane l holds A(r, k) for bf16 in lane (r % 8) * 4 + (k % 8) / 2, register
// (r >= 8) + 2 * (k >= 8), half k % 2; for tf32 in lane (r % 8) * 4 + k % 4, register
// (r >= 8) + 2 * (k >= 4). B(k, n): bf16 lane n * 4 + (k % 8) / 2, register k >= 8, half
// k % 2; tf32 lane n * 4 + k % 4, register k >= 4. Every product of two bf16 (8-bit
// significands) or two tf32 (11-bit) values is exact in FP32; the products are added to c
// in FP32 in k order, as the tensor cores accumulate in (at least) FP32.
enum CollectiveOp { kOpMmaBf16 = 1, kOpMmaTf32 = 2, kOpLdMatrix = 16 };

namespace {
// Every lane's D = A B + C (lane l: rows group, group + 8, columns 2 tig, 2 tig + 1, from its
// own c, the products added in k order) from the warp's deposits w, A and B decoded once.
template <bool kBf16>
void MmaWarp(const Deposit* w, float (&out)[kWarp][4]) {
  constexpr int K = kBf16 ? 16 : 8;
  float a_full[16][K], b_full[8][K];  // A by row, B by column
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < K; ++k)
      a_full[r][k] = kBf16 ? Bf16(w[(r % 8) * 4 + (k % 8) / 2].a[(r >= 8) + 2 * (k >= 8)], k % 2)
                           : Tf32(w[(r % 8) * 4 + k % 4].a[(r >= 8) + 2 * (k >= 4)]);
  for (int n = 0; n < 8; ++n)
    for (int k = 0; k < K; ++k)
      b_full[n][k] = kBf16 ? Bf16(w[n * 4 + (k % 8) / 2].b[k >= 8], k % 2)
                           : Tf32(w[n * 4 + k % 4].b[k >= 4]);
  for (unsigned lane = 0; lane < kWarp; ++lane) {
    const unsigned group = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const float* a_row = a_full[group + (i >= 2 ? 8 : 0)];
      const float* b_col = b_full[2 * tig + (i & 1)];
      float acc = w[lane].c[i];
      for (int k = 0; k < K; ++k) acc += a_row[k] * b_col[k];
      out[lane][i] = acc;
    }
  }
}

template <bool kBf16>
void Mma(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  Deposit mine{};
  mine.op = kBf16 ? kOpMmaBf16 : kOpMmaTf32;
  for (int i = 0; i < 4; ++i) mine.a[i] = a[i], mine.c[i] = c[i];
  mine.b[0] = b[0];
  mine.b[1] = b[1];
  const Deposit* w = WarpRendezvous(mine);
  const Fiber& f = *g_current;
  const unsigned slot = static_cast<unsigned>((f.collectives - 1) & 1);
  const uint64_t key = (g_block_serial << 32) | (f.collectives & 0xffffffffu);
  float(&out)[kWarp][4] = g_mma_d[f.warp][slot];
  // The first lane to run computes every lane's D, decoding A and B once for the warp instead
  // of per lane: the emulator's tensor-core tests spent a third of their time in mma.
  if (g_mma_key[f.warp][slot] != key) {
    MmaWarp<kBf16>(w, out);
    g_mma_key[f.warp][slot] = key;
  }
  for (int i = 0; i < 4; ++i) d[i] = out[f.lane][i];
}
}  // namespace

void MmaBf16m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  Mma<true>(d, a, b, c);
}
void MmaTf32m16n8k8(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  Mma<false>(d, a, b, c);
}

// ldmatrix.m8n8.b16: matrix i (i < count) is 8 rows of 16 bytes whose addresses lanes
// 8i .. 8i+7 supply (16-byte aligned). Without .trans lane l receives in r[i] the elements
// (row l / 4, columns 2 * (l % 4) and 2 * (l % 4) + 1) of matrix i, lower column in bits
// 0-15; with .trans it receives (rows 2 * (l % 4) and 2 * (l % 4) + 1, column l / 4), i.e.
// the same positions of the transposed matrix. Reading 32-bit elements as pairs of b16 makes
// the non-transposed form deliver (row l / 4, 32-bit column l % 4): the tf32 fragments.
void LdMatrix(uint32_t* r, int count, bool trans, const void* row_address) {
  Deposit mine{};
  mine.op = kOpLdMatrix + count * 2 + (trans ? 1 : 0);
  mine.addr = row_address;
  const unsigned lane = Current("ldmatrix").lane;
  if (lane < 8u * static_cast<unsigned>(count) &&
      (reinterpret_cast<uintptr_t>(row_address) & 15) != 0) {
    std::fprintf(stderr, "emu: ldmatrix row address %p of lane %u is not 16-byte aligned\n",
                 row_address, lane);
    std::abort();
  }
  const Deposit* w = WarpRendezvous(mine);
  for (int i = 0; i < count; ++i) {
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t* row = static_cast<const uint16_t*>(w[8 * i + lane / 4].addr);
      lo = row[2 * (lane % 4)];
      hi = row[2 * (lane % 4) + 1];
    } else {
      lo = static_cast<const uint16_t*>(w[8 * i + 2 * (lane % 4)].addr)[lane / 4];
      hi = static_cast<const uint16_t*>(w[8 * i + 2 * (lane % 4) + 1].addr)[lane / 4];
    }
    r[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
}

// ---- wgmma ------------------------------------------------------------------------------------
// Operand addresses (PTX ISA, "Shared Memory Matrix Layout", canonical layouts in CuTe
// notation, T = 8 bf16 per 16 bytes): 128-byte swizzle, K-major ((8,m),(T,2k)):((8T,SBO),(1,T))
// and MN-major ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)); then the swizzle XORs address bits 4-6
// (the 16-byte chunk in a 128-byte line) with bits 7-9 (the line in a 1024-byte block).
// Accumulators (".m64nNk16 register fragment" of the ISA): thread t of warp w of the warpgroup
// holds in d[4i + 2h + e] row 16w + t / 4 + 8h, column 8i + 2 (t % 4) + e.
namespace {
uint32_t WgmmaAddress(uint64_t desc, bool mn_major, int mn, int k) {
  const uint32_t start = static_cast<uint32_t>(desc & 0x3fff) << 4;
  const uint32_t lbo = static_cast<uint32_t>((desc >> 16) & 0x3fff) << 4;
  const uint32_t sbo = static_cast<uint32_t>((desc >> 32) & 0x3fff) << 4;
  const int base_offset = static_cast<int>((desc >> 49) & 7), layout = static_cast<int>(desc >> 62);
  if (layout != 1 || base_offset != 0) {
    std::fprintf(stderr, "emu: wgmma descriptor %#llx: only the 128-byte swizzle with base offset "
                 "0 is emulated\n", static_cast<unsigned long long>(desc));
    std::abort();
  }
  uint32_t a = mn_major ? start + (mn % 64) * 2 + (mn / 64) * lbo + (k % 8) * 128 + (k / 8) * sbo
                        : start + (mn % 8) * 128 + (mn / 8) * sbo + k * 2;
  a ^= ((a >> 7) & 7) << 4;
  if (a + 2 > g_dynamic_bytes) {
    std::fprintf(stderr, "emu: wgmma reads shared byte %u beyond the %zu requested\n", a,
                 g_dynamic_bytes);
    std::abort();
  }
  return a;
}
float SharedBf16(uint32_t addr) {
  uint16_t v;
  std::memcpy(&v, g_dynamic_smem + addr, 2);
  return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
// Computes op into `out` (its n / 2 accumulators) from shared memory as it is now, starting
// from `in`.
void RunWgmma(const Fiber& f, const PendingWgmma& op, const float* in, float* out) {
  const int w = static_cast<int>(f.warp % 4), t = static_cast<int>(f.lane);
  for (int i = 0; i < op.n / 2; ++i) {
    const int row = 16 * w + t / 4 + 8 * ((i / 2) % 2);
    const int col = 8 * (i / 4) + 2 * (t % 4) + i % 2;
    float acc = in[i];
    for (int k = 0; k < 16; ++k)
      acc += SharedBf16(WgmmaAddress(op.desc_a, false, row, k)) *
             SharedBf16(WgmmaAddress(op.desc_b, op.trans_b, col, k));
    out[i] = acc;
  }
}
}  // namespace

uint32_t SharedAddress(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (b < g_dynamic_smem || b >= g_dynamic_smem + kDynamicSharedBytes) {
    std::fprintf(stderr, "emu: %p is not in the dynamic shared memory\n", p);
    std::abort();
  }
  return static_cast<uint32_t>(b - g_dynamic_smem);
}

void WgmmaBf16(float* d, int n, uint64_t desc_a, uint64_t desc_b, bool trans_b) {
  Fiber& f = Current("wgmma");
  if (n % 8 != 0 || n < 8 || n > 256 || blockDim.x * blockDim.y * blockDim.z < (f.warp / 4 + 1) * 128) {
    std::fprintf(stderr, "emu: wgmma n = %d in a block of %u threads\n", n,
                 blockDim.x * blockDim.y * blockDim.z);
    std::abort();
  }
  PendingWgmma op{};
  op.d = d;
  op.n = n;
  op.desc_a = desc_a;
  op.desc_b = desc_b;
  op.trans_b = trans_b;
  op.chained = f.wgmmas.Any([&](const PendingWgmma& o) { return o.d == d; });
  if (!op.chained) std::memcpy(op.c_in, d, sizeof(float) * static_cast<size_t>(n / 2));
  for (int i = 0; i < n / 2; ++i) d[i] = std::nanf("");  // undefined until retired
  f.wgmmas.open.push_back(op);
}
void WgmmaCommit() { Current("wgmma.commit_group").wgmmas.Commit(); }
void WgmmaWait(int newest_pending) {
  Fiber& f = Current("wgmma.wait_group");
  f.wgmmas.Wait(newest_pending, [&](const std::vector<PendingWgmma>& group) {
    for (const PendingWgmma& op : group) {
      auto it = std::find_if(f.wg_shadow.begin(), f.wg_shadow.end(),
                             [&](const WgmmaShadow& sh) { return sh.d == op.d; });
      if (it == f.wg_shadow.end())
        it = f.wg_shadow.insert(f.wg_shadow.end(), WgmmaShadow{op.d, op.n, {}});
      RunWgmma(f, op, op.chained ? it->v : op.c_in, it->v);
    }
    // Arrays with nothing left in flight get their values.
    for (auto it = f.wg_shadow.begin(); it != f.wg_shadow.end();) {
      if (f.wgmmas.Any([&](const PendingWgmma& o) { return o.d == it->d; })) {
        ++it;
        continue;
      }
      std::memcpy(it->d, it->v, sizeof(float) * static_cast<size_t>(it->n / 2));
      it = f.wg_shadow.erase(it);
    }
  });
}

// ---- the scheduler ------------------------------------------------------------------------------
// One block at a time. A barrier phase starts with every thread at __syncthreads ready, in
// forward, reverse or shuffled order; a thread runs until it reaches __syncthreads (it then
// waits for the next phase), a warp-collective instruction (it waits until the other lanes
// of its warp arrive, then the warp's lanes are queued again, in the phase's order), a named
// barrier (likewise, once `count` threads are there), an mbarrier wait that is not complete
// (it is queued again behind the others), or its end. Threads that only spin on mbarriers,
// with nothing else left to run and no arrival made in a while, are a deadlock.
void Launch(dim3 grid, dim3 block, const std::function<void()>& body) {
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024) {
    std::fprintf(stderr, "emu: bad block size %u\n", nt);
    std::abort();
  }
  gridDim = grid;
  blockDim = block;
  g_body = &body;
  const unsigned nwarps = (nt + kWarp - 1) / kWarp;
  std::vector<Fiber> fibers(nt);
  while (g_stacks.size() < nt) g_stacks.emplace_back(new char[kStackBytes]);
  for (unsigned t = 0; t < nt; ++t) fibers[t].stack = g_stacks[t].get();
  std::vector<unsigned> order, lanes;
  std::vector<unsigned> warp_waiting(nwarps);
  std::vector<std::vector<unsigned>> named_waiting(16);
  std::deque<unsigned> ready;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blockIdx = uint3{bx, by, bz};
        ++g_block_serial;
        if (g_dynamic_bytes > 0) std::memset(g_dynamic_smem, 0xff, g_dynamic_bytes);
        for (unsigned t = 0; t < nt; ++t) {
          Fiber& f = fibers[t];
          f.tid = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
          f.warp = t / kWarp;
          f.lane = t % kWarp;
          f.state = Fiber::kReady;
          f.collectives = 0;
          f.copies.clear();
          f.wgmmas.clear();
          f.wg_shadow.clear();
          MakeContext(f.ctx, f.stack, kStackBytes, Trampoline);
        }
        for (unsigned w = 0; w < nwarps; ++w) warp_waiting[w] = 0;
        int phase = 0;
        unsigned idle_spins = 0;
        uint64_t arrivals_seen = g_mbar_arrivals;
        while (true) {
          order.clear();
          for (unsigned t = 0; t < nt; ++t)
            if (fibers[t].state == Fiber::kReady || fibers[t].state == Fiber::kBlockBarrier)
              order.push_back(t);
          Reorder(order, phase);
          ready.assign(order.begin(), order.end());
          unsigned finished = 0, at_barrier = 0;
          while (!ready.empty()) {
            const unsigned t = ready.front();
            ready.pop_front();
            Fiber& f = fibers[t];
            f.state = Fiber::kReady;
            threadIdx = f.tid;
            g_current = &f;
            SwitchContext(g_sched, f.ctx);
            g_current = nullptr;
            if (f.state == Fiber::kSpin) {
              if (g_mbar_arrivals != arrivals_seen || !g_deferred.empty()) {
                idle_spins = 0;
                arrivals_seen = g_mbar_arrivals;
              } else if (++idle_spins > 4 * nt) {
                std::fprintf(stderr, "emu: deadlock: threads wait on mbarrier phases that no "
                             "thread will complete (thread %u, block %u,%u,%u)\n", t, bx, by, bz);
                std::abort();
              }
              ready.push_back(t);
              continue;
            }
            idle_spins = 0;
            if (f.state == Fiber::kDone) {
              ++finished;
            } else if (f.state == Fiber::kNamedBarrier) {
              std::vector<unsigned>& wait = named_waiting[f.named];
              if (!wait.empty() && fibers[wait[0]].named_count != f.named_count) {
                std::fprintf(stderr, "emu: bar.sync %u with thread counts %u and %u\n", f.named,
                             fibers[wait[0]].named_count, f.named_count);
                std::abort();
              }
              wait.push_back(t);
              if (wait.size() == f.named_count) {
                Reorder(wait, phase);
                for (unsigned l : wait) {
                  fibers[l].state = Fiber::kReady;
                  ready.push_back(l);
                }
                wait.clear();
              }
            } else if (f.state == Fiber::kBlockBarrier) {
              ++at_barrier;
            } else if (f.state == Fiber::kWarpBarrier) {
              const unsigned w = f.warp;
              const unsigned size = std::min<unsigned>(kWarp, nt - w * kWarp);
              if (++warp_waiting[w] == size) {
                warp_waiting[w] = 0;
                lanes.clear();
                for (unsigned l = 0; l < size; ++l) lanes.push_back(w * kWarp + l);
                Reorder(lanes, phase);
                for (unsigned l : lanes) ready.push_back(l);
              }
            }
          }
          for (unsigned id = 1; id < 16; ++id)
            if (!named_waiting[id].empty()) {
              std::fprintf(stderr, "emu: %zu threads wait at bar.sync %u, %u that the others do "
                           "not reach\n", named_waiting[id].size(), id,
                           fibers[named_waiting[id][0]].named_count);
              std::abort();
            }
          for (unsigned w = 0; w < nwarps; ++w)
            if (warp_waiting[w] != 0) {
              std::fprintf(stderr,
                           "emu: %u lanes of warp %u wait at a warp-collective instruction that "
                           "the warp's other lanes do not reach\n", warp_waiting[w], w);
              std::abort();
            }
          if (at_barrier == 0) break;
          if (finished != 0) {
            std::fprintf(stderr, "emu: %u threads left the kernel while %u wait at a barrier\n",
                         finished, at_barrier);
            std::abort();
          }
          ++phase;
        }
        // Arrivals never waited for: their copies land before the next block.
        while (!g_deferred.empty()) LandDeferred(g_deferred.size() - 1);
        g_tx.clear();
      }
  g_body = nullptr;
  g_dynamic_bytes = 0;
}

}  // namespace colonnade::emu
