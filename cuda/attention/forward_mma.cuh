// attention's forward on mma.sync (fwd_mma): one block per (b, h, Br query rows), online softmax
// over Bc-key tiles; writes out (bf16) and lse (natural log of Σ exp(scale·qk)).
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "mma.cuh"

namespace mdlm {
namespace attn {
namespace {

template <int kD, int kBr, int kBc, int kWarps>
struct FwdCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMT = kBr / (16 * kWarps);  // 16-row tiles per warp
  static constexpr size_t kSmem = size_t(kBr + 4 * kBc) * row_stride<kD>() * sizeof(bf16);  // Q, 2 × (K, V)
  static_assert(kBr % (16 * kWarps) == 0 && kBc % 16 == 0 && kD % 16 == 0, "tile shape");
};

template <int kD, int kBr, int kBc, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) fwd_mma(const Params p) {
  using Cfg = FwdCfg<kD, kBr, kBc, kWarps>;
  constexpr int kMT = Cfg::kMT, kNT = kBc / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][kS]; the output tile at the end
  bf16* sK = sQ + kBr * kS;                       // [2][kBc][kS]
  bf16* sV = sK + 2 * kBc * kS;                   // [2][kBc][kS]

  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const int wrow = warp * 16 * kMT;  // this warp's first row in the block
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const bf16* qg = static_cast<const bf16*>(p.q) + q_base(p, b, h);
  const bf16* kg = static_cast<const bf16*>(p.k) + kv_base(p, b, g);
  const bf16* vg = static_cast<const bf16*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  int kind = kEmpty;
  int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);

  load_rows<kBr, kD, kThreads>(sQ, qg, qstride, q0, T, D);
  if (n < n_end) {
    load_rows<kBc, kD, kThreads>(sK, kg, kvstride, n * kBc, T, D);
    load_rows<kBc, kD, kThreads>(sV, vg, kvstride, n * kBc, T, D);
  }
  cp_async_commit();

  int qseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) qseg[mt][hi] = __ldg(segb + min(q0 + wrow + mt * 16 + gid + 8 * hi, T - 1));

  float o[kMT][kDT][4];
  float mrow[kMT][2], lrow[kMT][2];  // running max (log2 units of scaled scores), partial row sum
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
    mrow[mt][0] = mrow[mt][1] = -INFINITY;
    lrow[mt][0] = lrow[mt][1] = 0.f;
  }

  int buf = 0;
  while (n < n_end) {
    const int cur_kind = kind;
    const int k0 = n * kBc;
    cp_async_wait<0>();
    __syncthreads();  // tile n has landed; every warp is done with the other buffer
    const bf16* cK = sK + buf * kBc * kS;
    const bf16* cV = sV + buf * kBc * kS;

    float s[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
    }
    mma_abt<kD, kNT, kMT>(s, sQ + wrow * kS, cK);  // S = Q·Kᵀ
    // The next tile: classified (its document-id loads overlap the products above) and
    // prefetched into the other buffer while this one's softmax and P·V run.
    const int n_next = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
    if (n_next < n_end) {
      load_rows<kBc, kD, kThreads>(sK + (buf ^ 1) * kBc * kS, kg, kvstride, n_next * kBc, T, D);
      load_rows<kBc, kD, kThreads>(sV + (buf ^ 1) * kBc * kS, vg, kvstride, n_next * kBc, T, D);
    }
    cp_async_commit();
    // The scores the mask hides to -inf.
    const int r0 = q0 + wrow + gid;  // (a structured binding is not captured before C++20)
    const auto row = [&](int mt, int hi) { return r0 + mt * 16 + 8 * hi; };
    if (cur_kind == kOneDoc) mask_fragments(s, k0, -INFINITY, [&](int mt, int hi, int col) { return visible_in_doc(row(mt, hi), col, T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, k0, -INFINITY, [&](int mt, int hi, int col) { return visible(row(mt, hi), qseg[mt][hi], col, __ldg(segb + min(col, T - 1)), T, causal); });
    // Online softmax: rescale the running sums and the output by 2^(old max - new max).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hi], s[mt][nt][2 * hi + 1]));
        mx = quad_max(mx) * p.scale_log2;
        const float m_new = fmaxf(mrow[mt][hi], mx);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that has seen no key yet
        const float alpha = fast_exp2(mrow[mt][hi] - m_use);
        mrow[mt][hi] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const float pv = fast_exp2(fmaf(s[mt][nt][2 * hi + j], p.scale_log2, -m_use));
            s[mt][nt][2 * hi + j] = pv;
            sum += pv;
          }
        }
        lrow[mt][hi] = lrow[mt][hi] * alpha + sum;
        // Once the running max settles alpha is 1 for every row of the warp: skip the rescale.
        if (__any_sync(kFull32, alpha != 1.f)) {
#pragma unroll
          for (int dt = 0; dt < kDT; ++dt) {
            o[mt][dt][2 * hi] *= alpha;
            o[mt][dt][2 * hi + 1] *= alpha;
          }
        }
      }
    }
    mma_pv<kD, kNT, kMT>(o, s, cV);  // O += P·V (P rounded to bf16)
    buf ^= 1;
    n = n_next;
  }
  cp_async_wait<0>();
  __syncthreads();  // sQ is free (and no copy is in flight) whether or not the loop ran

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    float inv[2];
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const float l = quad_sum(lrow[mt][hi]);
      inv[hi] = l > 0.f ? 1.f / l : 0.f;
      const int row = q0 + wrow + mt * 16 + gid + 8 * hi;
      if (tig == 0 && row < T) p.lse[row_base(p, b, h) + row] = l > 0.f ? (mrow[mt][hi] + __log2f(l)) * kLn2 : -INFINITY;
    }
    frag_to_smem<kD, kDT>(sQ + (wrow + mt * 16) * kS, o[mt], inv[0], inv[1]);
  }
  __syncwarp();
  store_rows_warp<16 * kMT, kD>(static_cast<bf16*>(p.out) + q_base(p, b, h), qstride, sQ + wrow * kS, q0 + wrow, T, D);
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
