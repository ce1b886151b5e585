// Tensor-core primitives of the mixed-precision convolutions (conv_tc_kernels.cu): bf16 and
// tf32 conversions, ldmatrix, mma.sync and shared-memory addressing. On the GPU they are
// one PTX instruction each (sm_80+); on the CPU emulator (src/cuda/emu) the warp-collective
// ones are rendezvous of the warp's 32 fibers that compute every lane's fragment with the
// PTX layouts (documented in emu_runtime.cc), so a kernel that feeds the wrong lane the
// wrong element fails its tests on the emulator as it would on the GPU.
#pragma once

#include <cstdint>

#include "cuda/port.h"

#if !defined(COLONNADE_CUDA_EMULATE)
#include <cuda_bf16.h>
#endif

namespace colonnade::cuda::tc {

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

#endif  // COLONNADE_CUDA_EMULATE || __CUDACC__

}  // namespace colonnade::cuda::tc
