// adamw: one fused AdamW step over flat f32 buffers (param, m, v updated in place), the gradient
// scaled by clip[1] (grad_norm's output, read on the device). The bias corrections and decay
// factor are computed once in float64 on the host, as adamwScalars in src/ops/adamw.ts.
#include <cmath>

#include "elementwise.cuh"

namespace mdlm {

struct AdamwStep {
  const float* clip;
  float beta1, beta2, eps, decay, step_size, inv_sqrt_bc2;

  // in: param, grad, m, v; out: param, m, v
  __device__ void operator()(const float (&in)[4], float (&out)[3]) const {
    const float g = in[1] * __ldg(clip + 1);
    const float m1 = beta1 * in[2] + (1.0f - beta1) * g;
    const float v1 = beta2 * in[3] + (1.0f - beta2) * g * g;
    out[0] = decay * in[0] - step_size * m1 / (sqrtf(v1) * inv_sqrt_bc2 + eps);
    out[1] = m1;
    out[2] = v1;
  }
};

}  // namespace mdlm

MDLM_OP(adamw) {
  using namespace mdlm;
  const double lr = call.num("lr"), beta1 = call.num("beta1"), beta2 = call.num("beta2");
  const double step = static_cast<double>(call.i64("step"));
  const AdamwStep f{
      static_cast<const float*>(call.arg("clip").ptr),
      static_cast<float>(beta1),
      static_cast<float>(beta2),
      static_cast<float>(call.num("eps")),
      static_cast<float>(1.0 - lr * call.num("weightDecay")),
      static_cast<float>(lr / (1.0 - std::pow(beta1, step))),
      static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, step))),
  };
  launch_map<4, 3>(call, {"param", "grad", "m", "v"}, {"param", "m", "v"}, f);
}
