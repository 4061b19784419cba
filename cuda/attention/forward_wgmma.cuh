// attention's forward on Hopper (sm_90a): fwd_ws, warp-specialised, a producer warpgroup loading
// by TMA and two consumer warpgroups on wgmma.
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "wgmma_tiles.cuh"

namespace mdlm {
namespace attn {
namespace {

// Whether a warp-specialised block's setmaxnreg split fits: the consumers' increase comes out of
// what the producer gives back, within the registers the block launched with (its share of the
// SM's 64K with `blocks` an SM, a multiple of 8 a thread, which ptxas -v reports); asking for more
// would wait forever.
constexpr bool setmaxnreg_fits(int producers, int producer_regs, int consumers, int consumer_regs, int blocks) {
  const int launch = 65536 / blocks / (producers + consumers) / 8 * 8;
  return producers * producer_regs + consumers * consumer_regs <= launch * (producers + consumers) && producer_regs < launch &&
         consumer_regs > launch;
}

// Slack of fwd_ws's running max (log2 units of the scaled scores): probabilities up to 2^8 keep
// bf16's relative precision and are far from overflow in the f32 sums. Rescaling only past the
// slack, not at every new max, is faster at head dim 64 and level at 128.
constexpr float kMaxSlack = 8.f, kMaxP = 256.f;  // 2^kMaxSlack

// Two consumer warpgroups of 64 query rows (kBr = 128 a block) and a producer warpgroup; key
// tiles in a ring of kStages K and V buffers, each with a "full" mbarrier (the producer's TMA
// loads landed) and an "empty" one (both warpgroups are done reading it). The producer also decides
// which key tiles the block visits: with each K tile it leaves the tile's index and kind and its
// keys' segment ids in shared memory, so the consumers never read global memory in the loop.
// Persistent: as many blocks as are resident, each taking query blocks (its own index, then the
// next from p.tile_counter) until none is left; the Q tile has "full" and "empty" mbarriers too,
// and the ring runs on across query blocks, each one's loop ending with a stage that carries no
// tile, so the next query block's Q and first K/V tiles load while the consumers store O.
//
// Head dim 128: one block an SM, 128-key tiles. Head dim 64: two blocks an SM, so four consumer
// warpgroups' softmaxes interleave with the products (at head dim 64 the exponentials take about
// as long as the products), with 64-key tiles to fit 104 registers a consumer thread: faster than
// one block of 128-key tiles on the causal shapes, level on the others.
template <int kD>
struct WsFwdCfg {
  static constexpr int kBlocks = kD == 64 ? 2 : 1;
  // Three stages (two are slower on the bidirectional shapes at head dim 128); three fill 227 KB
  // there.
  static constexpr int kBr = 128, kBc = kBlocks == 1 ? 128 : 64, kStages = 3;
  // setmaxnreg works on warpgroups (setmaxnreg_fits). One block an SM launches at 168 registers a
  // thread: producer 56, consumers 224 (128·56 + 256·224 = 384·168); two at 80: 24 and 104
  // (128·24 + 256·104 ≤ 384·80).
  static constexpr int kProducerRegs = kBlocks == 1 ? 56 : 24, kConsumerRegs = kBlocks == 1 ? 224 : 104;
  // Whether a tile's P·V stays in flight during the next tile's softmax (S, O and P all held at
  // once). At 104 registers that made ptxas serialise every wgmma of the kernel (C7512); with two
  // blocks an SM the other block's warpgroups fill the tensor pipe instead, and P·V waited for at
  // once is faster at head dim 64 than waited for only before the next S.
  static constexpr bool kOverlapPV = kBlocks == 1;
  static constexpr int kConsumers = 256, kProducers = 128, kThreads = kConsumers + kProducers;
  static constexpr uint32_t kQTile = kBr * kD * 2, kTile = kBc * kD * 2;  // bytes of the Q tile, of a K or V tile
  static constexpr uint32_t kOffK = kQTile, kOffV = kOffK + kStages * kTile, kOffBar = kOffV + kStages * kTile;
  // mbarriers: fullK, fullV, emptyK, emptyV, kStages each, and the Q tile's full and empty; then
  // per stage the keys' segment ids and the tile's (index, kind); then the query block of the Q
  // tile, the producer's next one and its count of query blocks handed over
  static constexpr uint32_t kOffSeg = kOffBar + (4 * kStages + 2) * 8, kOffInfo = kOffSeg + kStages * kBc * 4;
  static constexpr uint32_t kOffBlock = kOffInfo + kStages * 8;
  static constexpr size_t kSmem = kOffBlock + 12 + 1024;
  static_assert(kD == 64 || kD == 128, "warp-specialised forward: head dim 64 or 128");
  static_assert(kBlocks * (kSmem + 1024) <= 228 * 1024, "blocks an SM: shared memory");
  static_assert(setmaxnreg_fits(kProducers, kProducerRegs, kConsumers, kConsumerRegs, kBlocks), "setmaxnreg budget");
};

template <int kD>
__global__ void __launch_bounds__(WsFwdCfg<kD>::kThreads, WsFwdCfg<kD>::kBlocks) fwd_ws(const __grid_constant__ Params p) {
#if defined(WARP_EMULATOR) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = WsFwdCfg<kD>;
  // The optimistic softmax (below) where P·V is issued after the softmax, not overlapped with it
  // (head dim 64).
  constexpr bool kOptimistic = !Cfg::kOverlapPV;
  constexpr int kBr = Cfg::kBr, kBc = Cfg::kBc, kS = Cfg::kStages, kKT = kBc / 16;
  DYNAMIC_SMEM(unsigned char, smem_raw);
  const uint32_t raw = smem_u32(smem_raw), base = (raw + 1023) & ~1023u;
  const uint32_t aQ = base, aK = base + Cfg::kOffK, aV = base + Cfg::kOffV, bar = base + Cfg::kOffBar;
  auto full_k = [&](int s) { return bar + 8 * s; };
  auto full_v = [&](int s) { return bar + 8 * (kS + s); };
  auto empty_k = [&](int s) { return bar + 8 * (2 * kS + s); };
  auto empty_v = [&](int s) { return bar + 8 * (3 * kS + s); };
  // Q: landed (thread 0 of the producer), free again (every consumer thread)
  const uint32_t full_q = bar + 8 * 4 * kS, empty_q = full_q + 8;
  int* const seg_smem = reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffSeg);  // [kS][kBc]
  int* const info = reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffInfo);     // [kS][2]: tile, kind
  const TileHandOver blocks{reinterpret_cast<int*>(smem_raw + (base - raw) + Cfg::kOffBlock)};  // query blocks
  const int T = p.T;
  const bool causal = p.causal;
  // The key tiles a query block's loop runs to (its end stage carries this index).
  auto key_tiles_end = [&](int q0) { return causal ? min((T + kBc - 1) / kBc, (min(q0 + kBr, T) + kBc - 1) / kBc) : (T + kBc - 1) / kBc; };

  if (threadIdx.x == 0) {
    for (int s = 0; s < kS; ++s) {
      // full K: every producer thread's arrival (its segment id and the tile info are stored),
      // thread 0's announcing the tile's bytes; full V: thread 0's
      wg::mbar_init(full_k(s), Cfg::kProducers);
      wg::mbar_init(full_v(s), 1);
      wg::mbar_init(empty_k(s), Cfg::kConsumers);
      wg::mbar_init(empty_v(s), Cfg::kConsumers);
    }
    wg::mbar_init(full_q, 1);
    wg::mbar_init(empty_q, Cfg::kConsumers);
    blocks.init();
    wg::fence_mbarrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= Cfg::kConsumers) {
    wg::regs_dec<Cfg::kProducerRegs>();
    // Producer warpgroup: for each query block the block takes, its Q tile (each consumer
    // warpgroup's 64 rows) once the consumers are done with the last one, then K (with the tile's
    // segment ids and info) and V of every key tile it visits, into the ring, then a stage whose
    // index is the loop's end (key_tiles_end) that ends the query block. Thread 0 issues the TMA
    // loads. The first query block is the block's own index, the next ones come from the counter.
    const int pt = threadIdx.x - Cfg::kConsumers;
    static_assert(Cfg::kProducers >= kBc, "a producer thread a key's segment id");
    const int n_blocks = query_blocks(p, kBr);
    int i = 0;  // ring steps, over all the block's query blocks
    for (int blk_index = blockIdx.x;; blk_index = blocks.next(p, pt, 3, Cfg::kProducers)) {
      if (blk_index >= n_blocks) {
        if (pt == 0) blocks.hand_over_none(blk_index, empty_q, full_q);
        return;
      }
      const QueryBlock qb = query_block(p, kBr, blk_index, n_blocks);
      const int b = qb.b, g = qb.g, q0 = qb.q0, n_end = key_tiles_end(q0);
      const int* segb = p.seg + (int64_t)b * T;
      if (pt == 0) {
        blocks.hand_over(blk_index, empty_q);
        wg::mbar_arrive_expect_tx(full_q, Cfg::kQTile);
#pragma unroll
        for (int w = 0; w < kBr / 64; ++w) load_tile<64, kD>(aQ + w * (64 * kD * 2), p.q_map, qb.h, q0 + 64 * w, b, full_q);
      }
      const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
      int kind = kEmpty;
      int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
      for (;; ++i) {
        const int s = i % kS;
        const uint32_t phase = (uint32_t)(i / kS) & 1u;
        if (i >= kS) wg::mbar_wait(empty_k(s), phase ^ 1u);
        if (pt == 0) {
          info[2 * s] = n;
          info[2 * s + 1] = kind;
        }
        if (n < n_end && pt < kBc) seg_smem[s * kBc + pt] = __ldg(segb + min(n * kBc + pt, T - 1));
        if (n < n_end && pt == 0) {
          wg::mbar_arrive_expect_tx(full_k(s), Cfg::kTile);
          load_tile<kBc, kD>(aK + s * Cfg::kTile, p.k_map, g, n * kBc, b, full_k(s));
        } else {
          wg::mbar_arrive(full_k(s));
        }
        if (pt == 0) {
          if (i >= kS) wg::mbar_wait(empty_v(s), phase ^ 1u);
          if (n < n_end) {
            wg::mbar_arrive_expect_tx(full_v(s), Cfg::kTile);
            load_tile<kBc, kD>(aV + s * Cfg::kTile, p.v_map, g, n * kBc, b, full_v(s));
          } else {
            wg::mbar_arrive(full_v(s));  // the end stage: a phase with no tile keeps V's phases in step with K's
          }
        }
        if (n >= n_end) break;
        n = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
      }
      ++i;
    }
  }

  // Consumer warpgroups.
  wg::regs_inc<Cfg::kConsumerRegs>();
  const int wgi = wg::warpgroup_index(), warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const uint32_t aQw = aQ + wgi * (64 * kD * 2);  // this warpgroup's [64][kD] Q tile
  const int D = p.D;
  const int64_t qstride = (int64_t)p.H * D;
  int i = 0;  // ring steps, over all the block's query blocks (each one's end stage included)
  for (int nq = 0;; ++nq) {
    wg::mbar_wait(full_q, (uint32_t)nq & 1u);  // both warpgroups' Q rows (the first step reads all of them)
    if (blocks.current() >= query_blocks(p, kBr)) break;
    const QueryBlock qb = query_block(p, kBr, blocks.current(), query_blocks(p, kBr));
    const int q0 = qb.q0, n_end = key_tiles_end(q0);
    const int* segb = p.seg + (int64_t)qb.b * T;
    int qrow[2], qseg[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      qrow[hi] = q0 + 64 * wgi + 16 * warp + gid + 8 * hi;
      qseg[hi] = __ldg(segb + min(qrow[hi], T - 1));
    }
    float o[kD / 2];
#pragma unroll
    for (int e = 0; e < kD / 2; ++e) o[e] = 0.f;
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    // P of the previous tile as bf16 A fragments (of this tile's without kOverlapPV); with
    // kOverlapPV the first step's product multiplies these zeros
    // by the Q tiles (finite, and never rewritten: a K or V buffer could be refilled while that
    // product is in flight), so every wgmma is on a uniform path.
    uint32_t pa[kKT][4];
#pragma unroll
    for (int kk = 0; kk < kKT; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;

    // Ping-pong: a warpgroup issues its products after the other one has issued its own (named
    // barriers 1 and 2), so one's softmax runs while the other's products do.
    if (wgi == 1) wg::bar_arrive(1, 256);
    uint32_t prev_v = aQ;  // the previous tile's V (see pa)
    auto issue_pv = [&] {  // O += P·V of prev_v's tile, one commit group
#pragma unroll
      for (int kk = 0; kk < kKT; ++kk) wg::wgmma_rs<kD, 1>(o, pa[kk], wg::desc_mn_major(prev_v, kBc, 0, kk), true);
      wg::wgmma_commit();
    };
    bool first = true;  // no tile of this query block yet
    for (;; ++i) {
      const int s = i % kS;
      const uint32_t phase = (uint32_t)(i / kS) & 1u;
      wg::mbar_wait(full_k(s), phase);
      const int n = info[2 * s], cur_kind = info[2 * s + 1], k0 = n * kBc;
      if (n >= n_end) {  // the query block's end: a stage with nothing in it
        wg::mbar_arrive(empty_k(s));
        // V's end phase only after the producer's (which follows its wait for this stage's last
        // release): arriving first could complete two phases of empty_v before it looks, and a
        // parity wait would then miss the one it waits for.
        wg::mbar_wait(full_v(s), phase);
        wg::mbar_arrive(empty_v(s));
        break;
      }
      if (Cfg::kOverlapPV && !first) wg::mbar_wait(full_v((i - 1) % kS), (uint32_t)((i - 1) / kS) & 1u);
      wg::bar_sync(1 + wgi, 256);
      // S = Q·Kᵀ of this stage's key tile into x, issued and committed (the optimistic softmax's
      // exact pass issues it again)
      auto issue_s = [&](float (&x)[kBc / 2]) {
        wg::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk)
          wg::wgmma_ss<kBc, 0, 0>(x, wg::desc_k_major(aQw, 64, 0, kk), wg::desc_k_major(aK + s * Cfg::kTile, kBc, 0, kk), kk > 0);
        wg::wgmma_commit();
      };
      float sc[kBc / 2];
      issue_s(sc);
      if constexpr (Cfg::kOverlapPV) issue_pv();
      wg::bar_arrive(2 - wgi, 256);
      wg::wgmma_wait<Cfg::kOverlapPV ? 1 : 0>();  // S(n); with kOverlapPV the previous P·V may still run

      // Scores the mask hides to -inf: a one-document tile's by positions (`positions`; else as
      // a partial tile's), a partial tile's with this stage's segment ids too.
      auto mask = [&](float (&x)[kBc / 2], bool positions) {
        auto hide = [&](auto visible_at) {
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
#pragma unroll
              for (int hi = 0; hi < 2; ++hi)
                if (!visible_at(hi, 8 * j + 2 * tig + e)) x[4 * j + 2 * hi + e] = -INFINITY;
        };
        if (positions && cur_kind == kOneDoc) hide([&](int hi, int col) { return visible_in_doc(qrow[hi], k0 + col, T, causal); });
        else if (cur_kind != kFull) hide([&](int hi, int col) { return visible(qrow[hi], qseg[hi], k0 + col, seg_smem[s * kBc + col], T, causal); });
      };
      // The probabilities of scores x into P's fragments, the row sums into lrow, O rescaled where
      // the running max moves; that happens only when the tile's max exceeds it by more than
      // kMaxSlack, so rarely after the first tiles, and the probabilities stay below 2^kMaxSlack.
      auto exact_softmax = [&](float (&x)[kBc / 2]) {
        float alpha[2];
        bool grow = false;
#pragma unroll
        for (int hi = 0; hi < 2; ++hi) {
          float mx = -INFINITY;
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j) mx = fmaxf(mx, fmaxf(x[4 * j + 2 * hi], x[4 * j + 2 * hi + 1]));
          mx = quad_max(mx) * p.scale_log2;
          const float m_new = mx > mrow[hi] + kMaxSlack ? mx : mrow[hi];
          grow |= m_new != mrow[hi];
          const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet
          alpha[hi] = fast_exp2(mrow[hi] - m_use);
          mrow[hi] = m_new;
          float sum = 0.f;
#pragma unroll
          for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = fast_exp2(fmaf(x[4 * j + 2 * hi + e], p.scale_log2, -m_use));
              x[4 * j + 2 * hi + e] = pv;
              sum += pv;
            }
          lrow[hi] = lrow[hi] * alpha[hi] + sum;
        }
        if constexpr (Cfg::kOverlapPV) {
          wg::wgmma_wait<0>();  // the previous P·V has landed: its V buffer is free, O can be rescaled
          if (!first) wg::mbar_arrive(empty_v((i - 1) % kS));
        }
        if (__any_sync(kFull32, grow)) {
#pragma unroll
          for (int j = 0; j < kD / 8; ++j)
#pragma unroll
            for (int hi = 0; hi < 2; ++hi) {
              o[4 * j + 2 * hi] *= alpha[hi];
              o[4 * j + 2 * hi + 1] *= alpha[hi];
            }
        }
        a_fragments<kBc>(x, pa);
      };
      mask(sc, true);
      if constexpr (kOptimistic) {
        // The optimistic softmax (faster at head dim 64, in the kernel and in training steps).
        // First against the running max as it stands, with no max taken: kept unless a row's sum
        // over some thread's keys exceeds 2^kMaxSlack (then a probability might) or is not finite
        // (no running max yet); the warpgroup decides together. Else the exact pass, on the scores
        // computed again (the K tile and its segment ids stay until then; keeping the first ones
        // took the registers that keep the wgmmas in flight).
        float psum[2] = {0.f, 0.f};
#pragma unroll
        for (int kk = 0; kk < kKT; ++kk)
#pragma unroll
          for (int r = 0; r < 4; ++r) {  // register r: row r & 1 (accumulator elements 8·kk + 2·r, + 1)
            const float neg_m = -mrow[r & 1];
            const float p0 = fast_exp2(fmaf(sc[8 * kk + 2 * r], p.scale_log2, neg_m));
            const float p1 = fast_exp2(fmaf(sc[8 * kk + 2 * r + 1], p.scale_log2, neg_m));
            psum[r & 1] += p0 + p1;
            pa[kk][r] = pack_bf16(p0, p1);
          }
        if (wg::bar_any(4 + wgi, 128, !(psum[0] <= kMaxP && psum[1] <= kMaxP))) {
          float again[kBc / 2];
          issue_s(again);
          wg::wgmma_wait<0>();
          mask(again, false);  // (one path of the mask fewer: registers)
          exact_softmax(again);
        } else {
          lrow[0] += psum[0];
          lrow[1] += psum[1];
        }
        wg::mbar_arrive(empty_k(s));
      } else {
        wg::mbar_arrive(empty_k(s));  // S(n) is in registers and the segment ids are read
        exact_softmax(sc);
      }
      prev_v = aV + s * Cfg::kTile;
      if constexpr (!Cfg::kOverlapPV) {  // this tile's P·V now, waited for before the next S
        wg::mbar_wait(full_v(s), phase);
        wg::wgmma_fence();
        issue_pv();
        wg::wgmma_wait<0>();
        wg::mbar_arrive(empty_v(s));
      }
      first = false;
    }
    if (wgi == 0) wg::bar_sync(1, 256);  // the other warpgroup's last arrival on barrier 1
    if constexpr (Cfg::kOverlapPV) {  // the last tile's P·V
      if (!first) wg::mbar_wait(full_v((i - 1) % kS), (uint32_t)((i - 1) / kS) & 1u);
      wg::wgmma_fence();
      issue_pv();
      wg::wgmma_wait<0>();
      if (!first) wg::mbar_arrive(empty_v((i - 1) % kS));
    }
    ++i;  // past the end stage
    wg::mbar_arrive(empty_q);  // every product of this query block is done: the next Q may load

    const int b = qb.b, h = qb.h;
    bf16* og = static_cast<bf16*>(p.out) + q_base(p, b, h);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const float l = quad_sum(lrow[hi]);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int t = qrow[hi];
      if (t >= T) continue;
      if (tig == 0) p.lse[row_base(p, b, h) + t] = l > 0.f ? (mrow[hi] + __log2f(l)) * kLn2 : -INFINITY;
#pragma unroll
      for (int j = 0; j < kD / 8; ++j) {
        const int col = 8 * j + 2 * tig;
        if (col < D) *reinterpret_cast<uint32_t*>(og + (int64_t)t * qstride + col) = pack_bf16(o[4 * j + 2 * hi] * inv, o[4 * j + 2 * hi + 1] * inv);
      }
    }
  }
#endif
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
