// gelu, tanh approximation (GPT-2, llm.c): gelu(x) = x · ½(1 + tanh u), u = k(x + c·x³),
// k = √(2/π), c = 0.044715; gelu_backward: dx = dout · gelu′(x). Written with
// ½(1 + tanh u) = σ(2u) and ½(1 − tanh² u) = 2·σ(2u)·σ(−2u), as the reference (src/ops/gelu.ts)
// and the WGSL shader: no tanh, no cancellation for negative x, no overflow.
#include "elementwise.cuh"

namespace mdlm {

constexpr float kGeluK = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

struct GeluForward {
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const {
    const float x = in[0];
    out[0] = x * sigmoids(2.0f * kGeluK * (x + kGeluC * x * x * x)).pos;
  }
};

struct GeluBackward {
  // in: dout, x; out: dx
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float x = in[1];
    const Sigmoids s = sigmoids(2.0f * kGeluK * (x + kGeluC * x * x * x));
    // Past |x| = 10 the second term is below 1e-35; the clamp keeps x² finite (0 · inf = NaN).
    const float xc = fminf(fmaxf(x, -10.0f), 10.0f);
    const float du = kGeluK * (1.0f + 3.0f * kGeluC * xc * xc);
    out[0] = in[0] * (s.pos + 2.0f * xc * s.pos * s.neg * du);
  }
};

}  // namespace mdlm

MDLM_OP(gelu) { mdlm::launch_map<1, 1>(call, {"x"}, {"out"}, mdlm::GeluForward{}); }

MDLM_OP(gelu_backward) { mdlm::launch_map<2, 1>(call, {"dout", "x"}, {"dx"}, mdlm::GeluBackward{}); }
