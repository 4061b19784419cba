// attention and attention_backward (src/ops/attention.ts): FlashAttention-2 style kernels.
//
// Layouts: q, out, dout, dq [B, T, H, D]; k, v, dk, dv [B, T, G, D] (G = kvHeads, q head h reads
// kv head h / (H / G)); segIds [B, T]; lse and the scratch Drow [B, H, T] (f32).
//
// bf16, head dim a multiple of 8 (padded up to 32, 64, 96 or 128 in shared memory, the padding
// zero), 16-byte aligned tensors: tensor-core kernels (mma.sync m16n8k16 bf16 -> f32, ldmatrix,
// cp.async double-buffered tiles, padded shared rows so ldmatrix is conflict-free).
//   forward   fwd_mma      one block per (b, h, Br query rows); online softmax over Bc-key tiles;
//                          writes out (bf16) and lse (natural log of Σ exp(scale·qk)).
//   backward  bwd_prep     Drow = rowsum(dO∘O) into scratch (and, fused, the f32 dQ accumulator
//                          zeroed); every tensor-core backward reads it.
//   backward (default, fused)
//             bwd_dkdv_mma<.., true> one block per (b, kv head, key rows): loops over the q heads
//                          of the GQA group and the query tiles; dV = Σ Pᵀ·dO, dK = scale · Σ dSᵀ·Q
//                          in registers, and dSᵀ through shared memory to dQacc += dS·K, added to
//                          the f32 accumulator with atomics (FA2's 5 tile products).
//             bwd_ws       the same on warpgroup MMA (sm_90), head dim 64 and 128: two consumer
//                          warpgroups of 64 keys fed by a producer warpgroup (tiles by TMA), each
//                          tile's dQ a step later.
//             bwd_dq_store dq = bf16(scale · dQacc).
//   With ropeBase (the fused q/k/v backward), dq and dk come out turned back through rope
//   (gradients of rope's inputs): in bwd_dq_store and in bwd_ws's dK store where it holds both
//   halves of a head (D = 64 or 128), else by bwd_rope_pass after the kernels; gradStride writes
//   dq, dk and dv as the parts of one fused gradient's rows.
//             dK and dV are owned by one thread each and summed in a fixed order; dQ's order of
//             atomic additions varies from run to run (its last bits with it).
//   backward (MDLM_ATTN_DETERMINISTIC=1: the same bits on every run)
//             bwd_dq_mma   one block per (b, h, query rows): dQ = scale · Σ_tiles dS·K in registers.
//             bwd_dkdv_mma<.., false> as above without dQ.
//             No atomics; the price is S and dP recomputed in both kernels, 7 tile products.
// MDLM_ATTN_WGMMA=0 keeps the mma.sync kernels on an sm_90 device.
// f32 (and bf16 with a head dim that is not a multiple of 8 or misaligned tensors): the same
// three kernels in exact fp32 SIMT arithmetic (fwd_simt, bwd_dq_simt, bwd_dkdv_simt; 128
// threads, 16 rows a block, 32-row streamed tiles).
//
// Launch configurations of the mma.sync kernels (tile table `Tiles` below; 128 threads = 4 warps
// unless noted; the wgmma kernels are described at their definitions):
//   kD   forward Br×Bc (rows/warp)   dq Br×Bc (rows/warp)   dkdv Bc(keys)×Br(queries) (keys/warp)
//   32   128×64 (32)                 128×64 (32)            128×32 (32)
//   64   128×64 (32)                 128×64 (32)            128×32 (32)
//   96   128×32 (32)                 128×32 (32)            64×32 (16)
//   128  128×64 (32)                 128×32 (32)            64×32 (16); fused: 128×32 (16), 8 warps
// Grids: one dimension, B·H (forward, dq) or B·G (dkdv) rows × ⌈T/tile⌉ tiles, in groups of rows
// sized to L2 and tile by tile within a group (block_tile, group_rows); the query blocks are taken
// last-first and key block 0 first, so the heaviest causal blocks start first.
//
// Masking (causal, document ids, tails) is one function, attn::visible, and tiles are skipped or
// left unmasked by attn::classify_tile (cuda/attention.cuh), in every kernel. Rows never see no
// key (a query always sees itself); should one, its output is 0 and its lse -inf (no NaN).
//
// cuda/emu/attention_check.cc runs this file on the CPU (warp-instruction emulator) against a
// float64 reference: build and run it after any change to these kernels.
#include "attention.cuh"
#include "op.h"
#include "wgmma.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

namespace mdlm {
namespace attn {
namespace {

constexpr int kDM = 128;  // largest head dim

struct Params {
  const void* q;
  const void* k;
  const void* v;
  const int* seg;
  void* out;            // forward
  float* lse;           // forward
  const void* o;        // backward: the forward's out
  const float* lse_in;  // backward: the forward's lse
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  // backward: elements between tokens of dq (H·D) and of dk and dv (G·D), or a fused q/k/v
  // gradient's row for all three (gradStride)
  int64_t dq_stride, dkv_stride;
  // backward with ropeBase: the positions [B, T] rope turned q and k by, and its inv_freq table
  // (base^(−2i/D), i < D/2, as rope's kernel has it); dq and dk come out turned back. Else null.
  const int* positions;
  float inv_freq[kDM / 2];
  float* dsum;      // backward scratch: Drow = rowsum(dO∘O), [B, H, T]
  float* dq_accum;  // fused backward scratch: dQ / scale in f32, laid out like dq
  int* tile_counter;  // scratch: the tiles a persistent kernel (fwd_ws, bwd_ws) has handed out past its grid, zeroed before it
  int B, T, H, G, D, group;
  int group_rows;  // rows (b·H + h, or b·G + g) a group of the tile grids' order (block_tile)
  int sms;         // the device's multiprocessors (group_rows)
  bool causal;
  float scale;       // multiplies q·k
  float scale_log2;  // scale · log2(e): scores go through exp2
  // The warp-specialised kernels' TMA maps of q, k, v and dout (encode_tile_maps: their tiles'
  // rows), read from kernel parameter space (a __grid_constant__ Params); unset for the others.
  wg::TileMap q_map, k_map, v_map, dout_map;
};

constexpr unsigned kFull32 = 0xffffffffu;

__device__ __forceinline__ int64_t q_base(const Params& p, int b, int h) { return ((int64_t)b * p.T * p.H + h) * p.D; }
__device__ __forceinline__ int64_t kv_base(const Params& p, int b, int g) { return ((int64_t)b * p.T * p.G + g) * p.D; }
__device__ __forceinline__ int64_t row_base(const Params& p, int b, int h) { return ((int64_t)b * p.H + h) * p.T; }
__device__ __forceinline__ int64_t dq_base(const Params& p, int b, int h) { return (int64_t)b * p.T * p.dq_stride + (int64_t)h * p.D; }
__device__ __forceinline__ int64_t dkv_base(const Params& p, int b, int g) { return (int64_t)b * p.T * p.dkv_stride + (int64_t)g * p.D; }

// Query block `index` of the query-tile grid (tile_grid(B·H, T, rows), `blocks` in all, in
// block_tile's order; by default this block's): batch, q head, its kv head and first query; the
// last (causal: heaviest) query tiles first.
struct QueryBlock {
  int b, h, g, q0;
};
__device__ __forceinline__ QueryBlock query_block(const Params& p, int rows, int index, int blocks) {
  const BlockTile bt = block_tile(p.T, rows, p.group_rows, index, blocks);
  const int h = bt.row % p.H;
  return {bt.row / p.H, h, h / p.group, (bt.tiles - 1 - bt.tile) * rows};
}
__device__ __forceinline__ QueryBlock query_block(const Params& p, int rows) { return query_block(p, rows, blockIdx.x, gridDim.x); }
// The query blocks of `rows` queries in all (the query-tile grid's size).
__device__ __forceinline__ int query_blocks(const Params& p, int rows) { return p.B * p.H * ((p.T + rows - 1) / rows); }
// Key block `index` of the key-tile grid (tile_grid(B·G, T, rows), `blocks` in all; by default
// this block's): batch, kv head and first key; the first (causal: heaviest) key tiles first.
struct KeyBlock {
  int b, g, k0;
};
__device__ __forceinline__ KeyBlock key_block(const Params& p, int rows, int index, int blocks) {
  const BlockTile bt = block_tile(p.T, rows, p.group_rows, index, blocks);
  return {bt.row / p.G, bt.row % p.G, bt.tile * rows};
}
__device__ __forceinline__ KeyBlock key_block(const Params& p, int rows) { return key_block(p, rows, blockIdx.x, gridDim.x); }
// The key blocks of `rows` keys in all (the key-tile grid's size).
__device__ __forceinline__ int key_blocks(const Params& p, int rows) { return p.B * p.G * ((p.T + rows - 1) / rows); }

// =============================================================================================
// Tensor-core kernels (bf16)
// =============================================================================================

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

// ---------------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------------

template <int kD, int kBr, int kBc, int kWarps>
struct FwdCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMT = kBr / (16 * kWarps);  // 16-row tiles per warp
  static constexpr size_t kSmem = size_t(kBr + 4 * kBc) * row_stride<kD>() * sizeof(bf16);  // Q, 2 × (K, V)
  static_assert(kBr % (16 * kWarps) == 0 && kBc % 16 == 0 && kD % 16 == 0, "tile shape");
};

template <int kD, int kBr, int kBc, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) fwd_mma(const Params p) {
  wait_previous_kernel();
  using Cfg = FwdCfg<kD, kBr, kBc, kWarps>;
  constexpr int kMT = Cfg::kMT, kNT = kBc / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  MDLM_ATTN_DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][kS]; the output tile at the end
  bf16* sK = sQ + kBr * kS;                       // [2][kBc][kS]
  bf16* sV = sK + 2 * kBc * kS;                   // [2][kBc][kS]

  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const int wrow = warp * 16 * kMT;  // this warp's first row in the block
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const bf16* qg = static_cast<const bf16*>(p.q) + q_base(p, b, h);
  const bf16* kg = static_cast<const bf16*>(p.k) + kv_base(p, b, g);
  const bf16* vg = static_cast<const bf16*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  int kind = kEmpty;
  int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);

  load_rows<kBr, kD, kThreads>(sQ, qg, qstride, q0, T, D);
  if (n < n_end) {
    load_rows<kBc, kD, kThreads>(sK, kg, kvstride, n * kBc, T, D);
    load_rows<kBc, kD, kThreads>(sV, vg, kvstride, n * kBc, T, D);
  }
  cp_async_commit();

  int qseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) qseg[mt][hi] = __ldg(segb + min(q0 + wrow + mt * 16 + gid + 8 * hi, T - 1));

  float o[kMT][kDT][4];
  float mrow[kMT][2], lrow[kMT][2];  // running max (log2 units of scaled scores), partial row sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    mrow[mt][0] = mrow[mt][1] = -INFINITY;
    lrow[mt][0] = lrow[mt][1] = 0.f;
  }

  int buf = 0;
  while (n < n_end) {
    const int cur_kind = kind;
    const int k0 = n * kBc;
    cp_async_wait<0>();
    __syncthreads();  // tile n has landed; every warp is done with the other buffer
    const bf16* cK = sK + buf * kBc * kS;
    const bf16* cV = sV + buf * kBc * kS;

    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
    }
    mma_abt<kD, kNT, kMT>(s, sQ + wrow * kS, cK);  // S = Q·Kᵀ
    // The next tile: classified (its document-id loads overlap the products above) and
    // prefetched into the other buffer while this one's softmax and P·V run.
    const int n_next = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
    if (n_next < n_end) {
      load_rows<kBc, kD, kThreads>(sK + (buf ^ 1) * kBc * kS, kg, kvstride, n_next * kBc, T, D);
      load_rows<kBc, kD, kThreads>(sV + (buf ^ 1) * kBc * kS, vg, kvstride, n_next * kBc, T, D);
    }
    cp_async_commit();
    // The scores the mask hides to -inf.
    const int r0 = q0 + wrow + gid;  // (a structured binding is not captured before C++20)
    const auto row = [&](int mt, int hi) { return r0 + mt * 16 + 8 * hi; };
    if (cur_kind == kOneDoc) mask_fragments(s, k0, -INFINITY, [&](int mt, int hi, int col) { return visible_in_doc(row(mt, hi), col, T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, k0, -INFINITY, [&](int mt, int hi, int col) { return visible(row(mt, hi), qseg[mt][hi], col, __ldg(segb + min(col, T - 1)), T, causal); });
    // Online softmax: rescale the running sums and the output by 2^(old max - new max).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hi], s[mt][nt][2 * hi + 1]));
        mx = quad_max(mx) * p.scale_log2;
        const float m_new = fmaxf(mrow[mt][hi], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet
        const float alpha = fast_exp2(mrow[mt][hi] - m_use);
        mrow[mt][hi] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float pv = fast_exp2(fmaf(s[mt][nt][2 * hi + j], p.scale_log2, -m_use));
            s[mt][nt][2 * hi + j] = pv;
            sum += pv;
          }
        }
        lrow[mt][hi] = lrow[mt][hi] * alpha + sum;
        // Once the running max settles alpha is 1 for every row of the warp: skip the rescale.
        if (__any_sync(kFull32, alpha != 1.f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            o[mt][dt][2 * hi] *= alpha;
            o[mt][dt][2 * hi + 1] *= alpha;
          }
        }
      }
    }
    mma_pv<kD, kNT, kMT>(o, s, cV);  // O += P·V (P rounded to bf16)
    buf ^= 1;
    n = n_next;
  }
  cp_async_wait<0>();
  __syncthreads();  // sQ is free (and no copy is in flight) whether or not the loop ran

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float inv[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const float l = quad_sum(lrow[mt][hi]);
      inv[hi] = l > 0.f ? 1.f / l : 0.f;
      const int row = q0 + wrow + mt * 16 + gid + 8 * hi;
      if (tig == 0 && row < T) p.lse[row_base(p, b, h) + row] = l > 0.f ? (mrow[mt][hi] + __log2f(l)) * kLn2 : -INFINITY;
    }
    frag_to_smem<kD, kDT>(sQ + (wrow + mt * 16) * kS, o[mt], inv[0], inv[1]);
  }
  __syncwarp();
  store_rows_warp<16 * kMT, kD>(static_cast<bf16*>(p.out) + q_base(p, b, h), qstride, sQ + wrow * kS, q0 + wrow, T, D);
}

// ---------------------------------------------------------------------------------------------
// Backward: dQ (and Drow)
// ---------------------------------------------------------------------------------------------

template <int kD, int kBc, int kWarps, int kMT>
struct DqCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kMT * kWarps;
  static constexpr size_t kSmem = size_t(2 * kBr + 4 * kBc) * row_stride<kD>() * sizeof(bf16);  // Q, dO, 2 × (K, V)
  static_assert(kBc % 16 == 0 && kD % 16 == 0, "tile shape");
};

// Σ of the 8 products of two rows of 8 bf16 (a bf16 is the high half of an f32).
__device__ __forceinline__ float dot_bf16x8(uint4 a, uint4 b) {
  const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(x[i] << 16), __uint_as_float(y[i] << 16), acc);
    acc = fmaf(__uint_as_float(x[i] & 0xffff0000u), __uint_as_float(y[i] & 0xffff0000u), acc);
  }
  return acc;
}

template <int kD, int kBc, int kWarps, int kMT>
__global__ void __launch_bounds__(32 * kWarps) bwd_dq_mma(const Params p) {
  wait_previous_kernel();
  using Cfg = DqCfg<kD, kBc, kWarps, kMT>;
  constexpr int kBr = Cfg::kBr, kNT = kBc / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  MDLM_ATTN_DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][kS]; the dQ tile at the end
  bf16* sdO = sQ + kBr * kS;                      // [kBr][kS]
  bf16* sK = sdO + kBr * kS;                      // [2][kBc][kS]
  bf16* sV = sK + 2 * kBc * kS;                   // [2][kBc][kS]

  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2;
  const int wrow = warp * 16 * kMT;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
  const bf16* qg = static_cast<const bf16*>(p.q) + qb;
  const bf16* dog = static_cast<const bf16*>(p.dout) + qb;
  const bf16* kg = static_cast<const bf16*>(p.k) + kv_base(p, b, g);
  const bf16* vg = static_cast<const bf16*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  int kind = kEmpty;
  int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);

  load_rows<kBr, kD, kThreads>(sQ, qg, qstride, q0, T, D);
  load_rows<kBr, kD, kThreads>(sdO, dog, qstride, q0, T, D);
  if (n < n_end) {
    load_rows<kBc, kD, kThreads>(sK, kg, kvstride, n * kBc, T, D);
    load_rows<kBc, kD, kThreads>(sV, vg, kvstride, n * kBc, T, D);
  }
  cp_async_commit();

  // Drow (bwd_prep's, in the scratch) and lse of the rows gid and gid + 8 of each 16-row tile.
  float drow[kMT][2], lse2[kMT][2];
  int qseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int row = q0 + wrow + mt * 16 + gid + 8 * hi;
      drow[mt][hi] = row < T ? p.dsum[rb + row] : 0.f;
      lse2[mt][hi] = row < T ? p.lse_in[rb + row] * kLog2e : 0.f;
      qseg[mt][hi] = __ldg(segb + min(row, T - 1));
    }
  }

  float acc[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;

  int buf = 0;
  while (n < n_end) {
    const int cur_kind = kind;
    const int k0 = n * kBc;
    cp_async_wait<0>();
    __syncthreads();  // tile n has landed; every warp is done with the other buffer
    const bf16* cK = sK + buf * kBc * kS;
    const bf16* cV = sV + buf * kBc * kS;

    float s[kMT][kNT][4], dp[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
        dp[mt][nt][0] = dp[mt][nt][1] = dp[mt][nt][2] = dp[mt][nt][3] = 0.f;
      }
    mma_abt<kD, kNT, kMT>(s, sQ + wrow * kS, cK);  // S = Q·Kᵀ
    // The next tile: classified and prefetched into the other buffer (as in the forward).
    const int n_next = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
    if (n_next < n_end) {
      load_rows<kBc, kD, kThreads>(sK + (buf ^ 1) * kBc * kS, kg, kvstride, n_next * kBc, T, D);
      load_rows<kBc, kD, kThreads>(sV + (buf ^ 1) * kBc * kS, vg, kvstride, n_next * kBc, T, D);
    }
    cp_async_commit();
    mma_abt<kD, kNT, kMT>(dp, sdO + wrow * kS, cV);  // dP = dO·Vᵀ
    // dS = P∘(dP − Drow), P = exp(scale·s − lse), stored over s; on a partial tile the pairs the
    // mask hides become 0 after, in a warp-uniform branch of its own (see bwd_probs).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], p.scale_log2, -lse2[mt][e >> 1])) * (dp[mt][nt][e] - drow[mt][e >> 1]);
    // The pairs the mask hides to 0.
    const int r0 = q0 + wrow + gid;  // (a structured binding is not captured before C++20)
    const auto row = [&](int mt, int hi) { return r0 + mt * 16 + 8 * hi; };
    if (cur_kind == kOneDoc) mask_fragments(s, k0, 0.f, [&](int mt, int hi, int col) { return visible_in_doc(row(mt, hi), col, T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, k0, 0.f, [&](int mt, int hi, int col) { return visible(row(mt, hi), qseg[mt][hi], col, __ldg(segb + min(col, T - 1)), T, causal); });
    mma_pv<kD, kNT, kMT>(acc, s, cK);  // dQ += dS·K
    buf ^= 1;
    n = n_next;
  }
  cp_async_wait<0>();
  __syncthreads();

  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dq) + dq_base(p, b, h), p.dq_stride, sQ + wrow * kS, acc, p.scale, q0 + wrow, T, D);
}

// ---------------------------------------------------------------------------------------------
// Backward: dK, dV
// ---------------------------------------------------------------------------------------------

template <int kD, int kBr, int kWarps, int kMT, bool kFuseDq>
struct DkvCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBc = 16 * kMT * kWarps;
  static constexpr int kDsStride = kBr + 8;  // dSᵀ rows: padded like row_stride, for ldmatrix
  // K, V, 2 × (Q, dO) tiles, then 2 × (lse, Drow) rows, then (fused) the dSᵀ tile.
  static constexpr size_t kTiles = size_t(2 * kBc + 4 * kBr) * row_stride<kD>() * sizeof(bf16);
  static constexpr size_t kRows = kTiles + 4 * kBr * sizeof(float);
  static constexpr size_t kSmem = kRows + (kFuseDq ? size_t(kBc) * kDsStride * sizeof(bf16) : 0);
  static_assert(kBr % 16 == 0 && kD % 16 == 0 && kTiles % 16 == 0 && kRows % 16 == 0, "tile shape");
  // The fused dQ product splits the kBr × kD tile over the warps: kBr/16 row tiles × column groups.
  static_assert(!kFuseDq || (kWarps % (kBr / 16) == 0 && (kD / (kWarps / (kBr / 16))) % 16 == 0), "dQ split");
};

// The fused backward's dQ product for one query tile: dQacc[q0.., :] += dS·K over the block's kBc
// keys, dS read transposed from sdS ([kBc keys][kBr queries], every warp's rows) and K from sK.
// Warp w computes rows 16·(w mod kBr/16).. and a kD/(groups) column slice, and adds it to the f32
// accumulator (row stride `stride`) with atomics: other key blocks add to the same rows.
template <int kD, int kBc, int kBr, int kWarps>
__device__ __forceinline__ void accumulate_dq(float* dqa, int64_t stride, const bf16* sdS, const bf16* sK, int q0, int T, int D) {
  constexpr int kQT = kBr / 16, kCols = kD / (kWarps / kQT), kSS = kBr + 8, kS = row_stride<kD>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2;
  const int qt = warp % kQT, c0 = (warp / kQT) * kCols;
  float acc[kCols / 8][4];
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  // A fragments of dS (16 queries × 16 keys) are the transposed 8×8 blocks of sdS: matrix i holds
  // keys 8·(i >> 1).. × queries 8·(i & 1)..
  const int mat = lane >> 3;
  const uint32_t a_addr = smem_u32(sdS + ((mat >> 1) * 8 + (lane & 7)) * kSS + qt * 16 + (mat & 1) * 8);
  const uint32_t b_addr = smem_u32(sK + (lane & 15) * kS + c0 + (lane >> 4) * 8);
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4_t(a_addr + kk * 16 * kSS * 2, a[0], a[1], a[2], a[3]);
#pragma unroll
    for (int dp = 0; dp < kCols / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(b_addr + (kk * 16 * kS + dp * 16) * 2, b0, b1, b2, b3);
      mma_bf16(acc[2 * dp], a, b0, b1);
      mma_bf16(acc[2 * dp + 1], a, b2, b3);
    }
  }
  add_dq_rows<kCols>(dqa, stride, q0 + qt * 16 + gid, &acc[0][0], c0, D, T);
}

template <int kD, int kBr, int kWarps, int kMT, bool kFuseDq>
__global__ void __launch_bounds__(32 * kWarps) bwd_dkdv_mma(const Params p) {
  wait_previous_kernel();
  using Cfg = DkvCfg<kD, kBr, kWarps, kMT, kFuseDq>;
  constexpr int kBc = Cfg::kBc, kNT = kBr / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  MDLM_ATTN_DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // [kBc][kS]; the dK tile at the end
  bf16* sV = sK + kBc * kS;                       // [kBc][kS]; the dV tile at the end
  bf16* sQ = sV + kBc * kS;                       // [2][kBr][kS]
  bf16* sdO = sQ + 2 * kBr * kS;                  // [2][kBr][kS]
  float* sL = reinterpret_cast<float*>(smem_raw + Cfg::kTiles);  // [2][kBr] lse
  float* sDr = sL + 2 * kBr;                                      // [2][kBr] Drow
  bf16* sdS = reinterpret_cast<bf16*>(smem_raw + Cfg::kRows);     // fused: [kBc][kBr + 8] dSᵀ

  const int T = p.T, D = p.D, group = p.group;
  const bool causal = p.causal;
  const KeyBlock blk = key_block(p, kBc);  // (not a structured binding: the lambdas below capture b and g)
  const int b = blk.b, g = blk.g, k0 = blk.k0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const int wrow = warp * 16 * kMT;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t kb = kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const QueryTileWalk walk(segb, k0, kBc, kBr, T, causal);
  int hq, m, kind;
  walk.start(group, hq, m, kind);

  auto load_tile = [&](int buf_, int hq_, int m_) {
    const int h = g * group + hq_;
    const int q0 = m_ * kBr;
    const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
    load_rows<kBr, kD, kThreads>(sQ + buf_ * kBr * kS, static_cast<const bf16*>(p.q) + qb, qstride, q0, T, D);
    load_rows<kBr, kD, kThreads>(sdO + buf_ * kBr * kS, static_cast<const bf16*>(p.dout) + qb, qstride, q0, T, D);
    for (int i = threadIdx.x; i < kBr; i += kThreads) {
      const int t = q0 + i;
      const bool ok = t < T;
      cp_async4(smem_u32(sL + buf_ * kBr + i), p.lse_in + (ok ? rb + t : 0), ok);
      cp_async4(smem_u32(sDr + buf_ * kBr + i), p.dsum + (ok ? rb + t : 0), ok);
    }
  };

  load_rows<kBc, kD, kThreads>(sK, static_cast<const bf16*>(p.k) + kb, kvstride, k0, T, D);
  load_rows<kBc, kD, kThreads>(sV, static_cast<const bf16*>(p.v) + kb, kvstride, k0, T, D);
  if (hq < group) load_tile(0, hq, m);
  cp_async_commit();

  int krow[kMT][2], kseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      krow[mt][hi] = k0 + wrow + mt * 16 + gid + 8 * hi;
      kseg[mt][hi] = __ldg(segb + min(krow[mt][hi], T - 1));
    }

  float dk[kMT][kDT][4], dv[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      dk[mt][dt][0] = dk[mt][dt][1] = dk[mt][dt][2] = dk[mt][dt][3] = 0.f;
      dv[mt][dt][0] = dv[mt][dt][1] = dv[mt][dt][2] = dv[mt][dt][3] = 0.f;
    }

  int buf = 0;
  while (hq < group) {
    const int cur_kind = kind;
    const int q0 = m * kBr;
    cp_async_wait<0>();
    __syncthreads();  // tile (hq, m) has landed; every warp is done with the other buffer
    const bf16* cQ = sQ + buf * kBr * kS;
    const bf16* cdO = sdO + buf * kBr * kS;
    const float* cL = sL + buf * kBr;
    const float* cDr = sDr + buf * kBr;

    float s[kMT][kNT][4], dpt[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
        dpt[mt][nt][0] = dpt[mt][nt][1] = dpt[mt][nt][2] = dpt[mt][nt][3] = 0.f;
      }
    mma_abt<kD, kNT, kMT>(s, sK + wrow * kS, cQ);  // Sᵀ = K·Qᵀ (this warp's 16·kMT keys × kBr queries)
    // The next (head, query tile): classified and prefetched into the other buffer.
    int hq_next = hq, m_next = m;
    walk.advance(hq_next, m_next, kind);
    if (hq_next < group) load_tile(buf ^ 1, hq_next, m_next);
    cp_async_commit();
    // Pᵀ = exp(scale·sᵀ − lse[query]), stored over s; on a partial tile the pairs the mask hides
    // become 0, in a warp-uniform branch of its own (see bwd_probs).
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(cL + nt * 8 + 2 * tig);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], p.scale_log2, -((e & 1) ? l2.y : l2.x) * kLog2e));
    }
    // The pairs the mask hides to 0 (keys in rows, queries in columns here).
    if (cur_kind == kOneDoc) mask_fragments(s, q0, 0.f, [&](int mt, int hi, int qi) { return visible_in_doc(qi, krow[mt][hi], T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, q0, 0.f, [&](int mt, int hi, int qi) { return visible(qi, __ldg(segb + min(qi, T - 1)), krow[mt][hi], kseg[mt][hi], T, causal); });
    mma_abt<kD, kNT, kMT>(dpt, sV + wrow * kS, cdO);  // dPᵀ = V·dOᵀ
    // dSᵀ = Pᵀ∘(dPᵀ − Drow[query]), stored over dpt.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 d2 = *reinterpret_cast<const float2*>(cDr + nt * 8 + 2 * tig);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        dpt[mt][nt][0] = s[mt][nt][0] * (dpt[mt][nt][0] - d2.x);
        dpt[mt][nt][1] = s[mt][nt][1] * (dpt[mt][nt][1] - d2.y);
        dpt[mt][nt][2] = s[mt][nt][2] * (dpt[mt][nt][2] - d2.x);
        dpt[mt][nt][3] = s[mt][nt][3] * (dpt[mt][nt][3] - d2.y);
      }
    }
    if constexpr (kFuseDq) {
      // dSᵀ to shared memory, rounded to bf16 as the dK product rounds it, for dQ += dS·K.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          bf16* row = sdS + (wrow + mt * 16 + gid) * Cfg::kDsStride + nt * 8 + 2 * tig;
          *reinterpret_cast<uint32_t*>(row) = pack_bf16(dpt[mt][nt][0], dpt[mt][nt][1]);
          *reinterpret_cast<uint32_t*>(row + 8 * Cfg::kDsStride) = pack_bf16(dpt[mt][nt][2], dpt[mt][nt][3]);
        }
    }
    mma_pv<kD, kNT, kMT>(dv, s, cdO);   // dV += Pᵀ·dO
    mma_pv<kD, kNT, kMT>(dk, dpt, cQ);  // dK += dSᵀ·Q
    if constexpr (kFuseDq) {
      __syncthreads();  // every warp's dSᵀ rows are in sdS (the loop's next barrier guards reuse)
      accumulate_dq<kD, kBc, kBr, kWarps>(p.dq_accum + q_base(p, b, g * group + hq), qstride, sdS, sK, q0, T, D);
    }
    buf ^= 1;
    hq = hq_next;
    m = m_next;
  }
  cp_async_wait<0>();
  __syncthreads();

  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dk) + dkv_base(p, b, g), p.dkv_stride, sK + wrow * kS, dk, p.scale, k0 + wrow, T, D);
  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dv) + dkv_base(p, b, g), p.dkv_stride, sV + wrow * kS, dv, 1.f, k0 + wrow, T, D);
}

// ---------------------------------------------------------------------------------------------
// Hopper (sm_90a): TMA tile loads and softmax pieces on warpgroup MMA (cuda/wgmma.cuh), the forward
// ---------------------------------------------------------------------------------------------

// Rows [t0, t0 + kRows) of head `head` of batch b from a TMA map (encode_tile_maps) into the
// swizzled [kRows][kD] tile at shared address `tile`, one load a 64-column slab, their bytes
// credited to mbarrier `bar` (announced by the caller's mbar_arrive_expect_tx); rows ≥ T and
// columns ≥ D land as zeros. One thread issues a whole tile: the producer warps' per-thread
// cp.async copies were about 170 instructions a step of bwd_ws<128> (ncu SASS, H200, 2026-12-04),
// on the schedulers the consumers share.
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
// The mask is in its own warp-uniform branch: folded into the exponentials' loop (as it was),
// ptxas computed every tile's mask, predicated off on the interior tiles: about 300 issued
// instructions a step that did nothing, in the phase that overlaps Sᵀ's and dPᵀ's wgmmas. Split
// out, the backward is 19-37% faster at head dim 128 and 13-19% at 64 on the bench shapes, save
// B16 T1024 causal (2% slower; H200, 2026-12-03, bench/RESULTS.md tenth pass).
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

// ---------------------------------------------------------------------------------------------
// Forward, Hopper (sm_90a), warp-specialised: a producer warpgroup and two ping-ponging consumers
// ---------------------------------------------------------------------------------------------

// Whether a warp-specialised block's setmaxnreg split fits: the consumers' increase comes out of
// what the producer gives back, within the registers the block launched with (its share of the
// SM's 64K with `blocks` an SM, a multiple of 8 a thread, which ptxas -v reports); asking for more
// would wait forever.
constexpr bool setmaxnreg_fits(int producers, int producer_regs, int consumers, int consumer_regs, int blocks) {
  const int launch = 65536 / blocks / (producers + consumers) / 8 * 8;
  return producers * producer_regs + consumers * consumer_regs <= launch * (producers + consumers) && producer_regs < launch &&
         consumer_regs > launch;
}

// Slack of fwd_ws's running max (log2 units of the scaled scores): probabilities up to 2^8 keep
// bf16's relative precision and are far from overflow in the f32 sums. H200, 2026-12-04
// (bench/RESULTS.md, sixteenth pass), against rescaling at every new max: 2-4% faster at head dim
// 64 (B16 T1024 H12 bidirectional 0.162-0.166 vs 0.168-0.169 ms), level at 128.
constexpr float kMaxSlack = 8.f, kMaxP = 256.f;  // 2^kMaxSlack

// Two consumer warpgroups of 64 query rows (kBr = 128 a block) and a producer warpgroup; key
// tiles in a ring of kStages K and V buffers, each with a "full" mbarrier (the producer's TMA
// loads landed) and an "empty" one (both warpgroups are done reading it). The producer also decides
// which key tiles the block visits: with each K tile it leaves the tile's index and kind and its
// keys' segment ids in shared memory, so the consumers never read global memory in the loop.
// Persistent: as many blocks as are resident, each taking query blocks (its own index, then the
// next from p.tile_counter) until none is left; the Q tile has "full" and "empty" mbarriers too,
// and the ring runs on across query blocks, each one's loop ending with a stage that carries no
// tile, so the next query block's Q and first K/V tiles load while the consumers store O.
//
// Head dim 128: one block an SM, 128-key tiles. Head dim 64: two blocks an SM, so four consumer
// warpgroups' softmaxes interleave with the products (at head dim 64 the exponentials take about
// as long as the products), with 64-key tiles to fit 104 registers a consumer thread. H200,
// 2026-12-03 (bench/RESULTS.md, thirteenth pass), against one block of 128-key tiles: causal B16
// T1024 H12 0.122-0.124 vs 0.137-0.141 ms, B8 0.069-0.072 vs 0.071-0.074, the rest level to 2%.
template <int kD>
struct WsFwdCfg {
  static constexpr int kBlocks = kD == 64 ? 2 : 1;
  // Three stages: at head dim 128, two were up to 9% slower on the bench shapes and level on the
  // causal ones (H200, 2026-12-03: B8 T2048 H16 bidirectional with 3 documents a row 0.527 vs
  // 0.485 ms); three fill 227 KB there.
  static constexpr int kBr = 128, kBc = kBlocks == 1 ? 128 : 64, kStages = 3;
  // setmaxnreg works on warpgroups (setmaxnreg_fits). One block an SM launches at 168 registers a
  // thread: producer 56, consumers 224 (128·56 + 256·224 = 384·168); two at 80: 24 and 104
  // (128·24 + 256·104 ≤ 384·80).
  static constexpr int kProducerRegs = kBlocks == 1 ? 56 : 24, kConsumerRegs = kBlocks == 1 ? 224 : 104;
  // Whether a tile's P·V stays in flight during the next tile's softmax (S, O and P all held at
  // once). At 104 registers that made ptxas serialise every wgmma of the kernel (C7512); with two
  // blocks an SM the other block's warpgroups fill the tensor pipe instead. H200, 2026-12-03
  // (bench/RESULTS.md, thirteenth pass): 5% less time over the head-dim-64 bench shapes (B16 T1024
  // H12 bidirectional 0.165 vs 0.175 ms), and waiting for P·V only before the next S was 1% slower.
  static constexpr bool kOverlapPV = kBlocks == 1;
  static constexpr int kConsumers = 256, kProducers = 128, kThreads = kConsumers + kProducers;
  static constexpr uint32_t kQTile = kBr * kD * 2, kTile = kBc * kD * 2;  // bytes of the Q tile, of a K or V tile
  static constexpr uint32_t kOffK = kQTile, kOffV = kOffK + kStages * kTile, kOffBar = kOffV + kStages * kTile;
  // mbarriers: fullK, fullV, emptyK, emptyV, kStages each, and the Q tile's full and empty; then
  // per stage the keys' segment ids and the tile's (index, kind); then the query block of the Q
  // tile, the producer's next one and its count of query blocks handed over
  static constexpr uint32_t kOffSeg = kOffBar + (4 * kStages + 2) * 8, kOffInfo = kOffSeg + kStages * kBc * 4;
  static constexpr uint32_t kOffBlock = kOffInfo + kStages * 8;
  static constexpr size_t kSmem = kOffBlock + 12 + 1024;
  static_assert(kD == 64 || kD == 128, "warp-specialised forward: head dim 64 or 128");
  static_assert(kBlocks * (kSmem + 1024) <= 228 * 1024, "blocks an SM: shared memory");
  static_assert(setmaxnreg_fits(kProducers, kProducerRegs, kConsumers, kConsumerRegs, kBlocks), "setmaxnreg budget");
};

template <int kD, bool kOptimistic>
__global__ void __launch_bounds__(WsFwdCfg<kD>::kThreads, WsFwdCfg<kD>::kBlocks) fwd_ws(const __grid_constant__ Params p) {
  wait_previous_kernel();
#if defined(MDLM_ATTN_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = WsFwdCfg<kD>;
  static_assert(!(kOptimistic && Cfg::kOverlapPV), "the optimistic softmax is written for P·V issued after the softmax");
  constexpr int kBr = Cfg::kBr, kBc = Cfg::kBc, kS = Cfg::kStages, kKT = kBc / 16;
  MDLM_ATTN_DYNAMIC_SMEM(unsigned char, smem_raw);
  const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023) & ~1023u;
  const uint32_t aQ = base, aK = base + Cfg::kOffK, aV = base + Cfg::kOffV, bar = base + Cfg::kOffBar;
  auto full_k = [&](int s) { return bar + 8 * s; };
  auto full_v = [&](int s) { return bar + 8 * (kS + s); };
  auto empty_k = [&](int s) { return bar + 8 * (2 * kS + s); };
  auto empty_v = [&](int s) { return bar + 8 * (3 * kS + s); };
  // Q: landed (thread 0 of the producer), free again (every consumer thread)
  const uint32_t full_q = bar + 8 * 4 * kS, empty_q = full_q + 8;
  int* const seg_smem = reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffSeg);  // [kS][kBc]
  int* const info = reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffInfo);     // [kS][2]: tile, kind
  const TileHandOver blocks{reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffBlock)};  // query blocks
  const int T = p.T;
  const bool causal = p.causal;
  // The key tiles a query block's loop runs to (its end stage carries this index).
  auto key_tiles_end = [&](int q0) { return causal ? min((T + kBc - 1) / kBc, (min(q0 + kBr, T) + kBc - 1) / kBc) : (T + kBc - 1) / kBc; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s) {
      // full K: every producer thread's arrival (its segment id and the tile info are stored),
      // thread 0's announcing the tile's bytes; full V: thread 0's
      wg::mbar_init(full_k(s), Cfg::kProducers);
      wg::mbar_init(full_v(s), 1);
      wg::mbar_init(empty_k(s), Cfg::kConsumers);
      wg::mbar_init(empty_v(s), Cfg::kConsumers);
    }
    wg::mbar_init(full_q, 1);
    wg::mbar_init(empty_q, Cfg::kConsumers);
    blocks.init();
    wg::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= Cfg::kConsumers) {
    wg::regs_dec<Cfg::kProducerRegs>();
    // Producer warpgroup: for each query block the block takes, its Q tile (each consumer
    // warpgroup's 64 rows) once the consumers are done with the last one, then K (with the tile's
    // segment ids and info) and V of every key tile it visits, into the ring, then a stage whose
    // index is the loop's end (key_tiles_end) that ends the query block. Thread 0 issues the TMA
    // loads. The first query block is the block's own index, the next ones come from the counter.
    // (Issuing the first K/V stage, with its tile search, before Q's hand-over was level on the
    // H200, 2026-12-05: bench/RESULTS.md, twenty-second pass.)
    const int pt = threadIdx.x - Cfg::kConsumers;
    static_assert(Cfg::kProducers >= kBc, "a producer thread a key's segment id");
    const int n_blocks = query_blocks(p, kBr);
    int i = 0;  // ring steps, over all the block's query blocks
    for (int blk_index = blockIdx.x;; blk_index = blocks.next(p, pt, 3, Cfg::kProducers)) {
      if (blk_index >= n_blocks) {
        if (pt == 0) blocks.hand_over_none(blk_index, empty_q, full_q);
        return;
      }
      const QueryBlock qb = query_block(p, kBr, blk_index, n_blocks);
      const int b = qb.b, g = qb.g, q0 = qb.q0, n_end = key_tiles_end(q0);
      const int* segb = p.seg + (int64_t)b * T;
      if (pt == 0) {
        blocks.hand_over(blk_index, empty_q);
        wg::mbar_arrive_expect_tx(full_q, Cfg::kQTile);
#pragma unroll
        for (int w = 0; w < kBr / 64; ++w) load_tile<64, kD>(aQ + w * (64 * kD * 2), p.q_map, qb.h, q0 + 64 * w, b, full_q);
      }
      const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
      int kind = kEmpty;
      int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
      for (;; ++i) {
        const int s = i % kS;
        const uint32_t phase = (uint32_t)(i / kS) & 1u;
        if (i >= kS) wg::mbar_wait(empty_k(s), phase ^ 1u);
        if (pt == 0) {
          info[2 * s] = n;
          info[2 * s + 1] = kind;
        }
        if (n < n_end && pt < kBc) seg_smem[s * kBc + pt] = __ldg(segb + min(n * kBc + pt, T - 1));
        if (n < n_end && pt == 0) {
          wg::mbar_arrive_expect_tx(full_k(s), Cfg::kTile);
          load_tile<kBc, kD>(aK + s * Cfg::kTile, p.k_map, g, n * kBc, b, full_k(s));
        } else {
          wg::mbar_arrive(full_k(s));
        }
        if (pt == 0) {
          if (i >= kS) wg::mbar_wait(empty_v(s), phase ^ 1u);
          if (n < n_end) {
            wg::mbar_arrive_expect_tx(full_v(s), Cfg::kTile);
            load_tile<kBc, kD>(aV + s * Cfg::kTile, p.v_map, g, n * kBc, b, full_v(s));
          } else {
            wg::mbar_arrive(full_v(s));  // the end stage: a phase with no tile keeps V's phases in step with K's
          }
        }
        if (n >= n_end) break;
        n = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
      }
      ++i;
    }
  }

  // Consumer warpgroups.
  wg::regs_inc<Cfg::kConsumerRegs>();
  const int wgi = wg::warpgroup_index(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const uint32_t aQw = aQ + wgi * (64 * kD * 2);  // this warpgroup's [64][kD] Q tile
  const int D = p.D;
  const int64_t qstride = (int64_t)p.H * D;
  int i = 0;  // ring steps, over all the block's query blocks (each one's end stage included)
  for (int nq = 0;; ++nq) {
    wg::mbar_wait(full_q, (uint32_t)nq & 1u);  // both warpgroups' Q rows (the first step reads all of them)
    if (blocks.current() >= query_blocks(p, kBr)) break;
    const QueryBlock qb = query_block(p, kBr, blocks.current(), query_blocks(p, kBr));
    const int q0 = qb.q0, n_end = key_tiles_end(q0);
    const int* segb = p.seg + (int64_t)qb.b * T;
    int qrow[2], qseg[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      qrow[hi] = q0 + 64 * wgi + 16 * warp + gid + 8 * hi;
      qseg[hi] = __ldg(segb + min(qrow[hi], T - 1));
    }
    float o[kD / 2];
#pragma unroll
    for (int e = 0; e < kD / 2; ++e) o[e] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    // P of the previous tile as bf16 A fragments (of this tile's without kOverlapPV); with
    // kOverlapPV the first step's product multiplies these zeros
    // by the Q tiles (finite, and never rewritten: a K or V buffer could be refilled while that
    // product is in flight), so every wgmma is on a uniform path.
    uint32_t pa[kKT][4];
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;

    // Ping-pong: a warpgroup issues its products after the other one has issued its own (named
    // barriers 1 and 2), so one's softmax runs while the other's products do.
    if (wgi == 1) wg::bar_arrive(1, 256);
    uint32_t prev_v = aQ;  // the previous tile's V (see pa)
    auto issue_pv = [&] {  // O += P·V of prev_v's tile, one commit group
#pragma unroll
      for (int kk = 0; kk < kKT; ++kk) wg::wgmma_rs<kD, 1>(o, pa[kk], wg::desc_mn_major(prev_v, kBc, 0, kk), true);
      wg::wgmma_commit();
    };
    bool first = true;  // no tile of this query block yet
    for (;; ++i) {
      const int s = i % kS;
      const uint32_t phase = (uint32_t)(i / kS) & 1u;
      wg::mbar_wait(full_k(s), phase);
      const int n = info[2 * s], cur_kind = info[2 * s + 1], k0 = n * kBc;
      if (n >= n_end) {  // the query block's end: a stage with nothing in it
        wg::mbar_arrive(empty_k(s));
        // V's end phase only after the producer's (which follows its wait for this stage's last
        // release): arriving first could complete two phases of empty_v before it looks, and a
        // parity wait would then miss the one it waits for.
        wg::mbar_wait(full_v(s), phase);
        wg::mbar_arrive(empty_v(s));
        break;
      }
      if (Cfg::kOverlapPV && !first) wg::mbar_wait(full_v((i - 1) % kS), (uint32_t)((i - 1) / kS) & 1u);
      wg::bar_sync(1 + wgi, 256);
      // S = Q·Kᵀ of this stage's key tile into x, issued and committed (the optimistic softmax's
      // exact pass issues it again)
      auto issue_s = [&](float (&x)[kBc / 2]) {
        wg::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk)
          wg::wgmma_ss<kBc, 0, 0>(x, wg::desc_k_major(aQw, 64, 0, kk), wg::desc_k_major(aK + s * Cfg::kTile, kBc, 0, kk), kk > 0);
        wg::wgmma_commit();
      };
      float sc[kBc / 2];
      issue_s(sc);
      if constexpr (Cfg::kOverlapPV) issue_pv();
      wg::bar_arrive(2 - wgi, 256);
      wg::wgmma_wait<Cfg::kOverlapPV ? 1 : 0>();  // S(n); with kOverlapPV the previous P·V may still run

      // Scores the mask hides to -inf: a one-document tile's by positions (`positions`; else as
      // a partial tile's), a partial tile's with this stage's segment ids too.
      auto mask = [&](float (&x)[kBc / 2], bool positions) {
        auto hide = [&](auto visible_at) {
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
              for (int hi = 0; hi < 2; ++hi)
                if (!visible_at(hi, 8 * j + 2 * tig + e)) x[4 * j + 2 * hi + e] = -INFINITY;
        };
        if (positions && cur_kind == kOneDoc) hide([&](int hi, int col) { return visible_in_doc(qrow[hi], k0 + col, T, causal); });
        else if (cur_kind != kFull) hide([&](int hi, int col) { return visible(qrow[hi], qseg[hi], k0 + col, seg_smem[s * kBc + col], T, causal); });
      };
      // The probabilities of scores x into P's fragments, the row sums into lrow, O rescaled where
      // the running max moves; that happens only when the tile's max exceeds it by more than
      // kMaxSlack, so rarely after the first tiles, and the probabilities stay below 2^kMaxSlack.
      auto exact_softmax = [&](float (&x)[kBc / 2]) {
        float alpha[2];
        bool grow = false;
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j) mx = fmaxf(mx, fmaxf(x[4 * j + 2 * hi], x[4 * j + 2 * hi + 1]));
          mx = quad_max(mx) * p.scale_log2;
          const float m_new = mx > mrow[hi] + kMaxSlack ? mx : mrow[hi];
          grow |= m_new != mrow[hi];
          const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet
          alpha[hi] = fast_exp2(mrow[hi] - m_use);
          mrow[hi] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = fast_exp2(fmaf(x[4 * j + 2 * hi + e], p.scale_log2, -m_use));
              x[4 * j + 2 * hi + e] = pv;
              sum += pv;
            }
          lrow[hi] = lrow[hi] * alpha[hi] + sum;
        }
        if constexpr (Cfg::kOverlapPV) {
          wg::wgmma_wait<0>();  // the previous P·V has landed: its V buffer is free, O can be rescaled
          if (!first) wg::mbar_arrive(empty_v((i - 1) % kS));
        }
        if (__any_sync(kFull32, grow)) {
#pragma unroll
          for (int j = 0; j < kD / 8; ++j)
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
              o[4 * j + 2 * hi] *= alpha[hi];
              o[4 * j + 2 * hi + 1] *= alpha[hi];
            }
        }
        a_fragments<kBc>(x, pa);
      };
      mask(sc, true);
      if constexpr (kOptimistic) {
        // The optimistic softmax, H200 2026-12-04 (bench/RESULTS.md, seventeenth pass): B16 T1024 H12
        // bidirectional 0.154 against 0.162 ms, llama-124m mdlm 0.14 ms a step less.
        // First against the running max as it stands, with no max taken: kept unless a row's sum
        // over some thread's keys exceeds 2^kMaxSlack (then a probability might) or is not finite
        // (no running max yet); the warpgroup decides together. Else the exact pass, on the scores
        // computed again (the K tile and its segment ids stay until then; keeping the first ones
        // took the registers that keep the wgmmas in flight).
        float psum[2] = {0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {  // register r: row r & 1 (accumulator elements 8·kk + 2·r, + 1)
            const float neg_m = -mrow[r & 1];
            const float p0 = fast_exp2(fmaf(sc[8 * kk + 2 * r], p.scale_log2, neg_m));
            const float p1 = fast_exp2(fmaf(sc[8 * kk + 2 * r + 1], p.scale_log2, neg_m));
            psum[r & 1] += p0 + p1;
            pa[kk][r] = pack_bf16(p0, p1);
          }
        if (wg::bar_any(4 + wgi, 128, !(psum[0] <= kMaxP && psum[1] <= kMaxP))) {
          float again[kBc / 2];
          issue_s(again);
          wg::wgmma_wait<0>();
          mask(again, false);  // (one path of the mask fewer: registers)
          exact_softmax(again);
        } else {
          lrow[0] += psum[0];
          lrow[1] += psum[1];
        }
        wg::mbar_arrive(empty_k(s));
      } else {
        wg::mbar_arrive(empty_k(s));  // S(n) is in registers and the segment ids are read
        exact_softmax(sc);
      }
      prev_v = aV + s * Cfg::kTile;
      if constexpr (!Cfg::kOverlapPV) {  // this tile's P·V now, waited for before the next S
        wg::mbar_wait(full_v(s), phase);
        wg::wgmma_fence();
        issue_pv();
        wg::wgmma_wait<0>();
        wg::mbar_arrive(empty_v(s));
      }
      first = false;
    }
    if (wgi == 0) wg::bar_sync(1, 256);  // the other warpgroup's last arrival on barrier 1
    if constexpr (Cfg::kOverlapPV) {  // the last tile's P·V
      if (!first) wg::mbar_wait(full_v((i - 1) % kS), (uint32_t)((i - 1) / kS) & 1u);
      wg::wgmma_fence();
      issue_pv();
      wg::wgmma_wait<0>();
      if (!first) wg::mbar_arrive(empty_v((i - 1) % kS));
    }
    ++i;  // past the end stage
    wg::mbar_arrive(empty_q);  // every product of this query block is done: the next Q may load

    const int b = qb.b, h = qb.h;
    bf16* og = static_cast<bf16*>(p.out) + q_base(p, b, h);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const float l = quad_sum(lrow[hi]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int t = qrow[hi];
      if (t >= T) continue;
      if (tig == 0) p.lse[row_base(p, b, h) + t] = l > 0.f ? (mrow[hi] + __log2f(l)) * kLn2 : -INFINITY;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const int col = 8 * j + 2 * tig;
        if (col < D) *reinterpret_cast<uint32_t*>(og + (int64_t)t * qstride + col) = pack_bf16(o[4 * j + 2 * hi] * inv, o[4 * j + 2 * hi + 1] * inv);
      }
    }
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Backward, Hopper (sm_90a), warp-specialised: a producer warpgroup and two consumers
// ---------------------------------------------------------------------------------------------

// bwd_dkdv_mma<.., true> on wgmma. Per 64-query tile, each consumer warpgroup computes, for its 64
// keys, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (shared × shared), Pᵀ and dSᵀ in registers, dV += Pᵀ·dO
// (registers × shared, MN-major), writes dSᵀ (bf16) to shared memory, and dK += dSᵀ·Q (from
// registers at head dim 128, from there at 64); dQ += dS·K goes to the f32 accumulator with atomics.
//
// Persistent, as fwd_ws: each block takes key blocks (its own, then the next from p.tile_counter,
// which bwd_prep zeroes) until none is left; K and V have "full" and "empty" mbarriers, and the
// ring runs on across key blocks with an end stage for each, so the next key block's K, V and
// first Q/dO stages load while the consumers store dK and dV and add the last dQ. The next key
// block's walk is built while its K and V wait for the consumers to finish the last block, so
// the walk's global round trips are off that hand-over's path.
//
// Head dim 128: each warpgroup computes half of dQ's columns. A producer warpgroup walks the query tiles
// and loads each one's Q and dO (TMA), lse, Drow and segment ids (cp.async) into a ring of three
// stages ("full" and "empty" mbarriers, as fwd_ws). The consumers issue no copies and run no walk, and take the
// registers the producer gives back (240 a thread). A step's dQ needs both warpgroups' dSᵀ rows,
// so it is computed a step later, from a ring of three dSᵀ buffers with mbarriers of their own
// ("written" by both warpgroups, "read" by both dQs): the warpgroups never meet at a barrier and
// drift apart, so one's softmax can run under the other's products.
// H200, 2026-12-03 (bench/RESULTS.md, eleventh pass), against the two-warpgroup bwd_dkdv_wgmma
// (one warpgroup a block at 64, the same products without a producer) it replaced: 1.12-1.20× faster on the head-dim-128 bench shapes save B8 T2048 H16 causal (level)
// with dQ in its own step and one block barrier a step, and the deferred dQ 1.02-1.09× faster
// again (B8 T2048 H16 bidirectional: 2.168 → 1.913 ms in one run, 1.879 → 1.812 in another;
// SDPA 1.474).
//
// Head dim 64: a step takes 128 query rows (FlashAttention-3's tile there), so Sᵀ and dPᵀ are n128
// products and a step does twice the work between its waits; a tile's dQ has 64 columns, too few
// to split (a 32-column operand would start inside a 128-byte swizzle row), so each warpgroup
// computes dQ for its half of the query rows over both warpgroups' 128 keys. Three Q/dO stages fit
// beside two dSᵀ buffers of 128 × 128. H200, 2026-12-04 (bench/RESULTS.md, eighteenth pass),
// against 64 query rows a step with the warpgroups taking turns at dQ: B16 T1024 H12
// bidirectional 0.471 vs 0.487 ms, causal 0.332 vs 0.335, B8 bidirectional 0.248 vs 0.255;
// llama-124m mdlm 0.40 ms a step less. (Those turns had replaced bwd_dkdv_wgmma, one warpgroup of
// 64 keys and three blocks an SM: 0.485 vs 0.545 ms at B16 T1024 bidirectional, thirteenth pass.)
// Three Q/dO stages and two dSᵀ buffers rather than two and three (the same shared memory: the
// producer runs a tile further ahead, the warpgroups may drift a step less apart): llama-124m
// 0.06 ms a step less for both objectives, every one of six alternating runs; B8 T1024
// bidirectional 0.245 vs 0.249 ms (twentieth pass).
template <int kD>
struct WsBwdCfg {
  // Query rows a step: 128 at head dim 64 (FlashAttention-3's tile there: twice the work between a
  // step's waits, n128 products), 64 at 128 (no registers for more).
  static constexpr int kWG = 2, kBc = 128, kBr = kD == 64 ? 128 : 64;
  // Each warpgroup computes half of every step's dQ: half the columns (head dim 128, kSplitDq), or
  // half the query rows (64).
  static constexpr bool kSplitDq = kD == 128;
  static constexpr int kDq = kSplitDq ? kD / kWG : kD;
  // dK += dSᵀ·Q with dSᵀ from registers (the fragments bwd_store_dst packs), so dK need not wait
  // for this warpgroup's stores: at head dim 128 (3-7% faster, twentieth pass). At 64 dK reads the
  // stored rows: the 32 more registers make ptxas serialise the wgmmas (C7512) while dK stays in
  // flight across the loop's back edge, still with the persistent kernel's 240 (ptxas 13.0,
  // 2026-12-05). Waiting for dK before the atomics compiles without it, and was level on the H200
  // (2026-12-05, bench/RESULTS.md twenty-second pass; the variant is commit 65b9580).
  static constexpr bool kDsInRegs = kD == 128;
  // Three Q and dO stages; dSᵀ buffers: three at 128, two at 64, where they are twice as large
  // (shared memory).
  static constexpr int kStages = 3, kdSBufs = kD == 64 ? 2 : 3;
  // 128·24 + 256·240 = 384·168, the launch share (setmaxnreg_fits). The persistent producer fits
  // its 24 with the walk's state in shared memory (in registers ptxas spilled 48 bytes).
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kConsumers = 128 * kWG, kProducers = 128, kThreads = kConsumers + kProducers;
  static constexpr uint32_t kKV = kBc * kD * 2, kQ = kBr * kD * 2, kdS = kBc * kBr * 2;
  // K, V, kStages × Q, kStages × dO, kdSBufs × dSᵀ [kBc][kBr]; then kStages × (lse, Drow, segment
  // id) of kBr, kStages × the tile's (head, query tile, kind, -), and the mbarriers: full and empty
  // of each stage, written and read of each dSᵀ buffer, and K and V's; the key block of K and V,
  // the producer's next one and its count of key blocks handed over; the producer's walk.
  static constexpr uint32_t kOffQ = 2 * kKV, kOffdO = kOffQ + kStages * kQ, kOffdS = kOffdO + kStages * kQ;
  static constexpr uint32_t kOffRows = kOffdS + kdSBufs * kdS, kOffInfo = kOffRows + 3 * kStages * kBr * 4;
  static constexpr uint32_t kOffBar = kOffInfo + kStages * 16, kOffBlock = kOffBar + (2 * (kStages + kdSBufs) + 2) * 8;
  static constexpr uint32_t kOffWalk = kOffBlock + 16;
  static constexpr size_t kSmem = kOffWalk + sizeof(QueryTileWalk) + 1024;
  static_assert(kD == 64 || kD == 128, "warp-specialised backward: head dim 64 or 128");
  static_assert(kSmem <= 227 * 1024, "warp-specialised backward: shared memory");
  static_assert(setmaxnreg_fits(kProducers, kProducerRegs, kConsumers, kConsumerRegs, 1), "setmaxnreg budget");
};

template <int kD>
__global__ void __launch_bounds__(WsBwdCfg<kD>::kThreads, 1) bwd_ws(const __grid_constant__ Params p) {
  wait_previous_kernel();
#if defined(MDLM_ATTN_EMULATE) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = WsBwdCfg<kD>;
  constexpr int kBc = Cfg::kBc, kBr = Cfg::kBr, kDq = Cfg::kDq, kS = Cfg::kStages;
  MDLM_ATTN_DYNAMIC_SMEM(unsigned char, smem_raw);
  const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  float* sL = reinterpret_cast<float*>(smem + Cfg::kOffRows);  // [kS][kBr] lse
  float* sDr = sL + kS * kBr;                                   // [kS][kBr] Drow
  int* sSg = reinterpret_cast<int*>(sDr + kS * kBr);            // [kS][kBr] the queries' segment ids
  int* info = reinterpret_cast<int*>(smem + Cfg::kOffInfo);     // [kS][4]: head in the group, query tile, kind
  const uint32_t aK = base, aV = aK + Cfg::kKV, aQ = base + Cfg::kOffQ, adO = base + Cfg::kOffdO, adS = base + Cfg::kOffdS;
  const uint32_t bar = base + Cfg::kOffBar;
  auto full = [&](int s) { return bar + 8 * s; };
  auto empty = [&](int s) { return bar + 8 * (kS + s); };
  auto ds_full = [&](int j) { return bar + 8 * (2 * kS + j); };
  auto ds_empty = [&](int j) { return bar + 8 * (2 * kS + Cfg::kdSBufs + j); };
  // K and V: landed (thread 0 of the producer), free again (every consumer thread)
  const uint32_t full_kv = bar + 8 * 2 * (kS + Cfg::kdSBufs), empty_kv = full_kv + 8;
  const TileHandOver blocks{reinterpret_cast<int*>(smem + Cfg::kOffBlock)};  // key blocks

  // (Each role computes what it needs after its setmaxnreg: a value live across the producer's
  // would have to fit its registers.)
  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s) {
      // full: every producer thread's arrival (after its stores of the tile's info; thread 0's
      // announcing Q and dO's bytes) and its cp.async copies' arrival; empty: every consumer thread's
      wg::mbar_init(full(s), 2 * Cfg::kProducers);
      wg::mbar_init(empty(s), Cfg::kConsumers);
    }
    for (int j = 0; j < Cfg::kdSBufs; ++j) {
      wg::mbar_init(ds_full(j), Cfg::kConsumers);
      wg::mbar_init(ds_empty(j), Cfg::kConsumers);
    }
    wg::mbar_init(full_kv, 1);
    wg::mbar_init(empty_kv, Cfg::kConsumers);
    blocks.init();
    wg::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= Cfg::kConsumers) {
    wg::regs_dec<Cfg::kProducerRegs>();
    // Producer: for each key block the block takes, its K and V tiles once the consumers are done
    // with the last ones (thread 32), then every query tile's Q and dO (thread 0, by TMA) and, for
    // pt < kBr, row pt's lse, Drow and segment id (cp.async) into the ring, and a stage whose head
    // is `group` that ends the key block; every warp walks the tiles (the walk's reductions are a
    // warp's). The first key block is the block's own index, the next ones come from the counter.
    const int pt = threadIdx.x - Cfg::kConsumers;
    static_assert(Cfg::kProducers >= kBr, "a producer thread a query's row values");
    const int T = p.T, group = p.group, n_blocks = key_blocks(p, kBc);
    int i = 0;  // ring steps, over all the block's key blocks
    // (the walk of the last key block is done with once next() returns: its barriers)
    for (int blk_index = blockIdx.x;; blk_index = blocks.next(p, pt, 1, Cfg::kProducers)) {
      if (blk_index >= n_blocks) {
        if (pt == 32) blocks.hand_over_none(blk_index, empty_kv, full_kv);
        return;
      }
      const KeyBlock kb = key_block(p, kBc, blk_index, n_blocks);
      const int b = kb.b, g = kb.g;
      // The walk, in shared memory: in registers it took more than the producer's 24 (each warp
      // reloads its fields as it goes). Warp 0 builds it (the build's reductions are a warp's)
      // while thread 32 hands the key block over, with its K and V, once the consumers are done
      // with the last one's: the walk's global round trips are then off the path from the
      // consumers' end of a key block to the first stage's loads.
      QueryTileWalk* const walk_smem = reinterpret_cast<QueryTileWalk*>(smem + Cfg::kOffWalk);
      if (pt < 32) {
        const QueryTileWalk w(p.seg + (int64_t)b * T, kb.k0, kBc, kBr, T, p.causal);
        if (pt == 0) *walk_smem = w;
      } else if (pt == 32) {
        blocks.hand_over(blk_index, empty_kv);
        wg::mbar_arrive_expect_tx(full_kv, 2 * Cfg::kKV);
        load_tile<kBc, kD>(aK, p.k_map, g, kb.k0, b, full_kv);
        load_tile<kBc, kD>(aV, p.v_map, g, kb.k0, b, full_kv);
      }
      wg::bar_sync(1, Cfg::kProducers);
      const QueryTileWalk& walk = *walk_smem;
      int hq, m, kind;
      walk.start(group, hq, m, kind);
      for (;; ++i) {
        const int s = i % kS;
        if (i >= kS) wg::mbar_wait(empty(s), (uint32_t)(i / kS - 1) & 1u);
        if (pt == 0) {
          info[4 * s] = hq;
          info[4 * s + 1] = m;
          info[4 * s + 2] = kind;
        }
        const int h = g * group + hq, q0 = m * kBr;
        if (hq < group && pt < kBr) {
          const int64_t rb = row_base(p, b, h);
          const int t = q0 + pt;
          const bool ok = t < T;
          cp_async4(smem_u32(sL + s * kBr + pt), p.lse_in + (ok ? rb + t : 0), ok);
          cp_async4(smem_u32(sDr + s * kBr + pt), p.dsum + (ok ? rb + t : 0), ok);
          cp_async4(smem_u32(sSg + s * kBr + pt), walk.seg + min(t, T - 1), true);
        }
        if (hq < group && pt == 0) {
          wg::mbar_arrive_expect_tx(full(s), 2 * Cfg::kQ);
          load_tile<kBr, kD>(aQ + s * Cfg::kQ, p.q_map, h, q0, b, full(s));
          load_tile<kBr, kD>(adO + s * Cfg::kQ, p.dout_map, h, q0, b, full(s));
        } else {
          wg::mbar_arrive(full(s));
        }
        wg::cp_async_mbar_arrive(full(s));
        if (hq >= group) break;
        walk.advance(hq, m, kind);
      }
      ++i;
    }
  }

  // Consumer warpgroups: warpgroup w owns keys k0 + 64w.. of each key block.
  wg::regs_inc<Cfg::kConsumerRegs>();
  const int wgi = wg::warpgroup_index(), warp = (threadIdx.x >> 5) & 3, gid = (threadIdx.x & 31) >> 2;
  const int key0 = 64 * wgi;
  const int T = p.T, D = p.D, group = p.group;
  const bool causal = p.causal;
  const int64_t qstride = (int64_t)p.H * D;
  // dQ of a step's tile over dSᵀ buffer `buf` (both warpgroups' rows of keys): this warpgroup's
  // columns of the 64 query rows (head dim 128), or all columns of its 64 of the 128 (64).
  const int dq_col = Cfg::kSplitDq ? wgi * kDq : 0, dq_row = Cfg::kSplitDq ? 0 : 64 * wgi;
  auto issue_dq = [&](float (&dq)[kDq / 2], uint32_t buf) {
    wg::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wg::wgmma_ss<kDq, 1, 1>(dq, wg::desc_mn_major(buf, kBc, dq_row, kk), wg::desc_mn_major(aK, kBc, dq_col, kk), kk > 0);
    wg::wgmma_commit();
  };
  // Ring steps (the producer's, over all the block's key blocks, each one's end included); the
  // dSᵀ steps are the others, i − n before key block n's end.
  int i = 0;
  for (int n = 0;; ++n) {
    wg::mbar_wait(full_kv, (uint32_t)n & 1u);
    // (computed again for the dK and dV stores: the loop has no registers to keep b and g in)
    auto this_block = [&] { return key_block(p, kBc, blocks.current(), key_blocks(p, kBc)); };
    if (blocks.current() >= key_blocks(p, kBc)) break;
    const KeyBlock kb = this_block();
    const int* segb = p.seg + (int64_t)kb.b * T;
    float* const dq_heads = p.dq_accum + q_base(p, kb.b, kb.g * group);  // the group's first q head
    auto add_dq = [&](const float (&dq)[kDq / 2], int hq, int q0) {
      add_dq_rows<kDq>(dq_heads + hq * D, qstride, q0 + dq_row + 16 * warp + gid, dq, dq_col, D, T);
    };
    int krow[2], kseg[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      krow[hi] = kb.k0 + key0 + 16 * warp + gid + 8 * hi;
      kseg[hi] = __ldg(segb + min(krow[hi], T - 1));
    }
    float dk[kD / 2], dv[kD / 2];
#pragma unroll
    for (int e = 0; e < kD / 2; ++e) dk[e] = dv[e] = 0.f;
    // Keeps the zeroing here: sunk into both sides of the loop's entry test, it would define dK's
    // registers on a path that meets an in-flight dK product before its wait (C7515).
    wg::fence_operand(dk);
    wg::fence_operand(dv);

    int prev_hq = -1, prev_q0 = 0;  // the step before's tile, whose dQ a step computes (-1: none yet)
    for (;; ++i) {
      const int j = i - n, s = i % kS, d = j % Cfg::kdSBufs;
      wg::mbar_wait(full(s), (uint32_t)(i / kS) & 1u);
      const int hq = info[4 * s], m = info[4 * s + 1], cur_kind = info[4 * s + 2];
      if (hq >= group) {  // the key block's end: a stage with nothing in it
        wg::mbar_arrive(empty(s));
        break;
      }
      const int q0 = m * kBr;
      const uint32_t cQ = aQ + s * Cfg::kQ, cdO = adO + s * Cfg::kQ;
      const float* cL = sL + s * kBr;
      const float* cDr = sDr + s * kBr;
      const int* cSg = sSg + s * kBr;

      float sc[kBr / 2], dp[kBr / 2];
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wg::wgmma_ss<kBr, 0, 0>(sc, wg::desc_k_major(aK, kBc, key0, kk), wg::desc_k_major(cQ, kBr, 0, kk), kk > 0);
      wg::wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wg::wgmma_ss<kBr, 0, 0>(dp, wg::desc_k_major(aV, kBc, key0, kk), wg::desc_k_major(cdO, kBr, 0, kk), kk > 0);
      wg::wgmma_commit();

      wg::wgmma_wait<1>();  // the previous step's dK (the last reader of its Q and its dSᵀ rows) and Sᵀ
      if (prev_hq >= 0) wg::mbar_arrive(empty((i - 1) % kS));
      uint32_t pa[kBr / 16][4];
      bwd_probs<kBr>(sc, pa, cL, cSg, cur_kind, q0, krow, kseg, T, causal, p.scale_log2);

      wg::wgmma_wait<0>();  // dPᵀ
      // both warpgroups' dQ of the buffer's last tile are done
      if (j >= Cfg::kdSBufs) wg::mbar_wait(ds_empty(d), (uint32_t)(j / Cfg::kdSBufs - 1) & 1u);
      uint32_t dsa[kBr / 16][4];
      bwd_store_dst<kBc, kBr>(adS + d * Cfg::kdS, dp, sc, cDr, key0, dsa);
      wg::fence_proxy_async();
      wg::mbar_arrive(ds_full(d));
      if constexpr (!Cfg::kDsInRegs) wg::bar_sync(2 + wgi, 128);  // this warpgroup's rows, which its dK reads

      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) wg::wgmma_rs<kD, 1>(dv, pa[kk], wg::desc_mn_major(cdO, kBr, 0, kk), true);  // dV += Pᵀ·dO
      wg::wgmma_commit();
      // the step before's dSᵀ (both warpgroups' rows), which its dQ below reads
      const int dprev = (j - 1 + Cfg::kdSBufs) % Cfg::kdSBufs;
      if (prev_hq >= 0) wg::mbar_wait(ds_full(dprev), (uint32_t)((j - 1) / Cfg::kdSBufs) & 1u);
      // dQ of the step before's tile: its dSᵀ was written a step ago, so the warpgroups rarely wait
      // for each other, and one's softmax can overlap the other's products. (A key block's first
      // step has none: it multiplies the K and V tiles, which no copy rewrites while they are in
      // use, unread, so every wgmma is on a uniform path: a conditional one made ptxas spill 392
      // bytes.)
      float dq[kDq / 2];
      issue_dq(dq, prev_hq >= 0 ? adS + dprev * Cfg::kdS : aK);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {  // dK += dSᵀ·Q
        if constexpr (Cfg::kDsInRegs) wg::wgmma_rs<kD, 1>(dk, dsa[kk], wg::desc_mn_major(cQ, kBr, 0, kk), true);
        else wg::wgmma_ss<kD, 0, 1>(dk, wg::desc_k_major(adS + d * Cfg::kdS, kBc, key0, kk), wg::desc_mn_major(cQ, kBr, 0, kk), true);
      }
      wg::wgmma_commit();
      // dV and dQ; dK runs on (see kDsInRegs)
      wg::wgmma_wait<1>();
      if (prev_hq >= 0) {
        add_dq(dq, prev_hq, prev_q0);
        wg::mbar_arrive(ds_empty(dprev));
      }
      prev_hq = hq;
      prev_q0 = q0;
    }
    KeyBlock end_block;
    {  // the key block's last dQ, after which its K and V are free
      const int j = i - n, dprev = (j - 1 + Cfg::kdSBufs) % Cfg::kdSBufs;
      float dq[kDq / 2];
      if (prev_hq >= 0) wg::mbar_wait(ds_full(dprev), (uint32_t)((j - 1) / Cfg::kdSBufs) & 1u);
      issue_dq(dq, prev_hq >= 0 ? adS + dprev * Cfg::kdS : aK);
      wg::wgmma_wait<0>();  // and the last step's dK
      end_block = this_block();  // before the producer may hand over the next
      wg::mbar_arrive(empty_kv);
      if (prev_hq >= 0) {
        wg::mbar_arrive(empty((i - 1) % kS));  // the last step's stage (i is the end's)
        add_dq(dq, prev_hq, prev_q0);
        wg::mbar_arrive(ds_empty(dprev));
      }
    }
    ++i;  // past the end's stage
    wg::fence_operand(dk);
    bwd_store_dkdv<kD>(p, end_block.b, end_block.g, krow, dk, dv);
  }
#endif
}

// ---------------------------------------------------------------------------------------------
// Backward, fused: the two small kernels around bwd_dkdv_mma<.., true>
// ---------------------------------------------------------------------------------------------

// Drow = rowsum(dO∘O) of every (b, t, h) row, and (fused) that row of the dQ accumulator zeroed:
// 16 lanes a row, 8 elements a lane (D a multiple of 8, at most 128). Both tensor-core backwards
// read Drow from here, so they agree on it to the bit.
__global__ void __launch_bounds__(256) bwd_prep(const Params p) {
  wait_previous_kernel();
  const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 4;  // (b·T + t)·H + h
  const int c = threadIdx.x & 15;
  const int D = p.D;
  const bool ok = row < (int64_t)p.B * p.T * p.H && c * 8 < D;
  if (p.tile_counter && blockIdx.x == 0 && threadIdx.x == 0) *p.tile_counter = 0;
  float acc = 0.f;
  if (ok) {
    const int64_t e = row * D + c * 8;
    acc = dot_bf16x8(*reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.o) + e),
                     *reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.dout) + e));
    if (p.dq_accum) {
      float4* z = reinterpret_cast<float4*>(p.dq_accum + e);
      z[0] = z[1] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) acc += __shfl_xor_sync(kFull32, acc, o);  // within the 16 lanes
  if (ok && c == 0) {
    const int h = (int)(row % p.H);
    const int64_t bt = row / p.H;
    const int t = (int)(bt % p.T), b = (int)(bt / p.T);
    p.dsum[row_base(p, b, h) + t] = acc;
  }
}

// Heads of a token bwd_dq_store turns with one set of angles (as rope's kernel, kRopeHeads).
constexpr int kDqStoreHeads = 4;

// dq = bf16(scale · dQ accumulator), turned back through rope (p.positions): a thread takes
// elements i..i+3 and their rope partners i + D/2.. (D a multiple of 8) of up to kDqStoreHeads
// heads of a token, with the angles once.
__global__ void __launch_bounds__(256) bwd_dq_store(const Params p) {
  wait_previous_kernel();
  const int half = p.D / 2, quads = half / 4, groups = (p.H + kDqStoreHeads - 1) / kDqStoreHeads;
  const int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, token = item / (groups * quads);
  if (token >= (int64_t)p.B * p.T) return;
  const int rest = (int)(item - token * groups * quads), h0 = rest / quads * kDqStoreHeads, i = rest % quads * 4;
  float2 cs[4];
#pragma unroll
  for (int e = 0; e < 4; ++e) cs[e] = p.positions ? rope_back_turn(p, p.positions[token], i + e) : make_float2(1.f, 0.f);
  const float s = p.scale;
  for (int h = h0; h < min(h0 + kDqStoreHeads, p.H); ++h) {
    const float* a = p.dq_accum + (token * p.H + h) * p.D + i;
    float lo[4], up[4];
    *reinterpret_cast<float4*>(lo) = *reinterpret_cast<const float4*>(a);
    *reinterpret_cast<float4*>(up) = *reinterpret_cast<const float4*>(a + half);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      turn_pair(lo[e], up[e], cs[e]);
      lo[e] *= s;
      up[e] *= s;
    }
    bf16* out = static_cast<bf16*>(p.dq) + token * p.dq_stride + (int64_t)h * p.D + i;
    *reinterpret_cast<uint2*>(out) = make_uint2(pack_bf16(lo[0], lo[1]), pack_bf16(lo[2], lo[3]));
    *reinterpret_cast<uint2*>(out + half) = make_uint2(pack_bf16(up[0], up[1]), pack_bf16(up[2], up[3]));
  }
}

// dq or dk turned back through rope where it lies, after kernels that store it unturned: a
// thread per (token, head, pair).
template <typename TS, bool kDk>
__global__ void __launch_bounds__(256) bwd_rope_pass(const Params p) {
  wait_previous_kernel();
  TS* const g = static_cast<TS*>(kDk ? p.dk : p.dq);
  const int heads = kDk ? p.G : p.H, half = p.D / 2;
  const int64_t stride = kDk ? p.dkv_stride : p.dq_stride;
  const int64_t item = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, row = item / half;  // row: (b·T + t)·heads + h
  if (row >= (int64_t)p.B * p.T * heads) return;
  const int i = (int)(item - row * half);
  const int64_t token = row / heads;
  TS* x = g + token * stride + (row % heads) * p.D + i;
  float lo = to_float(x[0]), up = to_float(x[half]);
  turn_pair(lo, up, rope_back_turn(p, p.positions[token], i));
  x[0] = from_float<TS>(lo);
  x[half] = from_float<TS>(up);
}

// =============================================================================================
// SIMT kernels: f32 storage (exact fp32 arithmetic), and bf16 that the tensor-core path does not
// take. Head dim up to kDM = 128 (the op's limit), a multiple of 4. 128 threads = 4 warps.
// =============================================================================================

constexpr int kDS = kDM + 4;  // row stride of tiles read one row per lane (float4, conflict-free)

// rows [t0, t0 + n) of a [.., T, heads, D] tensor -> s[n][stride] as f32 (rows >= T zero;
// columns >= D untouched and never read).
template <typename TS>
__device__ __forceinline__ void load_rows_f32(float* s, int stride, const TS* g, int64_t gstride, int t0, int n, int T, int D) {
  for (int i = threadIdx.x; i < n * D; i += blockDim.x) {
    const int r = i / D, c = i - r * D;
    const int t = t0 + r;
    s[r * stride + c] = t < T ? to_float(g[(int64_t)t * gstride + c]) : 0.f;
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Forward: 16 query rows a block (4 a warp), key tiles of 32 (one a lane).
template <typename TS>
__global__ void __launch_bounds__(128) fwd_simt(const Params p) {
  wait_previous_kernel();
  constexpr int kBr = 16, kBc = 32;
  MDLM_ATTN_DYNAMIC_SMEM(float, smf);
  float* sQ = smf;               // [kBr][kDM]
  float* sK = sQ + kBr * kDM;    // [kBc][kDS]
  float* sV = sK + kBc * kDS;    // [kBc][kDM]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const TS* kg = static_cast<const TS*>(p.k) + kv_base(p, b, g);
  const TS* vg = static_cast<const TS*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sQ, kDM, static_cast<const TS*>(p.q) + q_base(p, b, h), qstride, q0, kBr, T, D);
  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int qseg[4];
  float m[4], l[4], o[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    qseg[i] = __ldg(segb + min(q0 + warp * 4 + i, T - 1));
    m[i] = -INFINITY;
    l[i] = 0.f;
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  }
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  for (int n = 0; n < n_end; ++n) {
    const int k0 = n * kBc;
    const int kind = classify_tile(q0, kBr, qrange, k0, kBc, warp_seg_range(segb, k0, kBc, T), T, causal);
    if (kind == kEmpty) continue;
    __syncthreads();
    load_rows_f32(sK, kDS, kg, kvstride, k0, kBc, T, D);
    load_rows_f32(sV, kDM, vg, kvstride, k0, kBc, T, D);
    __syncthreads();
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int d = 0; d < D; d += 4) {
      const float4 kv = ld4(sK + lane * kDS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] = dot4(ld4(sQ + (warp * 4 + i) * kDM + d), kv, s[i]);
    }
    const int kj = k0 + lane;
    const int kseg = __ldg(segb + min(kj, T - 1));
    float pr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool vis = kind == kFull || visible(q0 + warp * 4 + i, qseg[i], kj, kseg, T, causal);
      const float sc = vis ? s[i] * p.scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(sc));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = expf(m[i] - m_use);
      pr[i] = expf(sc - m_use);
      l[i] = l[i] * alpha + pr[i];
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < 4; ++c) o[i][c] *= alpha;
    }
    for (int j = 0; j < kBc; ++j) {
      float pj[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pj[i] = __shfl_sync(kFull32, pr[i], j);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          const float vv = sV[j * kDM + d];
#pragma unroll
          for (int i = 0; i < 4; ++i) o[i][c] = fmaf(pj[i], vv, o[i][c]);
        }
      }
    }
  }
  TS* og = static_cast<TS*>(p.out) + q_base(p, b, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float L = warp_sum(l[i]);
    const int t = q0 + warp * 4 + i;
    if (t < T) {
      const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) og[(int64_t)t * qstride + d] = from_float<TS>(o[i][c] * inv);
      }
      if (lane == 0) p.lse[row_base(p, b, h) + t] = L > 0.f ? m[i] + logf(L) : -INFINITY;
    }
  }
}

// dQ and Drow: 16 query rows a block (4 a warp), key tiles of 32 (one a lane).
template <typename TS>
__global__ void __launch_bounds__(128) bwd_dq_simt(const Params p) {
  wait_previous_kernel();
  constexpr int kBr = 16, kBc = 32;
  MDLM_ATTN_DYNAMIC_SMEM(float, smf);
  float* sQ = smf;               // [kBr][kDM]
  float* sdO = sQ + kBr * kDM;   // [kBr][kDM]
  float* sK = sdO + kBr * kDM;   // [kBc][kDS]
  float* sV = sK + kBc * kDS;    // [kBc][kDS]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
  const TS* kg = static_cast<const TS*>(p.k) + kv_base(p, b, g);
  const TS* vg = static_cast<const TS*>(p.v) + kv_base(p, b, g);
  const TS* dog = static_cast<const TS*>(p.dout) + qb;
  const TS* og = static_cast<const TS*>(p.o) + qb;
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sQ, kDM, static_cast<const TS*>(p.q) + qb, qstride, q0, kBr, T, D);
  load_rows_f32(sdO, kDM, dog, qstride, q0, kBr, T, D);
  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int qseg[4];
  float lse[4], drow[4], acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    qseg[i] = __ldg(segb + min(t, T - 1));
    lse[i] = t < T ? p.lse_in[rb + t] : 0.f;
    float dd = 0.f;
    if (t < T)
      for (int d = lane; d < D; d += 32) dd = fmaf(to_float(dog[(int64_t)t * qstride + d]), to_float(og[(int64_t)t * qstride + d]), dd);
    drow[i] = warp_sum(dd);
    if (lane == 0 && t < T) p.dsum[rb + t] = drow[i];
    acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  }
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  for (int n = 0; n < n_end; ++n) {
    const int k0 = n * kBc;
    const int kind = classify_tile(q0, kBr, qrange, k0, kBc, warp_seg_range(segb, k0, kBc, T), T, causal);
    if (kind == kEmpty) continue;
    __syncthreads();
    load_rows_f32(sK, kDS, kg, kvstride, k0, kBc, T, D);
    load_rows_f32(sV, kDS, vg, kvstride, k0, kBc, T, D);
    __syncthreads();
    float s[4] = {0.f, 0.f, 0.f, 0.f}, dp[4] = {0.f, 0.f, 0.f, 0.f};
    for (int d = 0; d < D; d += 4) {
      const float4 kv = ld4(sK + lane * kDS + d), vv = ld4(sV + lane * kDS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[i] = dot4(ld4(sQ + (warp * 4 + i) * kDM + d), kv, s[i]);
        dp[i] = dot4(ld4(sdO + (warp * 4 + i) * kDM + d), vv, dp[i]);
      }
    }
    const int kj = k0 + lane;
    const int kseg = __ldg(segb + min(kj, T - 1));
    float ds[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool vis = kind == kFull || visible(q0 + warp * 4 + i, qseg[i], kj, kseg, T, causal);
      ds[i] = vis ? expf(s[i] * p.scale - lse[i]) * (dp[i] - drow[i]) : 0.f;
    }
    for (int j = 0; j < kBc; ++j) {
      float dj[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) dj[i] = __shfl_sync(kFull32, ds[i], j);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          const float kv = sK[j * kDS + d];
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[i][c] = fmaf(dj[i], kv, acc[i][c]);
        }
      }
    }
  }
  TS* dqg = static_cast<TS*>(p.dq) + dq_base(p, b, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    if (t < T) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) dqg[(int64_t)t * p.dq_stride + d] = from_float<TS>(acc[i][c] * p.scale);
      }
    }
  }
}

// dK, dV: 16 key rows a block (4 a warp), over the group's q heads and query tiles of 32 (one a
// lane). Reads Drow written by bwd_dq_simt.
template <typename TS>
__global__ void __launch_bounds__(128) bwd_dkdv_simt(const Params p) {
  wait_previous_kernel();
  constexpr int kBc = 16, kBr = 32;
  MDLM_ATTN_DYNAMIC_SMEM(float, smf);
  float* sK = smf;               // [kBc][kDM]
  float* sV = sK + kBc * kDM;    // [kBc][kDM]
  float* sQ = sV + kBc * kDM;    // [kBr][kDS]
  float* sdO = sQ + kBr * kDS;   // [kBr][kDS]
  float* sL = sdO + kBr * kDS;   // [kBr]
  float* sDr = sL + kBr;         // [kBr]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const KeyBlock blk = key_block(p, kBc);  // (not a structured binding: the lambdas below capture b and g)
  const int b = blk.b, g = blk.g, k0 = blk.k0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t kb = kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sK, kDM, static_cast<const TS*>(p.k) + kb, kvstride, k0, kBc, T, D);
  load_rows_f32(sV, kDM, static_cast<const TS*>(p.v) + kb, kvstride, k0, kBc, T, D);
  const SegRange krange = warp_seg_range(segb, k0, kBc, T);
  int kseg[4];
  float dk[4][4], dv[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    kseg[i] = __ldg(segb + min(k0 + warp * 4 + i, T - 1));
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[i][c] = dv[i][c] = 0.f;
  }
  const int m_begin = causal ? k0 / kBr : 0;
  const int m_end = (T + kBr - 1) / kBr;
  for (int hq = 0; hq < p.group; ++hq) {
    const int h = g * p.group + hq;
    const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
    for (int m = m_begin; m < m_end; ++m) {
      const int q0 = m * kBr;
      const int kind = classify_tile(q0, kBr, warp_seg_range(segb, q0, kBr, T), k0, kBc, krange, T, causal);
      if (kind == kEmpty) continue;
      __syncthreads();
      load_rows_f32(sQ, kDS, static_cast<const TS*>(p.q) + qb, qstride, q0, kBr, T, D);
      load_rows_f32(sdO, kDS, static_cast<const TS*>(p.dout) + qb, qstride, q0, kBr, T, D);
      if (threadIdx.x < kBr) {
        const int t = q0 + threadIdx.x;
        sL[threadIdx.x] = t < T ? p.lse_in[rb + t] : 0.f;
        sDr[threadIdx.x] = t < T ? p.dsum[rb + t] : 0.f;
      }
      __syncthreads();
      const int qi = q0 + lane;
      const int qseg = __ldg(segb + min(qi, T - 1));
      const float lse = sL[lane], dr = sDr[lane];
      float pr[4], ds[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < D; d += 4) {
          s = dot4(ld4(sK + (warp * 4 + i) * kDM + d), ld4(sQ + lane * kDS + d), s);
          dp = dot4(ld4(sV + (warp * 4 + i) * kDM + d), ld4(sdO + lane * kDS + d), dp);
        }
        const bool vis = kind == kFull || visible(qi, qseg, k0 + warp * 4 + i, kseg[i], T, causal);
        pr[i] = vis ? expf(s * p.scale - lse) : 0.f;
        ds[i] = pr[i] * (dp - dr);
      }
      for (int j = 0; j < kBr; ++j) {
        float pj[4], dj[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pj[i] = __shfl_sync(kFull32, pr[i], j);
          dj[i] = __shfl_sync(kFull32, ds[i], j);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = lane + 32 * c;
          if (d < D) {
            const float qv = sQ[j * kDS + d], ov = sdO[j * kDS + d];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              dv[i][c] = fmaf(pj[i], ov, dv[i][c]);
              dk[i][c] = fmaf(dj[i], qv, dk[i][c]);
            }
          }
        }
      }
    }
  }
  TS* dkg = static_cast<TS*>(p.dk) + dkv_base(p, b, g);
  TS* dvg = static_cast<TS*>(p.dv) + dkv_base(p, b, g);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = k0 + warp * 4 + i;
    if (t < T) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          dkg[(int64_t)t * p.dkv_stride + d] = from_float<TS>(dk[i][c] * p.scale);
          dvg[(int64_t)t * p.dkv_stride + d] = from_float<TS>(dv[i][c]);
        }
      }
    }
  }
}

constexpr size_t kFwdSimtSmem = size_t(16 * kDM + 32 * kDS + 32 * kDM) * sizeof(float);
constexpr size_t kDqSimtSmem = size_t(2 * 16 * kDM + 2 * 32 * kDS) * sizeof(float);
constexpr size_t kDkvSimtSmem = size_t(2 * 16 * kDM + 2 * 32 * kDS + 2 * 32) * sizeof(float);

// =============================================================================================
// Launchers
// =============================================================================================

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The grid of a tile kernel (block_tile): rows × ceil(T / rows_per_tile) blocks, one dimension.
dim3 tile_grid(int rows, int T, int rows_per_tile) {
  const int64_t n = (int64_t)rows * ceil_div(T, rows_per_tile);
  if (n > INT32_MAX) throw OpError("BAD_ARGUMENT", "attention: " + std::to_string(n) + " blocks of " + std::to_string(rows_per_tile) + " rows; at most 2^31 - 1");
  return dim3((unsigned)n);
}
int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Lets `kernel` take `smem` bytes of dynamic shared memory (over the default 48 KB).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t smem, const char* name) {
#ifdef MDLM_ATTN_EMULATE
  (void)kernel, (void)smem, (void)name;
#else
  if (smem > 48 * 1024) check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), name);
#endif
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, const Params& p, cudaStream_t stream, const char* name) {
  allow_smem(kernel, smem, name);
#ifdef MDLM_ATTN_EMULATE
  (void)stream;
  (void)name;
  ::emu::launch(kernel, grid, threads, smem, p);
#else
  check_cuda(launch_kernel(kernel, grid, threads, smem, stream, p), name);
#endif
}

int group_rows(const Params& p, bool backward, int rows, int tiles_per_row, int resident_blocks);

// A persistent kernel's tile counter (in the op's scratch) set to 0, in stream order. (The
// backward's bwd_prep zeroes its own.)
void zero_counter(int* counter, cudaStream_t stream, const char* what) {
#ifdef MDLM_ATTN_EMULATE
  (void)stream, (void)what;
  *counter = 0;
#else
  check_cuda(cudaMemsetAsync(counter, 0, sizeof(int), stream), what);
#endif
}

// The warp-specialised kernels' copy of p with its TMA maps: q (and, for the backward, dout) in
// tiles of q_rows tokens, k and v in tiles of kv_rows. (use_mma has checked the alignment and the
// head dim the maps need; a failure here is the driver's.)
Params with_tile_maps(const Params& p, int q_rows, int kv_rows, bool backward, const char* what) {
  Params m = p;
  const char* err = wg::encode_head_rows(m.q_map, p.q, p.B, p.T, p.H, p.D, q_rows);
  if (!err) err = wg::encode_head_rows(m.k_map, p.k, p.B, p.T, p.G, p.D, kv_rows);
  if (!err) err = wg::encode_head_rows(m.v_map, p.v, p.B, p.T, p.G, p.D, kv_rows);
  if (!err && backward) err = wg::encode_head_rows(m.dout_map, p.dout, p.B, p.T, p.H, p.D, q_rows);
  if (err) throw std::runtime_error(std::string(what) + ": " + err);
  return m;
}

// A tile kernel: `rows` rows of ⌈T / rows_per_tile⌉ tiles in block_tile's order, in groups of rows
// sized for this kernel's resident blocks (group_rows). A persistent kernel gets as many blocks as
// are resident at once (under the emulator 3, so that each takes several tiles), each taking tiles
// in that order until none is left; with MDLM_ATTN_PERSISTENT=0 (read at every call) it gets a
// block a tile as the others do, each finding the counter past the last tile after its own: the
// same code without the overlap of one tile's end with the next's loads, for an A/B of it.
template <typename Kernel>
void launch_tiles(Kernel kernel, int rows, int rows_per_tile, int threads, size_t smem, Params p, bool backward, cudaStream_t stream,
                  const char* name, bool persistent = false) {
  int resident = p.sms;
#ifndef MDLM_ATTN_EMULATE
  // Blocks an SM holds, asked of the driver once a kernel (each launches with one configuration).
  static std::map<const void*, int> per_sm;
  auto [it, fresh] = per_sm.try_emplace(reinterpret_cast<const void*>(kernel), 0);
  if (fresh) {
    allow_smem(kernel, smem, name);
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, smem), name);
  }
  resident *= std::max(1, it->second);
#endif
  p.group_rows = group_rows(p, backward, rows, ceil_div(p.T, rows_per_tile), resident);
  dim3 grid = tile_grid(rows, p.T, rows_per_tile);
#ifdef MDLM_ATTN_EMULATE
  resident = 3;
#endif
  if (persistent && env_knob("MDLM_ATTN_PERSISTENT") != "0") grid.x = std::min<unsigned>(grid.x, (unsigned)resident);
  launch(kernel, grid, threads, smem, p, stream, name);
}

// Tile configurations of the tensor-core kernels by padded head dim (one table; the report and
// docs/ARCHITECTURE.md quote it):
//   forward <kD, Br, Bc, warps>   dq <kD, Bc, warps, qM> (Br = 16·qM·warps)   dkdv <kD, Br, warps, kM> (Bc = 16·kM·warps)
// qM, kM: 16-row tiles a warp owns in the backward kernels (2 halves the shared-memory reads per
// product; dk/dv at 96 and 128 has no registers for it). uW: warps of the fused backward (its
// tile is dkdv's with uW warps): 8 at 128 (128 keys a block; timed on the H200 against 4 warps:
// 3.32 vs 3.61 ms bidirectional and 1.83 vs 1.88 causal at B8 T2048 H16, slower at B4), and 4
// elsewhere (at 64, 64 queries a step with one key tile a warp took 0.777 vs 0.628 ms at B16
// T1024 bidirectional, winning only at B8 causal, and 8 warps of one key tile 0.884). The
// forward at 128 takes 64-key tiles (a few spilled registers): 0.82 vs 0.97 ms bidirectional at
// B8 T2048 H16, 12% less over the bench shapes than 32-key tiles and 20% less than 64 × 64
// blocks; at 64, 128 × 64 beat 128 × 128 and 64 × 64 by 4-5% (H200, 2026-12-03).
template <int kD> struct Tiles;
template <> struct Tiles<32> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 64, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 2, uW = 4; };
template <> struct Tiles<64> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 64, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 2, uW = 4; };
template <> struct Tiles<96> { static constexpr int fBr = 128, fBc = 32, fW = 4, qBc = 32, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 1, uW = 4; };
template <> struct Tiles<128> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 32, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 1, uW = 8; };

template <int kD>
size_t max_mma_smem(bool backward) {
  using C = Tiles<kD>;
  if (!backward) return FwdCfg<kD, C::fBr, C::fBc, C::fW>::kSmem;
  return std::max({DqCfg<kD, C::qBc, C::qW, C::qM>::kSmem, DkvCfg<kD, C::kBr, C::kW, C::kM, false>::kSmem,
                   DkvCfg<kD, C::kBr, C::uW, C::kM, true>::kSmem});
}

template <int kD, int kBr, int kBc, int kWarps>
void launch_forward(const Params& p, cudaStream_t stream) {
  using F = FwdCfg<kD, kBr, kBc, kWarps>;
  launch_tiles(fwd_mma<kD, kBr, kBc, kWarps>, p.B * p.H, kBr, F::kThreads, F::kSmem, p, false, stream, "attention forward (bf16 mma)");
}

template <int kD>
void forward_mma(const Params& p, cudaStream_t stream, bool hopper) {
  using C = Tiles<kD>;
  if constexpr (kD == 64 || kD == 128) {
    if (hopper) {
      using W = WsFwdCfg<kD>;
      // The optimistic softmax where P·V is not overlapped (head dim 64; see fwd_ws) unless
      // MDLM_ATTN_FWD_OPT=0, read at every call.
      auto kernel = fwd_ws<kD, !W::kOverlapPV>;
      if (W::kOverlapPV || env_knob("MDLM_ATTN_FWD_OPT") == "0") kernel = fwd_ws<kD, false>;
      const char* what = "attention forward (bf16 wgmma, warp-specialised)";
      zero_counter(p.tile_counter, stream, what);
      return launch_tiles(kernel, p.B * p.H, W::kBr, W::kThreads, W::kSmem, with_tile_maps(p, 64, W::kBc, false, what), false, stream, what, true);
    }
  }
  launch_forward<kD, C::fBr, C::fBc, C::fW>(p, stream);
}

// The fused mma.sync kernel (dK, dV and dQ in one) with kW warps.
template <int kD, int kBr, int kW, int kM>
void launch_fused(const Params& p, cudaStream_t stream) {
  using K = DkvCfg<kD, kBr, kW, kM, true>;
  launch_tiles(bwd_dkdv_mma<kD, kBr, kW, kM, true>, p.B * p.G, K::kBc, K::kThreads, K::kSmem, p, true, stream, "attention backward dq/dk/dv (bf16 mma)");
}

// With ropeBase, dq and dk turned back by a pass of their own where the kernels that stored them
// did not turn them (bwd_dq_store and bwd_ws's dK store do).
template <typename TS>
void rope_passes(const Params& p, bool dq_turned, bool dk_turned, cudaStream_t stream) {
  if (!p.positions) return;
  const int64_t pairs = (int64_t)p.B * p.T * (p.D / 2);
  if (!dq_turned) launch(bwd_rope_pass<TS, false>, dim3((unsigned)ceil_div64(pairs * p.H, 256)), 256, 0, p, stream, "attention backward dq rope");
  if (!dk_turned) launch(bwd_rope_pass<TS, true>, dim3((unsigned)ceil_div64(pairs * p.G, 256)), 256, 0, p, stream, "attention backward dk rope");
}

// Drow first. Fused (p.dq_accum set): one kernel for dK, dV and dQ (atomics into the f32
// accumulator; on wgmma when `wgmma`), then dQ to bf16. Deterministic: dQ in a kernel of its own,
// then dK and dV.
template <int kD>
void backward_mma(const Params& p, cudaStream_t stream, bool wgmma) {
  using C = Tiles<kD>;
  const int64_t n = (int64_t)p.B * p.T * p.H * p.D;
  launch(bwd_prep, dim3((unsigned)ceil_div64(n / p.D * 16, 256)), 256, 0, p, stream, "attention backward Drow");
  if (p.dq_accum) {
    bool dk_turned = false;
    if constexpr (kD == 64 || kD == 128) {
      if (wgmma) {
        const char* what = "attention backward dq/dk/dv (bf16 wgmma, warp-specialised)";
        using W = WsBwdCfg<kD>;
        const Params pm = with_tile_maps(p, W::kBr, W::kBc, true, what);
        launch_tiles(bwd_ws<kD>, p.B * p.G, W::kBc, W::kThreads, W::kSmem, pm, true, stream, what, true);
        dk_turned = ws_turns_dk<kD>(p);
      }
    }
    if (!wgmma) launch_fused<kD, C::kBr, C::uW, C::kM>(p, stream);
    const int64_t items = (int64_t)p.B * p.T * ceil_div(p.H, kDqStoreHeads) * (p.D / 8);
    launch(bwd_dq_store, dim3((unsigned)ceil_div64(items, 256)), 256, 0, p, stream, "attention backward dq store");
    return rope_passes<bf16>(p, true, dk_turned, stream);
  }
  using Q = DqCfg<kD, C::qBc, C::qW, C::qM>;
  using K = DkvCfg<kD, C::kBr, C::kW, C::kM, false>;
  launch_tiles(bwd_dq_mma<kD, C::qBc, C::qW, C::qM>, p.B * p.H, Q::kBr, Q::kThreads, Q::kSmem, p, true, stream, "attention backward dq (bf16 mma)");
  launch_tiles(bwd_dkdv_mma<kD, C::kBr, C::kW, C::kM, false>, p.B * p.G, K::kBc, K::kThreads, K::kSmem, p, true, stream, "attention backward dk/dv (bf16 mma)");
  rope_passes<bf16>(p, false, false, stream);
}

template <typename TS>
void forward_simt(const Params& p, cudaStream_t stream) {
  launch_tiles(fwd_simt<TS>, p.B * p.H, 16, 128, kFwdSimtSmem, p, false, stream, "attention forward (simt)");
}

template <typename TS>
void backward_simt(const Params& p, cudaStream_t stream) {
  launch_tiles(bwd_dq_simt<TS>, p.B * p.H, 16, 128, kDqSimtSmem, p, true, stream, "attention backward dq (simt)");
  launch_tiles(bwd_dkdv_simt<TS>, p.B * p.G, 16, 128, kDkvSimtSmem, p, true, stream, "attention backward dk/dv (simt)");
  rope_passes<TS>(p, false, false, stream);
}

// MDLM_ATTN_DETERMINISTIC=1: the backward that gives the same bits on every run (dQ in its own
// kernel, recomputing S and dP: 7 tile products instead of 5, no atomics). Read at every call.
bool deterministic_backward() {
  const std::string v = env_knob("MDLM_ATTN_DETERMINISTIC");
  return !v.empty() && v != "0";
}

int padded_head_dim(int D) { return D <= 32 ? 32 : D <= 64 ? 64 : D <= 96 ? 96 : 128; }

// A Hopper kernel is taken when its knob (read at every call) is not "0", the device is sm_90
// (the emulator models one) and the kernel's shared memory fits.
bool use_hopper_kernel(const OpCall& call, const char* knob, size_t smem) {
  if (env_knob(knob) == "0") return false;
#ifdef MDLM_ATTN_EMULATE
  (void)call, (void)smem;
  return true;
#else
  return call.device && call.device->major == 9 && call.device->minor == 0 && smem <= call.device->sharedMemPerBlockOptin;
#endif
}

// The wgmma backward, bwd_ws, at padded head dim 64 and 128: 1.5-1.9× the mma.sync kernel's speed
// at 128 on the H200 (bench/RESULTS.md eleventh pass), and at 64 1.37× on B16 T1024 H12
// bidirectional (0.485 ms, thirteenth pass, against 0.663 in the ninth). (The one-warpgroup
// bwd_dkdv_wgmma it replaced at 64 was only 1-10% faster than mma.sync; before its wgmmas stopped
// being serialised, C7515, it was 5% slower.) A wgmma forward (two
// 64-row warpgroups, 128-key tiles, the previous tile's P·V in flight during the softmax; commit
// b578bf6) timed no faster than fwd_mma at 128 (0.807 vs 0.796 ms, B8 T2048 bidirectional) and
// slower at 64 (0.273 vs 0.230, B16 T1024), so it is not kept. MDLM_ATTN_WGMMA=0 keeps the
// mma.sync kernel.
bool use_wgmma_backward(const OpCall& call, const Params& p) {
  switch (padded_head_dim(p.D)) {
    case 128: return use_hopper_kernel(call, "MDLM_ATTN_WGMMA", WsBwdCfg<128>::kSmem);
    case 64: return use_hopper_kernel(call, "MDLM_ATTN_WGMMA", WsBwdCfg<64>::kSmem);
    default: return false;
  }
}

// The forward on sm_90 at padded head dim 64 and 128: the warp-specialised wgmma kernel (fwd_ws).
// H200, 2026-12-03 (bench/RESULTS.md, sixth pass), against fwd_mma: B8 T2048 H16 D128
// bidirectional 0.540 vs 0.764 ms, causal 0.342 vs 0.510; B16 T1024 H12 D64 bidirectional 0.188
// vs 0.231, causal 0.137 vs 0.146. MDLM_ATTN_WS_FORWARD=0 keeps fwd_mma.
bool use_wgmma_forward(const OpCall& call, const Params& p) {
  const int kd = padded_head_dim(p.D);
  if (kd != 64 && kd != 128) return false;
  return use_hopper_kernel(call, "MDLM_ATTN_WS_FORWARD", kd == 64 ? WsFwdCfg<64>::kSmem : WsFwdCfg<128>::kSmem);
}

// Rows a group of the tile grids' order (block_tile): as many as have the data their tiles share
// in 24 MB, half of the H100/H200 L2 (at most 8·T·D bytes a query head: the forward's K and V;
// the backward's Q, dO and dQ accumulator, for each query head of a key block's group). Causal
// groups also hold at least twice the blocks resident at once: their tiles' work ranges over 16×
// at T = 2048, and the heaviest start first only within a group, so with small groups the last
// group's heavy tiles ran last. The groups are then evened out, so no small group comes last.
// H200, 2026-12-03 (bench/RESULTS.md, twelfth pass): the causal backward took all B·H rows before,
// which put each resident block on a row of its own, and at B8 its reads missed L2 (B8 T2048 H16
// D128 causal 1.346 ms against 1.068 in 16-row groups; B16 T1024 H12 D64 causal 0.393 against
// 0.335-0.349 in 8- to 64-row groups); 4-row groups were too small (B4 T2048 H16/4 D128 causal
// 0.657 against 0.501). The causal forward took 12-row groups of 64 rows, the last of 4 (B4 T2048
// H16 D128 causal 0.194 ms against 0.170 in 8-row and 0.172 in 16-row groups). A sweep of 4 to 24
// rows over the backward's bench shapes (H200, 2026-12-05, sixteenth session) beat this rule nowhere
// by more than a run's spread. MDLM_ATTN_GROUP_ROWS=n sets it (the emulator's checks take small
// groups, so a partial last group runs).
int group_rows(const Params& p, bool backward, int rows, int tiles_per_row, int resident_blocks) {
  if (const int n = std::atoi(env_knob("MDLM_ATTN_GROUP_ROWS").c_str()); n > 0) return n;
  const int64_t per_row = (int64_t)8 * p.T * p.D * (backward ? p.group : 1);
  int target = (int)std::max<int64_t>(1, (int64_t)(24 << 20) / per_row);
  if (p.causal) target = std::max(target, ceil_div(2 * resident_blocks, tiles_per_row));
  return ceil_div(rows, ceil_div(rows, target));
}

Params make_params(const OpCall& call, const char* const* float_args, DType dt) {
  Params p{};
  p.B = call.i32("batch");
  p.T = call.i32("seqLen");
  p.H = call.i32("heads");
  p.G = call.i32("kvHeads");
  p.D = call.i32("headDim");
  p.causal = call.flag("causal");
  p.scale = static_cast<float>(call.num("scale"));
  if (p.B <= 0 || p.T <= 0 || p.H <= 0 || p.G <= 0 || p.D <= 0 || p.H % p.G != 0 || p.D % 4 != 0 || p.D > kDM) {
    throw OpError("BAD_ARGUMENT", call.op + ": unsupported shape (heads a multiple of kvHeads, headDim a multiple of 4 up to 128)");
  }
  p.group = p.H / p.G;
  p.sms = call.device ? call.device->multiProcessorCount : 132;
  p.scale_log2 = p.scale * kLog2e;
  for (const char* const* a = float_args; *a; ++a) {
    if (call.arg(*a).dtype != dt) throw OpError("UNSUPPORTED_DTYPE", call.op + ": argument '" + *a + "' is " + dtype_name(call.arg(*a).dtype) + ", the others " + dtype_name(dt));
  }
  if (call.arg("segIds").dtype != DType::i32) throw OpError("UNSUPPORTED_DTYPE", call.op + ": segIds must be i32");
  p.seg = static_cast<const int*>(call.arg("segIds").ptr);
  return p;
}

// The tensor-core path: bf16, head dim a multiple of 8, every bf16 tensor 16-byte aligned, and the
// tile fits the device's shared memory.
bool use_mma(const OpCall& call, const Params& p, const char* const* float_args, bool backward) {
  if (p.D % 8 != 0 || (backward && (p.dq_stride % 8 != 0 || p.dkv_stride % 8 != 0))) return false;  // the gradients' rows 16-byte aligned too
  for (const char* const* a = float_args; *a; ++a)
    if (reinterpret_cast<uintptr_t>(call.arg(*a).ptr) % 16 != 0) return false;
  size_t smem = 0;
  switch (padded_head_dim(p.D)) {
    case 32: smem = max_mma_smem<32>(backward); break;
    case 64: smem = max_mma_smem<64>(backward); break;
    case 96: smem = max_mma_smem<96>(backward); break;
    default: smem = max_mma_smem<128>(backward); break;
  }
  return !call.device || smem <= call.device->sharedMemPerBlockOptin;
}

}  // namespace
}  // namespace attn
}  // namespace mdlm

using namespace mdlm::attn;

MDLM_OP(attention) {
  using mdlm::DType;
  static const char* const kFloatArgs[] = {"q", "k", "v", "out", nullptr};
  const DType dt = call.float_dtype("q", {DType::f32, DType::bf16});
  Params p = make_params(call, kFloatArgs, dt);
  p.q = call.arg("q").ptr;
  p.k = call.arg("k").ptr;
  p.v = call.arg("v").ptr;
  p.out = call.arg("out").ptr;
  p.lse = static_cast<float*>(call.arg("lse").ptr);
  if (dt == DType::f32) {
    forward_simt<float>(p, call.stream);
  } else if (!use_mma(call, p, kFloatArgs, false)) {
    forward_simt<bf16>(p, call.stream);
  } else {
    const bool hopper = use_wgmma_forward(call, p);
    if (hopper) p.tile_counter = static_cast<int*>(call.scratch->get(sizeof(int)));  // fwd_ws is persistent
    switch (padded_head_dim(p.D)) {
      case 32: forward_mma<32>(p, call.stream, hopper); break;
      case 64: forward_mma<64>(p, call.stream, hopper); break;
      case 96: forward_mma<96>(p, call.stream, hopper); break;
      default: forward_mma<128>(p, call.stream, hopper); break;
    }
  }
}

MDLM_OP(attention_backward) {
  using mdlm::DType;
  static const char* const kFloatArgs[] = {"q", "k", "v", "out", "dout", "dq", "dk", "dv", nullptr};
  const DType dt = call.float_dtype("q", {DType::f32, DType::bf16});
  Params p = make_params(call, kFloatArgs, dt);
  p.q = call.arg("q").ptr;
  p.k = call.arg("k").ptr;
  p.v = call.arg("v").ptr;
  p.o = call.arg("out").ptr;
  p.lse_in = static_cast<const float*>(call.arg("lse").ptr);
  p.dout = call.arg("dout").ptr;
  p.dq = call.arg("dq").ptr;
  p.dk = call.arg("dk").ptr;
  p.dv = call.arg("dv").ptr;
  p.dq_stride = (int64_t)p.H * p.D;
  p.dkv_stride = (int64_t)p.G * p.D;
  if (call.has("gradStride")) {
    p.dq_stride = p.dkv_stride = call.i32("gradStride");
    if (p.dq_stride < (int64_t)p.H * p.D) throw mdlm::OpError("BAD_ARGUMENT", call.op + ": gradStride below heads · headDim");
  }
  if (call.has("ropeBase")) {
    if (p.D % 8 != 0) throw mdlm::OpError("BAD_ARGUMENT", call.op + ": ropeBase needs a head dim that is a multiple of 8");
    if (call.arg("positions").dtype != DType::i32) throw mdlm::OpError("UNSUPPORTED_DTYPE", call.op + ": positions must be i32");
    p.positions = static_cast<const int*>(call.arg("positions").ptr);
    const double base = call.num("ropeBase");
    for (int i = 0; i < p.D / 2; ++i) p.inv_freq[i] = mdlm::rope_inv_freq(base, i, p.D);
  }
  const size_t rows = (size_t)p.B * p.H * p.T;
  const bool mma = dt == DType::bf16 && use_mma(call, p, kFloatArgs, true);
  // The fused backward takes a counter (bwd_ws's key blocks) and the f32 dQ accumulator after Drow
  // in the scratch (each 256-byte aligned).
  const bool fused = mma && !deterministic_backward();
  const size_t drow_bytes = (sizeof(float) * rows + 255) / 256 * 256;
  char* scratch = static_cast<char*>(call.scratch->get(drow_bytes + (fused ? 256 + sizeof(float) * rows * p.D : 0)));
  p.dsum = reinterpret_cast<float*>(scratch);
  p.tile_counter = fused ? reinterpret_cast<int*>(scratch + drow_bytes) : nullptr;
  p.dq_accum = fused ? reinterpret_cast<float*>(scratch + drow_bytes + 256) : nullptr;
  if (dt == DType::f32) {
    backward_simt<float>(p, call.stream);
  } else if (!mma) {
    backward_simt<bf16>(p, call.stream);
  } else {
    const bool wgmma = fused && use_wgmma_backward(call, p);
    switch (padded_head_dim(p.D)) {
      case 32: backward_mma<32>(p, call.stream, wgmma); break;
      case 64: backward_mma<64>(p, call.stream, wgmma); break;
      case 96: backward_mma<96>(p, call.stream, wgmma); break;
      default: backward_mma<128>(p, call.stream, wgmma); break;
    }
  }
}
