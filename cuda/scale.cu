// scale: out = alpha · x, element-wise (f32 or bf16 storage, f32 math).
#include "elementwise.cuh"

namespace mdlm {

struct Scale {
  float alpha;
  __device__ void operator()(const float (&in)[1], float (&out)[1]) const { out[0] = alpha * in[0]; }
};

}  // namespace mdlm

MDLM_OP(scale) { mdlm::launch_map<1, 1>(call, {"x"}, {"out"}, mdlm::Scale{static_cast<float>(call.num("alpha"))}); }
