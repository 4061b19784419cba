// diffusion_mask: the forward process of masked diffusion, bit-identical to the reference
// (src/ops/diffusion_mask.ts) and shaders/diffusion_mask.wgsl. One block per sequence; each
// thread owns a contiguous chunk of positions. A block scan of the chunks' (non-padding, masked)
// counts gives the row totals and, when the row drew no mask, which thread holds the fallback's
// j-th non-padding position. With `empirical` each thread then rescales the weights of its own
// masked positions by real / masked (f32 division and product, as the reference rounds them).
// Draws are keyed by the global row (row_offset + b) of a global batch of total_rows rows.
#include "common.cuh"
#include "philox.cuh"

namespace mdlm {

constexpr int kMaskThreads = 256;

struct MaskParams {
  const int32_t* tokens;
  const float* mask_prob;
  const float* loss_weight;
  int32_t* noised;
  int32_t* mask;
  float* weights;
  uint32_t batch, seq_len, step, rank, row_offset, total_rows;
  uint2 key;
  int32_t mask_id;
  bool empirical;
};

__device__ __forceinline__ uint32_t mask_draw(const MaskParams& p, uint32_t index) {
  return philox4x32(make_uint4(index, p.step, p.rank, kRngPurposeMask), p.key).x;
}

__device__ __forceinline__ void emit(const MaskParams& p, uint32_t at, int32_t token, bool masked, float weight) {
  p.noised[at] = masked ? p.mask_id : token;
  p.mask[at] = masked ? 1 : 0;
  p.weights[at] = masked ? weight : 0.0f;
}

// Inclusive scan of (real, masked) over the block, in thread order (integers: exact).
__device__ uint2 block_inclusive_scan(uint2 v) {
  __shared__ uint2 warps[kMaskThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t x = __shfl_up_sync(0xffffffffu, v.x, o), y = __shfl_up_sync(0xffffffffu, v.y, o);
    if (lane >= o) v = make_uint2(v.x + x, v.y + y);
  }
  if (lane == 31) warps[warp] = v;
  __syncthreads();
  for (int w = 0; w < warp; w++) v = make_uint2(v.x + warps[w].x, v.y + warps[w].y);
  return v;
}

__global__ void __launch_bounds__(kMaskThreads) diffusion_mask_kernel(MaskParams p) {
  const uint32_t b = blockIdx.x;
  const uint32_t len = p.seq_len, row = b * len, draw_row = (p.row_offset + b) * len;
  const uint32_t chunk = (len + kMaskThreads - 1) / kMaskThreads;
  const uint32_t lo = min(threadIdx.x * chunk, len), hi = min(lo + chunk, len);
  const float prob = p.mask_prob[b], weight = p.loss_weight[b];
  uint32_t real = 0, masked = 0;
  for (uint32_t i = lo; i < hi; i++) {
    const int32_t token = p.tokens[row + i];
    bool m = false;
    if (token >= 0) {
      real++;
      m = uniform01(mask_draw(p, draw_row + i)) < prob;
    }
    masked += m;
    emit(p, row + i, token, m, weight);
  }
  __shared__ uint2 total;
  const uint2 inclusive = block_inclusive_scan(make_uint2(real, masked));
  if (threadIdx.x == kMaskThreads - 1) total = inclusive;
  __syncthreads();
  const bool fallback = total.y == 0 && total.x != 0;
  if (fallback) {
    const uint32_t j = mask_draw(p, p.total_rows * len + p.row_offset + b) % total.x;
    uint32_t seen = inclusive.x - real;
    if (j >= seen && j < seen + real) {
      for (uint32_t i = lo; i < hi; i++) {
        const int32_t token = p.tokens[row + i];
        if (token < 0) continue;
        if (seen++ == j) {
          emit(p, row + i, token, true, weight);
          break;
        }
      }
    }
  }
  if (!p.empirical || total.x == 0) return;
  // The fallback's position is in its owner's chunk, written by this same thread above.
  const float scaled = weight * (static_cast<float>(total.x) / static_cast<float>(fallback ? 1u : total.y));
  for (uint32_t i = lo; i < hi; i++) {
    if (p.mask[row + i]) p.weights[row + i] = scaled;
  }
}

}  // namespace mdlm

MDLM_OP(diffusion_mask) {
  using namespace mdlm;
  MaskParams p{
      static_cast<const int32_t*>(call.arg("tokens"_arg).ptr),
      static_cast<const float*>(call.arg("maskProb"_arg).ptr),
      static_cast<const float*>(call.arg("lossWeight"_arg).ptr),
      static_cast<int32_t*>(call.arg("noised"_arg).ptr),
      static_cast<int32_t*>(call.arg("mask"_arg).ptr),
      static_cast<float*>(call.arg("weights"_arg).ptr),
      static_cast<uint32_t>(call.i64("batch"_attr)),
      static_cast<uint32_t>(call.i64("seqLen"_attr)),
      static_cast<uint32_t>(call.i64("step"_attr)),
      static_cast<uint32_t>(call.i64("rank"_attr)),
      static_cast<uint32_t>(call.i64("rowOffset"_attr)),
      static_cast<uint32_t>(call.i64("totalRows"_attr)),
      seed_key(call.i64("seed"_attr)),
      call.i32("maskId"_attr),
      call.flag("empirical"_attr),
  };
  check_cuda(launch_kernel(diffusion_mask_kernel, p.batch, kMaskThreads, 0, call.stream, p), "diffusion_mask_kernel");
}
