// The CUDA side's debugging switches: environment variables read once, here and nowhere else in
// cuda/ (the build script, cuda/build.mjs, reads its own: the architectures and where the headers
// are). What users choose (determinism, the Hopper kernels, GEMM autotuning) is configuration,
// passed to the kernels as op attributes or KernelSettings (cuda/op.h), not a switch.
//
//   MDLM_CUDA_SYNC=1   wait for the stream after every op and graph launch, so that a fault
//                      inside a kernel is reported by the op that enqueued it (slow; debugging).
#pragma once

#include <cstdlib>
#include <cstring>

namespace mdlm::knobs {

// MDLM_CUDA_SYNC=1, read on the first call.
inline bool sync_each_op() {
  static const bool on = [] {
    const char* v = std::getenv("MDLM_CUDA_SYNC");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

}  // namespace mdlm::knobs
