// attention and attention_backward (src/ops/attention.ts): FlashAttention-2 style kernels, and
// the launch policy that picks among them. The kernels live by family beside this file:
// simt.cuh (f32), forward_mma.cuh and backward_mma.cuh (mma.sync, sm_80 and newer),
// forward_wgmma.cuh and backward_wgmma.cuh (Hopper's warp-specialised wgmma kernels),
// backward_passes.cuh (the small kernels around the backward's main ones); the masking rule and
// tile order in masking.cuh, the shared parameters in params.cuh.
//
// Layouts: q, out, dout, dq [B, T, H, D]; k, v, dk, dv [B, T, G, D] (G = kvHeads, q head h reads
// kv head h / (H / G)); segIds [B, T]; lse and the scratch Drow [B, H, T] (f32).
//
// bf16, head dim a multiple of 8 (padded up to 32, 64, 96 or 128 in shared memory, the padding
// zero), 16-byte aligned tensors: tensor-core kernels (mma.sync m16n8k16 bf16 -> f32, ldmatrix,
// cp.async double-buffered tiles, padded shared rows so ldmatrix is conflict-free).
//   forward   fwd_mma      one block per (b, h, Br query rows); online softmax over Bc-key tiles;
//                          writes out (bf16) and lse (natural log of Σ exp(scale·qk)).
//   backward  bwd_prep     Drow = rowsum(dO∘O) into scratch (and, fused, the f32 dQ accumulator
//                          zeroed); every tensor-core backward reads it.
//   backward (default, fused)
//             bwd_dkdv_mma<.., true> one block per (b, kv head, key rows): loops over the q heads
//                          of the GQA group and the query tiles; dV = Σ Pᵀ·dO, dK = scale · Σ dSᵀ·Q
//                          in registers, and dSᵀ through shared memory to dQacc += dS·K, added to
//                          the f32 accumulator with atomics (FA2's 5 tile products).
//             bwd_ws       the same on warpgroup MMA (sm_90), head dim 64 and 128: two consumer
//                          warpgroups of 64 keys fed by a producer warpgroup (tiles by TMA), each
//                          tile's dQ a step later.
//             bwd_dq_store dq = bf16(scale · dQacc).
//   With ropeBase (the fused q/k/v backward), dq and dk come out turned back through rope
//   (gradients of rope's inputs): in bwd_dq_store and in bwd_ws's dK store where it holds both
//   halves of a head (D = 64 or 128), else by bwd_rope_pass after the kernels; gradStride writes
//   dq, dk and dv as the parts of one fused gradient's rows.
//             dK and dV are owned by one thread each and summed in a fixed order; dQ's order of
//             atomic additions varies from run to run (its last bits with it).
//   backward (the op's deterministic attribute: the same bits on every run)
//             bwd_dq_mma   one block per (b, h, query rows): dQ = scale · Σ_tiles dS·K in registers.
//             bwd_dkdv_mma<.., false> as above without dQ.
//             No atomics; the price is S and dP recomputed in both kernels, 7 tile products.
// On an sm_90 device the forward at head dims 64 and 128 is fwd_ws (warp-specialised wgmma) and
// the default backward bwd_ws; with the kernel settings' hopper_kernels off (cuda/op.h) it runs
// the mma.sync kernels, as other GPUs do.
// f32 (and bf16 with a head dim that is not a multiple of 8 or misaligned tensors): the same
// three kernels in exact fp32 SIMT arithmetic (fwd_simt, bwd_dq_simt, bwd_dkdv_simt; 128
// threads, 16 rows a block, 32-row streamed tiles).
//
// Launch configurations of the mma.sync kernels (tile table `Tiles` below; 128 threads = 4 warps
// unless noted; the wgmma kernels are described at their definitions):
//   kD   forward Br×Bc (rows/warp)   dq Br×Bc (rows/warp)   dkdv Bc(keys)×Br(queries) (keys/warp)
//   32   128×64 (32)                 128×64 (32)            128×32 (32)
//   64   128×64 (32)                 128×64 (32)            128×32 (32)
//   96   128×32 (32)                 128×32 (32)            64×32 (16)
//   128  128×64 (32)                 128×32 (32)            64×32 (16); fused: 128×32 (16), 8 warps
// Grids: one dimension, B·H (forward, dq) or B·G (dkdv) rows × ⌈T/tile⌉ tiles, in groups of rows
// sized to L2 and tile by tile within a group (block_tile, group_rows); the query blocks are taken
// last-first and key block 0 first, so the heaviest causal blocks start first.
//
// Masking (causal, document ids, tails) is one function, attn::visible, and tiles are skipped or
// left unmasked by attn::classify_tile (masking.cuh), in every kernel. Rows never see no
// key (a query always sees itself); should one, its output is 0 and its lse -inf (no NaN).
//
// tests/cuda_emu/attention_check.cc runs this file on the CPU (warp-instruction emulator) against
// a float64 reference (tests/cuda_build.test.ts): run it after any change to these kernels.
#include "forward_mma.cuh"
#include "backward_mma.cuh"
#include "forward_wgmma.cuh"
#include "backward_wgmma.cuh"
#include "backward_passes.cuh"
#include "simt.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

namespace mdlm {
namespace attn {
namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The grid of a tile kernel (block_tile): rows × ceil(T / rows_per_tile) blocks, one dimension.
dim3 tile_grid(int rows, int T, int rows_per_tile) {
  const int64_t n = (int64_t)rows * ceil_div(T, rows_per_tile);
  if (n > INT32_MAX) throw OpError("BAD_ARGUMENT", "attention: " + std::to_string(n) + " blocks of " + std::to_string(rows_per_tile) + " rows; at most 2^31 - 1");
  return dim3((unsigned)n);
}
int64_t ceil_div64(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Lets `kernel` take `smem` bytes of dynamic shared memory (over the default 48 KB).
template <typename Kernel>
void allow_smem(Kernel kernel, size_t smem, const char* name) {
#ifdef WARP_EMULATOR
  (void)kernel, (void)smem, (void)name;
#else
  if (smem > 48 * 1024) check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem), name);
#endif
}

template <typename Kernel>
void launch(Kernel kernel, dim3 grid, int threads, size_t smem, const Params& p, cudaStream_t stream, const char* name) {
  allow_smem(kernel, smem, name);
#ifdef WARP_EMULATOR
  (void)stream;
  (void)name;
  ::emu::launch(kernel, grid, threads, smem, p);
#else
  check_cuda(launch_kernel(kernel, grid, threads, smem, stream, p), name);
#endif
}

int group_rows(const Params& p, bool backward, int rows, int tiles_per_row, int resident_blocks);

// A persistent kernel's tile counter (in the op's scratch) set to 0, in stream order. (The
// backward's bwd_prep zeroes its own.)
void zero_counter(int* counter, cudaStream_t stream, const char* what) {
#ifdef WARP_EMULATOR
  (void)stream, (void)what;
  *counter = 0;
#else
  check_cuda(cudaMemsetAsync(counter, 0, sizeof(int), stream), what);
#endif
}

// The warp-specialised kernels' copy of p with its TMA maps: q (and, for the backward, dout) in
// tiles of q_rows tokens, k and v in tiles of kv_rows. (use_mma has checked the alignment and the
// head dim the maps need; a failure here is the driver's.)
Params with_tile_maps(const Params& p, int q_rows, int kv_rows, bool backward, const char* what) {
  Params m = p;
  const char* err = wg::encode_head_rows(m.q_map, p.q, p.B, p.T, p.H, p.D, q_rows);
  if (!err) err = wg::encode_head_rows(m.k_map, p.k, p.B, p.T, p.G, p.D, kv_rows);
  if (!err) err = wg::encode_head_rows(m.v_map, p.v, p.B, p.T, p.G, p.D, kv_rows);
  if (!err && backward) err = wg::encode_head_rows(m.dout_map, p.dout, p.B, p.T, p.H, p.D, q_rows);
  if (err) throw std::runtime_error(std::string(what) + ": " + err);
  return m;
}

// A tile kernel: `rows` rows of ⌈T / rows_per_tile⌉ tiles in block_tile's order, in groups of rows
// sized for this kernel's resident blocks (group_rows). A persistent kernel gets as many blocks as
// are resident at once (under the emulator 3, so that each takes several tiles), each taking tiles
// in that order until none is left.
template <typename Kernel>
void launch_tiles(Kernel kernel, int rows, int rows_per_tile, int threads, size_t smem, Params p, bool backward, cudaStream_t stream,
                  const char* name, bool persistent = false) {
  int resident = p.sms;
#ifndef WARP_EMULATOR
  // Blocks an SM holds, asked of the driver once a kernel (each launches with one configuration).
  static std::map<const void*, int> per_sm;
  auto [it, fresh] = per_sm.try_emplace(reinterpret_cast<const void*>(kernel), 0);
  if (fresh) {
    allow_smem(kernel, smem, name);
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, smem), name);
  }
  resident *= std::max(1, it->second);
#endif
  p.group_rows = group_rows(p, backward, rows, ceil_div(p.T, rows_per_tile), resident);
  dim3 grid = tile_grid(rows, p.T, rows_per_tile);
#ifdef WARP_EMULATOR
  resident = 3;
#endif
  if (persistent) grid.x = std::min<unsigned>(grid.x, (unsigned)resident);
  launch(kernel, grid, threads, smem, p, stream, name);
}

// Tile configurations of the tensor-core kernels by padded head dim (one table; the header above
// and docs/ARCHITECTURE.md quote it):
//   forward <kD, Br, Bc, warps>   dq <kD, Bc, warps, qM> (Br = 16·qM·warps)   dkdv <kD, Br, warps, kM> (Bc = 16·kM·warps)
// qM, kM: 16-row tiles a warp owns in the backward kernels (2 halves the shared-memory reads per
// product; dk/dv at 96 and 128 has no registers for it). uW: warps of the fused backward (its
// tile is dkdv's with uW warps): 8 at 128 (128 keys a block, faster than 4 warps on the large
// bench shapes), and 4 elsewhere (at 64 neither more queries a step nor 8 warps was faster). The
// forward at 128 takes 64-key tiles (a few spilled registers), faster than 32-key tiles and than
// 64 × 64 blocks; at 64, 128 × 64 is faster than 128 × 128 and 64 × 64.
template <int kD> struct Tiles;
template <> struct Tiles<32> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 64, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 2, uW = 4; };
template <> struct Tiles<64> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 64, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 2, uW = 4; };
template <> struct Tiles<96> { static constexpr int fBr = 128, fBc = 32, fW = 4, qBc = 32, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 1, uW = 4; };
template <> struct Tiles<128> { static constexpr int fBr = 128, fBc = 64, fW = 4, qBc = 32, qW = 4, qM = 2, kBr = 32, kW = 4, kM = 1, uW = 8; };

template <int kD>
size_t max_mma_smem(bool backward) {
  using C = Tiles<kD>;
  if (!backward) return FwdCfg<kD, C::fBr, C::fBc, C::fW>::kSmem;
  return std::max({DqCfg<kD, C::qBc, C::qW, C::qM>::kSmem, DkvCfg<kD, C::kBr, C::kW, C::kM, false>::kSmem,
                   DkvCfg<kD, C::kBr, C::uW, C::kM, true>::kSmem});
}

template <int kD, int kBr, int kBc, int kWarps>
void launch_forward(const Params& p, cudaStream_t stream) {
  using F = FwdCfg<kD, kBr, kBc, kWarps>;
  launch_tiles(fwd_mma<kD, kBr, kBc, kWarps>, p.B * p.H, kBr, F::kThreads, F::kSmem, p, false, stream, "attention forward (bf16 mma)");
}

template <int kD>
void forward_mma(const Params& p, cudaStream_t stream, bool hopper) {
  using C = Tiles<kD>;
  if constexpr (kD == 64 || kD == 128) {
    if (hopper) {
      using W = WsFwdCfg<kD>;
      const auto kernel = fwd_ws<kD>;
      const char* what = "attention forward (bf16 wgmma, warp-specialised)";
      zero_counter(p.tile_counter, stream, what);
      return launch_tiles(kernel, p.B * p.H, W::kBr, W::kThreads, W::kSmem, with_tile_maps(p, 64, W::kBc, false, what), false, stream, what, true);
    }
  }
  launch_forward<kD, C::fBr, C::fBc, C::fW>(p, stream);
}

// The fused mma.sync kernel (dK, dV and dQ in one) with kW warps.
template <int kD, int kBr, int kW, int kM>
void launch_fused(const Params& p, cudaStream_t stream) {
  using K = DkvCfg<kD, kBr, kW, kM, true>;
  launch_tiles(bwd_dkdv_mma<kD, kBr, kW, kM, true>, p.B * p.G, K::kBc, K::kThreads, K::kSmem, p, true, stream, "attention backward dq/dk/dv (bf16 mma)");
}

// With ropeBase, dq and dk turned back by a pass of their own where the kernels that stored them
// did not turn them (bwd_dq_store and bwd_ws's dK store do).
template <typename TS>
void rope_passes(const Params& p, bool dq_turned, bool dk_turned, cudaStream_t stream) {
  if (!p.positions) return;
  const int64_t pairs = (int64_t)p.B * p.T * (p.D / 2);
  if (!dq_turned) launch(bwd_rope_pass<TS, false>, dim3((unsigned)ceil_div64(pairs * p.H, 256)), 256, 0, p, stream, "attention backward dq rope");
  if (!dk_turned) launch(bwd_rope_pass<TS, true>, dim3((unsigned)ceil_div64(pairs * p.G, 256)), 256, 0, p, stream, "attention backward dk rope");
}

// Drow first. Fused (p.dq_accum set): one kernel for dK, dV and dQ (atomics into the f32
// accumulator; on wgmma when `wgmma`), then dQ to bf16. Deterministic: dQ in a kernel of its own,
// then dK and dV.
template <int kD>
void backward_mma(const Params& p, cudaStream_t stream, bool wgmma) {
  using C = Tiles<kD>;
  const int64_t n = (int64_t)p.B * p.T * p.H * p.D;
  launch(bwd_prep, dim3((unsigned)ceil_div64(n / p.D * 16, 256)), 256, 0, p, stream, "attention backward Drow");
  if (p.dq_accum) {
    bool dk_turned = false;
    if constexpr (kD == 64 || kD == 128) {
      if (wgmma) {
        const char* what = "attention backward dq/dk/dv (bf16 wgmma, warp-specialised)";
        using W = WsBwdCfg<kD>;
        const Params pm = with_tile_maps(p, W::kBr, W::kBc, true, what);
        launch_tiles(bwd_ws<kD>, p.B * p.G, W::kBc, W::kThreads, W::kSmem, pm, true, stream, what, true);
        dk_turned = ws_turns_dk<kD>(p);
      }
    }
    if (!wgmma) launch_fused<kD, C::kBr, C::uW, C::kM>(p, stream);
    const int64_t items = (int64_t)p.B * p.T * ceil_div(p.H, kDqStoreHeads) * (p.D / 8);
    launch(bwd_dq_store, dim3((unsigned)ceil_div64(items, 256)), 256, 0, p, stream, "attention backward dq store");
    return rope_passes<bf16>(p, true, dk_turned, stream);
  }
  using Q = DqCfg<kD, C::qBc, C::qW, C::qM>;
  using K = DkvCfg<kD, C::kBr, C::kW, C::kM, false>;
  launch_tiles(bwd_dq_mma<kD, C::qBc, C::qW, C::qM>, p.B * p.H, Q::kBr, Q::kThreads, Q::kSmem, p, true, stream, "attention backward dq (bf16 mma)");
  launch_tiles(bwd_dkdv_mma<kD, C::kBr, C::kW, C::kM, false>, p.B * p.G, K::kBc, K::kThreads, K::kSmem, p, true, stream, "attention backward dk/dv (bf16 mma)");
  rope_passes<bf16>(p, false, false, stream);
}

template <typename TS>
void forward_simt(const Params& p, cudaStream_t stream) {
  launch_tiles(fwd_simt<TS>, p.B * p.H, 16, 128, kFwdSimtSmem, p, false, stream, "attention forward (simt)");
}

template <typename TS>
void backward_simt(const Params& p, cudaStream_t stream) {
  launch_tiles(bwd_dq_simt<TS>, p.B * p.H, 16, 128, kDqSimtSmem, p, true, stream, "attention backward dq (simt)");
  launch_tiles(bwd_dkdv_simt<TS>, p.B * p.G, 16, 128, kDkvSimtSmem, p, true, stream, "attention backward dk/dv (simt)");
  rope_passes<TS>(p, false, false, stream);
}

int padded_head_dim(int D) { return D <= 32 ? 32 : D <= 64 ? 64 : D <= 96 ? 96 : 128; }

// A Hopper kernel is taken when the kernel settings allow them, the device is sm_90 (the emulator
// models one) and the kernel's shared memory fits.
bool use_hopper_kernel(const OpCall& call, size_t smem) {
  if (!call.settings.hopper_kernels) return false;
#ifdef WARP_EMULATOR
  (void)smem;
  return true;
#else
  return call.device && call.device->major == 9 && call.device->minor == 0 && smem <= call.device->sharedMemPerBlockOptin;
#endif
}

// The default backward on sm_90 at padded head dim 64 and 128: the warp-specialised wgmma kernel
// (bwd_ws), well ahead of the mma.sync kernel at both head dims.
bool use_wgmma_backward(const OpCall& call, const Params& p) {
  switch (padded_head_dim(p.D)) {
    case 128: return use_hopper_kernel(call, WsBwdCfg<128>::kSmem);
    case 64: return use_hopper_kernel(call, WsBwdCfg<64>::kSmem);
    default: return false;
  }
}

// The forward on sm_90 at padded head dim 64 and 128: the warp-specialised wgmma kernel (fwd_ws),
// faster than fwd_mma at both head dims, causal or not.
bool use_wgmma_forward(const OpCall& call, const Params& p) {
  const int kd = padded_head_dim(p.D);
  if (kd != 64 && kd != 128) return false;
  return use_hopper_kernel(call, kd == 64 ? WsFwdCfg<64>::kSmem : WsFwdCfg<128>::kSmem);
}

// Rows a group of the tile grids' order (block_tile): as many as have the data their tiles share
// in 24 MB, half of the H100/H200 L2 (at most 8·T·D bytes a query head: the forward's K and V;
// the backward's Q, dO and dQ accumulator, for each query head of a key block's group). Causal
// groups also hold at least twice the blocks resident at once: their tiles' work ranges over 16×
// at T = 2048, and the heaviest start first only within a group, so with small groups the last
// group's heavy tiles would run last. The groups are then evened out, so no small group comes
// last. (All B·H rows in one group put each resident block on a row of its own, and its reads
// missed L2; groups of a few rows are too small for the causal tiles; fixed group sizes over the
// bench shapes do no better than this rule.)
int group_rows(const Params& p, bool backward, int rows, int tiles_per_row, int resident_blocks) {
#ifdef WARP_EMULATOR
  // The emulator's cases have 6 to 12 rows, fewer than this rule's groups: groups of 4 make their
  // last group a partial one.
  (void)p, (void)backward, (void)rows, (void)tiles_per_row, (void)resident_blocks;
  return 4;
#else
  const int64_t per_row = (int64_t)8 * p.T * p.D * (backward ? p.group : 1);
  int target = (int)std::max<int64_t>(1, (int64_t)(24 << 20) / per_row);
  if (p.causal) target = std::max(target, ceil_div(2 * resident_blocks, tiles_per_row));
  return ceil_div(rows, ceil_div(rows, target));
#endif
}

// The float arguments of a call, all of one dtype.
using FloatArgs = std::initializer_list<ArgName>;

Params make_params(const OpCall& call, FloatArgs float_args, DType dt) {
  Params p{};
  p.B = call.i32("batch"_attr);
  p.T = call.i32("seqLen"_attr);
  p.H = call.i32("heads"_attr);
  p.G = call.i32("kvHeads"_attr);
  p.D = call.i32("headDim"_attr);
  p.causal = call.flag("causal"_attr);
  p.scale = static_cast<float>(call.num("scale"_attr));
  if (p.B <= 0 || p.T <= 0 || p.H <= 0 || p.G <= 0 || p.D <= 0 || p.H % p.G != 0 || p.D % 4 != 0 || p.D > kDM) {
    throw OpError("BAD_ARGUMENT", call.op + ": unsupported shape (heads a multiple of kvHeads, headDim a multiple of 4 up to 128)");
  }
  p.group = p.H / p.G;
  p.sms = call.device ? call.device->multiProcessorCount : 132;
  p.scale_log2 = p.scale * kLog2e;
  for (const ArgName a : float_args) {
    if (call.arg(a).dtype != dt) throw OpError("UNSUPPORTED_DTYPE", call.op + ": argument '" + a.str + "' is " + dtype_name(call.arg(a).dtype) + ", the others " + dtype_name(dt));
  }
  if (call.arg("segIds"_arg).dtype != DType::i32) throw OpError("UNSUPPORTED_DTYPE", call.op + ": segIds must be i32");
  p.seg = static_cast<const int*>(call.arg("segIds"_arg).ptr);
  return p;
}

// The tensor-core path: bf16, head dim a multiple of 8, every bf16 tensor 16-byte aligned, and the
// tile fits the device's shared memory.
bool use_mma(const OpCall& call, const Params& p, FloatArgs float_args, bool backward) {
  if (p.D % 8 != 0 || (backward && (p.dq_stride % 8 != 0 || p.dkv_stride % 8 != 0))) return false;  // the gradients' rows 16-byte aligned too
  for (const ArgName a : float_args)
    if (reinterpret_cast<uintptr_t>(call.arg(a).ptr) % 16 != 0) return false;
  size_t smem = 0;
  switch (padded_head_dim(p.D)) {
    case 32: smem = max_mma_smem<32>(backward); break;
    case 64: smem = max_mma_smem<64>(backward); break;
    case 96: smem = max_mma_smem<96>(backward); break;
    default: smem = max_mma_smem<128>(backward); break;
  }
  return !call.device || smem <= call.device->sharedMemPerBlockOptin;
}

}  // namespace
}  // namespace attn
}  // namespace mdlm

using namespace mdlm::attn;

MDLM_OP(attention) {
  using mdlm::DType;
  const FloatArgs floats = {"q"_arg, "k"_arg, "v"_arg, "out"_arg};
  const DType dt = call.float_dtype("q"_arg, {DType::f32, DType::bf16});
  Params p = make_params(call, floats, dt);
  p.q = call.arg("q"_arg).ptr;
  p.k = call.arg("k"_arg).ptr;
  p.v = call.arg("v"_arg).ptr;
  p.out = call.arg("out"_arg).ptr;
  p.lse = static_cast<float*>(call.arg("lse"_arg).ptr);
  if (dt == DType::f32) {
    forward_simt<float>(p, call.stream);
  } else if (!use_mma(call, p, floats, false)) {
    forward_simt<bf16>(p, call.stream);
  } else {
    const bool hopper = use_wgmma_forward(call, p);
    if (hopper) p.tile_counter = static_cast<int*>(call.scratch->get(sizeof(int)));  // fwd_ws is persistent
    switch (padded_head_dim(p.D)) {
      case 32: forward_mma<32>(p, call.stream, hopper); break;
      case 64: forward_mma<64>(p, call.stream, hopper); break;
      case 96: forward_mma<96>(p, call.stream, hopper); break;
      default: forward_mma<128>(p, call.stream, hopper); break;
    }
  }
}

MDLM_OP(attention_backward) {
  using mdlm::DType;
  const FloatArgs floats = {"q"_arg, "k"_arg, "v"_arg, "out"_arg, "dout"_arg, "dq"_arg, "dk"_arg, "dv"_arg};
  const DType dt = call.float_dtype("q"_arg, {DType::f32, DType::bf16});
  Params p = make_params(call, floats, dt);
  p.q = call.arg("q"_arg).ptr;
  p.k = call.arg("k"_arg).ptr;
  p.v = call.arg("v"_arg).ptr;
  p.o = call.arg("out"_arg).ptr;
  p.lse_in = static_cast<const float*>(call.arg("lse"_arg).ptr);
  p.dout = call.arg("dout"_arg).ptr;
  p.dq = call.arg("dq"_arg).ptr;
  p.dk = call.arg("dk"_arg).ptr;
  p.dv = call.arg("dv"_arg).ptr;
  p.dq_stride = (int64_t)p.H * p.D;
  p.dkv_stride = (int64_t)p.G * p.D;
  if (call.has("gradStride"_attr)) {
    p.dq_stride = p.dkv_stride = call.i32("gradStride"_attr);
    if (p.dq_stride < (int64_t)p.H * p.D) throw mdlm::OpError("BAD_ARGUMENT", call.op + ": gradStride below heads · headDim");
  }
  if (call.has("ropeBase"_attr)) {
    if (p.D % 8 != 0) throw mdlm::OpError("BAD_ARGUMENT", call.op + ": ropeBase needs a head dim that is a multiple of 8");
    if (call.arg("positions"_arg).dtype != DType::i32) throw mdlm::OpError("UNSUPPORTED_DTYPE", call.op + ": positions must be i32");
    p.positions = static_cast<const int*>(call.arg("positions"_arg).ptr);
    const double base = call.num("ropeBase"_attr);
    for (int i = 0; i < p.D / 2; ++i) p.inv_freq[i] = mdlm::rope_inv_freq(base, i, p.D);
  }
  const size_t rows = (size_t)p.B * p.H * p.T;
  const bool mma = dt == DType::bf16 && use_mma(call, p, floats, true);
  // The fused backward takes a counter (bwd_ws's key blocks) and the f32 dQ accumulator after Drow
  // in the scratch (each 256-byte aligned).
  // deterministic: the backward that gives the same bits on every run (dQ in its own kernel,
  // recomputing S and dP: 7 tile products instead of 5, no atomics).
  const bool fused = mma && !call.flag_or_false("deterministic"_attr);
  const size_t drow_bytes = (sizeof(float) * rows + 255) / 256 * 256;
  char* scratch = static_cast<char*>(call.scratch->get(drow_bytes + (fused ? 256 + sizeof(float) * rows * p.D : 0)));
  p.dsum = reinterpret_cast<float*>(scratch);
  p.tile_counter = fused ? reinterpret_cast<int*>(scratch + drow_bytes) : nullptr;
  p.dq_accum = fused ? reinterpret_cast<float*>(scratch + drow_bytes + 256) : nullptr;
  if (dt == DType::f32) {
    backward_simt<float>(p, call.stream);
  } else if (!mma) {
    backward_simt<bf16>(p, call.stream);
  } else {
    const bool wgmma = fused && use_wgmma_backward(call, p);
    switch (padded_head_dim(p.D)) {
      case 32: backward_mma<32>(p, call.stream, wgmma); break;
      case 64: backward_mma<64>(p, call.stream, wgmma); break;
      case 96: backward_mma<96>(p, call.stream, wgmma); break;
      default: backward_mma<128>(p, call.stream, wgmma); break;
    }
  }
}
