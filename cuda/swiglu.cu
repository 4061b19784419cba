// swiglu: out = silu(gate) · up, silu(g) = g · sigmoid(g); swiglu_backward:
//   dgate = dout · up · (σ + g · σ · (1 − σ)),  dup = dout · g · σ,  σ = sigmoid(g).
// Element-wise over rows · hidden (src/ops/swiglu.ts); see elementwise.cuh for the launch.
#include "elementwise.cuh"

namespace mdlm {

struct SwigluForward {
  // in: gate, up; out: out
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const {
    const float g = in[0];
    out[0] = g * sigmoids(g).pos * in[1];
  }
};

struct SwigluBackward {
  // in: dout, gate, up; out: dgate, dup
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const {
    const float dout = in[0], g = in[1], up = in[2];
    const Sigmoids s = sigmoids(g);
    out[0] = dout * up * (s.pos + g * s.pos * s.neg);
    out[1] = dout * g * s.pos;
  }
};

}  // namespace mdlm

MDLM_OP(swiglu) { mdlm::launch_map<2, 1>(call, {"gate", "up"}, {"out"}, mdlm::SwigluForward{}); }

MDLM_OP(swiglu_backward) {
  mdlm::launch_map<3, 2>(call, {"dout", "gate", "up"}, {"dgate", "dup"}, mdlm::SwigluBackward{});
}
