// add: out = a + b, element-wise (f32 or bf16 storage, f32 math), 16-byte vectors when aligned.
#include "elementwise.cuh"

namespace mdlm {

struct Add {
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const { out[0] = in[0] + in[1]; }
};

}  // namespace mdlm

MDLM_OP(add) { mdlm::launch_map<2, 1>(call, {"a", "b"}, {"out"}, mdlm::Add{}); }
