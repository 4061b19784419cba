// matmul_swiglu: [Gᵀ; Uᵀ] = Wgu · xᵀ into gu, and out = silu(G)·U (src/ops/matmul_swiglu.ts).
// On an sm_90 GPU, bf16, with wgu and x 16-byte aligned and k a multiple of 8: one launch of
// cuda/gemm/gemm_ws.cuh's ping-pong kernel with its SwiGLU epilogue (of the form
// gemm::swiglu_epilogue picks for the product's size), which writes G, U and out as it stores
// each tile (by TMA stores where rows is a multiple of 8 and the outputs 16-byte aligned), so out
// is computed from G and U as they are stored, as the swiglu op would read them. Otherwise (other
// GPUs, or the Hopper kernels off: KernelSettings): the matmul op, then the swiglu op on gu's
// halves.
// matmul_swiglu_backward: dhᵀ = Wdownᵀ · doutᵀ, then dG and dU into dgu. On an sm_90 GPU, bf16,
// every tensor 16-byte aligned and hidden, rows and k multiples of 8: the ping-pong kernel with
// SwiGLU's backward epilogue (dh never stored; G and U come by TMA, in two slots of a quarter
// tile, beside a ring of five stages).
// Otherwise: the matmul op into scratch, then swiglu_backward.
#include "../common.cuh"
#include "gemm_ws.cuh"

namespace mdlm {
namespace {

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
  const DType dtype = float_dtype_of(call, {"wgu"_arg, "x"_arg, "gu"_arg, "out"_arg});
  const Arg &wgu = call.arg("wgu"_arg), &x = call.arg("x"_arg), &gu = call.arg("gu"_arg), &out = call.arg("out"_arg);
  const int64_t F = call.i64("hidden"_attr), rows = call.i64("rows"_attr), k = call.i64("k"_attr);
  if (hopper_bf16(call, dtype, {2 * F, rows, k}) && launch_fused(call, wgu, x, gu, out, (int)F, (int)rows, (int)k)) return;
  // The two ops this one stands for, on the same stream.
  run_matmul(call, wgu, x, gu, 2 * F, rows, k, false);
  run_op(call, "swiglu", {{"gate"_arg, arg_part(gu, 0, F * rows)}, {"up"_arg, arg_part(gu, F * rows, F * rows)}, {"out"_arg, out}},
         {{"rows"_attr, (double)F}, {"hidden"_attr, (double)rows}});
}

MDLM_OP(matmul_swiglu_backward) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"wdown"_arg, "dout"_arg, "gu"_arg, "dgu"_arg});
  const Arg &wdown = call.arg("wdown"_arg), &dout = call.arg("dout"_arg), &gu = call.arg("gu"_arg), &dgu = call.arg("dgu"_arg);
  const int64_t F = call.i64("hidden"_attr), rows = call.i64("rows"_attr), k = call.i64("k"_attr);
  if (hopper_bf16(call, dtype, {2 * F, rows, k}) && all_aligned16({wdown.ptr, dout.ptr, gu.ptr, dgu.ptr})) {
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
         {{"dout"_arg, dh}, {"gate"_arg, arg_part(gu, 0, F * rows)}, {"up"_arg, arg_part(gu, F * rows, F * rows)}, {"dgate"_arg, arg_part(dgu, 0, F * rows)}, {"dup"_arg, arg_part(dgu, F * rows, F * rows)}},
         {{"rows"_attr, (double)F}, {"hidden"_attr, (double)rows}});
}
