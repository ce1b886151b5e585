// 16-byte chunks of an epilogue's output (eight bf16 or four float values) as they leave
// shared memory: the ReLU mask, the add into a gradient and the per-chunk sums that
// wgmma.cu's staged epilogue (StoreTileStaged) applies on the way to global memory.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/port.h"
#include "cuda/tc_port.h"

namespace colonnade::cuda::conv {

#if defined(COLONNADE_CUDA_EMULATE) || defined(__CUDACC__)

// A 16-byte chunk of TOut values as words: word i holds elements 2i, 2i + 1 (bf16) or
// element i (float). Bit operations on the words, not TOut pointers into the chunk: those
// alias a uint4 (undefined, and the emulator's optimised build read stale values).
template <class TOut>
__device__ __forceinline__ uint4 MaskChunk(uint4 v, const uint4& m) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
  const uint32_t mw[4] = {m.x, m.y, m.z, m.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      if (!(__uint_as_float(mw[i]) > 0.0f)) w[i] = 0u;
    } else {
      const uint32_t lo =
          tc::Bf16ToFloat(static_cast<uint16_t>(mw[i] & 0xffffu)) > 0.0f ? 0xffffu : 0u;
      const uint32_t hi =
          tc::Bf16ToFloat(static_cast<uint16_t>(mw[i] >> 16)) > 0.0f ? 0xffff0000u : 0u;
      w[i] &= lo | hi;
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// old + v per element (TcGemmParams::add): Add's float sum of the stored values, rounded to
// TOut (v holds values rounded to TOut already, as the tile does).
template <class TOut>
__device__ __forceinline__ uint4 AddChunk(const uint4& old, const uint4& v) {
  const uint32_t ow[4] = {old.x, old.y, old.z, old.w};
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      w[i] = __float_as_uint(__uint_as_float(ow[i]) + __uint_as_float(w[i]));
    } else {
      const float lo = tc::Bf16ToFloat(static_cast<uint16_t>(ow[i] & 0xffffu)) +
                       tc::Bf16ToFloat(static_cast<uint16_t>(w[i] & 0xffffu));
      const float hi = tc::Bf16ToFloat(static_cast<uint16_t>(ow[i] >> 16)) +
                       tc::Bf16ToFloat(static_cast<uint16_t>(w[i] >> 16));
      w[i] = tc::PackBf16x2(lo, hi);
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}
// The sum and sum of squares of a chunk's values (FP32, in element order).
template <class TOut>
__device__ __forceinline__ void ChunkSums(const uint4& v, float& s, float& s2) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  s = s2 = 0.0f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same<TOut, float>::value) {
      const float x = __uint_as_float(w[i]);
      s += x;
      s2 += x * x;
    } else {
      const float lo = tc::Bf16ToFloat(static_cast<uint16_t>(w[i] & 0xffffu));
      const float hi = tc::Bf16ToFloat(static_cast<uint16_t>(w[i] >> 16));
      s += lo;
      s2 += lo * lo;
      s += hi;
      s2 += hi * hi;
    }
  }
}

#endif  // COLONNADE_CUDA_EMULATE || __CUDACC__

}  // namespace colonnade::cuda::conv
