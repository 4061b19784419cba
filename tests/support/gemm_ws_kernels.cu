// Every instantiation of cuda/gemm_ws.cuh's kernel, for tests/cuda_build.test.ts to compile for
// sm_90a (no cuda/*.cu launches them yet: bench/gemm_ws.cu times them against cuBLASLt).
#include "../../cuda/gemm_ws.cuh"

namespace mdlm::gemm {

void launch_all(const Params& p, float2* table) {
  gemm_ws_nt<0, kCooperative><<<1, kThreads, kSmem>>>(p);
  gemm_ws_nt<64, kCooperative><<<1, kThreads, kSmem>>>(p);
  gemm_ws_nt<128, kCooperative><<<1, kThreads, kSmem>>>(p);
  gemm_ws_nt<0, kPingPong><<<1, kThreads, kSmem>>>(p);
  gemm_ws_nt<64, kPingPong><<<1, kThreads, kSmem>>>(p);
  gemm_ws_nt<128, kPingPong><<<1, kThreads, kSmem>>>(p);
  make_rope_table<<<1, 256>>>(table, 1, 64, 10000.0);
}

}  // namespace mdlm::gemm
