// The small kernels around the backward's main kernels: Drow (bwd_prep), dQ from its f32
// accumulator (bwd_dq_store), and rope's turn of dq or dk where the main kernel did not apply it
// (bwd_rope_pass).
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "params.cuh"

namespace mdlm {
namespace attn {
namespace {

// Drow = rowsum(dO∘O) of every (b, t, h) row, and (fused) that row of the dQ accumulator zeroed:
// 16 lanes a row, 8 elements a lane (D a multiple of 8, at most 128). Both tensor-core backwards
// read Drow from here, so they agree on it to the bit.
__global__ void __launch_bounds__(256) bwd_prep(const Params p) {
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

}  // namespace
}  // namespace attn
}  // namespace mdlm
