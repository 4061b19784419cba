// matmul_swiglu: [Gᵀ; Uᵀ] = Wgu · xᵀ into gu, and out = silu(G)·U (src/ops/matmul_swiglu.ts).
// On an sm_90 GPU, bf16, with wgu and x 16-byte aligned and k a multiple of 8: one launch of
// cuda/matmul_ws.cuh's ping-pong kernel with its SwiGLU epilogue, which writes G, U and out as
// it stores each tile (by TMA stores where rows is a multiple of 8 and the outputs 16-byte
// aligned), so out is computed from G and U as they are stored, as the swiglu op would read
// them. Otherwise, or with MDLM_MATMUL_SWIGLU_FUSED=0 (an A/B switch): the matmul op, then the
// swiglu op on gu's halves.
// matmul_swiglu_backward: dhᵀ = Wdownᵀ · doutᵀ, then dG and dU into dgu. On an sm_90 GPU, bf16,
// every tensor 16-byte aligned and hidden, rows and k multiples of 8: the ping-pong kernel with
// SwiGLU's backward epilogue (dh never stored; G and U come by TMA while the tile multiplies).
// Otherwise, or with MDLM_MATMUL_SWIGLU_FUSED=0: the matmul op into scratch, then swiglu_backward.
#include <algorithm>
#include <limits>

#include "common.cuh"
#include "matmul_ws.cuh"

namespace mdlm {
namespace {

// Whether the fused kernels may run: sm_90, bf16, not switched off, every extent an int.
bool fusable(const OpCall& call, DType dtype, std::initializer_list<int64_t> extents) {
  return env_knob("MDLM_MATMUL_SWIGLU_FUSED") != "0" && call.device && call.device->major == 9 && dtype == DType::bf16 &&
         std::max(extents) <= std::numeric_limits<int>::max();
}

bool launch_fused(const OpCall& call, const Arg& wgu, const Arg& x, const Arg& gu, const Arg& out, int F, int rows, int k) {
  if (k % 8 != 0 ||
      !all_aligned16({wgu.ptr, x.ptr}) || reinterpret_cast<uintptr_t>(gu.ptr) % 4 != 0 || reinterpret_cast<uintptr_t>(out.ptr) % 4 != 0) {
    return false;
  }
  gemm::Params p;
  if (gemm::make_swiglu_params(p, wgu.ptr, x.ptr, static_cast<gemm::bf16*>(gu.ptr), static_cast<gemm::bf16*>(out.ptr), F, rows, k)) return false;
  gemm::use_tma_store(p);  // where the layout allows it
  check_cuda(gemm::launch(p, gemm::kSwiglu, gemm::kPingPong, false, call.device->multiProcessorCount, call.stream), "matmul_swiglu (gemm_ws_nt)");
  return true;
}

}  // namespace
}  // namespace mdlm

MDLM_OP(matmul_swiglu) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"wgu", "x", "gu", "out"});
  const Arg &wgu = call.arg("wgu"), &x = call.arg("x"), &gu = call.arg("gu"), &out = call.arg("out");
  const int64_t F = call.i64("hidden"), rows = call.i64("rows"), k = call.i64("k");
  if (fusable(call, dtype, {2 * F, rows, k}) && launch_fused(call, wgu, x, gu, out, (int)F, (int)rows, (int)k)) return;
  // The two ops this one stands for, on the same stream.
  OpCall mm = call;
  mm.op = "matmul";
  mm.args = {{"a", wgu}, {"b", x}, {"out", gu}};
  mm.nums = {{"batch", 1}, {"m", (double)(2 * F)}, {"n", (double)rows}, {"k", (double)k}, {"transA", 0}, {"transB", 1}, {"accumulate", 0}, {"outF32", 0}};
  find_launcher("matmul")(mm);
  Arg gate = gu, up = gu;
  gate.numel = up.numel = F * rows;
  up.ptr = static_cast<char*>(gu.ptr) + F * rows * dtype_bytes(dtype);
  OpCall sw = call;
  sw.op = "swiglu";
  sw.args = {{"gate", gate}, {"up", up}, {"out", out}};
  sw.nums = {{"rows", (double)F}, {"hidden", (double)rows}};
  find_launcher("swiglu")(sw);
}

MDLM_OP(matmul_swiglu_backward) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"wdown", "dout", "gu", "dgu"});
  const Arg &wdown = call.arg("wdown"), &dout = call.arg("dout"), &gu = call.arg("gu"), &dgu = call.arg("dgu");
  const int64_t F = call.i64("hidden"), rows = call.i64("rows"), k = call.i64("k");
  if (fusable(call, dtype, {2 * F, rows, k}) && all_aligned16({wdown.ptr, dout.ptr, gu.ptr, dgu.ptr})) {
    gemm::Params p;
    if (!gemm::make_swiglu_bwd_params(p, wdown.ptr, dout.ptr, static_cast<gemm::bf16*>(dgu.ptr), static_cast<const gemm::bf16*>(gu.ptr), (int)F, (int)rows, (int)k)) {
      check_cuda(gemm::launch(p, gemm::kSwigluBwd, gemm::kPingPong, true, call.device->multiProcessorCount, call.stream), "matmul_swiglu_backward (gemm_ws_nt)");
      return;
    }
  }
  // The two ops this one stands for, on the same stream, dh in scratch.
  Arg dh = gu;
  dh.numel = F * rows;
  dh.ptr = call.scratch->get((size_t)F * rows * dtype_bytes(dtype));
  OpCall mm = call;
  mm.op = "matmul";
  mm.args = {{"a", wdown}, {"b", dout}, {"out", dh}};
  mm.nums = {{"batch", 1}, {"m", (double)F}, {"n", (double)rows}, {"k", (double)k}, {"transA", 1}, {"transB", 1}, {"accumulate", 0}, {"outF32", 0}};
  find_launcher("matmul")(mm);
  Arg gate = gu, up = gu, dgate = dgu, dup = dgu;
  gate.numel = up.numel = dgate.numel = dup.numel = F * rows;
  up.ptr = static_cast<char*>(gu.ptr) + F * rows * dtype_bytes(dtype);
  dup.ptr = static_cast<char*>(dgu.ptr) + F * rows * dtype_bytes(dtype);
  OpCall sw = call;
  sw.op = "swiglu_backward";
  sw.args = {{"dout", dh}, {"gate", gate}, {"up", up}, {"dgate", dgate}, {"dup", dup}};
  sw.nums = {{"rows", (double)F}, {"hidden", (double)rows}};
  find_launcher("swiglu_backward")(sw);
}
