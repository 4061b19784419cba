// The attention kernels' parameters (one Params for every kernel, forward and backward) and the
// index arithmetic they share: where a (batch, head) starts in each tensor, and which query or
// key block a block of the one-dimensional tile grids works on.
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "masking.cuh"
#include "fragments.cuh"

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

}  // namespace
}  // namespace attn
}  // namespace mdlm
