// Every kernel cuda/matmul_ws.cuh's kernel_for hands out, for tests/cuda_build.test.ts to compile for
// sm_90a and check for serialised wgmmas (cuda/matmul.cu launches only the plain ones).
#include "../../cuda/matmul_ws.cuh"

namespace mdlm::gemm {

void launch_all(const Params& p, float2* table) {
  for (const int epilogue : {kStore, kSwiglu, kSwigluDeep, kSwigluBwd, 64, 128}) {
    for (const Schedule sched : {kCooperative, kPingPong}) {
      for (const int tile_n : {128, 256}) {
        for (const bool a_t : {false, true}) {
          if (const Kernel kernel = kernel_for(epilogue, sched, tile_n, a_t)) kernel<<<1, kThreads, smem_bytes(tile_n, epilogue)>>>(p);
        }
      }
    }
  }
  make_rope_table<<<1, 256>>>(table, 1, 64, 10000.0);
}

}  // namespace mdlm::gemm
