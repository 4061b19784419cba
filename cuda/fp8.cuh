// FP8 scaling as src/ops/fp8.ts defines it, bit for bit, for the kernels (quantize_fp8.cu,
// fp8_scale_update.cu) and their host checks: power-of-two scales from an amax by integer
// arithmetic on the f32 exponent, their exact inverses, and fp8(x · scale) rounded to nearest even
// and saturated to the format's largest finite value (NaN stays NaN).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "common.cuh"
#include "convert.cuh"
#include "op.h"

namespace mdlm {

enum class Fp8 { e4m3, e5m2 };

// Scale exponents stay within [-kMaxScaleExp, kMaxScaleExp]: scale and scaleInv both normal f32.
constexpr int kMaxScaleExp = 126;

// A format's encoder, largest finite value (1.75 · 2^kMaxExp) and the code convert.ts gives NaN.
template <Fp8 F>
struct Fp8Format;
template <>
struct Fp8Format<Fp8::e4m3> {
  using Mini = E4M3;
  static constexpr float kMax = 448.0f;
  static constexpr int kMaxExp = 8;
  static constexpr uint32_t kNaN = 0x7fu;
};
template <>
struct Fp8Format<Fp8::e5m2> {
  using Mini = E5M2;
  static constexpr float kMax = 57344.0f;
  static constexpr int kMaxExp = 15;
  static constexpr uint32_t kNaN = 0x7eu;
};

__host__ __device__ constexpr int fp8_max_exp(Fp8 f) { return f == Fp8::e4m3 ? Fp8Format<Fp8::e4m3>::kMaxExp : Fp8Format<Fp8::e5m2>::kMaxExp; }

// pow2Scale: the largest power of two s with amax · s ≤ the format's max, divided by 2^margin;
// `previous` when amax is zero, negative or not finite. With amax = m · 2^E (1 ≤ m < 2) and
// max = 1.75 · 2^max_exp, s = 2^(max_exp − E), halved when m > 1.75; an amax below the f32
// normals takes the largest scale.
__host__ __device__ inline float pow2_scale(float amax, int max_exp, int margin, float previous) {
  const uint32_t bits = f32_bits(amax);
  const int exp = static_cast<int>((bits >> 23) & 0xffu);
  if (!(amax > 0.0f) || exp == 0xff) return previous;
  int k = exp == 0 ? kMaxScaleExp : max_exp - (exp - 127) - ((bits & 0x7fffffu) > 0x600000u ? 1 : 0) - margin;
  k = k < -kMaxScaleExp ? -kMaxScaleExp : k > kMaxScaleExp ? kMaxScaleExp : k;
  return bits_f32(static_cast<uint32_t>(k + 127) << 23);
}

// inversePow2: 1 / scale for a power-of-two scale (exact), from its exponent field alone.
__host__ __device__ inline float inverse_pow2(float scale) {
  const int k = static_cast<int>((f32_bits(scale) >> 23) & 0xffu) - 127;
  return bits_f32(static_cast<uint32_t>(127 - k) << 23);
}

// The product x · scale (f32, rounded once) clamped to ±max; NaN passes.
template <Fp8 F>
__host__ __device__ __forceinline__ float fp8_clamp(float x, float scale) {
  constexpr float kMax = Fp8Format<F>::kMax;
  const float y = x * scale;
  return y > kMax ? kMax : y < -kMax ? -kMax : y;
}

// quantizeValue's code: fp8(x · scale), round to nearest even, saturating.
template <Fp8 F>
__host__ __device__ __forceinline__ uint32_t quantize_fp8(float x, float scale) {
  return Fp8Format<F>::Mini::encode(fp8_clamp<F>(x, scale));
}

// Two codes, x0's in the low byte. On sm_89+ one cvt.rn.satfinite does both: the same rounding
// as the encoder on the clamped values (round to nearest even on the format's grid, subnormals
// included), far fewer instructions, which keeps the quantisation passes at memory bandwidth;
// NaN takes convert.ts's code.
template <Fp8 F>
__host__ __device__ __forceinline__ uint32_t quantize_fp8x2(float x0, float x1, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  const float y0 = fp8_clamp<F>(x0, scale), y1 = fp8_clamp<F>(x1, scale);
  uint16_t r;
  if constexpr (F == Fp8::e4m3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(y1), "f"(y0));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(y1), "f"(y0));
  }
  const uint32_t lo = y0 != y0 ? Fp8Format<F>::kNaN : (r & 0xffu);
  const uint32_t hi = y1 != y1 ? Fp8Format<F>::kNaN : (r >> 8);
  return lo | hi << 8;
#else
  return quantize_fp8<F>(x0, scale) | quantize_fp8<F>(x1, scale) << 8;
#endif
}

// The transposed quantisation's tile (quantize_fp8 and quantize_fp8_blockwise): kFp8TileRows rows
// of x (one 128-byte line of the transposed output) by kFp8TileCols columns, held in shared memory
// as four rows' codes of a column a 32-bit word; a row of words is padded by one, so that the
// stores' reads do not conflict.
constexpr int kFp8TileRows = 128;
constexpr int kFp8TileCols = 64;
constexpr int kFp8TileWords = kFp8TileRows / 4 + 1;

// Row r's four values of x [rows, cols] from column c into v, 0 past the edges: one load with
// VEC_IN (x's rows 4-element aligned) where all four lie within cols.
template <typename T, bool VEC_IN>
__device__ __forceinline__ void load_fp8_patch_row(const T* __restrict__ x, int64_t rows, int64_t cols, int64_t r, int64_t c, float (&v)[4]) {
#pragma unroll
  for (int j = 0; j < 4; j++) v[j] = 0.0f;
  if (r >= rows) return;
  const T* src = x + r * cols + c;
  if (VEC_IN && c + 4 <= cols) {
    load<T, 4>(src, v);
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = c + j < cols ? load1(src + j) : 0.0f;
  }
}

// Stores the tile of x at (r0, c0) to out_t [cols, rows] (its rows c0.., columns r0..): 16 bytes
// at a time with VEC_OUT (rows % 16 == 0, out_t on a 16-byte boundary) where the 16 lie within
// rows, byte by byte elsewhere; columns of x past cols are not stored.
template <bool VEC_OUT>
__device__ __forceinline__ void store_fp8_tile(const uint32_t (&tile)[kFp8TileCols][kFp8TileWords], uint8_t* __restrict__ out_t, int64_t rows,
                                               int64_t cols, int64_t r0, int64_t c0) {
  constexpr int kChunks = kFp8TileCols * kFp8TileRows / 16;  // 16-byte pieces of out_t's rows in a tile
  for (int q = threadIdx.x; q < kChunks; q += blockDim.x) {
    const int tc = q / (kFp8TileRows / 16), tr = q % (kFp8TileRows / 16) * 16;
    const int64_t c = c0 + tc, r = r0 + tr;
    if (c >= cols) continue;
    const uint32_t* words = &tile[tc][tr / 4];
    uint8_t* dst = out_t + c * rows + r;
    if (VEC_OUT && r + 16 <= rows) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    } else {
      for (int b = 0; b < 16 && r + b < rows; b++) dst[b] = static_cast<uint8_t>(words[b / 4] >> (8 * (b % 4)));
    }
  }
}

// ---- host side ----

// The format an attribute names ('e4m3' or 'e5m2').
inline Fp8 fp8_format(const OpCall& call, AttrName name) {
  const std::string& s = call.str(name);
  if (s == "e4m3") return Fp8::e4m3;
  if (s == "e5m2") return Fp8::e5m2;
  call.unsupported(std::string("FP8 format '") + s + "'");
}

// Calls f(std::integral_constant<Fp8, f>).
template <typename Fn>
void with_fp8(Fp8 f, Fn&& fn) {
  if (f == Fp8::e4m3) fn(std::integral_constant<Fp8, Fp8::e4m3>{});
  else fn(std::integral_constant<Fp8, Fp8::e5m2>{});
}

}  // namespace mdlm
