// Pieces the warp-specialised Hopper kernels (fwd_ws, bwd_ws) share: TMA tile loads, the hand-over
// of tiles in a persistent kernel, and the softmax and mask on wgmma accumulator fragments.
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "params.cuh"

namespace mdlm {
namespace attn {
namespace {

// Rows [t0, t0 + kRows) of head `head` of batch b from a TMA map (encode_tile_maps) into the
// swizzled [kRows][kD] tile at shared address `tile`, one load a 64-column slab, their bytes
// credited to mbarrier `bar` (announced by the caller's mbar_arrive_expect_tx); rows ≥ T and
// columns ≥ D land as zeros. One thread issues a whole tile: per-thread cp.async copies by the
// producer warps would take many instructions a step on the schedulers the consumers share.
template <int kRows, int kD>
__device__ __forceinline__ void load_tile(uint32_t tile, const wg::TileMap& map, int head, int t0, int b, uint32_t bar) {
#pragma unroll
  for (int c = 0; c < kD / 64; ++c) wg::tile_load_4d(tile + c * kRows * 128, map, 64 * c, head, t0, b, bar);
}

// How a persistent warp-specialised kernel (fwd_ws, bwd_ws) moves from tile to tile: three ints
// of shared memory hold the tile whose operands the consumers are given ([0]; `tiles` or more:
// none left), the producer's next ([1]) and how many tiles thread 0 has handed over ([2]; in
// shared memory, as the producer has few registers). A block's first tile is its own index, the
// next ones come from p.tile_counter (zeroed before the launch).
struct TileHandOver {
  int* slot;
  __device__ __forceinline__ void init() const { slot[2] = 0; }
  // The producer thread that hands tiles over (the same one throughout): tile `index` to the
  // consumers once they have released the last one's operands (mbarrier `empty`, a phase a tile).
  __device__ __forceinline__ void hand_over(int index, uint32_t empty) const {
    const int handed = slot[2];
    if (handed > 0) wg::mbar_wait(empty, (uint32_t)(handed - 1) & 1u);
    slot[2] = handed + 1;
    slot[0] = index;
  }
  // That thread, once the counter is past the last tile (`index`): the consumers learn it through
  // the operands' `full` mbarrier, a phase with nothing loaded.
  __device__ __forceinline__ void hand_over_none(int index, uint32_t empty, uint32_t full) const {
    hand_over(index, empty);
    wg::mbar_arrive(full);
  }
  // Every producer thread (pt its index, named barrier `bar` theirs): the block's next tile.
  __device__ __forceinline__ int next(const Params& p, int pt, int bar, int producers) const {
    if (pt == 0) slot[1] = (int)gridDim.x + fetch_increment(p.tile_counter);
    wg::bar_sync(bar, producers);
    const int index = slot[1];
    wg::bar_sync(bar, producers);  // read by every producer thread before thread 0 writes it again
    return index;
  }
  // The consumers' tile (after the full mbarrier of its operands).
  __device__ __forceinline__ int current() const { return slot[0]; }
};

// The wgmma backwards' softmax gradient of one step, in a warpgroup's accumulator layout (64 keys
// × kN queries, rows = keys): Pᵀ = exp(scale·sᵀ − lse[query]) in place of the scores, with the
// pairs the mask hides zeroed on a partial tile, then packed as bf16 A fragments (k = queries).
// The mask is in its own warp-uniform branch: folded into the exponentials' loop, ptxas computes
// every tile's mask, predicated off on the interior tiles, hundreds of issued instructions a step
// that do nothing, in the phase that overlaps Sᵀ's and dPᵀ's wgmmas.
template <int kN>
__device__ __forceinline__ void bwd_probs(float (&s)[kN / 2], uint32_t (&pa)[kN / 16][4], const float* lse, const int* qseg, int kind, int q0,
                                          const int (&krow)[2], const int (&kseg)[2], int T, bool causal, float scale_log2) {
  const int tig = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const float2 l2 = *reinterpret_cast<const float2*>(lse + j * 8 + 2 * tig);
#pragma unroll
    for (int e = 0; e < 2; ++e)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) s[4 * j + 2 * hi + e] = fast_exp2(fmaf(s[4 * j + 2 * hi + e], scale_log2, -(e ? l2.y : l2.x) * kLog2e));
  }
  // The pairs the mask hides to 0: a one-document tile's by positions, a partial tile's with the ids.
  auto hide = [&](auto visible_at) {
#pragma unroll
    for (int j = 0; j < kN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi)
          if (!visible_at(j * 8 + 2 * tig + e, hi)) s[4 * j + 2 * hi + e] = 0.f;
  };
  if (kind == kOneDoc) hide([&](int c, int hi) { return visible_in_doc(q0 + c, krow[hi], T, causal); });
  else if (kind == kPartial) hide([&](int c, int hi) { return visible(q0 + c, qseg[c], krow[hi], kseg[hi], T, causal); });
  a_fragments<kN>(s, pa);
}

// dSᵀ = Pᵀ∘(dPᵀ − Drow[query]) (in place of dPᵀ), as the A fragments of dK's wgmmas (dsa, as
// bwd_probs' pa), and stored as bf16 into rows key0 + 16·warp.. of the swizzled [kBc][kN] tile at
// shared address `dst` ([keys][queries], read by dQ's wgmmas): a k16 step's four registers are
// four 8 × 8 matrices, one stmatrix (cuDNN's backward stores dS so; 32-bit stores with a swizzled
// address each took four times the instructions).
template <int kBc, int kN>
__device__ __forceinline__ void bwd_store_dst(uint32_t dst, float (&dp)[kN / 2], const float (&s)[kN / 2], const float* drow, int key0,
                                              uint32_t (&dsa)[kN / 16][4]) {
  const int warp = (threadIdx.x >> 5) & 3, tig = threadIdx.x & 3;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const float2 d2 = *reinterpret_cast<const float2*>(drow + j * 8 + 2 * tig);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      dp[4 * j + 2 * hi] = s[4 * j + 2 * hi] * (dp[4 * j + 2 * hi] - d2.x);
      dp[4 * j + 2 * hi + 1] = s[4 * j + 2 * hi + 1] * (dp[4 * j + 2 * hi + 1] - d2.y);
    }
  }
  a_fragments<kN>(dp, dsa);
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) wg::store_fragment(dst, kBc, key0 + 16 * warp, kk, dsa[kk]);
}

// Whether bwd_ws turns dK back through rope itself: the accumulator's columns c and c + D/2 are
// then in one thread (register j and j + kD/16), which takes D = kD. Else a pass of its own does.
template <int kD>
__host__ __device__ __forceinline__ bool ws_turns_dk(const Params& p) { return p.positions && p.D == kD; }

// (cos, −sin) of rope's angle for position `pos` and pair i: the backward's turn by −θ, with θ
// computed as rope's kernel does (f32(pos) · inv_freq[i] in f32), reduced to [−π, π] in three
// steps (2π split so that k · each part is exact for |k| < 2^15), then the SFU's sin and cos
// (absolute error ~1e-6 there, far below bf16's rounding). sincosf took ~40 instructions a pair:
// at llama-1.3b's shape that ate the saved rope_backward launches.
__device__ __forceinline__ float2 rope_back_turn(const Params& p, int pos, int i) {
  const float a = static_cast<float>(pos) * p.inv_freq[i];
  const float k = rintf(a * 0.15915494309189535f);
  const float r = fmaf(-k, 1.2556658930407139e-6f, fmaf(-k, 0.001934051513671875f, fmaf(-k, 6.28125f, a)));
  float s, c;
  __sincosf(r, &s, &c);
  return make_float2(c, -s);
}

// A rope pair (elements i and i + D/2) turned by the (cos, sin) in cs.
__device__ __forceinline__ void turn_pair(float& lo, float& up, float2 cs) {
  const float x1 = lo, x2 = up;
  lo = x1 * cs.x - x2 * cs.y;
  up = x2 * cs.x + x1 * cs.y;
}

// dK (× scale) and dV of keys krow[0..1] straight from the accumulators: 4 bytes a lane, once a
// block; dK turned back through rope first (ws_turns_dk: column 8j + 2·tig + e of register j
// pairs with register j + kD/16's).
template <int kD>
__device__ __forceinline__ void bwd_store_dkdv(const Params& p, int b, int g, const int (&krow)[2], float (&dk)[kD / 2], const float (&dv)[kD / 2]) {
  const int tig = threadIdx.x & 3;
  if (ws_turns_dk<kD>(p)) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int pos = krow[hi] < p.T ? p.positions[(int64_t)b * p.T + krow[hi]] : 0;
#pragma unroll
      for (int j = 0; j < kD / 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          turn_pair(dk[4 * j + 2 * hi + e], dk[4 * (j + kD / 16) + 2 * hi + e], rope_back_turn(p, pos, 8 * j + 2 * tig + e));
        }
    }
  }
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int t = krow[hi];
    if (t >= p.T) continue;
    bf16* gk = static_cast<bf16*>(p.dk) + dkv_base(p, b, g) + (int64_t)t * p.dkv_stride;
    bf16* gv = static_cast<bf16*>(p.dv) + dkv_base(p, b, g) + (int64_t)t * p.dkv_stride;
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) {
      const int col = 8 * j + 2 * tig;
      if (col >= p.D) continue;
      *reinterpret_cast<uint32_t*>(gk + col) = pack_bf16(dk[4 * j + 2 * hi] * p.scale, dk[4 * j + 2 * hi + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(gv + col) = pack_bf16(dv[4 * j + 2 * hi], dv[4 * j + 2 * hi + 1]);
    }
  }
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
