// axpy: y += alpha · x in place (f32 or bf16 storage, f32 math): y is both an input and the
// output of the element-wise map; each thread reads its elements before writing them.
#include "elementwise.cuh"

namespace mdlm {

struct Axpy {
  float alpha;
  __device__ void operator()(const float (&in)[2], float (&out)[1]) const { out[0] = fmaf(alpha, in[0], in[1]); }
};

}  // namespace mdlm

MDLM_OP(axpy) { mdlm::launch_map<2, 1>(call, {"x", "y"}, {"y"}, mdlm::Axpy{static_cast<float>(call.num("alpha"))}); }
