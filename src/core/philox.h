// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// Every random draw in Colonnade is a pure function of a key and a counter, never of a
// stateful stream, so the numbers do not depend on how work is split over threads, GPUs
// or ranks (DESIGN.md, "Randomness"). Header-only and usable from CUDA device code.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define COLONNADE_HD __host__ __device__ __forceinline__
#else
#define COLONNADE_HD inline
#endif

namespace colonnade {

struct Philox4 {
  uint32_t v[4];
};

COLONNADE_HD void MulHiLo32(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// One block of four 32-bit random words for (key, counter).
COLONNADE_HD Philox4 Philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo32(0xD2511F53u, c0, &hi0, &lo0);
    MulHiLo32(0xCD9E8D57u, c2, &hi1, &lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  Philox4 r;
  r.v[0] = c0;
  r.v[1] = c1;
  r.v[2] = c2;
  r.v[3] = c3;
  return r;
}

// Uniform in [0, 1) with 24 bits, exactly representable in float.
COLONNADE_HD float UniformFromBits(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Uniform [0, 1) draw number `index` of stream (key, stream).
COLONNADE_HD float PhiloxUniform(uint64_t key, uint64_t stream, uint64_t index) {
  return UniformFromBits(Philox4x32(key, stream, index).v[0]);
}

// Standard normal draw (Box-Muller on two words of one block), double precision inside
// so the CPU and GPU agree to the last bit where both round the same way.
COLONNADE_HD float PhiloxNormal(uint64_t key, uint64_t stream, uint64_t index) {
  Philox4 r = Philox4x32(key, stream, index);
  double u1 = (static_cast<double>(r.v[0]) + 1.0) * (1.0 / 4294967297.0);  // (0, 1)
  double u2 = static_cast<double>(r.v[1]) * (1.0 / 4294967296.0);
  return static_cast<float>(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Mixes values into a 64-bit key (SplitMix64 finaliser), e.g. (seed, purpose, layer).
COLONNADE_HD uint64_t MixKey(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Purposes of random streams, mixed into keys so that streams never collide.
enum class RandomPurpose : uint64_t {
  kInit = 1,
  kDropout = 2,
  kDataOrder = 3,
  kCrop = 4,
  kMirror = 5,
  kLighting = 6,
  kSynthetic = 7,
  kResizedCrop = 8,  // the random-resized crop's box (data/augment.h)
  kCutout = 9,       // the cutout square's centre
};

inline uint64_t StringHash(const char* s) {  // FNV-1a, stable across platforms
  uint64_t h = 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 1099511628211ull;
  return h;
}

}  // namespace colonnade
