// The mma.sync tile helpers of the tensor-core kernels (bf16, sm_80 and newer): padded shared
// rows, cp.async tile loads, fragment stores, the score-like products and the masking of their
// fragments.
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "params.cuh"

namespace mdlm {
namespace attn {
namespace {

// Shared-memory row stride in elements: 16 bytes of padding make the 8 rows an ldmatrix reads
// fall into 8 different 16-byte bank groups (strides of 80, 144, 208, 272 bytes).
template <int kD>
__host__ __device__ constexpr int row_stride() { return kD + 8; }

// cp.async rows [t0, t0 + kRows) of a [.., T, heads, D] tensor (g: row 0 of this head, stride:
// elements between rows) into s[kRows][kD + 8]. Rows >= T and columns >= d are zero-filled.
// Each thread keeps one 16-byte column and steps down the rows, so the addresses it needs are one
// pointer plus constant offsets (few registers live across the main loops).
template <int kRows, int kD, int kThreads>
__device__ __forceinline__ void load_rows(bf16* s, const bf16* g, int64_t stride, int t0, int T, int d) {
  constexpr int kChunks = kD / 8;
  constexpr int kS = row_stride<kD>();
  if constexpr (kThreads % kChunks == 0 && kRows % (kThreads / kChunks) == 0) {
    constexpr int kStep = kThreads / kChunks;  // rows per pass
    const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
    const bool col_ok = c * 8 < d;
    const bf16* src = g + (int64_t)(t0 + r0) * stride + c * 8;
    const uint32_t dst = smem_u32(s + r0 * kS + c * 8);
#pragma unroll
    for (int it = 0; it < kRows / kStep; ++it) {
      const bool ok = col_ok && t0 + r0 + it * kStep < T;
      cp_async16(dst + it * kStep * kS * 2, ok ? src + it * kStep * stride : g, ok);
    }
  } else {
    constexpr int kTotal = kRows * kChunks;
#pragma unroll
    for (int it = 0; it < (kTotal + kThreads - 1) / kThreads; ++it) {
      const int i = it * kThreads + (int)threadIdx.x;
      if (kTotal % kThreads == 0 || i < kTotal) {
        const int r = i / kChunks, c = i % kChunks;
        const int t = t0 + r;
        const bool ok = t < T && c * 8 < d;
        cp_async16(smem_u32(s + r * kS + c * 8), ok ? g + (int64_t)t * stride + c * 8 : g, ok);
      }
    }
  }
}

// Rows [0, kRows) of s (a warp's own rows) to global rows t0.. (row < T, column < d), 16 bytes
// per lane and step.
template <int kRows, int kD>
__device__ __forceinline__ void store_rows_warp(bf16* g, int64_t stride, const bf16* s, int t0, int T, int d) {
  constexpr int kChunks = kD / 8;
  constexpr int kS = row_stride<kD>();
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int it = 0; it < (kRows * kChunks + 31) / 32; ++it) {
    const int i = it * 32 + lane;
    if (i < kRows * kChunks) {
      const int r = i / kChunks, c = i % kChunks;
      const int t = t0 + r;
      if (t < T && c * 8 < d) {
        *reinterpret_cast<uint4*>(g + (int64_t)t * stride + c * 8) = *reinterpret_cast<const uint4*>(s + r * kS + c * 8);
      }
    }
  }
}

// acc[16 x kCols] (mma fragments of a warp's 16-row tile) · mul -> bf16 rows of s.
template <int kD, int kDT>
__device__ __forceinline__ void frag_to_smem(bf16* s, const float (&acc)[kDT][4], float mul_lo, float mul_hi) {
  constexpr int kS = row_stride<kD>();
  const int lane = threadIdx.x & 31;
  const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) {
    *reinterpret_cast<uint32_t*>(s + gid * kS + dt * 8 + 2 * tig) = pack_bf16(acc[dt][0] * mul_lo, acc[dt][1] * mul_lo);
    *reinterpret_cast<uint32_t*>(s + (gid + 8) * kS + dt * 8 + 2 * tig) = pack_bf16(acc[dt][2] * mul_hi, acc[dt][3] * mul_hi);
  }
}

// acc[kMT][kNT][4] += A(16·kMT rows of sA, via ldmatrix) · B(kNT·8 rows of sB)ᵀ: the score-like
// products S = Q·Kᵀ, dP = dO·Vᵀ, Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ. Each B fragment serves the kMT row tiles
// of the warp (shared-memory reads per product fall as kMT grows).
template <int kD, int kNT, int kMT>
__device__ __forceinline__ void mma_abt(float (&acc)[kMT][kNT][4], const bf16* sA, const bf16* sB) {
  constexpr int kS = row_stride<kD>();
  const int lane = threadIdx.x & 31;
  const uint32_t a_addr = smem_u32(sA + (lane & 15) * kS + (lane >> 4) * 8);
  const uint32_t b_addr = smem_u32(sB + ((lane & 7) + (lane >> 4) * 8) * kS + ((lane >> 3) & 1) * 8);
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) ldsm_x4(a_addr + (mt * 16 * kS + kk * 16) * 2, a[mt][0], a[mt][1], a[mt][2], a[mt][3]);
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4(b_addr + (np * 16 * kS + kk * 16) * 2, b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_bf16(acc[mt][2 * np], a[mt], b0, b1);
        mma_bf16(acc[mt][2 * np + 1], a[mt], b2, b3);
      }
    }
  }
}

// A masked tile of the mma.sync kernels: acc[mt][nt][2·hi + j] (fragment row 16·mt + gid + 8·hi,
// column c0 + 8·nt + 2·tig + j) set to `fill` where !visible_at(mt, hi, column); a one-document
// tile's test by positions alone, a partial tile's with the document ids (classify_tile).
template <int kMT, int kNT, typename Visible>
__device__ __forceinline__ void mask_fragments(float (&acc)[kMT][kNT][4], int c0, float fill, Visible visible_at) {
  const int tig = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi)
          if (!visible_at(mt, hi, c0 + nt * 8 + 2 * tig + j)) acc[mt][nt][2 * hi + j] = fill;
}

// acc[kMT][kD/8][4] += P(16·kMT x kK, register fragments) · sB(kK rows x kD): O += P·V,
// dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q. p[kMT][kK/8][4] are accumulator fragments, rounded to bf16
// here; each B fragment serves the kMT row tiles.
template <int kD, int kKT, int kMT>
__device__ __forceinline__ void mma_pv(float (&acc)[kMT][kD / 8][4], const float (&p)[kMT][kKT][4], const bf16* sB) {
  constexpr int kS = row_stride<kD>();
  const int lane = threadIdx.x & 31;
  const uint32_t b_addr = smem_u32(sB + (lane & 15) * kS + (lane >> 4) * 8);
#pragma unroll
  for (int kk = 0; kk < kKT / 2; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      a[mt][0] = pack_bf16(p[mt][2 * kk][0], p[mt][2 * kk][1]);
      a[mt][1] = pack_bf16(p[mt][2 * kk][2], p[mt][2 * kk][3]);
      a[mt][2] = pack_bf16(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]);
      a[mt][3] = pack_bf16(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]);
    }
#pragma unroll
    for (int dp = 0; dp < kD / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(b_addr + (kk * 16 * kS + dp * 16) * 2, b0, b1, b2, b3);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_bf16(acc[mt][2 * dp], a[mt], b0, b1);
        mma_bf16(acc[mt][2 * dp + 1], a[mt], b2, b3);
      }
    }
  }
}

// A warp's 16·kMT rows of accumulators · mul -> bf16 rows of s, then to global rows t0..
template <int kD, int kMT>
__device__ __forceinline__ void store_warp_rows(bf16* g, int64_t stride, bf16* s, const float (&acc)[kMT][kD / 8][4], float mul, int t0, int T, int d) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) frag_to_smem<kD, kD / 8>(s + mt * 16 * row_stride<kD>(), acc[mt], mul, mul);
  __syncwarp();
  store_rows_warp<16 * kMT, kD>(g, stride, s, t0, T, d);
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
