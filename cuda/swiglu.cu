// swiglu: out = silu(gate) · up; swiglu_backward: dgate, dup (the math: swiglu.cuh).
// Element-wise over rows · hidden (src/ops/swiglu.ts); see elementwise.cuh for the launch.
#include "elementwise.cuh"
#include "swiglu.cuh"

namespace mdlm {

struct SwigluForward {
  // in: gate, up; out: out
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const { out[0] = swiglu_forward(in[0], in[1]); }
};

struct SwigluBackward {
  // in: dout, gate, up; out: dgate, dup
  __device__ void operator()(const float (&in)[3], float (&out)[2]) const { swiglu_backward(in[0], in[1], in[2], out[0], out[1]); }
};

}  // namespace mdlm

MDLM_OP(swiglu) { mdlm::launch_map<2, 1>(call, {"gate"_arg, "up"_arg}, {"out"_arg}, mdlm::SwigluForward{}); }

MDLM_OP(swiglu_backward) {
  mdlm::launch_map<3, 2>(call, {"dout"_arg, "gate"_arg, "up"_arg}, {"dgate"_arg, "dup"_arg}, mdlm::SwigluBackward{});
}
