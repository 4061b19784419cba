// attention's backward on mma.sync: bwd_dq_mma (dQ for a block of query rows, the deterministic
// backward's first kernel) and bwd_dkdv_mma (dK and dV for a block of keys; with kFuseDq also dQ,
// added to the f32 accumulator with atomics: the default backward on GPUs before Hopper).
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "mma.cuh"

namespace mdlm {
namespace attn {
namespace {

template <int kD, int kBc, int kWarps, int kMT>
struct DqCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kMT * kWarps;
  static constexpr size_t kSmem = size_t(2 * kBr + 4 * kBc) * row_stride<kD>() * sizeof(bf16);  // Q, dO, 2 × (K, V)
  static_assert(kBc % 16 == 0 && kD % 16 == 0, "tile shape");
};

// Σ of the 8 products of two rows of 8 bf16 (a bf16 is the high half of an f32).
__device__ __forceinline__ float dot_bf16x8(uint4 a, uint4 b) {
  const uint32_t x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc = fmaf(__uint_as_float(x[i] << 16), __uint_as_float(y[i] << 16), acc);
    acc = fmaf(__uint_as_float(x[i] & 0xffff0000u), __uint_as_float(y[i] & 0xffff0000u), acc);
  }
  return acc;
}

template <int kD, int kBc, int kWarps, int kMT>
__global__ void __launch_bounds__(32 * kWarps) bwd_dq_mma(const Params p) {
  using Cfg = DqCfg<kD, kBc, kWarps, kMT>;
  constexpr int kBr = Cfg::kBr, kNT = kBc / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // [kBr][kS]; the dQ tile at the end
  bf16* sdO = sQ + kBr * kS;                      // [kBr][kS]
  bf16* sK = sdO + kBr * kS;                      // [2][kBc][kS]
  bf16* sV = sK + 2 * kBc * kS;                   // [2][kBc][kS]

  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2;
  const int wrow = warp * 16 * kMT;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
  const bf16* qg = static_cast<const bf16*>(p.q) + qb;
  const bf16* dog = static_cast<const bf16*>(p.dout) + qb;
  const bf16* kg = static_cast<const bf16*>(p.k) + kv_base(p, b, g);
  const bf16* vg = static_cast<const bf16*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  int kind = kEmpty;
  int n = next_key_tile(0, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);

  load_rows<kBr, kD, kThreads>(sQ, qg, qstride, q0, T, D);
  load_rows<kBr, kD, kThreads>(sdO, dog, qstride, q0, T, D);
  if (n < n_end) {
    load_rows<kBc, kD, kThreads>(sK, kg, kvstride, n * kBc, T, D);
    load_rows<kBc, kD, kThreads>(sV, vg, kvstride, n * kBc, T, D);
  }
  cp_async_commit();

  // Drow (bwd_prep's, in the scratch) and lse of the rows gid and gid + 8 of each 16-row tile.
  float drow[kMT][2], lse2[kMT][2];
  int qseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int row = q0 + wrow + mt * 16 + gid + 8 * hi;
      drow[mt][hi] = row < T ? p.dsum[rb + row] : 0.f;
      lse2[mt][hi] = row < T ? p.lse_in[rb + row] * kLog2e : 0.f;
      qseg[mt][hi] = __ldg(segb + min(row, T - 1));
    }
  }

  float acc[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) acc[mt][dt][0] = acc[mt][dt][1] = acc[mt][dt][2] = acc[mt][dt][3] = 0.f;

  int buf = 0;
  while (n < n_end) {
    const int cur_kind = kind;
    const int k0 = n * kBc;
    cp_async_wait<0>();
    __syncthreads();  // tile n has landed; every warp is done with the other buffer
    const bf16* cK = sK + buf * kBc * kS;
    const bf16* cV = sV + buf * kBc * kS;

    float s[kMT][kNT][4], dp[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
        dp[mt][nt][0] = dp[mt][nt][1] = dp[mt][nt][2] = dp[mt][nt][3] = 0.f;
      }
    mma_abt<kD, kNT, kMT>(s, sQ + wrow * kS, cK);  // S = Q·Kᵀ
    // The next tile: classified and prefetched into the other buffer (as in the forward).
    const int n_next = next_key_tile(n + 1, n_end, kBc, segb, q0, kBr, qrange, T, causal, kind);
    if (n_next < n_end) {
      load_rows<kBc, kD, kThreads>(sK + (buf ^ 1) * kBc * kS, kg, kvstride, n_next * kBc, T, D);
      load_rows<kBc, kD, kThreads>(sV + (buf ^ 1) * kBc * kS, vg, kvstride, n_next * kBc, T, D);
    }
    cp_async_commit();
    mma_abt<kD, kNT, kMT>(dp, sdO + wrow * kS, cV);  // dP = dO·Vᵀ
    // dS = P∘(dP − Drow), P = exp(scale·s − lse), stored over s; on a partial tile the pairs the
    // mask hides become 0 after, in a warp-uniform branch of its own (see bwd_probs).
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], p.scale_log2, -lse2[mt][e >> 1])) * (dp[mt][nt][e] - drow[mt][e >> 1]);
    // The pairs the mask hides to 0.
    const int r0 = q0 + wrow + gid;  // (a structured binding is not captured before C++20)
    const auto row = [&](int mt, int hi) { return r0 + mt * 16 + 8 * hi; };
    if (cur_kind == kOneDoc) mask_fragments(s, k0, 0.f, [&](int mt, int hi, int col) { return visible_in_doc(row(mt, hi), col, T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, k0, 0.f, [&](int mt, int hi, int col) { return visible(row(mt, hi), qseg[mt][hi], col, __ldg(segb + min(col, T - 1)), T, causal); });
    mma_pv<kD, kNT, kMT>(acc, s, cK);  // dQ += dS·K
    buf ^= 1;
    n = n_next;
  }
  cp_async_wait<0>();
  __syncthreads();

  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dq) + dq_base(p, b, h), p.dq_stride, sQ + wrow * kS, acc, p.scale, q0 + wrow, T, D);
}

// ---------------------------------------------------------------------------------------------
// Backward: dK, dV
// ---------------------------------------------------------------------------------------------

template <int kD, int kBr, int kWarps, int kMT, bool kFuseDq>
struct DkvCfg {
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBc = 16 * kMT * kWarps;
  static constexpr int kDsStride = kBr + 8;  // dSᵀ rows: padded like row_stride, for ldmatrix
  // K, V, 2 × (Q, dO) tiles, then 2 × (lse, Drow) rows, then (fused) the dSᵀ tile.
  static constexpr size_t kTiles = size_t(2 * kBc + 4 * kBr) * row_stride<kD>() * sizeof(bf16);
  static constexpr size_t kRows = kTiles + 4 * kBr * sizeof(float);
  static constexpr size_t kSmem = kRows + (kFuseDq ? size_t(kBc) * kDsStride * sizeof(bf16) : 0);
  static_assert(kBr % 16 == 0 && kD % 16 == 0 && kTiles % 16 == 0 && kRows % 16 == 0, "tile shape");
  // The fused dQ product splits the kBr × kD tile over the warps: kBr/16 row tiles × column groups.
  static_assert(!kFuseDq || (kWarps % (kBr / 16) == 0 && (kD / (kWarps / (kBr / 16))) % 16 == 0), "dQ split");
};

// The fused backward's dQ product for one query tile: dQacc[q0.., :] += dS·K over the block's kBc
// keys, dS read transposed from sdS ([kBc keys][kBr queries], every warp's rows) and K from sK.
// Warp w computes rows 16·(w mod kBr/16).. and a kD/(groups) column slice, and adds it to the f32
// accumulator (row stride `stride`) with atomics: other key blocks add to the same rows.
template <int kD, int kBc, int kBr, int kWarps>
__device__ __forceinline__ void accumulate_dq(float* dqa, int64_t stride, const bf16* sdS, const bf16* sK, int q0, int T, int D) {
  constexpr int kQT = kBr / 16, kCols = kD / (kWarps / kQT), kSS = kBr + 8, kS = row_stride<kD>();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2;
  const int qt = warp % kQT, c0 = (warp / kQT) * kCols;
  float acc[kCols / 8][4];
#pragma unroll
  for (int nt = 0; nt < kCols / 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
  // A fragments of dS (16 queries × 16 keys) are the transposed 8×8 blocks of sdS: matrix i holds
  // keys 8·(i >> 1).. × queries 8·(i & 1)..
  const int mat = lane >> 3;
  const uint32_t a_addr = smem_u32(sdS + ((mat >> 1) * 8 + (lane & 7)) * kSS + qt * 16 + (mat & 1) * 8);
  const uint32_t b_addr = smem_u32(sK + (lane & 15) * kS + c0 + (lane >> 4) * 8);
#pragma unroll
  for (int kk = 0; kk < kBc / 16; ++kk) {
    uint32_t a[4];
    ldsm_x4_t(a_addr + kk * 16 * kSS * 2, a[0], a[1], a[2], a[3]);
#pragma unroll
    for (int dp = 0; dp < kCols / 16; ++dp) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4_t(b_addr + (kk * 16 * kS + dp * 16) * 2, b0, b1, b2, b3);
      mma_bf16(acc[2 * dp], a, b0, b1);
      mma_bf16(acc[2 * dp + 1], a, b2, b3);
    }
  }
  add_dq_rows<kCols>(dqa, stride, q0 + qt * 16 + gid, &acc[0][0], c0, D, T);
}

template <int kD, int kBr, int kWarps, int kMT, bool kFuseDq>
__global__ void __launch_bounds__(32 * kWarps) bwd_dkdv_mma(const Params p) {
  using Cfg = DkvCfg<kD, kBr, kWarps, kMT, kFuseDq>;
  constexpr int kBc = Cfg::kBc, kNT = kBr / 8, kDT = kD / 8, kS = row_stride<kD>(), kThreads = Cfg::kThreads;
  DYNAMIC_SMEM(unsigned char, smem_raw);
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // [kBc][kS]; the dK tile at the end
  bf16* sV = sK + kBc * kS;                       // [kBc][kS]; the dV tile at the end
  bf16* sQ = sV + kBc * kS;                       // [2][kBr][kS]
  bf16* sdO = sQ + 2 * kBr * kS;                  // [2][kBr][kS]
  float* sL = reinterpret_cast<float*>(smem_raw + Cfg::kTiles);  // [2][kBr] lse
  float* sDr = sL + 2 * kBr;                                      // [2][kBr] Drow
  bf16* sdS = reinterpret_cast<bf16*>(smem_raw + Cfg::kRows);     // fused: [kBc][kBr + 8] dSᵀ

  const int T = p.T, D = p.D, group = p.group;
  const bool causal = p.causal;
  const KeyBlock blk = key_block(p, kBc);  // (not a structured binding: the lambdas below capture b and g)
  const int b = blk.b, g = blk.g, k0 = blk.k0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tig = lane & 3;
  const int wrow = warp * 16 * kMT;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t kb = kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  const QueryTileWalk walk(segb, k0, kBc, kBr, T, causal);
  int hq, m, kind;
  walk.start(group, hq, m, kind);

  auto load_tile = [&](int buf_, int hq_, int m_) {
    const int h = g * group + hq_;
    const int q0 = m_ * kBr;
    const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
    load_rows<kBr, kD, kThreads>(sQ + buf_ * kBr * kS, static_cast<const bf16*>(p.q) + qb, qstride, q0, T, D);
    load_rows<kBr, kD, kThreads>(sdO + buf_ * kBr * kS, static_cast<const bf16*>(p.dout) + qb, qstride, q0, T, D);
    for (int i = threadIdx.x; i < kBr; i += kThreads) {
      const int t = q0 + i;
      const bool ok = t < T;
      cp_async4(smem_u32(sL + buf_ * kBr + i), p.lse_in + (ok ? rb + t : 0), ok);
      cp_async4(smem_u32(sDr + buf_ * kBr + i), p.dsum + (ok ? rb + t : 0), ok);
    }
  };

  load_rows<kBc, kD, kThreads>(sK, static_cast<const bf16*>(p.k) + kb, kvstride, k0, T, D);
  load_rows<kBc, kD, kThreads>(sV, static_cast<const bf16*>(p.v) + kb, kvstride, k0, T, D);
  if (hq < group) load_tile(0, hq, m);
  cp_async_commit();

  int krow[kMT][2], kseg[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      krow[mt][hi] = k0 + wrow + mt * 16 + gid + 8 * hi;
      kseg[mt][hi] = __ldg(segb + min(krow[mt][hi], T - 1));
    }

  float dk[kMT][kDT][4], dv[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      dk[mt][dt][0] = dk[mt][dt][1] = dk[mt][dt][2] = dk[mt][dt][3] = 0.f;
      dv[mt][dt][0] = dv[mt][dt][1] = dv[mt][dt][2] = dv[mt][dt][3] = 0.f;
    }

  int buf = 0;
  while (hq < group) {
    const int cur_kind = kind;
    const int q0 = m * kBr;
    cp_async_wait<0>();
    __syncthreads();  // tile (hq, m) has landed; every warp is done with the other buffer
    const bf16* cQ = sQ + buf * kBr * kS;
    const bf16* cdO = sdO + buf * kBr * kS;
    const float* cL = sL + buf * kBr;
    const float* cDr = sDr + buf * kBr;

    float s[kMT][kNT][4], dpt[kMT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
        dpt[mt][nt][0] = dpt[mt][nt][1] = dpt[mt][nt][2] = dpt[mt][nt][3] = 0.f;
      }
    mma_abt<kD, kNT, kMT>(s, sK + wrow * kS, cQ);  // Sᵀ = K·Qᵀ (this warp's 16·kMT keys × kBr queries)
    // The next (head, query tile): classified and prefetched into the other buffer.
    int hq_next = hq, m_next = m;
    walk.advance(hq_next, m_next, kind);
    if (hq_next < group) load_tile(buf ^ 1, hq_next, m_next);
    cp_async_commit();
    // Pᵀ = exp(scale·sᵀ − lse[query]), stored over s; on a partial tile the pairs the mask hides
    // become 0, in a warp-uniform branch of its own (see bwd_probs).
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 l2 = *reinterpret_cast<const float2*>(cL + nt * 8 + 2 * tig);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = fast_exp2(fmaf(s[mt][nt][e], p.scale_log2, -((e & 1) ? l2.y : l2.x) * kLog2e));
    }
    // The pairs the mask hides to 0 (keys in rows, queries in columns here).
    if (cur_kind == kOneDoc) mask_fragments(s, q0, 0.f, [&](int mt, int hi, int qi) { return visible_in_doc(qi, krow[mt][hi], T, causal); });
    else if (cur_kind == kPartial) mask_fragments(s, q0, 0.f, [&](int mt, int hi, int qi) { return visible(qi, __ldg(segb + min(qi, T - 1)), krow[mt][hi], kseg[mt][hi], T, causal); });
    mma_abt<kD, kNT, kMT>(dpt, sV + wrow * kS, cdO);  // dPᵀ = V·dOᵀ
    // dSᵀ = Pᵀ∘(dPᵀ − Drow[query]), stored over dpt.
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const float2 d2 = *reinterpret_cast<const float2*>(cDr + nt * 8 + 2 * tig);
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        dpt[mt][nt][0] = s[mt][nt][0] * (dpt[mt][nt][0] - d2.x);
        dpt[mt][nt][1] = s[mt][nt][1] * (dpt[mt][nt][1] - d2.y);
        dpt[mt][nt][2] = s[mt][nt][2] * (dpt[mt][nt][2] - d2.x);
        dpt[mt][nt][3] = s[mt][nt][3] * (dpt[mt][nt][3] - d2.y);
      }
    }
    if constexpr (kFuseDq) {
      // dSᵀ to shared memory, rounded to bf16 as the dK product rounds it, for dQ += dS·K.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          bf16* row = sdS + (wrow + mt * 16 + gid) * Cfg::kDsStride + nt * 8 + 2 * tig;
          *reinterpret_cast<uint32_t*>(row) = pack_bf16(dpt[mt][nt][0], dpt[mt][nt][1]);
          *reinterpret_cast<uint32_t*>(row + 8 * Cfg::kDsStride) = pack_bf16(dpt[mt][nt][2], dpt[mt][nt][3]);
        }
    }
    mma_pv<kD, kNT, kMT>(dv, s, cdO);   // dV += Pᵀ·dO
    mma_pv<kD, kNT, kMT>(dk, dpt, cQ);  // dK += dSᵀ·Q
    if constexpr (kFuseDq) {
      __syncthreads();  // every warp's dSᵀ rows are in sdS (the loop's next barrier guards reuse)
      accumulate_dq<kD, kBc, kBr, kWarps>(p.dq_accum + q_base(p, b, g * group + hq), qstride, sdS, sK, q0, T, D);
    }
    buf ^= 1;
    hq = hq_next;
    m = m_next;
  }
  cp_async_wait<0>();
  __syncthreads();

  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dk) + dkv_base(p, b, g), p.dkv_stride, sK + wrow * kS, dk, p.scale, k0 + wrow, T, D);
  store_warp_rows<kD, kMT>(static_cast<bf16*>(p.dv) + dkv_base(p, b, g), p.dkv_stride, sV + wrow * kS, dv, 1.f, k0 + wrow, T, D);
}

}  // namespace
}  // namespace attn
}  // namespace mdlm
