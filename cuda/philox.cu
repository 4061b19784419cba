// philox: out[i] = philox4x32(counter = [i, step, rank, purpose], key = seed), one block a thread.
#include "common.cuh"
#include "philox.cuh"

namespace mdlm {

__global__ void __launch_bounds__(256) philox_kernel(uint32_t* __restrict__ out, uint32_t blocks, uint32_t step, uint32_t rank, uint32_t purpose, uint2 key,
                                                     bool vector_store) {
  wait_previous_kernel();
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= blocks) return;
  const uint4 r = philox4x32(make_uint4(i, step, rank, purpose), key);
  if (vector_store) {
    reinterpret_cast<uint4*>(out)[i] = r;
  } else {
    out[4 * i] = r.x;
    out[4 * i + 1] = r.y;
    out[4 * i + 2] = r.z;
    out[4 * i + 3] = r.w;
  }
}

}  // namespace mdlm

MDLM_OP(philox) {
  using namespace mdlm;
  auto* out = static_cast<uint32_t*>(call.arg("out").ptr);
  const auto blocks = static_cast<uint32_t>(call.i64("blocks"));
  check_cuda(launch_kernel(philox_kernel, blocks_for(blocks, 256), 256, 0, call.stream, out, blocks, static_cast<uint32_t>(call.i64("step")), static_cast<uint32_t>(call.i64("rank")),
                                                                   static_cast<uint32_t>(call.i64("purpose")), seed_key(call.i64("seed")), aligned16(out)), "philox_kernel");
}
