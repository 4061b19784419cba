// Warp and fragment helpers of the attention kernels: reductions over a warp and over the quad of
// lanes that share an accumulator row, the dQ accumulator's atomic adds, accumulator fragments
// as A operands, and exp2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "../ptx.cuh"

namespace mdlm {
namespace attn {

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

// atomicAdd(addr, 1): the previous value.
__device__ __forceinline__ int fetch_increment(int* addr) {
#ifdef WARP_EMULATOR
  return (*addr)++;  // the emulator runs one thread at a time
#else
  return atomicAdd(addr, 1);
#endif
}

// *addr += v for four adjacent floats of global memory (16-byte aligned), atomically per float
// (the dQ accumulator of the fused backwards). sm_90 has a vector reduction; older GPUs take four.
__device__ __forceinline__ void atomic_add4(float* addr, float4 v) {
#ifdef WARP_EMULATOR
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
// each adds four adjacent columns of one row: half the reductions of adding pairs, 16 bytes each.
// Addresses come from one row pointer with immediate offsets: computed anew for each, a
// reduction's address registers would wait for the previous reduction to read them. When every
// row and column of the warp's fragment is in range (all but a sequence's last tile, at a head
// dim that needs no padding) the reductions go out untested, without a test and branch each.
// These adds are bounded by L2's reduction throughput, a large part of bwd_ws's time.
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
#ifdef WARP_EMULATOR
  return std::exp2(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#endif
}

}  // namespace attn
}  // namespace mdlm
