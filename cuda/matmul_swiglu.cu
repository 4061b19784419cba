// matmul_swiglu: [Gᵀ; Uᵀ] = Wgu · xᵀ into gu, and out = silu(G)·U (src/ops/matmul_swiglu.ts).
// On an sm_90 GPU, bf16, with wgu and x 16-byte aligned and k a multiple of 8: one launch of
// cuda/matmul_ws.cuh's ping-pong kernel with its SwiGLU epilogue (of the form
// gemm::swiglu_epilogue picks for the product's size), which writes G, U and out as it stores
// each tile (by TMA stores where rows is a multiple of 8 and the outputs 16-byte aligned), so out
// is computed from G and U as they are stored, as the swiglu op would read them. Otherwise, or
// with MDLM_MATMUL_SWIGLU_FUSED=0 (an A/B switch): the matmul op, then the swiglu op on gu's
// halves.
// matmul_swiglu_backward: dhᵀ = Wdownᵀ · doutᵀ, then dG and dU into dgu. On an sm_90 GPU, bf16,
// every tensor 16-byte aligned and hidden, rows and k multiples of 8: the ping-pong kernel with
// SwiGLU's backward epilogue (dh never stored; G and U come by TMA, in two slots of a quarter
// tile, beside a ring of five stages).
// Otherwise, or with MDLM_MATMUL_SWIGLU_FUSED=0: the matmul op into scratch, then swiglu_backward.
#include "common.cuh"
#include "matmul_ws.cuh"

namespace mdlm {
namespace {

// Whether the fused kernels may run: not switched off, and a Hopper bf16 call.
bool fusable(const OpCall& call, DType dtype, std::initializer_list<int64_t> extents) {
  return env_knob("MDLM_MATMUL_SWIGLU_FUSED") != "0" && hopper_bf16(call, dtype, extents);
}

bool launch_fused(const OpCall& call, const Arg& wgu, const Arg& x, const Arg& gu, const Arg& out, int F, int rows, int k) {
  if (k % 8 != 0 ||
      !all_aligned16({wgu.ptr, x.ptr}) || reinterpret_cast<uintptr_t>(gu.ptr) % 4 != 0 || reinterpret_cast<uintptr_t>(out.ptr) % 4 != 0) {
    return false;
  }
  gemm::Params p;
  if (gemm::make_swiglu_params(p, wgu.ptr, x.ptr, static_cast<gemm::bf16*>(gu.ptr), static_cast<gemm::bf16*>(out.ptr), F, rows, k)) return false;
  gemm::use_tma_store(p);  // where the layout allows it
  check_cuda(gemm::launch(p, gemm::swiglu_epilogue(F, rows, k), gemm::kPingPong, call.device->multiProcessorCount, call.stream), "matmul_swiglu (gemm_ws_nt)");
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
  run_matmul(call, wgu, x, gu, 2 * F, rows, k, false);
  run_op(call, "swiglu", {{"gate", arg_part(gu, 0, F * rows)}, {"up", arg_part(gu, F * rows, F * rows)}, {"out", out}}, {{"rows", (double)F}, {"hidden", (double)rows}});
}

MDLM_OP(matmul_swiglu_backward) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"wdown", "dout", "gu", "dgu"});
  const Arg &wdown = call.arg("wdown"), &dout = call.arg("dout"), &gu = call.arg("gu"), &dgu = call.arg("dgu");
  const int64_t F = call.i64("hidden"), rows = call.i64("rows"), k = call.i64("k");
  if (fusable(call, dtype, {2 * F, rows, k}) && all_aligned16({wdown.ptr, dout.ptr, gu.ptr, dgu.ptr})) {
    gemm::Params p;
    if (!gemm::make_swiglu_bwd_params(p, wdown.ptr, dout.ptr, static_cast<gemm::bf16*>(dgu.ptr), static_cast<const gemm::bf16*>(gu.ptr), (int)F, (int)rows, (int)k)) {
      check_cuda(gemm::launch(p, gemm::kSwigluBwd, gemm::kPingPong, call.device->multiProcessorCount, call.stream), "matmul_swiglu_backward (gemm_ws_nt)");
      return;
    }
  }
  // The two ops this one stands for, on the same stream, dh in scratch.
  const Arg dh = scratch_arg(call, dtype, F * rows);
  run_matmul(call, wdown, dout, dh, F, rows, k, true);
  run_op(call, "swiglu_backward",
         {{"dout", dh}, {"gate", arg_part(gu, 0, F * rows)}, {"up", arg_part(gu, F * rows, F * rows)}, {"dgate", arg_part(dgu, 0, F * rows)}, {"dup", arg_part(dgu, F * rows, F * rows)}},
         {{"rows", (double)F}, {"hidden", (double)rows}});
}
