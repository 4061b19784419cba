// compact_rows: the rows with a target >= 0 and a weight != 0 moved to the front, in order (as
// src/ops/compact_rows.ts and shaders/compact_rows.wgsl). One block of kThreads; each thread owns
// a contiguous chunk of rows; a block scan of the chunks' counts says where each thread's rows
// go. Past the total each thread fills its own chunk's slots of the packed arrays with "none".
//
// Also here: the kernel that decides a conditional graph node from such a count (set_above), for
// the addon's conditionalBegin: the LM head's blocks past the last counted row are skipped.
#include "reduce.cuh"

namespace mdlm {

constexpr int kCompactThreads = 1024;

struct CompactParams {
  const int32_t* targets;
  const float* weights;
  int32_t* order;
  int32_t* slot;
  int32_t* count;
  int32_t* packed_targets;
  float* packed_weights;
  uint32_t rows;
};

__device__ __forceinline__ bool counted(const CompactParams& p, uint32_t r) { return p.targets[r] >= 0 && p.weights[r] != 0.0f; }

__global__ void __launch_bounds__(kCompactThreads) compact_rows_kernel(CompactParams p) {
  const uint32_t chunk = (p.rows + kCompactThreads - 1) / kCompactThreads;
  const uint32_t lo = min(threadIdx.x * chunk, p.rows), hi = min(lo + chunk, p.rows);
  uint32_t own = 0;
  for (uint32_t r = lo; r < hi; r++) own += counted(p, r);
  uint32_t total;
  uint32_t k = block_inclusive_scan<kCompactThreads>(own, total) - own;
  for (uint32_t r = lo; r < hi; r++) {
    if (counted(p, r)) {
      p.order[k] = static_cast<int32_t>(r);
      p.slot[r] = static_cast<int32_t>(k);
      p.packed_targets[k] = p.targets[r];
      p.packed_weights[k] = p.weights[r];
      k++;
    } else {
      p.slot[r] = -1;
    }
  }
  for (uint32_t j = max(lo, total); j < hi; j++) {
    p.order[j] = -1;
    p.packed_targets[j] = -1;
    p.packed_weights[j] = 0.0f;
  }
  if (threadIdx.x == 0) *p.count = static_cast<int32_t>(total);
}

__global__ void set_above_kernel(cudaGraphConditionalHandle handle, const int32_t* count, int32_t threshold) {
  cudaGraphSetConditional(handle, *count > threshold ? 1u : 0u);
}

void launch_set_above(cudaGraphConditionalHandle handle, const int32_t* count, int32_t threshold, cudaStream_t stream) {
  set_above_kernel<<<1, 1, 0, stream>>>(handle, count, threshold);
  check_launch("set_above_kernel");
}

}  // namespace mdlm

MDLM_OP(compact_rows) {
  using namespace mdlm;
  const int64_t rows = call.i64("rows"_attr);
  if (rows > 0x7fffffff) throw OpError("BAD_ATTRIBUTE", "compact_rows: rows " + std::to_string(rows) + " do not fit in an i32 row index");
  CompactParams p{
      static_cast<const int32_t*>(call.arg("targets"_arg).ptr),
      static_cast<const float*>(call.arg("weights"_arg).ptr),
      static_cast<int32_t*>(call.arg("order"_arg).ptr),
      static_cast<int32_t*>(call.arg("slot"_arg).ptr),
      static_cast<int32_t*>(call.arg("count"_arg).ptr),
      static_cast<int32_t*>(call.arg("packedTargets"_arg).ptr),
      static_cast<float*>(call.arg("packedWeights"_arg).ptr),
      static_cast<uint32_t>(rows),
  };
  check_cuda(launch_kernel(compact_rows_kernel, 1, kCompactThreads, 0, call.stream, p), "compact_rows_kernel");
}
