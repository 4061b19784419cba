// A warp-specialised Hopper GEMM (sm_90a: TMA, mbarriers, wgmma), the base for element-wise work
// fused into a GEMM's epilogue, which cuBLASLt's epilogues cannot express: rope on the q/k
// projection, SwiGLU on the gate/up projection and SwiGLU's backward on dh, whose own kernels
// would read and write the projections' outputs once more at the memory's bandwidth. The ops
// launch it on Hopper only (matmul_rope.cu, matmul_swiglu.cu); plain products go to cuBLASLt
// (matmul.cu).
//
//   out[b][m][n] = Σ_k a[b][m][k] · w[b][n][k]      (bf16 in, f32 accumulate, bf16 out)
//
// Both operands K-major (row-major with k fastest): the x · Wᵀ layout of a projection (a may
// also be stored transposed: kAT below). A block
// takes output tiles of 128 rows by kBN (128 or 256) columns in a grouped order (kGroupM tile rows
// at a time, for L2 reuse of the w tiles), persistently: as many blocks as SMs, each walking tiles
// blockIdx.x, +gridDim.x, ... Warpgroup 2 is the producer: its thread 0 loads each 64-deep k
// step's tiles of a ([128][64]) and w ([kBN][64]) by TMA into a ring of stages (four, or
// five: stages_for), tile after tile. Warpgroups 0 and 1 are the consumers (wgmma m64nkBNk16,
// both operands from shared memory, four a stage, one stage's products kept in flight), in one of two schedules (Schedule): both
// on each tile, or each on every other tile. While consumers store a tile, the producer is
// already loading the next one's stages. Tails (m, n, k not multiples of the tile) load as zeros
// (TMA's out-of-bounds fill) and are not stored.
//
// With kRopeD > 0 the epilogue is rope's (cuda/rope.cu): every kRopeD columns are a head whose
// element i < kRopeD/2 pairs with i + kRopeD/2, turned by the angle of the row's position, and the
// columns from `split` on go to a second output (the q/k projection: q and k, roped, each into its
// own buffer, where the unfused path writes [rows, (H + G)·D] and rope reads it back). The pair
// of a column is in the same thread (the accumulator holds columns 8j + 2·tig + e, j < kBN/8: the
// partner is j + kRopeD/16). The angles' (cos, sin) come from a table, rope_cs[pos][i], made once
// (make_rope_table): sincosf for each of a thread's 16 to 32 angles a tile would take, by
// instruction count, about a third of the time of a K = 768 tile's main loop. A row whose
// position is past the table (or negative) takes that slower road (rope_cs_at), to the same bits.
//
// With the kSwiglu epilogue (ping-pong only; kSwigluDeep is the same with a deeper ring) the
// product is the MLP's gate/up projection in its transposed layout, [Gᵀ; Uᵀ] = Wgu · xᵀ (a = Wgu [2F][d], w = x [rows][d], out [2F][rows]): a
// tile's 128 rows of a are 64 gate rows f0.. and the 64 up rows F + f0.. (two TMA boxes), so a
// consumer's two accumulators hold the gate and up values of the same (f, token) in the same
// registers, and its epilogue writes G, U and h = silu(G)·U (into out3, [F][rows]) at once, each
// rounded as the unfused swiglu kernel would read and write them: the swiglu kernel, and its
// second read of G and U, are saved.
//
// kAT: a is stored transposed, [b][k][m] (m fastest), loaded as [64 k][64 m] boxes and read
// MN-major by the wgmma: the layout of the MLP's dh = Wdownᵀ · doutᵀ. Its kSwigluBwd epilogue
// (ping-pong, 128 wide: make_swiglu_bwd_params) is SwiGLU's backward on the spot: with dh
// (rounded to bf16, as the unfused path stores it) and G and U of the tile from [2F][n], it
// writes dG and dU into out's rows f and F + f and never writes dh. Each consumer's G and U
// come by TMA into two slots of its own, a quarter tile each (64 hidden units by 64 tokens): two
// quarters asked for as its tile begins, so that they land while the tile multiplies (read in the
// epilogue, G and U stalled it on memory latency), and the other two brought into L2 then and
// loaded into a slot as soon as the stores of the quarter before them there have read it; each
// quarter's dG and dU are written over its G and U and leave together by TMA. Ping-pong hides the
// epilogue's math behind the other consumer's tile (cooperative, both consumers would compute it
// with the tensor cores idle). Two slots rather than three leave room for a fifth stage of the
// ring: with four stages the main loop waits on operand loads queued behind G, U, dG and dU.
//
// Under WARP_EMULATOR the same kernel runs on the CPU warp emulator (tests/cuda_emu/matmul_check.cc).
#pragma once

#include <set>

#include "../common.cuh"
#include "../ptx.cuh"
#include "../swiglu.cuh"

namespace mdlm {
namespace gemm {

using bf16 = __nv_bfloat16;

// Tiles of 128 rows × kBN columns (kBN 128 or 256: the width is the kernel's template argument
// and Params::tile_n), k steps of 64.
constexpr int kBM = 128, kBK = 64, kGroupM = 8;
constexpr int kConsumers = 256, kProducers = 128, kThreads = kConsumers + kProducers;
// setmaxnreg: one block an SM launches at 168 registers a thread (65536 / 384, a multiple of 8);
// the producer gives back to 40 and the consumers take 232 (128·40 + 256·232 ≤ 384·168).
constexpr int kProducerRegs = 40, kConsumerRegs = 232;
constexpr int kTileABytes = kBM * kBK * 2;  // a's [128][64] bf16 tile of a stage
constexpr int kOutStageBytes = 64 * 128 * 2;  // a consumer's [64][128] bf16 tile of output, staged for its stores
__host__ __device__ constexpr int stage_bytes(int tile_n) { return kTileABytes + tile_n * kBK * 2; }

// Epilogues (the kernel's first template argument): SwiGLU's forward (in two forms:
// swiglu_epilogue) or backward (below), or rope's with that head dim (64 or 128).
constexpr int kSwiglu = 1, kSwigluBwd = 2, kSwigluDeep = 3;
__host__ __device__ constexpr bool is_swiglu_forward(int epilogue) { return epilogue == kSwiglu || epilogue == kSwigluDeep; }

// Each consumer's [64][128] output tiles: one, or kSwiglu's three (G, U and h each its own, so
// that their TMA stores need not wait for each other), or kSwigluDeep's two (h in G's once G's
// TMA stores have read it, for a fifth stage of the ring), or kSwigluBwd's two slots (a quarter of
// a tile's G and U each, [64][64] boxes, which its dG and dU are written over and stored from).
constexpr int kBwdSlots = 2;
__host__ __device__ constexpr int out_tiles_for(int epilogue) {
  return epilogue == kSwiglu ? 3 : epilogue == kSwigluDeep ? 2 : epilogue == kSwigluBwd ? kBwdSlots : 1;
}
// mbarriers past the ring's full and empty ones: kSwigluBwd's one a slot and consumer.
__host__ __device__ constexpr int aux_barriers(int epilogue) { return epilogue == kSwigluBwd ? 2 * kBwdSlots : 0; }
// The most shared memory a block may have (227 KB), and the 1024-byte alignment of the swizzled tiles within it.
constexpr int kSmemMax = 232448, kSmemAlign = 1024;
// The ring's stages: four, or five for kSwigluDeep and kSwigluBwd (four stages deep, the
// backward's main loop waits on its operand loads, queued behind G, U, dG and dU). Six, where they
// fit, are faster at small shapes but slower at large ones.
__host__ __device__ constexpr int stages_for(int epilogue) { return epilogue == kSwigluBwd || epilogue == kSwigluDeep ? 5 : 4; }
// The ring, the consumers' output tiles, the mbarriers, and the alignment: at most kSmemMax.
__host__ __device__ constexpr size_t smem_bytes(int tile_n, int epilogue) {
  const int stages = stages_for(epilogue);
  return (size_t)stages * stage_bytes(tile_n) + 2 * out_tiles_for(epilogue) * kOutStageBytes + (2 * stages + aux_barriers(epilogue)) * 8 + kSmemAlign;
}
static_assert(smem_bytes(128, 128) <= kSmemMax && smem_bytes(256, 128) <= kSmemMax && smem_bytes(128, kSwiglu) <= kSmemMax &&
              smem_bytes(128, kSwigluDeep) <= kSmemMax && smem_bytes(128, kSwigluBwd) <= kSmemMax);

struct Params {
  wg::TileMap a_map, w_map;  // a [batch][m][k] and w [batch][n][k], boxes of 128 and tile_n rows × 64
  bool a_t;                  // a stored [batch][k][m] (make_params): boxes of 64 × 64
  // tma_store (use_tma_store): the staged output tiles leave by TMA stores through out_map (and
  // out2_map: rope's k, or SwiGLU's second half; out3_map: SwiGLU's h), boxes of 64 rows × 64
  // columns, instead of the consumers' own stores.
  wg::TileMap out_map, out2_map, out3_map;
  bool tma_store;
  bf16* out;                 // [batch][m][n], rows ldo elements apart
  int64_t ldo, out_batch;    // elements between rows, and between batches, of out
  int batch, m, n, k;
  int tile_n, tiles_m, tiles_n;
  // kRopeD > 0 (batch 1): columns [split, n) go to out2 (rows ldo2 apart) at column − split;
  // positions[row], and rope_cs[pos · kRopeD/2 + i] = (cos, sin) of pos · inv_freq[i] for
  // 0 ≤ pos < rope_positions; inv_freq from rope_base.
  bf16* out2;
  int64_t ldo2;
  int split;
  const int* positions;
  const float2* rope_cs;
  int rope_positions;
  double rope_base;
  // kSwiglu, kSwigluDeep: F (m is F too: the tiles' rows are hidden units), and h's buffer [F][n], rows ldo3 apart.
  // kSwigluBwd: F (= m), and G and U, [2F][n] (make_swiglu_bwd_params), loaded through aux_map
  // and aux2_map, boxes of 64 rows × 64 columns.
  int swiglu_f;
  bf16* out3;
  int64_t ldo3;
  wg::TileMap aux_map, aux2_map;
};


struct Tile {
  int b, m0, n0;
};

// Tile `t` of the grouped order: kGroupM tile rows (the last group fewer), column by column; a
// tile is kTileM rows of out (128, or SwiGLU's 64 hidden units) by kBN columns.
template <int kTileM, int kBN>
__device__ __forceinline__ Tile tile_at(const Params& p, int t) {
  const int per_batch = p.tiles_m * p.tiles_n;
  const int b = t / per_batch, r = t - b * per_batch;
  const int first = r / (kGroupM * p.tiles_n) * kGroupM, rows = min(kGroupM, p.tiles_m - first);
  const int in_group = r - first * p.tiles_n;
  return {b, (first + in_group % rows) * kTileM, in_group / rows * kBN};
}

__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  return make_float2(__bfloat162float(__ushort_as_bfloat16((unsigned short)(v & 0xffffu))), __bfloat162float(__ushort_as_bfloat16((unsigned short)(v >> 16))));
}

// A warpgroup's 64 × kBN block of bf16 values in registers, as its accumulator holds them but two
// to a register: v[2j + h] holds columns 8j + 2·tig and 8j + 2·tig + 1 of row 16·warp + gid + 8h
// (acc[4j + 2h] and acc[4j + 2h + 1] rounded).
template <int kBN>
__device__ __forceinline__ void pack_acc(const float (&acc)[kBN / 2], uint32_t (&v)[kBN / 4]) {
#pragma unroll
  for (int q = 0; q < kBN / 4; ++q) v[q] = pack_bf16(acc[2 * q], acc[2 * q + 1]);
}

// Where such a block goes to or comes from: rows row0.. and columns col0.. of a [rows][cols] bf16
// matrix at ptr, rows ld elements apart; with `map` (stores only), by TMA through it, the matrix
// being batch b of its tensor (boxes of 64 rows × 64 columns).
struct Block {
  bf16* ptr;
  int64_t ld;
  int rows, cols, row0, col0;
  const wg::TileMap* map;
  int b;
  // Through the warpgroup's staged tile (whole 16-byte pieces of rows) rather than pair by pair.
  __device__ __forceinline__ bool staged() const { return map || (ld % 8 == 0 && reinterpret_cast<uintptr_t>(ptr) % 16 == 0); }
};

// A warpgroup's staging of its blocks (store_block, load_block): the [64][128] tile at shared
// address `addr` (the same bytes at `ptr`) and the named barrier its 128 threads meet at.
struct OutStage {
  uint32_t addr;
  unsigned char* ptr;
  int barrier;
  // No TMA store from the tile can still be reading it (store_block then need not wait for the
  // warpgroup's earlier ones, to another tile: kSwiglu's G, U and h).
  bool unread = false;
  // The i-th [64][128] tile from this one on, of a consumer's several (out_tiles_for), with no TMA
  // store reading it (its caller has waited for them).
  __device__ __forceinline__ OutStage tile(int i) const { return OutStage{addr + i * kOutStageBytes, ptr + i * kOutStageBytes, barrier, true}; }
};

// Block v into d. Staged, 128 columns at a time: stmatrix into the tile, the warpgroup's
// barrier, then 16-byte stores of whole 128-byte lines (8 a thread), or, through d.map, two TMA
// stores issued by one thread, which the warpgroup does not wait for until it next needs the
// tile. Else a 4-byte store for each pair of columns (or 2-byte ones, at odd strides and edges).
template <int kBN>
__device__ __forceinline__ void store_block(const Block& d, const uint32_t (&v)[kBN / 4], int warp, int gid, int tig, const OutStage& st) {
  if (d.staged()) {
    const int t = threadIdx.x % 128;
#pragma unroll
    for (int c = 0; c < kBN / 128; ++c) {
      if (d.map) {  // the staged tile is free once the last TMA store from it has read it
        if (t == 0 && !st.unread) wg::bulk_wait_read<0>();
        wg::bar_sync(st.barrier, 128);
      }
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {  // columns 128c + 16kk..: pairs 32c + 4kk..
        const uint32_t r[4] = {v[32 * c + 4 * kk], v[32 * c + 4 * kk + 1], v[32 * c + 4 * kk + 2], v[32 * c + 4 * kk + 3]};
        wg::store_fragment(st.addr, 64, 16 * warp, kk, r);
      }
      if (d.map) {  // two [64][64] boxes, clipped at the tensor's edges; waited for above or at the end
        wg::fence_proxy_async();
        wg::bar_sync(st.barrier, 128);
        if (t == 0) {
          wg::tile_store_4d(st.addr, *d.map, d.col0 + 128 * c, 0, d.row0, d.b);
          wg::tile_store_4d(st.addr + 64 * 128, *d.map, d.col0 + 128 * c + 64, 0, d.row0, d.b);
          wg::bulk_commit();
        }
        continue;
      }
      wg::bar_sync(st.barrier, 128);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int q = t + 128 * i, row = q / 16, chunk = q % 16;
        const int orow = d.row0 + row, col = d.col0 + 128 * c + 8 * chunk;
        if (orow >= d.rows || col >= d.cols) continue;
        const uint4 x = *reinterpret_cast<const uint4*>(st.ptr + wg::sw128_offset(64, row, 8 * chunk));
        bf16* const dst = d.ptr + (int64_t)orow * d.ld + col;
        if (col + 8 <= d.cols) {
          *reinterpret_cast<uint4*>(dst) = x;
        } else {
          const uint32_t e[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
          for (int y = 0; y < 8; ++y) {  // constant indices: x stays in registers
            if (col + y < d.cols) dst[y] = __ushort_as_bfloat16((unsigned short)(e[y / 2] >> (16 * (y % 2))));
          }
        }
      }
      wg::bar_sync(st.barrier, 128);  // all read: the tile is free for the next columns
    }
    return;
  }
  const bool pairs = d.ld % 2 == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = d.row0 + 16 * warp + gid + 8 * h;
    if (row >= d.rows) continue;
    bf16* const orow = d.ptr + (int64_t)row * d.ld;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int col = d.col0 + 8 * j + 2 * tig;
      const uint32_t x = v[2 * j + h];
      if (pairs && col + 1 < d.cols) {
        *reinterpret_cast<uint32_t*>(orow + col) = x;
      } else {
        if (col < d.cols) orow[col] = __ushort_as_bfloat16((unsigned short)(x & 0xffffu));
        if (col + 1 < d.cols) orow[col + 1] = __ushort_as_bfloat16((unsigned short)(x >> 16));
      }
    }
  }
}

// The [64][kCols] block staged at shared address `addr` (store_block's layout: kCols / 64
// 128B-swizzled [64][64] slabs, as TMA boxes land) into v, by ldmatrix (store_fragment's
// addresses): this warp's 16 rows.
template <int kCols = 128>
__device__ __forceinline__ void read_block(uint32_t addr, uint32_t (&v)[kCols / 4], int warp) {
  const int lane = threadIdx.x & 31, m = lane >> 3;
#pragma unroll
  for (int kk = 0; kk < kCols / 16; ++kk) {
    uint32_t* const r = v + 4 * kk;
    ldsm_x4(addr + wg::sw128_offset(64, 16 * warp + (lane & 7) + 8 * (m & 1), 16 * kk + 8 * (m >> 1)), r[0], r[1], r[2], r[3]);
  }
}

// (cos, sin) of f32(pos) · inv_freq[i] for a head of head_dim, computed (make_rope_table's and
// rope_kernel's arithmetic): for a position past the table. Not inlined on the GPU: the
// epilogue's unrolled loops would carry its code, and its double pow, at every pair (`inline`
// only lets each object that includes this header define it).
#ifdef WARP_EMULATOR
#define GEMM_NOINLINE
#else
#define GEMM_NOINLINE __noinline__
#endif
__device__ inline GEMM_NOINLINE float2 rope_cs_at(int pos, int i, int head_dim, double base) {
  float s, c;
  sincosf(static_cast<float>(pos) * rope_inv_freq(base, i, head_dim), &s, &c);
  return make_float2(c, s);
}

// Rows row0..row0 + 63 of tile `tl` from a warpgroup's accumulator (acc[4j + 2h + e] =
// out[row0 + 16·warp + gid + 8h][8j + 2·tig + e]), turned by rope, into out (or, for the
// columns from `split` on, out2).
template <int kRopeD, int kBN>
__device__ __forceinline__ void store_rows(const Params& p, const Tile& tl, int row0, int warp, int gid, int tig, float (&acc)[kBN / 2],
                                           const OutStage& st) {
  constexpr int kPair = kRopeD / 16;  // j between a column and its partner
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = tl.m0 + row0 + 16 * warp + gid + 8 * h;
    const int pos = __ldg(p.positions + min(row, p.m - 1));
    // Every pair of row h turned by (cos, sin) = cs_at(i).
    const auto turn = [&](auto cs_at) {
#pragma unroll
      for (int j = 0; j < kBN / 8; ++j) {
        if ((j / kPair) % 2 != 0) continue;  // the upper half of its head
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int i = (8 * j + 2 * tig + e) % kRopeD;
          const float2 c = cs_at(i);
          float& lo = acc[4 * j + 2 * h + e];
          float& hi = acc[4 * (j + kPair) + 2 * h + e];
          const float l = lo, u = hi;
          lo = l * c.x - u * c.y;
          hi = u * c.x + l * c.y;
        }
      }
    };
    // The computed fallback in a loop of its own: chosen pair by pair, beside every table read,
    // it would slow every tile's epilogue.
    if (static_cast<unsigned>(pos) < static_cast<unsigned>(p.rope_positions)) {
      const float2* cs = p.rope_cs + (int64_t)pos * (kRopeD / 2);
      turn([&](int i) { return __ldg(cs + i); });
    } else {
      turn([&](int i) { return rope_cs_at(pos, i, kRopeD, p.rope_base); });
    }
  }
  uint32_t v[kBN / 4];
  pack_acc<kBN>(acc, v);
  const bool second = tl.n0 >= p.split;
  const Block d = second ? Block{p.out2, p.ldo2, p.m, p.n - p.split, tl.m0 + row0, tl.n0 - p.split, p.tma_store ? &p.out2_map : nullptr, 0}
                         : Block{p.out + (int64_t)tl.b * p.out_batch, p.ldo, p.m, p.n, tl.m0 + row0, tl.n0, p.tma_store ? &p.out_map : nullptr, tl.b};
  store_block<kBN>(d, v, warp, gid, tig, st);
}

// The first (half = 0) or second half of SwiGLU's [2F][n] out, G or U: rows f0.. of
// the F, through out_map or out2_map.
__device__ __forceinline__ Block swiglu_half(const Params& p, const Tile& tl, int f0, int half) {
  return Block{p.out + (int64_t)half * p.swiglu_f * p.ldo, p.ldo, p.swiglu_f, p.n, f0, tl.n0, p.tma_store ? (half ? &p.out2_map : &p.out_map) : nullptr, 0};
}

// The SwiGLU forward's store of tile `tl` (64 hidden units f0.. by kBN tokens) from a ping-pong
// consumer's gate and up accumulators: G and U rounded to bf16 into out's rows f and F + f, then
// h = swiglu_forward(G, U) of the rounded values (cuda/swiglu.cuh) into out3's row f, staged in a
// third tile or (kHInG, kSwigluDeep's two tiles) in G's.
template <int kBN, bool kHInG>
__device__ __forceinline__ void store_swiglu(const Params& p, const Tile& tl, int warp, int gid, int tig, const float (&g)[kBN / 2], const float (&u)[kBN / 2],
                                             const OutStage& st) {
  uint32_t vg[kBN / 4], vu[kBN / 4];
  pack_acc<kBN>(g, vg);
  pack_acc<kBN>(u, vu);
  // The previous tile's stores have long read the tiles (store_block's barrier passes it on).
  if (threadIdx.x % 128 == 0) wg::bulk_wait_read<0>();
  store_block<kBN>(swiglu_half(p, tl, tl.m0, 0), vg, warp, gid, tig, st.tile(0));
  store_block<kBN>(swiglu_half(p, tl, tl.m0, 1), vu, warp, gid, tig, st.tile(1));
#pragma unroll
  for (int q = 0; q < kBN / 4; ++q) {
    const float2 a = unpack_bf16(vg[q]), b = unpack_bf16(vu[q]);
    vg[q] = pack_bf16(swiglu_forward(a.x, b.x), swiglu_forward(a.y, b.y));
  }
  if (kHInG && threadIdx.x % 128 == 0) wg::bulk_wait_read<1>();  // G's stores (all but U's) have read its tile
  store_block<kBN>(Block{p.out3, p.ldo3, p.swiglu_f, p.n, tl.m0, tl.n0, p.tma_store ? &p.out3_map : nullptr, 0}, vg, warp, gid, tig, st.tile(kHInG ? 0 : 2));
}

// SwiGLU's backward for a register's two bf16 values: g and u (G and U) become dG and dU from dh.
__device__ __forceinline__ void swiglu_backward_pair(uint32_t dh, uint32_t& g, uint32_t& u) {
  const float2 d = unpack_bf16(dh), gf = unpack_bf16(g), uf = unpack_bf16(u);
  float dg0, du0, dg1, du1;
  swiglu_backward(d.x, gf.x, uf.x, dg0, du0);
  swiglu_backward(d.y, gf.y, uf.y, dg1, du1);
  g = pack_bf16(dg0, dg1), u = pack_bf16(du0, du1);
}

// kSwigluBwd: quarter j (0..3) of a tile is accumulator j / 2's 64 hidden units by the 64
// tokens of half j % 2; its boxes' origin in G, U, dG and dU ([F][n] each): (token, unit).
__device__ __forceinline__ int2 quarter_origin(const Tile& tl, int j) { return make_int2(tl.n0 + 64 * (j % 2), tl.m0 + 64 * (j / 2)); }
// The TMA loads of quarter j's G and U ([64][64] boxes, 8 KB each) into `slot`, G then U, on
// mbarrier `full`.
__device__ __forceinline__ void load_quarter(const Params& p, const Tile& tl, int j, uint32_t slot, uint32_t full) {
  wg::mbar_arrive_expect_tx(full, kOutStageBytes);
  const int2 o = quarter_origin(tl, j);
  wg::tile_load_4d(slot, p.aux_map, o.x, 0, o.y, 0, full);
  wg::tile_load_4d(slot + kOutStageBytes / 2, p.aux2_map, o.x, 0, o.y, 0, full);
}
// Quarter j's G and U brought into L2 only, for its load_quarter later.
__device__ __forceinline__ void prefetch_quarter(const Params& p, const Tile& tl, int j) {
  const int2 o = quarter_origin(tl, j);
  wg::tile_prefetch_l2_4d(p.aux_map, o.x, 0, o.y, 0);
  wg::tile_prefetch_l2_4d(p.aux2_map, o.x, 0, o.y, 0);
}

// kSwigluBwd's store of a consumer's tile `tl` (128 hidden units by 128 tokens) from its dh,
// rounded to bf16 (pack_acc) as the unfused path stores it, a quarter at a time from the two
// slots at `slots` (kOutStageBytes apart; slot s's mbarrier at full0 + 8s). The consumer's
// quarters are numbered across its tiles, from q0 = 4 · its tiles before this one, and quarter q
// takes slot q % 2 at phase (q / 2) & 1. Quarters 0 and 1 were asked for as the tile began, and
// 2 and 3 brought into L2 (gemm_ws_nt); quarter j + 2 is loaded into quarter j's slot as soon as
// quarter j's stores have read it, to land while quarter j + 1 is worked. Each warp reads its 16
// rows of G and U, writes its dG and dU over them, and one thread stores both boxes by TMA: dG
// and dU of a quarter leave together.
__device__ __forceinline__ void store_swiglu_bwd(const Params& p, const Tile& tl, int warp, int q0, const uint32_t (&dh)[2][32], uint32_t slots, uint32_t full0,
                                                 int barrier) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int q = q0 + j, s = q % kBwdSlots;
    const uint32_t slot = slots + s * kOutStageBytes;
    wg::mbar_wait(full0 + 8 * s, (uint32_t)(q / kBwdSlots) & 1u);
    uint32_t vg[16], vu[16];
    read_block<64>(slot, vg, warp);
    read_block<64>(slot + kOutStageBytes / 2, vu, warp);
#pragma unroll
    for (int i = 0; i < 16; ++i) swiglu_backward_pair(dh[j / 2][16 * (j % 2) + i], vg[i], vu[i]);
    // Over the rows this warp read (its ldmatrix results are used above, so the reads are done).
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t rg[4] = {vg[4 * kk], vg[4 * kk + 1], vg[4 * kk + 2], vg[4 * kk + 3]};
      const uint32_t ru[4] = {vu[4 * kk], vu[4 * kk + 1], vu[4 * kk + 2], vu[4 * kk + 3]};
      wg::store_fragment(slot, 64, 16 * warp, kk, rg);
      wg::store_fragment(slot + kOutStageBytes / 2, 64, 16 * warp, kk, ru);
    }
    wg::fence_proxy_async();  // the generic writes before the async proxy's reads
    wg::bar_sync(barrier, 128);
    if (threadIdx.x % 128 == 0) {
      const int2 o = quarter_origin(tl, j);
      wg::tile_store_4d(slot, p.out_map, o.x, 0, o.y, 0);
      wg::tile_store_4d(slot + kOutStageBytes / 2, p.out2_map, o.x, 0, o.y, 0);
      wg::bulk_commit();
      if (j + kBwdSlots < 4) {  // the stores just issued have read the slot
        wg::bulk_wait_read<0>();
        load_quarter(p, tl, j + kBwdSlots, slot, full0 + 8 * s);
      }
    }
  }
}

// The two consumer warpgroups' schedules. kCooperative: both work on each tile, 64 rows each,
// and store it together (the tensor cores idle while they store). kPingPong: each takes every
// other tile of the block, all 128 rows (two accumulators), and their main loops take turns, so
// one stores its tile while the other multiplies (CUTLASS's "ping-pong" schedule): for short K
// (768 at llama-124m: 12 stages a tile) the store is a large part of a tile's time. The turns are
// named barriers 1 and 2, and they are what keeps the ring's parities apart: a warpgroup waits
// for a stage's phase by its parity, which only tells it from the phase before, so it must not
// wait on a stage while the previous phase, the other warpgroup's, may be incomplete (run ahead,
// it would pass on the stale phase: the emulator's random schedules caught that).
enum Schedule { kCooperative, kPingPong };

template <int kEpi, Schedule kSched, int kBN, bool kAT>
__global__ void __launch_bounds__(kThreads, 1) gemm_ws_nt(const __grid_constant__ Params p) {
  constexpr int kRopeD = kEpi >= 16 ? kEpi : 0;
  constexpr bool kSwi = is_swiglu_forward(kEpi), kPing = kSched == kPingPong;
  static_assert(kSwi || kEpi == kSwigluBwd || (kRopeD > 0 && kRopeD <= 128 && kBN % (kRopeD > 0 ? kRopeD : 1) == 0), "rope: a head of 64 or 128 columns");
  static_assert(kBN == 128 || (kBN == 256 && !kPing), "tiles 128 wide, or 256 cooperative (ping-pong's two accumulators of 64 × 256 would not fit)");
  static_assert(!kSwi || kPing, "SwiGLU's epilogue takes a consumer's two accumulators: ping-pong");
  static_assert(!kSwi || !kAT, "SwiGLU's forward reads a (Wgu) K-major");
  constexpr bool kSwiBwd = kEpi == kSwigluBwd;
  static_assert(!kSwiBwd || (kPing && kBN == 128 && kAT), "SwiGLU's backward: ping-pong, 128 wide, a (Wdown) transposed");
  constexpr int kStages = stages_for(kEpi);
  constexpr int kOutTileBytes = out_tiles_for(kEpi) * kOutStageBytes;  // a consumer's output tiles
#if defined(WARP_EMULATOR) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kTileM = kSwi ? 64 : kBM;  // rows of out a tile covers (SwiGLU: 64 hidden units)
  DYNAMIC_SMEM(unsigned char, smem_raw);
  const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023) & ~1023u;
  constexpr int kStageBytes = stage_bytes(kBN);
  // After the ring: the consumers' output tiles (kSwigluBwd: their slots), then the mbarriers.
  const uint32_t out_tiles = base + kStages * kStageBytes, bar = out_tiles + 2 * kOutTileBytes;
  auto stage_a = [&](int s) { return base + s * kStageBytes; };
  auto stage_w = [&](int s) { return base + s * kStageBytes + kTileABytes; };
  auto full = [&](int s) { return bar + 8 * s; };
  auto empty = [&](int s) { return bar + 8 * (kStages + s); };
  auto slot_full = [&](int w, int s) { return bar + 8 * (2 * kStages + kBwdSlots * w + s); };  // kSwigluBwd: consumer w's slot s
  const int tiles = p.batch * p.tiles_m * p.tiles_n, ksteps = (p.k + kBK - 1) / kBK;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      wg::mbar_init(full(s), 1);                          // the producer's arrival with the stage's bytes
      wg::mbar_init(empty(s), kPing ? 1 : kConsumers / 128);  // an arrival from each warpgroup that reads it
    }
    if (kSwiBwd) {
      for (int b = 0; b < 2 * kBwdSlots; ++b) wg::mbar_init(slot_full(0, b), 1);
    }
    wg::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= kConsumers) {
    wg::regs_dec<kProducerRegs>();
    if (threadIdx.x != kConsumers) return;
    int i = 0;  // ring steps, over all the block's tiles
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const Tile tl = tile_at<kTileM, kBN>(p, t);
      for (int ks = 0; ks < ksteps; ++ks, ++i) {
        const int s = i % kStages;
        if (i >= kStages) wg::mbar_wait(empty(s), ((uint32_t)(i / kStages) & 1u) ^ 1u);
        wg::mbar_arrive_expect_tx(full(s), kStageBytes);
        if constexpr (kAT) {  // two [64 k][64 m] slabs, 8 KB each
          wg::tile_load_4d(stage_a(s), p.a_map, tl.m0, 0, ks * kBK, tl.b, full(s));
          wg::tile_load_4d(stage_a(s) + 64 * 128, p.a_map, tl.m0 + 64, 0, ks * kBK, tl.b, full(s));
        } else if constexpr (kSwi) {  // the gate rows, then the up rows under them (64 rows of 128 bytes)
          wg::tile_load_4d(stage_a(s), p.a_map, ks * kBK, 0, tl.m0, tl.b, full(s));
          wg::tile_load_4d(stage_a(s) + 64 * 128, p.a_map, ks * kBK, 0, p.swiglu_f + tl.m0, tl.b, full(s));
        } else {
          wg::tile_load_4d(stage_a(s), p.a_map, ks * kBK, 0, tl.m0, tl.b, full(s));
        }
        wg::tile_load_4d(stage_w(s), p.w_map, ks * kBK, 0, tl.n0, tl.b, full(s));
      }
    }
    return;
  }

  wg::regs_inc<kConsumerRegs>();
  const int wgi = wg::warpgroup_index(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  // This warpgroup's output tile, after the ring (named barriers 3 and 4: 1 and 2 are ping-pong's turns).
  const OutStage out_stage{out_tiles + wgi * kOutTileBytes, smem_raw + (out_tiles - raw) + wgi * kOutTileBytes, 3 + wgi};
  constexpr int kAcc = kPing ? 2 : 1;  // 64-row accumulators a warpgroup
  // Ping-pong turns: warpgroup w's main loop for the block's tile `seq` waits on barrier 1 + w,
  // which the other warpgroup's arrival opens once it has waited on every stage of tile seq − 1
  // (warpgroup 1 opens warpgroup 0's first). Arrivals only for a tile that exists, so none is
  // left unmatched at the end.
  auto has_tile = [&](int seq) { return blockIdx.x + seq * gridDim.x < (unsigned)tiles; };
  if (kPing && wgi == 1) wg::bar_arrive(1, kConsumers);
  // The block's tiles this warpgroup takes: every one (cooperative), or every other from the
  // warpgroup's index (ping-pong); `seq` counts the block's tiles, so the ring step of a tile's
  // first stage is seq · ksteps either way.
  for (int seq = kPing ? wgi : 0, t = blockIdx.x + seq * gridDim.x; t < tiles; seq += kPing ? 2 : 1, t = blockIdx.x + seq * gridDim.x) {
    const Tile tl = tile_at<kTileM, kBN>(p, t);
    float acc[kAcc][kBN / 2];
#pragma unroll
    for (int r = 0; r < kAcc; ++r)
#pragma unroll
      for (int e = 0; e < kBN / 2; ++e) acc[r][e] = 0.f;
    const int i0 = seq * ksteps;
    // kSwigluBwd: the tile's first quarters into the slots, once the previous tile's stores from
    // them have read them, and the others into L2.
    [[maybe_unused]] const int q0 = 4 * (seq >> 1);
    if (kSwiBwd && threadIdx.x % 128 == 0) {
      wg::bulk_wait_read<0>();
#pragma unroll
      for (int j = 0; j < kBwdSlots; ++j) load_quarter(p, tl, j, out_stage.addr + (q0 + j) % kBwdSlots * kOutStageBytes, slot_full(wgi, (q0 + j) % kBwdSlots));
#pragma unroll
      for (int j = kBwdSlots; j < 4; ++j) prefetch_quarter(p, tl, j);
    }
    if (kPing) wg::bar_sync(1 + wgi, kConsumers);
    for (int ks = 0; ks < ksteps; ++ks) {
      const int i = i0 + ks, s = i % kStages;
      wg::mbar_wait(full(s), (uint32_t)(i / kStages) & 1u);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        const uint64_t w_desc = wg::desc_k_major(stage_w(s), kBN, 0, kk);
#pragma unroll
        for (int r = 0; r < kAcc; ++r) {
          const int a_rows = kPing ? 64 * r : 64 * wgi;  // this accumulator's 64 rows of the a tile
          if constexpr (kAT) wg::wgmma_ss<kBN, 1, 0>(acc[r], wg::desc_mn_major(stage_a(s), kBK, a_rows, kk), w_desc, true);
          else wg::wgmma_ss<kBN, 0, 0>(acc[r], wg::desc_k_major(stage_a(s), kBM, a_rows, kk), w_desc, true);
        }
      }
      wg::wgmma_commit();
      // The previous stage's products are done once at most this one's group is pending: free it.
      wg::wgmma_wait<1>();
#pragma unroll
      for (int r = 0; r < kAcc; ++r) wg::fence_operand(acc[r]);
      if (ks > 0 && threadIdx.x % 128 == 0) wg::mbar_arrive(empty((i - 1) % kStages));
    }
    if (kPing && has_tile(seq + 1)) wg::bar_arrive(2 - wgi, kConsumers);
    wg::wgmma_wait<0>();
#pragma unroll
    for (int r = 0; r < kAcc; ++r) wg::fence_operand(acc[r]);
    if (ksteps > 0 && threadIdx.x % 128 == 0) wg::mbar_arrive(empty((i0 + ksteps - 1) % kStages));
    if constexpr (kSwi) {
      store_swiglu<kBN, kEpi == kSwigluDeep>(p, tl, warp, gid, tig, acc[0], acc[kAcc - 1], out_stage);
    } else if constexpr (kSwiBwd) {
      uint32_t dh[2][32];
#pragma unroll
      for (int r = 0; r < 2; ++r) pack_acc<128>(acc[r], dh[r]);
      store_swiglu_bwd(p, tl, warp, q0, dh, out_stage.addr, slot_full(wgi, 0), out_stage.barrier);
    } else {
#pragma unroll
      for (int r = 0; r < kAcc; ++r) store_rows<kRopeD, kBN>(p, tl, kPing ? 64 * r : 64 * wgi, warp, gid, tig, acc[r], out_stage);
    }
  }
  if (threadIdx.x % 128 == 0) wg::bulk_wait_read<0>();  // the last TMA stores have read their tile
#endif
}

// Encodes p's tile maps for a [batch][m][k] (or, a_t, [batch][k][m]: m a multiple of 8) and w
// [batch][n][k] (16-byte aligned, k a multiple of 8) and sets its tile counts for tiles tile_n
// wide (the epilogues' fields unset). Returns an error message, or nullptr.
inline const char* make_params(Params& p, const void* a, const void* w, bf16* out, int batch, int m, int n, int k, int64_t ldo, int tile_n,
                               bool a_t = false) {
  p = Params{};
  p.tile_n = tile_n;
  p.a_t = a_t;
  p.out = out;
  p.ldo = ldo;
  p.out_batch = (int64_t)m * ldo;
  p.batch = batch, p.m = m, p.n = n, p.k = k;
  p.tiles_m = (m + kBM - 1) / kBM;
  p.tiles_n = (n + tile_n - 1) / tile_n;
  const char* err = a_t ? wg::encode_head_rows(p.a_map, a, batch, k, 1, m, 64) : wg::encode_head_rows(p.a_map, a, batch, m, 1, k, kBM);
  return err ? err : wg::encode_head_rows(p.w_map, w, batch, n, 1, k, tile_n);
}

// Sends the staged tiles of p's out (and, when rope splits the columns, out2; with SwiGLU, out's
// two halves and out3 when set) by TMA stores: only where each is a dense [batch][rows][cols]
// tensor (rows ldo = n, or ldo2 = n − split, or ldo3 = n, apart), 16-byte aligned with 16-byte
// rows. Returns whether it did (else the consumers store).
inline bool use_tma_store(Params& p) {
  const auto fits = [](const void* base, int64_t ld, int cols) { return base && ld == cols && cols % 8 == 0 && reinterpret_cast<uintptr_t>(base) % 16 == 0; };
  if (p.swiglu_f > 0) {
    const int F = p.swiglu_f;
    bf16* const second = p.out + (int64_t)F * p.ldo;
    if (p.batch != 1 || !fits(p.out, p.ldo, p.n) || !fits(second, p.ldo, p.n) || (p.out3 && !fits(p.out3, p.ldo3, p.n))) return false;
    if (wg::encode_head_rows(p.out_map, p.out, 1, F, 1, p.n, 64) || wg::encode_head_rows(p.out2_map, second, 1, F, 1, p.n, 64)) return false;
    if (p.out3 && wg::encode_head_rows(p.out3_map, p.out3, 1, F, 1, p.n, 64)) return false;
    p.tma_store = true;
    return true;
  }
  const bool split = p.out2 != nullptr;
  const int n1 = split ? p.split : p.n;
  if (!fits(p.out, p.ldo, n1) || (split && !fits(p.out2, p.ldo2, p.n - p.split))) return false;
  if (wg::encode_head_rows(p.out_map, p.out, p.batch, p.m, 1, n1, 64)) return false;
  if (split && wg::encode_head_rows(p.out2_map, p.out2, 1, p.m, 1, p.n - p.split, 64)) return false;
  p.tma_store = true;
  return true;
}

// p for the SwiGLU forward (kSwiglu or kSwigluDeep): wgu [2F][d] (gate rows, then up rows), x
// [rows][d], G and U into gu [2F][rows]
// and h into h [F][rows] (all 16-byte aligned, d a multiple of 8). Returns an error message, or nullptr.
inline const char* make_swiglu_params(Params& p, const void* wgu, const void* x, bf16* gu, bf16* h, int F, int rows, int d) {
  p = Params{};
  p.out = gu, p.ldo = rows, p.out_batch = (int64_t)2 * F * rows;
  p.out3 = h, p.ldo3 = rows;
  p.swiglu_f = F;
  p.batch = 1, p.m = F, p.n = rows, p.k = d;
  p.tile_n = 128;
  p.tiles_m = (F + 63) / 64;
  p.tiles_n = (rows + 127) / 128;
  const char* err = wg::encode_head_rows(p.a_map, wgu, 1, 2 * F, 1, d, 64);
  return err ? err : wg::encode_head_rows(p.w_map, x, 1, rows, 1, d, 128);
}

// Which SwiGLU forward epilogue a gate/up projection of F hidden units, `rows` tokens and d
// inputs takes: kSwigluDeep for the smaller, kSwiglu for the larger (on an H100 the deep form is
// faster up to llama-124m's and somewhat larger products, slower at llama-1.3b's; the bound lies
// between; bench/matmul_ws.cu times both).
inline int swiglu_epilogue(int F, int rows, int d) { return 4.0 * F * rows * d < 5e11 ? kSwigluDeep : kSwiglu; }

// p for kSwigluBwd: dh = Wdownᵀ · doutᵀ with wdown [d][F] (a transposed) and dout [rows][d], G
// and U from gu [2F][rows], dG and dU into dgu [2F][rows] (by TMA stores), for the ping-pong
// 128-wide kernel. Needs every tensor 16-byte aligned, F, rows and d multiples of 8. Returns an
// error message, or nullptr.
inline const char* make_swiglu_bwd_params(Params& p, const void* wdown, const void* dout, bf16* dgu, const bf16* gu, int F, int rows, int d) {
  if (F % 8 != 0 || rows % 8 != 0) return "SwiGLU's backward epilogue: F and rows must be multiples of 8";
  if (const char* err = make_params(p, wdown, dout, dgu, 1, F, rows, d, rows, 128, true)) return err;
  p.swiglu_f = F;
  const char* err = wg::encode_head_rows(p.aux_map, gu, 1, F, 1, rows, 64);
  if (!err) err = wg::encode_head_rows(p.aux2_map, gu + (int64_t)F * rows, 1, F, 1, rows, 64);
  if (!err && !use_tma_store(p)) err = "SwiGLU's backward epilogue: dgu must be 16-byte aligned";
  return err;
}

// The kernel for an epilogue (kSwiglu, kSwigluDeep, kSwigluBwd, or a rope head dim of 64 or
// 128), schedule, tile width and a's layout (a_t: [k][m]), launched with kThreads threads and
// smem_bytes(tile_n, epilogue) bytes of shared memory; null for a combination the ops do not use.
// The ops use: SwiGLU's forward ping-pong 128 wide; its backward ping-pong 128 wide with a
// transposed; rope ping-pong 128 wide, or cooperative 256 wide where q's columns allow it.
using Kernel = void (*)(const Params);
inline Kernel kernel_for(int epilogue, Schedule sched, int tile_n, bool a_t) {
  const bool ping = sched == kPingPong && tile_n == 128, coop = sched == kCooperative && tile_n == 256;
  switch (epilogue) {
    case kSwiglu: return ping && !a_t ? gemm_ws_nt<kSwiglu, kPingPong, 128, false> : nullptr;
    case kSwigluDeep: return ping && !a_t ? gemm_ws_nt<kSwigluDeep, kPingPong, 128, false> : nullptr;
    case kSwigluBwd: return ping && a_t ? gemm_ws_nt<kSwigluBwd, kPingPong, 128, true> : nullptr;
    case 64: return a_t ? nullptr : ping ? gemm_ws_nt<64, kPingPong, 128, false> : coop ? gemm_ws_nt<64, kCooperative, 256, false> : nullptr;
    case 128: return a_t ? nullptr : ping ? gemm_ws_nt<128, kPingPong, 128, false> : coop ? gemm_ws_nt<128, kCooperative, 256, false> : nullptr;
    default: return nullptr;
  }
}

#ifndef WARP_EMULATOR
// Launches the kernel for (epilogue, sched, p.tile_n, p.a_t) over p's tiles, one block an SM at most
// (`sms`), on `stream`, with smem_bytes(p.tile_n, epilogue) of shared memory, which each kernel is
// allowed once. Returns the launch's error (cudaErrorInvalidValue for a combination kernel_for
// has no kernel for).
inline cudaError_t launch(const Params& p, int epilogue, Schedule sched, int sms, cudaStream_t stream) {
  const Kernel kernel = kernel_for(epilogue, sched, p.tile_n, p.a_t);
  if (!kernel) return cudaErrorInvalidValue;
  const size_t smem = smem_bytes(p.tile_n, epilogue);
  static std::set<Kernel> allowed;
  if (!allowed.count(kernel)) {
    if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return e;
    allowed.insert(kernel);
  }
  const int64_t tiles = (int64_t)p.batch * p.tiles_m * p.tiles_n;
  return launch_kernel(kernel, (unsigned)std::min<int64_t>(tiles, sms), kThreads, smem, stream, p);
}
#endif

// rope_cs[pos · (head_dim/2) + i] = (cos, sin) of f32(pos) · inv_freq[i] for pos < positions, as
// rope_kernel computes them (cuda/rope.cu): the table gemm_ws_nt<head_dim> reads.
static __global__ void make_rope_table(float2* rope_cs, int positions, int head_dim, double base) {
  const int half = head_dim / 2;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < (int64_t)positions * half) rope_cs[i] = rope_cs_at((int)(i / half), (int)(i % half), head_dim, base);
}

}  // namespace gemm
}  // namespace mdlm
