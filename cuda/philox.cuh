// Philox4x32-10 (Salmon et al. 2011), bit-identical to src/rng/philox.ts and
// shaders/lib/philox.wgsl: counter c, key k -> four u32 words. mdlm keys every draw by
// key = seed (64 bits), counter = [index, step, rank, purpose].
#pragma once

#include <cstdint>

namespace mdlm {

__host__ __device__ __forceinline__ uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
}

__host__ __device__ __forceinline__ uint4 philox4x32(uint4 c, uint2 k) {
#pragma unroll
  for (int r = 0; r < 10; r++) {
    if (r > 0) {
      k.x += 0x9e3779b9u;
      k.y += 0xbb67ae85u;
    }
    const uint32_t hi0 = philox_mulhi(0xd2511f53u, c.x), lo0 = 0xd2511f53u * c.x;
    const uint32_t hi1 = philox_mulhi(0xcd9e8d57u, c.z), lo1 = 0xcd9e8d57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

// A u32 to a float in [0, 1) with 24 random bits: exact in f32, as uniform01 in philox.ts.
__host__ __device__ __forceinline__ float uniform01(uint32_t u) { return static_cast<float>(u >> 8) * 5.9604644775390625e-8f; }

// The two key words of a seed (a non-negative integer up to 2^53), as seedKey in philox.ts.
inline uint2 seed_key(int64_t seed) { return make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)); }

// RngPurpose.mask in philox.ts.
constexpr uint32_t kRngPurposeMask = 3;

}  // namespace mdlm
