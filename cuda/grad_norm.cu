// grad_norm: out = [‖x‖₂ · gradScale, gradScale · clip scale] left on the device for adamw (gradScale
// undoes a loss scale; 1 without one): the sums of squares of x's segments (cuda/reduce.cuh), then
// one block adds the partials in a fixed order.
#include "reduce.cuh"

namespace mdlm {

// CLIP_EPS in src/ops/grad_norm.ts: keeps the scale finite for a zero gradient.
constexpr float kClipEps = 1e-6f;

__global__ void __launch_bounds__(256) grad_norm_finalize_kernel(const float* __restrict__ partials, int64_t count, const float* __restrict__ grad_scale, float max_norm, float* __restrict__ out) {
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) acc += partials[j];
  acc = block_combine<false>(acc);
  if (threadIdx.x == 0) {
    const float g = *grad_scale;
    const float norm = sqrtf(acc) * g;
    out[0] = norm;
    out[1] = g * (max_norm > 0.0f ? fminf(1.0f, max_norm / (norm + kClipEps)) : 1.0f);
  }
}

}  // namespace mdlm

MDLM_OP(grad_norm) {
  using namespace mdlm;
  const int64_t n = call.i64("n"_attr);
  const int64_t segments = reduce_segments_for(1, n);
  auto* partials = static_cast<float*>(call.scratch->get(sizeof(float) * segments));
  reduce_segments(call, static_cast<const float*>(call.arg("x"_arg).ptr), partials, {1, n, segments, ReduceMap::square, false, 1.0f});
  check_cuda(launch_kernel(grad_norm_finalize_kernel, 1, 256, 0, call.stream, partials, segments, static_cast<const float*>(call.arg("gradScale"_arg).ptr), static_cast<float>(call.num("maxNorm"_attr)), static_cast<float*>(call.arg("out"_arg).ptr)), "grad_norm_finalize_kernel");
}
