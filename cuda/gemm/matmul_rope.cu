// matmul_rope: [q | k] = x · Wqkᵀ, each head turned by rope at its token's position, into q and k
// (src/ops/matmul_rope.ts). On an sm_90 GPU with the Hopper kernels on (KernelSettings), bf16, head
// dim 64 or 128, q's columns a multiple of 128, x and w 16-byte aligned and inFeatures a multiple
// of 8: one launch of cuda/gemm/gemm_ws.cuh's kernel with its rope epilogue (cooperative 256 wide
// where q's columns allow it, else ping-pong 128), which turns the products as they leave the
// accumulators and stores q and k (by TMA stores where they are dense and aligned): the
// [rows, (H + G)·D] projection is never stored, and rope never reads it back. The angles'
// (cos, sin) come from a table per (base, head dim), made on the first call and kept (a position
// past it is computed in the epilogue). Otherwise: the matmul op into scratch, then the rope op on
// its q and k columns.
#include <algorithm>
#include <map>
#include <utility>

#include "../common.cuh"
#include "gemm_ws.cuh"

namespace mdlm {
namespace {

// Positions the table covers at least (more when seqLen is larger): 2 MB at head dim 128.
constexpr int kRopeTablePositions = 4096;

struct RopeTable {
  float2* cs = nullptr;
  int positions = 0;
};

// The (cos, sin) table for (base, head_dim) covering `positions`, made on this stream the first
// time (and again, larger, for more positions; an older table stays allocated, as graphs recorded
// with it may still read it). Not while a CUDA graph is recorded: the work must run once first.
RopeTable rope_table(const OpCall& call, double base, int head_dim, int positions) {
  static std::map<std::pair<double, int>, RopeTable> tables;
  RopeTable& t = tables[{base, head_dim}];
  if (t.positions >= positions) return t;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(call.stream, &capture), "matmul_rope: cudaStreamIsCapturing");
  if (capture != cudaStreamCaptureStatusNone) {
    throw OpError("BAD_ARGUMENT", "matmul_rope: its rope table is made on the first call, which must not be recorded in a CUDA graph; run the same work once unrecorded first");
  }
  const int n = std::max(positions, kRopeTablePositions);
  float2* cs = nullptr;
  check_cuda(cudaMalloc(&cs, (size_t)n * (head_dim / 2) * sizeof(float2)), "matmul_rope: the rope table");
  const int64_t entries = (int64_t)n * (head_dim / 2);
  check_cuda(launch_kernel(gemm::make_rope_table, blocks_for(entries, 256), 256, 0, call.stream, cs, n, head_dim, base), "make_rope_table");
  t = RopeTable{cs, n};
  return t;
}

bool launch_fused(const OpCall& call, const Arg& x, const Arg& w, const Arg& positions, const Arg& q, const Arg& k, int rows, int heads, int kv_heads,
                  int head_dim, int seq_len, double base, int in_features) {
  const int split = heads * head_dim, n = split + kv_heads * head_dim;
  if ((head_dim != 64 && head_dim != 128) || split % 128 != 0 || in_features % 8 != 0 || !all_aligned16({x.ptr, w.ptr})) return false;
  const int tile_n = split % 256 == 0 ? 256 : 128;
  gemm::Params p;
  if (gemm::make_params(p, x.ptr, w.ptr, static_cast<gemm::bf16*>(q.ptr), 1, rows, n, in_features, split, tile_n)) return false;
  const RopeTable table = rope_table(call, base, head_dim, seq_len);
  p.out2 = static_cast<gemm::bf16*>(k.ptr), p.ldo2 = n - split, p.split = split;
  p.positions = static_cast<const int*>(positions.ptr), p.rope_cs = table.cs, p.rope_positions = table.positions, p.rope_base = base;
  gemm::use_tma_store(p);  // where q and k allow it
  const gemm::Schedule sched = tile_n == 256 ? gemm::kCooperative : gemm::kPingPong;
  check_cuda(gemm::launch(p, head_dim, sched, call.device->multiProcessorCount, call.stream), "matmul_rope (gemm_ws_nt)");
  return true;
}

}  // namespace
}  // namespace mdlm

MDLM_OP(matmul_rope) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"x"_arg, "w"_arg, "q"_arg, "k"_arg});
  const Arg &x = call.arg("x"_arg), &w = call.arg("w"_arg), &positions = call.arg("positions"_arg), &q = call.arg("q"_arg), &k = call.arg("k"_arg);
  const int64_t batch = call.i64("batch"_attr), seq_len = call.i64("seqLen"_attr), heads = call.i64("heads"_attr), kv_heads = call.i64("kvHeads"_attr);
  const int64_t head_dim = call.i64("headDim"_attr), in_features = call.i64("inFeatures"_attr);
  const double base = call.num("base"_attr);
  const int64_t rows = batch * seq_len, n = (heads + kv_heads) * head_dim;
  if (hopper_bf16(call, dtype, {rows, n, in_features}) &&
      launch_fused(call, x, w, positions, q, k, (int)rows, (int)heads, (int)kv_heads, (int)head_dim, (int)seq_len, base, (int)in_features)) {
    return;
  }
  // The two ops this one stands for, on the same stream, the projection in scratch.
  const Arg qk = scratch_arg(call, dtype, rows * n);
  run_matmul(call, x, w, qk, rows, n, in_features, false);
  for (const bool key : {false, true}) {
    const int64_t part_heads = key ? kv_heads : heads;
    run_op(call, "rope", {{"x"_arg, arg_part(qk, key ? heads * head_dim : 0, (rows - 1) * n + part_heads * head_dim)}, {"positions"_arg, positions}, {"y"_arg, key ? k : q}},
           {{"batch"_attr, (double)batch}, {"seqLen"_attr, (double)seq_len}, {"heads"_attr, (double)part_heads}, {"headDim"_attr, (double)head_dim}, {"base"_attr, base},
            {"xStride"_attr, (double)n}});
  }
}
