// The attention kernels' masking (cuda/attention/attention.cu): the one masking rule (causal,
// document ids, sequence tails) used by every kernel and both dtypes, the tile grids' order, tile
// classification for skipping masked tiles, and a key block's walk over its query tiles.
//
// Requires sm_80 or newer (redux.sync).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "../common.cuh"  // to_float / from_float: storage <-> f32 for the SIMT kernels

namespace mdlm {
namespace attn {

using bf16 = __nv_bfloat16;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// Masking: the op's rule (src/ops/attention.ts `visibility`) plus the tails of the last tiles.
// Query qi sees key kj iff both are real rows (< T), kj <= qi when causal, and their document
// ids agree. Every kernel masks through this function and skips tiles through classify_tile.
// ---------------------------------------------------------------------------------------------

// Within one document: the rule without the ids (kOneDoc tiles, classify_tile).
__device__ __forceinline__ bool visible_in_doc(int qi, int kj, int T, bool causal) { return qi < T && kj < T && (!causal || kj <= qi); }

__device__ __forceinline__ bool visible(int qi, int qseg, int kj, int kseg, int T, bool causal) {
  return visible_in_doc(qi, kj, T, causal) && qseg == kseg;
}

// The tile kernels' grids are one-dimensional: rows × tiles blocks (row: b·H + h, or b·G + g;
// tile: a block of `rows_per_tile` queries or keys), taken in groups of `group_rows` rows (the
// last group may be smaller) and within a group tile by tile: tile 0 (the heaviest when causal)
// of every row of the group, then tile 1, ... The host sizes the groups so the data their tiles
// share (the forward's K and V; the backward's Q, dO and dQ accumulator) fits in L2: the blocks
// resident at one time then read it from DRAM about once, and the heavy causal tiles start
// first. (With the head fastest, each resident block would have a head of its own, and the
// backward would read its inputs from DRAM many times over.)
// block_tile: the row and tile of block `index` of `blocks` (rows × tiles) in that order (a
// persistent kernel passes the index of the tile it takes next).
struct BlockTile {
  int row, tile, tiles;
};
__device__ __forceinline__ BlockTile block_tile(int T, int rows_per_tile, int group_rows, int index, int blocks) {
  const int tiles = (T + rows_per_tile - 1) / rows_per_tile, rows = blocks / tiles;
  // 32-bit: group_rows · tiles <= blocks < 2^31 (tile_grid); a 64-bit division took more registers
  // than bwd_ws's producer warps have
  const int first = index / (group_rows * tiles) * group_rows, in_group = min(group_rows, rows - first);
  const int j = index - first * tiles;
  return {first + j % in_group, j / in_group, tiles};
}

// Smallest and largest document id over the rows [t0, t0 + n) that are < T (lo > hi: no such
// row). Computed by one warp (every lane gets the result); each warp of a block calls it itself,
// so no shared memory or barrier is involved.
struct SegRange {
  int lo, hi;
};

__device__ __forceinline__ SegRange warp_seg_range(const int* __restrict__ seg_row, int t0, int n, int T) {
  const int lane = threadIdx.x & 31;
  int lo = INT_MAX, hi = INT_MIN;
  for (int i = lane; i < n; i += 32) {
    const int t = t0 + i;
    if (t < T) {
      const int s = __ldg(seg_row + t);
      lo = min(lo, s);
      hi = max(hi, s);
    }
  }
  lo = __reduce_min_sync(0xffffffffu, lo);
  hi = __reduce_max_sync(0xffffffffu, hi);
  return {lo, hi};
}

enum TileKind : int { kEmpty = 0, kPartial = 1, kFull = 2, kOneDoc = 3 };

// A tile of queries [q0, q0 + nq) × keys [k0, k0 + nk):
//   kEmpty   no (query, key) pair is visible: skipped entirely (no load, no math);
//   kFull    every pair is visible (no tails, below the causal diagonal, one document): no mask;
//   kOneDoc  one document on both sides, some pairs hidden by the causal diagonal or a tail:
//            visible_in_doc() per element, by positions alone (the tiles on a causal diagonal
//            without documents: no id is read, and two compares an element fewer). The SIMT
//            kernels mask it as kPartial (visible() is exact for it);
//   kPartial anything else: visible() per element.
// The document test compares id ranges, so it never skips a visible pair whatever the ids are;
// for packed rows (ids non-decreasing along T) it is exact at tile granularity.
__device__ __forceinline__ int classify_tile(int q0, int nq, SegRange qs, int k0, int nk, SegRange ks, int T, bool causal) {
  if (qs.lo > qs.hi || ks.lo > ks.hi) return kEmpty;            // no real rows on one side
  if (causal && k0 > min(q0 + nq, T) - 1) return kEmpty;        // every key after every query
  if (qs.hi < ks.lo || ks.hi < qs.lo) return kEmpty;            // no document in common
  const bool one_doc = qs.lo == qs.hi && ks.lo == ks.hi && qs.lo == ks.lo;
  const bool inside = q0 + nq <= T && k0 + nk <= T && (!causal || k0 + nk - 1 <= q0);
  return one_doc ? (inside ? kFull : kOneDoc) : kPartial;
}

// First key tile n' >= n (tiles of nk keys, n' < n_end) that the query block [q0, q0 + nq) does
// not skip; n_end if none. `kind` receives its classification.
__device__ __forceinline__ int next_key_tile(int n, int n_end, int nk, const int* __restrict__ seg_row, int q0, int nq,
                                             SegRange qs, int T, bool causal, int& kind) {
  for (; n < n_end; ++n) {
    const int k0 = n * nk;
    kind = classify_tile(q0, nq, qs, k0, nk, warp_seg_range(seg_row, k0, nk, T), T, causal);
    if (kind != kEmpty) break;
  }
  return n;
}

// First query tile m' >= m (tiles of nq queries, m' < m_end) that the key block [k0, k0 + nk)
// does not skip; m_end if none.
__device__ __forceinline__ int next_query_tile(int m, int m_end, int nq, const int* __restrict__ seg_row, int k0, int nk,
                                               SegRange ks, int T, bool causal, int& kind) {
  for (; m < m_end; ++m) {
    const int q0 = m * nq;
    kind = classify_tile(q0, nq, warp_seg_range(seg_row, q0, nq, T), k0, nk, ks, T, causal);
    if (kind != kEmpty) break;
  }
  return m;
}

// A key block's walk over (q head of its GQA group, query tile): every query tile the block does
// not skip, for each head of the group in turn (which tiles are skipped does not depend on the
// head). Every warp builds it itself (warp_seg_range), so no shared memory or barrier is involved.
struct QueryTileWalk {
  const int* seg;
  int k0, nk, nq, T;
  bool causal;
  SegRange ks;
  // The query tiles [m_lo, m_end) the key block may see, walked in two runs: [rot, m_end), then
  // [m_lo, rot). Causal: rot = m_lo (one run, in order). Bidirectional: the key blocks of a row
  // start spread over the tiles, so they do not all add to the same dQ rows at once.
  // m_first: the first tile not skipped (-1: none).
  int m_lo, m_end, rot, m_first, first_kind;

  __device__ __forceinline__ QueryTileWalk(const int* seg_, int k0_, int nk_, int nq_, int T_, bool causal_)
      : seg(seg_), k0(k0_), nk(nk_), nq(nq_), T(T_), causal(causal_), ks(warp_seg_range(seg_, k0_, nk_, T_)),
        m_lo(causal_ ? k0_ / nq_ : 0), m_end((T_ + nq_ - 1) / nq_), first_kind(kEmpty) {
    rot = !causal ? m_lo + (int)((int64_t)(k0 / nk) * (m_end - m_lo) / ((T + nk - 1) / nk)) : m_lo;
    m_first = from(rot, true, first_kind);
  }
  // The first step: head 0 at m_first (head `group`, i.e. done, when the block skips every tile).
  __device__ __forceinline__ void start(int group, int& hq, int& m, int& kind) const {
    hq = m_first >= 0 ? 0 : group;
    m = m_first;
    kind = first_kind;
  }
  // The step after (hq, m): the next tile of head hq not skipped, else head hq + 1's first.
  __device__ __forceinline__ void advance(int& hq, int& m, int& kind) const {
    m = from(m + 1, m >= rot, kind);
    wrap(hq, m, kind);
  }

 private:
  // The first tile not skipped from m on: in the first run when `first_run` (and then the second),
  // else in the second; -1 when the walk ends first.
  __device__ __forceinline__ int from(int m, bool first_run, int& kind) const {
    if (first_run) {
      m = next_query_tile(m, m_end, nq, seg, k0, nk, ks, T, causal, kind);
      if (m < m_end) return m;
      m = m_lo;
    }
    m = next_query_tile(m, rot, nq, seg, k0, nk, ks, T, causal, kind);
    return m < rot ? m : -1;
  }
  // Past the last tile of head hq: head hq + 1's first.
  __device__ __forceinline__ void wrap(int& hq, int& m, int& kind) const {
    if (m < 0) {
      ++hq;
      m = m_first;
      kind = first_kind;
    }
  }
};

}  // namespace attn
}  // namespace mdlm
