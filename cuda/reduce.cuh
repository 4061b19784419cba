// Deterministic reductions over rows of an f32 matrix, shared by reduce.cu and grad_norm.cu (the
// twin of shaders/reduce.wgsl and its launcher). Each block combines one segment of one row: its
// threads walk the segment strided (coalesced), then a fixed tree (warp butterflies, then the
// warps' results in warp order) combines them. A row is cut into segments only while rows are too
// few to fill the GPU; the segments' partials then go through a second pass. Segment counts,
// block sizes and the load width are functions of the shape and of whether x starts on a 16-byte
// boundary alone, so the same tensors give the same bits every run and on every GPU. Also the
// block-wide integer scan of embedding's radix sort and compact_rows.
#pragma once

#include <algorithm>

#include "common.cuh"

namespace mdlm {

// Inclusive scan of one u32 a thread over a block of kThreads (a multiple of 32), in thread order,
// and the block's total: warp shuffles, then the warps' totals. Integers: exact in any order.
// Every thread of the block must call it (it holds one __syncthreads).
template <int kThreads>
__device__ __forceinline__ uint32_t block_inclusive_scan(uint32_t v, uint32_t& total) {
  static_assert(kThreads % 32 == 0, "block_inclusive_scan: whole warps");
  __shared__ uint32_t warps[kThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t x = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += x;
  }
  if (lane == 31) warps[warp] = v;
  __syncthreads();
  total = 0;
  for (int w = 0; w < kThreads / 32; w++) {
    if (w < warp) v += warps[w];
    total += warps[w];
  }
  return v;
}

enum class ReduceMap { identity, square, abs };

// Enough blocks to fill a large GPU; rows are split only while segments stay this long.
constexpr int64_t kReduceTargetBlocks = 1024;
constexpr int64_t kReduceMinSegment = 4096;

inline int64_t reduce_segments_for(int64_t rows, int64_t cols) {
  if (rows >= kReduceTargetBlocks) return 1;
  return std::max<int64_t>(1, std::min((kReduceTargetBlocks + rows - 1) / rows, cols / kReduceMinSegment));
}

template <bool MAX>
__device__ __forceinline__ float combine(float a, float b) {
  return MAX ? fmaxf(a, b) : a + b;
}

// Combines v over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in
// thread 0. 0 is the identity of both sums and maxima of |x| (the only maxima taken).
template <bool MAX>
__device__ float block_combine(float v) {
  __shared__ float warps[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = combine<MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (blockDim.x == 32) return v;
  if (lane == 0) warps[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? warps[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = combine<MAX>(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

template <ReduceMap MAP>
__device__ __forceinline__ float reduce_map(float e) {
  return MAP == ReduceMap::square ? e * e : MAP == ReduceMap::abs ? fabsf(e) : e;
}

// out[o] = scale · combine of map(x) over segment o % segments of row o / segments. With kVec4 the
// rows and segments start on 16-byte boundaries and hold whole float4s (reduce_segments checks),
// and each thread takes float4s: four times the bytes a load, which the grad norm's one long row
// needs to reach the memory's bandwidth (scalar loads fall well short of it).
template <ReduceMap MAP, bool MAX, bool kVec4>
__global__ void __launch_bounds__(256) segment_reduce_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t cols, int64_t segments,
                                                             int64_t seg_len, float scale) {
  const int64_t o = blockIdx.x;
  const int64_t begin = (o % segments) * seg_len;
  const int64_t end = begin + seg_len < cols ? begin + seg_len : cols;
  const float* row = x + (o / segments) * cols;
  float acc = 0.0f;
  if constexpr (kVec4) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int64_t j = begin / 4 + threadIdx.x; j < end / 4; j += blockDim.x) {
      const float4 e = row4[j];
      acc = combine<MAX>(acc, combine<MAX>(combine<MAX>(reduce_map<MAP>(e.x), reduce_map<MAP>(e.y)), combine<MAX>(reduce_map<MAP>(e.z), reduce_map<MAP>(e.w))));
    }
  } else {
#pragma unroll 4
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc = combine<MAX>(acc, reduce_map<MAP>(row[j]));
  }
  acc = block_combine<MAX>(acc);
  if (threadIdx.x == 0) out[o] = acc * scale;
}

struct SegmentPass {
  int64_t rows, cols, segments;
  ReduceMap map;
  bool use_max;
  float scale;
};

// One launch: out gets rows · segments values. Rows of whole float4s on 16-byte boundaries take
// float4 loads, their segments rounded up to whole float4s (the last one the shorter for it).
inline void reduce_segments(const OpCall& call, const float* x, float* out, const SegmentPass& p) {
  const bool vec4 = p.cols % 4 == 0 && aligned16(x);
  int64_t seg_len = (p.cols + p.segments - 1) / p.segments;
  if (vec4) seg_len = (seg_len + 3) / 4 * 4;
  // About four elements a thread before the tree, 32 to 256 threads.
  int threads = 32;
  while (threads < 256 && threads * 4 < seg_len) threads *= 2;
  const unsigned blocks = static_cast<unsigned>(p.rows * p.segments);
  auto launch = [&](auto kernel_plain, auto kernel_vec4) {
    check_cuda(launch_kernel(vec4 ? kernel_vec4 : kernel_plain, blocks, threads, 0, call.stream, x, out, p.cols, p.segments, seg_len, p.scale),
               "segment_reduce_kernel");
  };
  if (p.use_max) {
    if (p.map == ReduceMap::abs) launch(segment_reduce_kernel<ReduceMap::abs, true, false>, segment_reduce_kernel<ReduceMap::abs, true, true>);
    else launch(segment_reduce_kernel<ReduceMap::identity, true, false>, segment_reduce_kernel<ReduceMap::identity, true, true>);
  } else {
    if (p.map == ReduceMap::square) launch(segment_reduce_kernel<ReduceMap::square, false, false>, segment_reduce_kernel<ReduceMap::square, false, true>);
    else launch(segment_reduce_kernel<ReduceMap::identity, false, false>, segment_reduce_kernel<ReduceMap::identity, false, true>);
  }
}

}  // namespace mdlm
