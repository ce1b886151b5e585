// Tensor-core primitives of the mixed-precision convolutions (conv/mma.cu, wgmma.cu): bf16 and
// tf32 conversions, ldmatrix, mma.sync and shared-memory addressing. On the GPU they are
// one PTX instruction each (sm_80+); on the CPU emulator (src/cuda/emu) the warp-collective
// ones are rendezvous of the warp's 32 fibers that compute every lane's fragment with the
// PTX layouts (documented in emu_runtime.cc), so a kernel that feeds the wrong lane the
// wrong element fails its tests on the emulator as it would on the GPU.
#pragma once

#include <cstdint>

#include "cuda/port.h"

#if !defined(COLONNADE_CUDA_EMULATE)
#include <cuda.h>  // CUtensorMap (a type only: the driver's encoder is fetched at run time)
#include <cuda_bf16.h>
#endif

namespace colonnade::cuda::tc {

// A TMA tensor map (the TMA-fed wgmma kernels' operands): the driver's opaque 128-byte object
// on the GPU (made by MakeTmaMap in conv/wgmma.cu), the emulator's plain description there.
// A kernel reads it from its parameters (COLONNADE_GRID_CONSTANT), never from a copy.
#if defined(COLONNADE_CUDA_EMULATE)
using TmaMap = colonnade::emu::TmaMap;
#else
using TmaMap = CUtensorMap;
#endif

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)

// float -> bf16 bits, round to nearest even (cvt.rn.bf16.f32).
__device__ __forceinline__ uint16_t FloatToBf16(float v) {
#if defined(COLONNADE_CUDA_EMULATE)
  return EmuFloatToBf16Bits(v);
#else
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
#endif
}

// Two floats -> two bf16 in one register, `lo` in bits 0-15 (the lower-numbered element of
// an mma fragment register), both rounded to nearest even.
__device__ __forceinline__ uint32_t PackBf16x2(float lo, float hi) {
#if defined(COLONNADE_CUDA_EMULATE)
  return static_cast<uint32_t>(EmuFloatToBf16Bits(lo)) |
         (static_cast<uint32_t>(EmuFloatToBf16Bits(hi)) << 16);
#else
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#endif
}

__device__ __forceinline__ float Bf16ToFloat(uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

// float -> tf32 (sign, 8 exponent bits, 10 significand bits, the low 13 bits zero), rounded
// to nearest with ties away from zero: cvt.rna.tf32.f32. Inf and NaN pass unchanged.
__device__ __forceinline__ uint32_t Tf32Round(float v) {
#if defined(COLONNADE_CUDA_EMULATE)
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
#else
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(v));
  return r;
#endif
}

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16: four 8x8 b16 matrices; lane l gives
// the address of row l % 8 of matrix l / 8 (16-byte aligned) and receives element pair
// (l / 4, 2 * (l % 4) + {0, 1}) of each matrix in r[i] (.trans: pair (2 * (l % 4) + {0, 1},
// l / 4)).
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem_row) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::LdMatrix(r, 4, false, smem_row);
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem_row) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::LdMatrix(r, 4, true, smem_row);
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
#endif
}

// d += a * b on the tensor cores, FP32 accumulators (fragment layouts: emu_runtime.cc).
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MmaBf16m16n8k16(d, a, b, d);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
__device__ __forceinline__ void MmaTf32(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MmaTf32m16n8k8(d, a, b, d);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// ---- wgmma (sm_90a): warpgroup matrix multiply from shared-memory descriptors ------------
// Used by the wgmma kernels (conv/wgmma.cu). A warpgroup is 4 consecutive warps starting at
// a warp index divisible by 4; every wgmma instruction is executed by all its 128 threads.
// On the GPU these are PTX instructions that exist only in sm_90a code (the host checks
// with WgmmaAvailable() before launching such a kernel); on the emulator
// (src/cuda/emu/emu_runtime.cc) a wgmma is computed per thread from shared memory at the
// wgmma.wait_group that retires it, and its accumulators read NaN until then, so a missing
// wait, or a stage refilled while a wgmma still reads it, gives wrong results there as on
// the GPU.

// The shared-memory address (the 18-bit offset in the block's shared window) of p.
__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
#if defined(COLONNADE_CUDA_EMULATE)
  return colonnade::emu::SharedAddress(p);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// A wgmma matrix descriptor for a 128-byte-swizzled operand (PTX ISA, "Matrix Descriptor
// Format"): bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4, 32-45
// stride-dimension byte offset >> 4, 49-51 base offset (0: the swizzle pattern starts at a
// 1024-byte boundary), 62-63 layout (1 = 128-byte swizzle).
__device__ __forceinline__ uint64_t SmemDesc128B(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((addr & 0x3ffffu) >> 4) |
         (static_cast<uint64_t>((lbo & 0x3ffffu) >> 4) << 16) |
         (static_cast<uint64_t>((sbo & 0x3ffffu) >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

// fence.proxy.async.shared::cta: this thread's ordinary (generic-proxy) writes to shared
// memory, cp.async's included, become visible to the async proxy that wgmma reads through.
// Each writing thread issues it before the barrier that publishes the data.
__device__ __forceinline__ void FenceProxyAsync() {
#if !defined(COLONNADE_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// wgmma.fence: orders earlier accesses to the accumulator registers before the next wgmma.
__device__ __forceinline__ void WgmmaFence() {
#if !defined(COLONNADE_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.commit_group: closes a group of this warpgroup's wgmma operations.
__device__ __forceinline__ void WgmmaCommit() {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::WgmmaCommit();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// wgmma.wait_group N: waits until at most N groups are still in flight.
template <int N>
__device__ __forceinline__ void WgmmaWait() {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::WgmmaWait(N);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// The compiler does not know that wgmma.wait_group completes the accumulators: this empty
// statement "rewrites" each one after the wait, so no read is scheduled before it.
template <int R>
__device__ __forceinline__ void WgmmaFenceOperands(float (&d)[R]) {
#if !defined(COLONNADE_CUDA_EMULATE)
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

// ---- the warp-specialized pipeline (sm_90a): mbarriers, named barriers, register split ----
// A producer warpgroup's cp.async copies complete a stage's "full" mbarrier; the consumer
// warpgroups wait on it, multiply, and arrive on the stage's "empty" mbarrier, which the
// producer waits on before refilling it (conv/wgmma.cu). On the emulator each is a call
// (emu_runtime.h says what it checks).

// mbarrier.init.shared::cta.b64: a barrier whose phases complete after `count` arrivals.
__device__ __forceinline__ void MbarInit(uint64_t* bar, unsigned count) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MbarInit(bar, count);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(SmemAddress(bar)), "r"(count)
               : "memory");
#else
  __trap();
#endif
}
// mbarrier.arrive.shared::cta.b64: one arrival (release: this thread's earlier accesses,
// the reads of its retired wgmma included, happen before the phase completes).
__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MbarArrive(bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(SmemAddress(bar)) : "memory");
#else
  __trap();
#endif
}
#if !defined(COLONNADE_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ bool MbarTryWait(uint32_t addr, unsigned parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(addr), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
#endif
// How long a wait on an mbarrier may take before the kernel gives up (a kernel stuck on a
// phase that never completes would otherwise hang the process, and a training job with it).
constexpr uint64_t kMbarWaitLimitNs = uint64_t(10) * 1000 * 1000 * 1000;
// Waits until the phase of parity `parity` (0 for the first) of the barrier has completed
// (mbarrier.try_wait.parity in a loop; acquire). After kMbarWaitLimitNs it traps: the launch
// fails with an error (the next CUDA call reports it) instead of hanging the job. It prints
// nothing: a printf is a function call, and a call anywhere in a kernel that issues wgmma
// makes ptxas serialize every wgmma of that kernel (warning C7510: "wgmma pipeline crossing
// function boundary"); the warp-specialized kernels before 2026-12-06 ran so.
__device__ __forceinline__ void MbarWait(uint64_t* bar, unsigned parity) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MbarWait(bar, parity);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const uint32_t a = SmemAddress(bar);
  if (MbarTryWait(a, parity)) return;
  const uint64_t t0 = GlobalTimerNs();
  while (!MbarTryWait(a, parity))
    if (GlobalTimerNs() - t0 > kMbarWaitLimitNs) __trap();
#else
  __trap();
#endif
}
// cp.async.mbarrier.arrive.noinc.shared::cta.b64: an arrival made when all of this
// thread's earlier cp.async copies have landed (counted in the barrier's init count).
__device__ __forceinline__ void CpAsyncMbarArrive(uint64_t* bar) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::CpAsyncMbarArrive(bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(SmemAddress(bar))
               : "memory");
#else
  __trap();
#endif
}
// mbarrier.arrive.expect_tx.shared::cta.b64: the current phase also waits for `bytes`
// transaction bytes (the TMA copies that complete on it), then this thread's arrival.
__device__ __forceinline__ void MbarArriveExpectTx(uint64_t* bar, unsigned bytes) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::MbarArriveExpectTx(bar, bytes);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(SmemAddress(bar)),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}
// cp.async.bulk.tensor.3d / .5d (TMA): the box of `map` at coordinates (c0, c1, ...),
// innermost first, into shared memory at dst (elements outside the tensor read as zero; the
// map's swizzle applied by address), completing its bytes on `bar`. One thread issues it; the
// copy is asynchronous and needs no fence before a wgmma reads it (both are the async proxy).
__device__ __forceinline__ void TmaLoad3D(void* dst, const TmaMap* map, int c0, int c1, int c2,
                                          uint64_t* bar) {
#if defined(COLONNADE_CUDA_EMULATE)
  const int c[3] = {c0, c1, c2};
  colonnade::emu::TmaLoad(dst, map, c, bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4}], [%5];\n" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(SmemAddress(bar))
      : "memory");
#else
  __trap();
#endif
}
__device__ __forceinline__ void TmaLoad5D(void* dst, const TmaMap* map, int c0, int c1, int c2,
                                          int c3, int c4, uint64_t* bar) {
#if defined(COLONNADE_CUDA_EMULATE)
  const int c[5] = {c0, c1, c2, c3, c4};
  colonnade::emu::TmaLoad(dst, map, c, bar);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
      "[%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(SmemAddress(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4),
      "r"(SmemAddress(bar))
      : "memory");
#else
  __trap();
#endif
}
// bar.sync id, count: a barrier of `count` threads (whole warps) on named barrier id > 0.
template <int kId, int kCount>
__device__ __forceinline__ void NamedBarrierSync() {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::NamedBarrierSync(kId, kCount);
#else
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kCount) : "memory");
#endif
}
// setmaxnreg.{inc,dec}.sync.aligned.u32 N: this warpgroup's registers per thread become N
// (the producer gives some back, the consumers take them). No-op on the emulator.
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsInc() {
#if !defined(COLONNADE_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void SetMaxRegsDec() {
#if !defined(COLONNADE_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16, scale-d = 1 (d += A * B), A 64 x 16
// K-major (trans-a 0), B 16 x N MN-major (kTransB = 1: N contiguous) or K-major (0), both
// through descriptors. Accumulators of thread t of warp w (of the warpgroup): d[4i + 2h + e] is row
// 16w + t / 4 + 8h, column 8i + 2 (t % 4) + e (the m16n8 layout of mma.sync, repeated
// along N).
template <int kTransB>
__device__ __forceinline__ void WgmmaBf16N128(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::WgmmaBf16(d, 128, desc_a, desc_b, kTransB != 0);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransB));
#else
  __trap();  // not built for sm_90a: the host never launches a wgmma kernel then
#endif
}

template <int kTransB>
__device__ __forceinline__ void WgmmaBf16N256(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
#if defined(COLONNADE_CUDA_EMULATE)
  colonnade::emu::WgmmaBf16(d, 256, desc_a, desc_b, kTransB != 0);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, %131;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(kTransB));
#else
  __trap();  // not built for sm_90a: the host never launches a wgmma kernel then
#endif
}

#endif  // COLONNADE_CUDA_EMULATE || __CUDACC__

}  // namespace colonnade::cuda::tc
