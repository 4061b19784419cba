// fp8_scale_update: the delayed recipe's step-end update of a table of sites' meta records
// [amax history, scale, scaleInv], as src/ops/fp8_scale_update.ts (cuda/fp8.cuh's arithmetic, bit
// for bit). A warp a site: the history's maximum (fmaxf from 0: NaN and negatives drop out, an
// infinity counts, as the reference's `>`), the scale from it (kept when it is zero or not
// finite), then the history rolled by one with history[0] = 0.
#include "common.cuh"
#include "fp8.cuh"

namespace mdlm {
namespace {

constexpr int kSiteThreads = 256;

__global__ void __launch_bounds__(kSiteThreads) fp8_scale_update_kernel(float* __restrict__ meta, int64_t sites, int history_len, int max_exp, int margin) {
  const int64_t site = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (site >= sites) return;  // whole warps: site is the same across a warp
  float* m = meta + site * (history_len + 2);
  float amax = 0.0f;
  for (int i = lane; i < history_len; i += 32) amax = fmaxf(amax, m[i]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  // history[i] = history[i - 1], 32 entries at a time from the top down: every lane reads its
  // entry's predecessor before any lane of the warp writes, and a lower group reads only entries
  // below the ones written so far.
  for (int base = (history_len - 1) / 32 * 32; base >= 0; base -= 32) {
    const int i = base + lane;
    const bool moves = i >= 1 && i < history_len;
    const float v = moves ? m[i - 1] : 0.0f;
    __syncwarp();
    if (moves) m[i] = v;
    __syncwarp();
  }
  if (lane == 0) {
    const float scale = pow2_scale(amax, max_exp, margin, m[history_len]);
    m[0] = 0.0f;
    m[history_len] = scale;
    m[history_len + 1] = inverse_pow2(scale);
  }
}

}  // namespace
}  // namespace mdlm

MDLM_OP(fp8_scale_update) {
  using namespace mdlm;
  const int64_t sites = call.i64("sites"_attr);
  const int history_len = call.i32("historyLen"_attr), margin = call.i32("margin"_attr);
  const Fp8 format = fp8_format(call, "format"_attr);
  auto* meta = static_cast<float*>(call.arg("meta"_arg).ptr);
  check_cuda(launch_kernel(fp8_scale_update_kernel, blocks_for(sites * 32, kSiteThreads), kSiteThreads, 0, call.stream, meta, sites, history_len,
                           fp8_max_exp(format), margin),
             "fp8_scale_update_kernel");
}
