// Bit-exact conversions between f32 and the narrow float formats, twins of src/convert.ts (the
// single definition every backend is held to): round to nearest even on the target grid, NaN and
// overflow handled exactly as there. fp8 follows the OCP 8-bit spec: E4M3 saturates to ±448 and
// has NaN but no infinity; E5M2 is IEEE-like. Integer arithmetic only, so host and device agree
// and no intrinsic's NaN or saturation convention leaks in.
#pragma once

#include <cstdint>

namespace mdlm {

__host__ __device__ __forceinline__ uint32_t f32_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  __builtin_memcpy(&b, &x, 4);
  return b;
#endif
}

__host__ __device__ __forceinline__ float bits_f32(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  __builtin_memcpy(&x, &b, 4);
  return x;
#endif
}

__host__ __device__ __forceinline__ int count_leading_zeros(uint32_t v) {
#ifdef __CUDA_ARCH__
  return __clz(static_cast<int>(v));
#else
  return __builtin_clz(v);
#endif
}

// JavaScript's NaN as an f32 (what convert.ts's decoders give for every NaN code).
constexpr uint32_t kCanonicalNaN = 0x7fc00000u;

__host__ __device__ __forceinline__ uint16_t f32_to_bf16(float x) {
  const uint32_t b = f32_bits(x);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x7fffffu) != 0) return static_cast<uint16_t>((b >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

__host__ __device__ __forceinline__ float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

// A float format with E exponent and M mantissa bits (M <= 10), as encodeMini/decodeMini in
// src/convert.ts. MAX_CODE is the unsigned code of the largest finite value; SATURATE clamps
// overflow to it (E4M3) instead of giving infinity.
template <int E, int M, bool SATURATE, uint32_t MAX_CODE>
struct MiniFloat {
  static constexpr uint32_t kSign = 1u << (E + M);
  static constexpr uint32_t kInfinity = ((1u << E) - 1u) << M;
  static constexpr int kBias = (1 << (E - 1)) - 1;

  __host__ __device__ static uint32_t encode(float x) {
    const uint32_t b = f32_bits(x);
    const uint32_t ef = (b >> 23) & 0xffu;
    const uint32_t mf = b & 0x7fffffu;
    if (ef == 0xffu && mf != 0) return SATURATE ? kSign - 1u : kInfinity | (1u << (M - 1));
    const uint32_t sign = (b >> 31) ? kSign : 0u;
    if (ef == 0xffu) return sign | (SATURATE ? MAX_CODE : kInfinity);
    // |x| = sig · 2^(e2); the target's exponent for it is exp (clamped to the subnormal range),
    // and q = |x| / 2^(exp - M) rounded half to even is its code within that binade.
    const int exp = static_cast<int>(ef) - 127 > 1 - kBias ? static_cast<int>(ef) - 127 : 1 - kBias;
    const uint32_t sig = ef ? (mf | 0x800000u) : mf;
    const int e2 = ef ? static_cast<int>(ef) - 150 : -149;
    const int shift = exp - M - e2;  // > 0: M <= 10 < 23
    uint32_t q = 0;
    if (shift < 25) {  // sig < 2^24: a larger shift leaves less than half, which rounds to 0
      const uint32_t fl = sig >> shift;
      const uint32_t rem = sig & ((1u << shift) - 1u);
      const uint32_t half = 1u << (shift - 1);
      q = fl + ((rem > half || (rem == half && (fl & 1u))) ? 1u : 0u);
    }
    // Normals carry q up to 2^(M+1) into the next exponent; subnormals have q < 2^M: one formula.
    const uint32_t code = (static_cast<uint32_t>(exp + kBias - 1) << M) + q;
    return sign | (code <= MAX_CODE ? code : SATURATE ? MAX_CODE : kInfinity);
  }

  __host__ __device__ static float decode(uint32_t c) {
    const bool negative = (c & kSign) != 0;
    const uint32_t ex = (c >> M) & ((1u << E) - 1u);
    const uint32_t mant = c & ((1u << M) - 1u);
    const uint32_t exp_max = (1u << E) - 1u;
    uint32_t bits;
    if (SATURATE ? (ex == exp_max && mant == (1u << M) - 1u) : (ex == exp_max && mant != 0)) {
      return bits_f32(kCanonicalNaN);
    } else if (!SATURATE && ex == exp_max) {
      bits = 0x7f800000u;
    } else if (ex == 0) {
      if (mant == 0) {
        bits = 0;
      } else {  // subnormal: normalise (every narrow subnormal is an f32 normal)
        const int lead = 31 - count_leading_zeros(mant);
        bits = (static_cast<uint32_t>(lead - M + 1 - kBias + 127) << 23) | ((mant << (23 - lead)) & 0x7fffffu);
      }
    } else {
      bits = (static_cast<uint32_t>(static_cast<int>(ex) - kBias + 127) << 23) | (mant << (23 - M));
    }
    return bits_f32(bits | (negative ? 0x80000000u : 0u));
  }
};

using F16 = MiniFloat<5, 10, false, 0x7bffu>;   // max 65504
using E4M3 = MiniFloat<4, 3, true, 0x7eu>;      // max 448
using E5M2 = MiniFloat<5, 2, false, 0x7bu>;     // max 57344

}  // namespace mdlm
