// The row layout of rmsnorm.cu's kernels (a header of its own: the layout and the deterministic
// parameter-gradient sums are independent of the normalisation).
//
// A row of `dim` elements lives in registers, read from memory once: a team of blockDim.x threads
// (a multiple of 32) holds it, thread t owning the vectors of VEC elements t + k · blockDim.x,
// k < kRowVecs<VEC>, at most 8 elements per thread. A block holds blockDim.y teams, one row each.
//
// Parameter gradients (dweight, dbias) are deterministic: each thread sums its columns over the
// rows its team walks, the teams of a block are added in team order into one partial row per block
// (scratch), and sum_partials_kernel adds the blocks' partial rows in block order. No atomics.
#pragma once

#include "common.cuh"

namespace mdlm {

template <int VEC>
constexpr int kRowVecs = VEC >= 8 ? 1 : 8 / VEC;

// Most threads a row team may have (8 elements a thread: rows up to 8192 elements).
constexpr int kMaxRowThreads = 1024;
// Most teams of a block whose teams span several warps: blocks of up to 512 threads, 64 a team.
constexpr int kMaxSharedTeams = 8;

// Calls f(k, j) for each vector k < kRowVecs<VEC> this thread owns; j is its first column.
template <int VEC, typename F>
__device__ __forceinline__ void for_row_vecs(int dim, F&& f) {
  const int nvec = dim / VEC;
#pragma unroll
  for (int k = 0; k < kRowVecs<VEC>; k++) {
    const int c = threadIdx.x + k * blockDim.x;
    if (c < nvec) f(k, c * VEC);
  }
}

// Sums v over the threads of this thread's team; every thread gets the totals (the same bits).
// When a team spans several warps it meets the block at barriers: every thread of the block
// must call it the same number of times.
template <int K>
__device__ __forceinline__ void team_sum(float (&v)[K]) {
  __shared__ float partial[kMaxSharedTeams][K][32];
#pragma unroll
  for (int i = 0; i < K; i++) v[i] = warp_sum(v[i]);
  if (blockDim.x == 32) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // the previous call's reads of `partial` are done
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < K; i++) partial[threadIdx.y][i][warp] = v[i];
  }
  __syncthreads();
  const bool has = lane < static_cast<int>(blockDim.x >> 5);
#pragma unroll
  for (int i = 0; i < K; i++) v[i] = warp_sum(has ? partial[threadIdx.y][i][lane] : 0.0f);
}

// Adds v (this thread's owned columns) over the block's teams in team order and writes the total
// row to out[0, dim). `acc` is dynamic shared memory of dim floats when blockDim.y > 1. Every
// thread of the block must call it.
template <int VEC>
__device__ void write_block_columns(const float (&v)[kRowVecs<VEC>][VEC], int dim, float* out, float* acc) {
  if (blockDim.y == 1) {
    for_row_vecs<VEC>(dim, [&](int k, int j) { store<float, VEC>(out + j, v[k]); });
    return;
  }
  for (int team = 0; team < static_cast<int>(blockDim.y); team++) {
    if (static_cast<int>(threadIdx.y) == team) {
      for_row_vecs<VEC>(dim, [&](int k, int j) {
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[j + e] = (team == 0 ? 0.0f : acc[j + e]) + v[k][e];
      });
    }
    __syncthreads();
  }
  for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < dim; j += blockDim.x * blockDim.y) out[j] = acc[j];
  __syncthreads();  // acc may be reused at once
}

// out_y[j] (+)= Σ_g partials[y][g][j] over the groups g in a fixed order, for y < gridDim.y (out0,
// out1); added to out_y with `accumulate`. Block (32, 32): 32 columns, 32 slices of the groups,
// then the slices in order.
template <typename T>
__global__ void __launch_bounds__(1024) sum_partials_kernel(const float* __restrict__ partials, int groups, int dim, T* out0, T* out1, bool accumulate) {
  __shared__ float slice[32][33];
  const int j = blockIdx.x * 32 + threadIdx.x;
  const float* p = partials + static_cast<int64_t>(blockIdx.y) * groups * dim;
  float s = 0.0f;
  if (j < dim) {
    for (int g = threadIdx.y; g < groups; g += 32) s += p[static_cast<int64_t>(g) * dim + j];
  }
  slice[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < dim) {
    float t = 0.0f;
#pragma unroll 8
    for (int y = 0; y < 32; y++) t += slice[y][threadIdx.x];
    T* out = (blockIdx.y == 0 ? out0 : out1) + j;
    *out = from_float<T>(accumulate ? to_float(*out) + t : t);
  }
}

// ---- host side ----

struct RowLayout {
  int threads_per_row;
  int rows_per_block;
  dim3 block() const { return dim3(threads_per_row, rows_per_block); }
  // Dynamic shared memory of write_block_columns.
  size_t column_smem(int dim) const { return rows_per_block > 1 ? dim * sizeof(float) : 0; }
};

// Teams of whole warps owning at most 8 elements a thread; as many rows a block as fit in
// `block_threads` threads.
template <int VEC>
RowLayout row_layout(const OpCall& call, int dim, int block_threads) {
  const int nvec = dim / VEC;
  const int threads = round_up((nvec + kRowVecs<VEC> - 1) / kRowVecs<VEC>, 32);
  if (threads > kMaxRowThreads) {
    throw OpError("BAD_ARGUMENT", call.op + ": dim " + std::to_string(dim) + " is more than the kernels hold (8192)");
  }
  return {threads, threads >= block_threads ? 1 : block_threads / threads};
}

// Backward grid: one block per row group up to as many as are resident at once, each walking
// rows block, block + grid, ... (so the partial rows stay few); then launches the kernel
// (args...) and the sum of its partials into out0 (and out1), of type TO, added to them with
// `accumulate`. `partials` is the scratch the kernel writes: [outputs][grid][dim] floats.
template <typename TO, typename Kernel, typename... Args>
void launch_row_backward(const OpCall& call, Kernel kernel, const RowLayout& layout, int rows, int dim, TO* out0, TO* out1, bool accumulate,
                         Args... args) {
  const int outputs = out1 ? 2 : 1;
  const dim3 block = layout.block();
  const size_t smem = layout.column_smem(dim);
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block.x * block.y, smem), call.op.c_str());
  const int needed = (rows + layout.rows_per_block - 1) / layout.rows_per_block;
  const int grid = std::max(1, std::min(needed, sm_count(call) * per_sm));
  float* partials = static_cast<float*>(call.scratch->get(sizeof(float) * outputs * grid * dim));
  check_cuda(launch_kernel(kernel, grid, block, smem, call.stream, args..., partials, rows, dim), call.op.c_str());
  check_cuda(launch_kernel(sum_partials_kernel<TO>, dim3((dim + 31) / 32, outputs), dim3(32, 32), 0, call.stream, partials, grid, dim, out0, out1, accumulate), call.op.c_str());
}

}  // namespace mdlm
