// Device helpers shared by the attention kernels (cuda/attention.cu): the one masking rule (causal,
// document ids, sequence tails) used by every kernel and both dtypes, tile classification for
// skipping masked tiles, and thin wrappers over the sm_80+ instructions of the tensor-core path
// (cp.async, ldmatrix, mma.sync m16n8k16 bf16 -> f32).
//
// Requires sm_80 or newer (cp.async, ldmatrix, bf16 mma, redux.sync).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#ifdef MDLM_ATTN_EMULATE
#include "emu/warp_emu.h"
#endif

#include "common.cuh"  // to_float / from_float: storage <-> f32 for the SIMT kernels

// Dynamic shared memory of a kernel, as an array of T named `name`.
#ifdef MDLM_ATTN_EMULATE
#define MDLM_ATTN_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::emu::smem_base())
#else
#define MDLM_ATTN_DYNAMIC_SMEM(T, name) extern __shared__ __align__(128) T name[]
#endif

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
// first. With the head fastest, the ~130 resident blocks each had a head of their own, and the
// wgmma backward read 4.4 GB from DRAM for 0.3 GB of inputs at B8 T2048 H16 D128 (Nsight
// Compute, H200, 2026-12-03).
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
  // start spread over the tiles, so they do not all add to the same dQ rows at once (with two
  // other changes, 9% faster on the document-masked B8 T2048 H16 D128 backward, H200, 2026-12-03).
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

// ---------------------------------------------------------------------------------------------
// Warp reductions
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Over the 4 lanes of a quad (the lanes that share a row of an mma accumulator fragment).
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  return x;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
  return x;
}

// ---------------------------------------------------------------------------------------------
// sm_80+ instructions
// ---------------------------------------------------------------------------------------------

#ifdef MDLM_ATTN_EMULATE
// CPU emulation of the same instructions (cuda/emu/warp_emu.h, driven by
// cuda/emu/attention_check.cc): checks the kernels' indexing and fragment layouts without a GPU.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return ::emu::smem_addr(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) { ::emu::cp_async(dst, src, 16, pred ? 16 : 0); }
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool pred) { ::emu::cp_async(dst, src, 4, pred ? 4 : 0); }
__device__ __forceinline__ void cp_async_commit() {}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N == 0, "the emulation lands every copy at wait_group 0");
  ::emu::cp_async_wait_all();
}
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ::emu::ldmatrix_x4(addr, r, false);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ::emu::ldmatrix_x4(addr, r, true);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { ::emu::mma_m16n8k16(c, a, b0, b1); }
#else
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; when !pred nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

// 4 bytes global -> shared; zero when !pred.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Four 8x8 b16 matrices; lane l gives the address of row (l & 7) of matrix (l >> 3); register i
// receives matrix i: lane l holds its row l >> 2, columns 2(l & 3) and 2(l & 3) + 1.
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// The same, each matrix transposed: lane l holds column l >> 2, rows 2(l & 3) and 2(l & 3) + 1.
__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// c[16x8] += a[16x16] · b[16x8], bf16 inputs, f32 accumulation. Fragments (g = lane >> 2,
// t = lane & 3): a = {(g, 2t..), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..)}, b = {(k 2t.., n g),
// (k 2t+8.., n g)}, c = {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif  // MDLM_ATTN_EMULATE

// atomicAdd(addr, 1): the previous value.
__device__ __forceinline__ int fetch_increment(int* addr) {
#ifdef MDLM_ATTN_EMULATE
  return (*addr)++;  // the emulator runs one thread at a time
#else
  return atomicAdd(addr, 1);
#endif
}

// *addr += v for four adjacent floats of global memory (16-byte aligned), atomically per float
// (the dQ accumulator of the fused backwards). sm_90 has a vector reduction; older GPUs take four.
__device__ __forceinline__ void atomic_add4(float* addr, float4 v) {
#ifdef MDLM_ATTN_EMULATE
  addr[0] += v.x;  // the emulator runs one thread at a time
  addr[1] += v.y;
  addr[2] += v.z;
  addr[3] += v.w;
#elif __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4*>(addr), v);
#else
  atomicAdd(addr, v.x);
  atomicAdd(addr + 1, v.y);
  atomicAdd(addr + 2, v.z);
  atomicAdd(addr + 3, v.w);
#endif
}

// Adds an accumulator fragment (m16n8 tiles: v[4j + 2·hi + e] is row r0 + 8·hi, column
// c0 + 8j + 2·tig + e) to the f32 dQ accumulator's rows r0 and r0 + 8 (< T), for the kCols / 8
// column tiles whose first column c0 + 8j is < D (D and c0 multiples of 8, so a tile is wholly in
// or out, the same for every lane). Lanes 2i and 2i + 1 trade halves (a shuffle a float) so that
// each adds four adjacent columns of one row: half the reductions of adding pairs, 16 bytes each
// (0-2% faster backwards, H200, 2026-12-03). Addresses from one row pointer with immediate offsets:
// computing each anew made a reduction's address registers wait for the previous reduction to read
// them (14% of the wgmma backward's stall samples, Nsight Compute, H200, 2026-12-03). When every
// row and column of the warp's fragment is in range (all but a sequence's last tile, at a head
// dim that needs no padding) the reductions go out untested: the per-reduction tests and their
// branches were 9 of the 22 instructions a reduction took in bwd_ws<128> (ncu SASS, H200,
// 2026-12-04). These adds are a quarter of bwd_ws's time (11.8 ms of a llama-1.3b mdlm step, H100,
// 2026-12-07), bounded by L2's reduction throughput: issued from shared memory by the copy engine
// (cp.reduce.async.bulk, as FlashAttention-3 does) they were no faster, and an L2 evict_last
// policy changed nothing (bench/RESULTS.md, thirty-fourth session). Fewer bytes is what would help
// (a cluster pair summing its dQ first was slower in both forms tried: branch wip/bwd-pair-dq,
// bench/RESULTS.md thirty-fourth and thirty-fifth sessions).
template <int kCols>
__device__ __forceinline__ void add_dq_rows(float* dqa, int64_t stride, int r0, const float* v, int c0, int D, int T) {
  const int tig = threadIdx.x & 3;
  const bool all_cols = c0 + kCols <= D, odd = tig & 1;
  const int row = r0 + 8 * odd;
  float* p = dqa + (int64_t)row * stride + c0 + 2 * (tig & 2);
  // column tile j's four adjacent values of this lane's row: even lanes keep row r0's pair and take
  // the partner's; odd lanes the same for row r0 + 8
  auto quad = [&](int j) {
    const float s0 = odd ? v[4 * j] : v[4 * j + 2], s1 = odd ? v[4 * j + 1] : v[4 * j + 3];
    const float g0 = __shfl_xor_sync(0xffffffffu, s0, 1), g1 = __shfl_xor_sync(0xffffffffu, s1, 1);
    return odd ? make_float4(g0, g1, v[4 * j + 2], v[4 * j + 3]) : make_float4(v[4 * j], v[4 * j + 1], g0, g1);
  };
  if (all_cols && !__any_sync(0xffffffffu, row >= T)) {
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j) atomic_add4(p + 8 * j, quad(j));
    return;
  }
#pragma unroll
  for (int j = 0; j < kCols / 8; ++j) {
    const float4 q = quad(j);
    if (row < T && (all_cols || c0 + 8 * j < D)) atomic_add4(p + 8 * j, q);
  }
}

// Two floats to a bf16x2 register, round to nearest even; `lo` in the low half (lower column).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// An accumulator fragment of N columns (f32, m16n8 tiles: x[4j + 2·hi + e] is row g + 8·hi, column
// 8j + 2·tig + e) as the bf16 A fragments of N / 16 k16 steps: step kk's register r packs elements
// 8·kk + 2·r and + 1 (mma.sync's and wgmma's register A layout), as FlashAttention does with P.
template <int N>
__device__ __forceinline__ void a_fragments(const float (&x)[N / 2], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) a[kk][r] = pack_bf16(x[8 * kk + 2 * r], x[8 * kk + 2 * r + 1]);
}

// 2^x (ex2.approx: relative error ~2^-22; 2^-inf = 0).
__device__ __forceinline__ float fast_exp2(float x) {
#ifdef MDLM_ATTN_EMULATE
  return std::exp2(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

}  // namespace attn
}  // namespace mdlm
