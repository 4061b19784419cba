// adamw: one fused AdamW step over flat f32 buffers (param, m, v updated in place), the gradient
// scaled by clip[1] (grad_norm's output, read on the device); a non-finite norm clip[0] makes the
// step the identity (the host queues the update without reading the norm first). The learning
// rate and the bias corrections are read on the device too, from sched = [lr, lr / (1 - beta1^step),
// 1 / sqrt(1 - beta2^step)] (adamwSchedule in src/ops/adamw.ts), so a recorded update serves every
// step.
// adamw_cast: the same step, the updated values also stored into `work` in the compute dtype
// (the bf16 working copy), so no cast pass reads the f32 masters again: 30 bytes a parameter
// moved instead of 28 + 6.
#include "common.cuh"

namespace mdlm {

struct AdamwStep {
  const float* clip;
  const float* sched;
  float beta1, beta2, eps, weight_decay;

  // in: param, grad, m, v; out: param, m, v
  __device__ void operator()(const float (&in)[4], float (&out)[3]) const {
    // All exponent bits set: NaN or ±Inf (a bit test, whatever the compiler assumes of NaNs).
    if ((__float_as_uint(__ldg(clip)) & 0x7f800000u) == 0x7f800000u) {
      out[0] = in[0], out[1] = in[2], out[2] = in[3];
      return;
    }
    const float lr = __ldg(sched), step_size = __ldg(sched + 1), inv_sqrt_bc2 = __ldg(sched + 2);
    const float g = in[1] * __ldg(clip + 1);
    const float m1 = beta1 * in[2] + (1.0f - beta1) * g;
    const float v1 = beta2 * in[3] + (1.0f - beta2) * g * g;
    out[0] = (1.0f - lr * weight_decay) * in[0] - step_size * m1 / (sqrtf(v1) * inv_sqrt_bc2 + eps);
    out[1] = m1;
    out[2] = v1;
  }
};

// The step over VEC elements a thread (a 16-byte vector of each f32 buffer), the n % VEC tail
// one element a thread in the same launch; with a working copy (adamw_cast) the updated values
// are also stored into it as W.
template <typename W, int VEC>
__global__ void __launch_bounds__(256)
    adamw_kernel(float* param, const float* __restrict__ grad, float* m, float* v, W* __restrict__ work, int64_t n, AdamwStep f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  if (i < nvec) {
    const int64_t e0 = i * VEC;
    float a[4][VEC], b[3][VEC];
    load<float, VEC>(param + e0, a[0]);
    load<float, VEC>(grad + e0, a[1]);
    load<float, VEC>(m + e0, a[2]);
    load<float, VEC>(v + e0, a[3]);
#pragma unroll
    for (int e = 0; e < VEC; e++) {
      const float x[4] = {a[0][e], a[1][e], a[2][e], a[3][e]};
      float y[3];
      f(x, y);
#pragma unroll
      for (int j = 0; j < 3; j++) b[j][e] = y[j];
    }
    store<float, VEC>(param + e0, b[0]);
    store<float, VEC>(m + e0, b[1]);
    store<float, VEC>(v + e0, b[2]);
    if (work) store<W, VEC>(work + e0, b[0]);
  } else if (i - nvec < n - nvec * VEC) {
    const int64_t e = nvec * VEC + (i - nvec);
    const float x[4] = {param[e], grad[e], m[e], v[e]};
    float y[3];
    f(x, y);
    param[e] = y[0];
    m[e] = y[1];
    v[e] = y[2];
    if (work) store1(work + e, y[0]);
  }
}

// One step over the call's buffers; `work` null (adamw) or the working copy (adamw_cast).
template <typename W>
void launch_adamw(const OpCall& call, W* work) {
  const AdamwStep f{
      static_cast<const float*>(call.arg("clip"_arg).ptr),
      static_cast<const float*>(call.arg("sched"_arg).ptr),
      static_cast<float>(call.num("beta1"_attr)),
      static_cast<float>(call.num("beta2"_attr)),
      static_cast<float>(call.num("eps"_attr)),
      static_cast<float>(call.num("weightDecay"_attr)),
  };
  float* param = static_cast<float*>(call.arg("param"_arg).ptr);
  const float* grad = static_cast<const float*>(call.arg("grad"_arg).ptr);
  float* m = static_cast<float*>(call.arg("m"_arg).ptr);
  float* v = static_cast<float*>(call.arg("v"_arg).ptr);
  const int64_t n = call.arg("param"_arg).numel;
  constexpr int kVec = kVec16<float>;
  const bool vectorised = all_aligned16({param, grad, m, v}) && reinterpret_cast<uintptr_t>(work) % (kVec * sizeof(W)) == 0;
  with_vec<float>(vectorised, [&](auto vec) {
    constexpr int VEC = decltype(vec)::value;
    const int64_t nvec = n / VEC;
    check_cuda(launch_kernel(adamw_kernel<W, VEC>, blocks_for(nvec + (n - nvec * VEC), 256), 256, 0, call.stream, param, grad, m, v, work, n, f), call.op.c_str());
  });
}

}  // namespace mdlm

MDLM_OP(adamw) { mdlm::launch_adamw<float>(call, nullptr); }

MDLM_OP(adamw_cast) {
  using namespace mdlm;
  with_float_type(call.float_dtype("work"_arg, {DType::f32, DType::bf16}), [&](auto tag) {
    using W = typename decltype(tag)::type;
    launch_adamw<W>(call, static_cast<W*>(call.arg("work"_arg).ptr));
  });
}
