// attention's backward on Hopper (sm_90a): bwd_ws, warp-specialised, dK, dV and dQ in one kernel
// (dQ added to the f32 accumulator with atomics).
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "wgmma_tiles.cuh"

namespace mdlm {
namespace attn {
namespace {

// bwd_dkdv_mma<.., true> on wgmma. Per 64-query tile, each consumer warpgroup computes, for its 64
// keys, Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (shared × shared), Pᵀ and dSᵀ in registers, dV += Pᵀ·dO
// (registers × shared, MN-major), writes dSᵀ (bf16) to shared memory, and dK += dSᵀ·Q (from
// registers at head dim 128, from there at 64); dQ += dS·K goes to the f32 accumulator with atomics.
//
// Persistent, as fwd_ws: each block takes key blocks (its own, then the next from p.tile_counter,
// which bwd_prep zeroes) until none is left; K and V have "full" and "empty" mbarriers, and the
// ring runs on across key blocks with an end stage for each, so the next key block's K, V and
// first Q/dO stages load while the consumers store dK and dV and add the last dQ. The next key
// block's walk is built while its K and V wait for the consumers to finish the last block, so
// the walk's global round trips are off that hand-over's path.
//
// Head dim 128: each warpgroup computes half of dQ's columns. A producer warpgroup walks the query tiles
// and loads each one's Q and dO (TMA), lse, Drow and segment ids (cp.async) into a ring of three
// stages ("full" and "empty" mbarriers, as fwd_ws). The consumers issue no copies and run no walk, and take the
// registers the producer gives back (240 a thread). A step's dQ needs both warpgroups' dSᵀ rows,
// so it is computed a step later, from a ring of three dSᵀ buffers with mbarriers of their own
// ("written" by both warpgroups, "read" by both dQs): the warpgroups never meet at a barrier and
// drift apart, so one's softmax can run under the other's products (faster than computing dQ in
// its own step behind a block barrier).
//
// Head dim 64: a step takes 128 query rows (FlashAttention-3's tile there), so Sᵀ and dPᵀ are n128
// products and a step does twice the work between its waits; a tile's dQ has 64 columns, too few
// to split (a 32-column operand would start inside a 128-byte swizzle row), so each warpgroup
// computes dQ for its half of the query rows over both warpgroups' 128 keys. Three Q/dO stages fit
// beside two dSᵀ buffers of 128 × 128 (faster than 64 query rows a step with the warpgroups
// taking turns at dQ). Three Q/dO stages and two dSᵀ buffers rather than two and three (the same
// shared memory): the producer runs a tile further ahead, the warpgroups may drift a step less
// apart, and training steps are faster so.
template <int kD>
struct WsBwdCfg {
  // Query rows a step: 128 at head dim 64 (FlashAttention-3's tile there: twice the work between a
  // step's waits, n128 products), 64 at 128 (no registers for more).
  static constexpr int kWG = 2, kBc = 128, kBr = kD == 64 ? 128 : 64;
  // Each warpgroup computes half of every step's dQ: half the columns (head dim 128, kSplitDq), or
  // half the query rows (64).
  static constexpr bool kSplitDq = kD == 128;
  static constexpr int kDq = kSplitDq ? kD / kWG : kD;
  // dK += dSᵀ·Q with dSᵀ from registers (the fragments bwd_store_dst packs), so dK need not wait
  // for this warpgroup's stores: at head dim 128. At 64 dK reads the stored rows: the 32 more
  // registers make ptxas serialise the wgmmas (C7512) while dK stays in flight across the loop's
  // back edge, even with the persistent kernel's 240 (waiting for dK before the atomics avoids
  // that, and is no faster).
  static constexpr bool kDsInRegs = kD == 128;
  // Three Q and dO stages; dSᵀ buffers: three at 128, two at 64, where they are twice as large
  // (shared memory).
  static constexpr int kStages = 3, kdSBufs = kD == 64 ? 2 : 3;
  // 128·24 + 256·240 = 384·168, the launch share (setmaxnreg_fits). The persistent producer fits
  // its 24 with the walk's state in shared memory (in registers ptxas spilled 48 bytes).
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  static constexpr int kConsumers = 128 * kWG, kProducers = 128, kThreads = kConsumers + kProducers;
  static constexpr uint32_t kKV = kBc * kD * 2, kQ = kBr * kD * 2, kdS = kBc * kBr * 2;
  // K, V, kStages × Q, kStages × dO, kdSBufs × dSᵀ [kBc][kBr]; then kStages × (lse, Drow, segment
  // id) of kBr, kStages × the tile's (head, query tile, kind, -), and the mbarriers: full and empty
  // of each stage, written and read of each dSᵀ buffer, and K and V's; the key block of K and V,
  // the producer's next one and its count of key blocks handed over; the producer's walk.
  static constexpr uint32_t kOffQ = 2 * kKV, kOffdO = kOffQ + kStages * kQ, kOffdS = kOffdO + kStages * kQ;
  static constexpr uint32_t kOffRows = kOffdS + kdSBufs * kdS, kOffInfo = kOffRows + 3 * kStages * kBr * 4;
  static constexpr uint32_t kOffBar = kOffInfo + kStages * 16, kOffBlock = kOffBar + (2 * (kStages + kdSBufs) + 2) * 8;
  static constexpr uint32_t kOffWalk = kOffBlock + 16;
  static constexpr size_t kSmem = kOffWalk + sizeof(QueryTileWalk) + 1024;
  static_assert(kD == 64 || kD == 128, "warp-specialised backward: head dim 64 or 128");
  static_assert(kSmem <= 227 * 1024, "warp-specialised backward: shared memory");
  static_assert(setmaxnreg_fits(kProducers, kProducerRegs, kConsumers, kConsumerRegs, 1), "setmaxnreg budget");
};

template <int kD>
__global__ void __launch_bounds__(WsBwdCfg<kD>::kThreads, 1) bwd_ws(const __grid_constant__ Params p) {
#if defined(WARP_EMULATOR) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = WsBwdCfg<kD>;
  constexpr int kBc = Cfg::kBc, kBr = Cfg::kBr, kDq = Cfg::kDq, kS = Cfg::kStages;
  DYNAMIC_SMEM(unsigned char, smem_raw);
  const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023) & ~1023u;
  unsigned char* smem = smem_raw + (base - raw);
  float* sL = reinterpret_cast<float*>(smem + Cfg::kOffRows);  // [kS][kBr] lse
  float* sDr = sL + kS * kBr;                                   // [kS][kBr] Drow
  int* sSg = reinterpret_cast<int*>(sDr + kS * kBr);            // [kS][kBr] the queries' segment ids
  int* info = reinterpret_cast<int*>(smem + Cfg::kOffInfo);     // [kS][4]: head in the group, query tile, kind
  const uint32_t aK = base, aV = aK + Cfg::kKV, aQ = base + Cfg::kOffQ, adO = base + Cfg::kOffdO, adS = base + Cfg::kOffdS;
  const uint32_t bar = base + Cfg::kOffBar;
  auto full = [&](int s) { return bar + 8 * s; };
  auto empty = [&](int s) { return bar + 8 * (kS + s); };
  auto ds_full = [&](int j) { return bar + 8 * (2 * kS + j); };
  auto ds_empty = [&](int j) { return bar + 8 * (2 * kS + Cfg::kdSBufs + j); };
  // K and V: landed (thread 0 of the producer), free again (every consumer thread)
  const uint32_t full_kv = bar + 8 * 2 * (kS + Cfg::kdSBufs), empty_kv = full_kv + 8;
  const TileHandOver blocks{reinterpret_cast<int*>(smem + Cfg::kOffBlock)};  // key blocks

  // (Each role computes what it needs after its setmaxnreg: a value live across the producer's
  // would have to fit its registers.)
  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s) {
      // full: every producer thread's arrival (after its stores of the tile's info; thread 0's
      // announcing Q and dO's bytes) and its cp.async copies' arrival; empty: every consumer thread's
      wg::mbar_init(full(s), 2 * Cfg::kProducers);
      wg::mbar_init(empty(s), Cfg::kConsumers);
    }
    for (int j = 0; j < Cfg::kdSBufs; ++j) {
      wg::mbar_init(ds_full(j), Cfg::kConsumers);
      wg::mbar_init(ds_empty(j), Cfg::kConsumers);
    }
    wg::mbar_init(full_kv, 1);
    wg::mbar_init(empty_kv, Cfg::kConsumers);
    blocks.init();
    wg::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= Cfg::kConsumers) {
    wg::regs_dec<Cfg::kProducerRegs>();
    // Producer: for each key block the block takes, its K and V tiles once the consumers are done
    // with the last ones (thread 32), then every query tile's Q and dO (thread 0, by TMA) and, for
    // pt < kBr, row pt's lse, Drow and segment id (cp.async) into the ring, and a stage whose head
    // is `group` that ends the key block; every warp walks the tiles (the walk's reductions are a
    // warp's). The first key block is the block's own index, the next ones come from the counter.
    const int pt = threadIdx.x - Cfg::kConsumers;
    static_assert(Cfg::kProducers >= kBr, "a producer thread a query's row values");
    const int T = p.T, group = p.group, n_blocks = key_blocks(p, kBc);
    int i = 0;  // ring steps, over all the block's key blocks
    // (the walk of the last key block is done with once next() returns: its barriers)
    for (int blk_index = blockIdx.x;; blk_index = blocks.next(p, pt, 1, Cfg::kProducers)) {
      if (blk_index >= n_blocks) {
        if (pt == 32) blocks.hand_over_none(blk_index, empty_kv, full_kv);
        return;
      }
      const KeyBlock kb = key_block(p, kBc, blk_index, n_blocks);
      const int b = kb.b, g = kb.g;
      // The walk, in shared memory: in registers it took more than the producer's 24 (each warp
      // reloads its fields as it goes). Warp 0 builds it (the build's reductions are a warp's)
      // while thread 32 hands the key block over, with its K and V, once the consumers are done
      // with the last one's: the walk's global round trips are then off the path from the
      // consumers' end of a key block to the first stage's loads.
      QueryTileWalk* const walk_smem = reinterpret_cast<QueryTileWalk*>(smem + Cfg::kOffWalk);
      if (pt < 32) {
        const QueryTileWalk w(p.seg + (int64_t)b * T, kb.k0, kBc, kBr, T, p.causal);
        if (pt == 0) *walk_smem = w;
      } else if (pt == 32) {
        blocks.hand_over(blk_index, empty_kv);
        wg::mbar_arrive_expect_tx(full_kv, 2 * Cfg::kKV);
        load_tile<kBc, kD>(aK, p.k_map, g, kb.k0, b, full_kv);
        load_tile<kBc, kD>(aV, p.v_map, g, kb.k0, b, full_kv);
      }
      wg::bar_sync(1, Cfg::kProducers);
      const QueryTileWalk& walk = *walk_smem;
      int hq, m, kind;
      walk.start(group, hq, m, kind);
      for (;; ++i) {
        const int s = i % kS;
        if (i >= kS) wg::mbar_wait(empty(s), (uint32_t)(i / kS - 1) & 1u);
        if (pt == 0) {
          info[4 * s] = hq;
          info[4 * s + 1] = m;
          info[4 * s + 2] = kind;
        }
        const int h = g * group + hq, q0 = m * kBr;
        if (hq < group && pt < kBr) {
          const int64_t rb = row_base(p, b, h);
          const int t = q0 + pt;
          const bool ok = t < T;
          cp_async4(smem_u32(sL + s * kBr + pt), p.lse_in + (ok ? rb + t : 0), ok);
          cp_async4(smem_u32(sDr + s * kBr + pt), p.dsum + (ok ? rb + t : 0), ok);
          cp_async4(smem_u32(sSg + s * kBr + pt), walk.seg + min(t, T - 1), true);
        }
        if (hq < group && pt == 0) {
          wg::mbar_arrive_expect_tx(full(s), 2 * Cfg::kQ);
          load_tile<kBr, kD>(aQ + s * Cfg::kQ, p.q_map, h, q0, b, full(s));
          load_tile<kBr, kD>(adO + s * Cfg::kQ, p.dout_map, h, q0, b, full(s));
        } else {
          wg::mbar_arrive(full(s));
        }
        wg::cp_async_mbar_arrive(full(s));
        if (hq >= group) break;
        walk.advance(hq, m, kind);
      }
      ++i;
    }
  }

  // Consumer warpgroups: warpgroup w owns keys k0 + 64w.. of each key block.
  wg::regs_inc<Cfg::kConsumerRegs>();
  const int wgi = wg::warpgroup_index(), warp = (threadIdx.x >> 5) & 3, gid = (threadIdx.x & 31) >> 2;
  const int key0 = 64 * wgi;
  const int T = p.T, D = p.D, group = p.group;
  const bool causal = p.causal;
  const int64_t qstride = (int64_t)p.H * D;
  // dQ of a step's tile over dSᵀ buffer `buf` (both warpgroups' rows of keys): this warpgroup's
  // columns of the 64 query rows (head dim 128), or all columns of its 64 of the 128 (64).
  const int dq_col = Cfg::kSplitDq ? wgi * kDq : 0, dq_row = Cfg::kSplitDq ? 0 : 64 * wgi;
  auto issue_dq = [&](float (&dq)[kDq / 2], uint32_t buf) {
    wg::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBc / 16; ++kk)
      wg::wgmma_ss<kDq, 1, 1>(dq, wg::desc_mn_major(buf, kBc, dq_row, kk), wg::desc_mn_major(aK, kBc, dq_col, kk), kk > 0);
    wg::wgmma_commit();
  };
  // Ring steps (the producer's, over all the block's key blocks, each one's end included); the
  // dSᵀ steps are the others, i − n before key block n's end.
  int i = 0;
  for (int n = 0;; ++n) {
    wg::mbar_wait(full_kv, (uint32_t)n & 1u);
    // (computed again for the dK and dV stores: the loop has no registers to keep b and g in)
    auto this_block = [&] { return key_block(p, kBc, blocks.current(), key_blocks(p, kBc)); };
    if (blocks.current() >= key_blocks(p, kBc)) break;
    const KeyBlock kb = this_block();
    const int* segb = p.seg + (int64_t)kb.b * T;
    float* const dq_heads = p.dq_accum + q_base(p, kb.b, kb.g * group);  // the group's first q head
    auto add_dq = [&](const float (&dq)[kDq / 2], int hq, int q0) {
      add_dq_rows<kDq>(dq_heads + hq * D, qstride, q0 + dq_row + 16 * warp + gid, dq, dq_col, D, T);
    };
    int krow[2], kseg[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      krow[hi] = kb.k0 + key0 + 16 * warp + gid + 8 * hi;
      kseg[hi] = __ldg(segb + min(krow[hi], T - 1));
    }
    float dk[kD / 2], dv[kD / 2];
#pragma unroll
    for (int e = 0; e < kD / 2; ++e) dk[e] = dv[e] = 0.f;
    // Keeps the zeroing here: sunk into both sides of the loop's entry test, it would define dK's
    // registers on a path that meets an in-flight dK product before its wait (C7515).
    wg::fence_operand(dk);
    wg::fence_operand(dv);

    int prev_hq = -1, prev_q0 = 0;  // the step before's tile, whose dQ a step computes (-1: none yet)
    for (;; ++i) {
      const int j = i - n, s = i % kS, d = j % Cfg::kdSBufs;
      wg::mbar_wait(full(s), (uint32_t)(i / kS) & 1u);
      const int hq = info[4 * s], m = info[4 * s + 1], cur_kind = info[4 * s + 2];
      if (hq >= group) {  // the key block's end: a stage with nothing in it
        wg::mbar_arrive(empty(s));
        break;
      }
      const int q0 = m * kBr;
      const uint32_t cQ = aQ + s * Cfg::kQ, cdO = adO + s * Cfg::kQ;
      const float* cL = sL + s * kBr;
      const float* cDr = sDr + s * kBr;
      const int* cSg = sSg + s * kBr;

      float sc[kBr / 2], dp[kBr / 2];
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wg::wgmma_ss<kBr, 0, 0>(sc, wg::desc_k_major(aK, kBc, key0, kk), wg::desc_k_major(cQ, kBr, 0, kk), kk > 0);
      wg::wgmma_commit();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk)
        wg::wgmma_ss<kBr, 0, 0>(dp, wg::desc_k_major(aV, kBc, key0, kk), wg::desc_k_major(cdO, kBr, 0, kk), kk > 0);
      wg::wgmma_commit();

      wg::wgmma_wait<1>();  // the previous step's dK (the last reader of its Q and its dSᵀ rows) and Sᵀ
      if (prev_hq >= 0) wg::mbar_arrive(empty((i - 1) % kS));
      uint32_t pa[kBr / 16][4];
      bwd_probs<kBr>(sc, pa, cL, cSg, cur_kind, q0, krow, kseg, T, causal, p.scale_log2);

      wg::wgmma_wait<0>();  // dPᵀ
      // both warpgroups' dQ of the buffer's last tile are done
      if (j >= Cfg::kdSBufs) wg::mbar_wait(ds_empty(d), (uint32_t)(j / Cfg::kdSBufs - 1) & 1u);
      uint32_t dsa[kBr / 16][4];
      bwd_store_dst<kBc, kBr>(adS + d * Cfg::kdS, dp, sc, cDr, key0, dsa);
      wg::fence_proxy_async();
      wg::mbar_arrive(ds_full(d));
      if constexpr (!Cfg::kDsInRegs) wg::bar_sync(2 + wgi, 128);  // this warpgroup's rows, which its dK reads

      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) wg::wgmma_rs<kD, 1>(dv, pa[kk], wg::desc_mn_major(cdO, kBr, 0, kk), true);  // dV += Pᵀ·dO
      wg::wgmma_commit();
      // the step before's dSᵀ (both warpgroups' rows), which its dQ below reads
      const int dprev = (j - 1 + Cfg::kdSBufs) % Cfg::kdSBufs;
      if (prev_hq >= 0) wg::mbar_wait(ds_full(dprev), (uint32_t)((j - 1) / Cfg::kdSBufs) & 1u);
      // dQ of the step before's tile: its dSᵀ was written a step ago, so the warpgroups rarely wait
      // for each other, and one's softmax can overlap the other's products. (A key block's first
      // step has none: it multiplies the K and V tiles, which no copy rewrites while they are in
      // use, unread, so every wgmma is on a uniform path: a conditional one made ptxas spill 392
      // bytes.)
      float dq[kDq / 2];
      issue_dq(dq, prev_hq >= 0 ? adS + dprev * Cfg::kdS : aK);
      wg::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBr / 16; ++kk) {  // dK += dSᵀ·Q
        if constexpr (Cfg::kDsInRegs) wg::wgmma_rs<kD, 1>(dk, dsa[kk], wg::desc_mn_major(cQ, kBr, 0, kk), true);
        else wg::wgmma_ss<kD, 0, 1>(dk, wg::desc_k_major(adS + d * Cfg::kdS, kBc, key0, kk), wg::desc_mn_major(cQ, kBr, 0, kk), true);
      }
      wg::wgmma_commit();
      // dV and dQ; dK runs on (see kDsInRegs)
      wg::wgmma_wait<1>();
      if (prev_hq >= 0) {
        add_dq(dq, prev_hq, prev_q0);
        wg::mbar_arrive(ds_empty(dprev));
      }
      prev_hq = hq;
      prev_q0 = q0;
    }
    KeyBlock end_block;
    {  // the key block's last dQ, after which its K and V are free
      const int j = i - n, dprev = (j - 1 + Cfg::kdSBufs) % Cfg::kdSBufs;
      float dq[kDq / 2];
      if (prev_hq >= 0) wg::mbar_wait(ds_full(dprev), (uint32_t)((j - 1) / Cfg::kdSBufs) & 1u);
      issue_dq(dq, prev_hq >= 0 ? adS + dprev * Cfg::kdS : aK);
      wg::wgmma_wait<0>();  // and the last step's dK
      end_block = this_block();  // before the producer may hand over the next
      wg::mbar_arrive(empty_kv);
      if (prev_hq >= 0) {
        wg::mbar_arrive(empty((i - 1) % kS));  // the last step's stage (i is the end's)
        add_dq(dq, prev_hq, prev_q0);
        wg::mbar_arrive(ds_empty(dprev));
      }
    }
    ++i;  // past the end's stage
    wg::fence_operand(dk);
    bwd_store_dkdv<kD>(p, end_block.b, end_block.g, krow, dk, dv);
  }
#endif
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
