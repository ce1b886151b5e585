// What the CPU references of the op families (core/ops/*.cc) share with cpu_ops.cc, where the
// thread pool and the per-thread scratch memory live (see cpu_ops.cc's header for the rules:
// every parallel loop writes disjoint outputs with one fixed formula per element, so results do
// not depend on the thread count).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>

namespace colonnade::cpu {

// Calls fn(begin, end) on a partition of [0, n) into at most CpuThreads() contiguous ranges.
// `cost` is a rough per-item cost in element operations, used only to decide whether
// splitting is worth it. Runs inline when nested inside another ParallelFor, when another
// thread is using the pool, or when the work is small.
void ParallelFor(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn);

// Per-thread scratch memory that grows and is kept, so that steady-state training does
// not pay for page faults on every call. Separate slots for buffers that are live at the
// same time on one thread (the caller of a conv holds kCol while it also runs pool tasks
// that use kTask).
enum ScratchSlot { kScratchCol = 0, kScratchTask = 1, kScratchSlots = 2 };
float* Scratch(ScratchSlot slot, int64_t floats);

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

}  // namespace colonnade::cpu
