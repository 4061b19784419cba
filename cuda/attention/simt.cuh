// attention's f32 kernels in exact fp32 SIMT arithmetic, forward and backward (fwd_simt,
// bwd_dq_simt, bwd_dkdv_simt): f32 storage, and the bf16 calls the tensor-core kernels do not take.
// Part of the attention op's one translation unit (cuda/attention/attention.cu includes it, in an
// anonymous namespace).
#pragma once

#include "params.cuh"

namespace mdlm {
namespace attn {
namespace {

// =============================================================================================
// SIMT kernels: f32 storage (exact fp32 arithmetic), and bf16 that the tensor-core path does not
// take. Head dim up to kDM = 128 (the op's limit), a multiple of 4. 128 threads = 4 warps.
// =============================================================================================

constexpr int kDS = kDM + 4;  // row stride of tiles read one row per lane (float4, conflict-free)

// rows [t0, t0 + n) of a [.., T, heads, D] tensor -> s[n][stride] as f32 (rows >= T zero;
// columns >= D untouched and never read).
template <typename TS>
__device__ __forceinline__ void load_rows_f32(float* s, int stride, const TS* g, int64_t gstride, int t0, int n, int T, int D) {
  for (int i = threadIdx.x; i < n * D; i += blockDim.x) {
    const int r = i / D, c = i - r * D;
    const int t = t0 + r;
    s[r * stride + c] = t < T ? to_float(g[(int64_t)t * gstride + c]) : 0.f;
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Forward: 16 query rows a block (4 a warp), key tiles of 32 (one a lane).
template <typename TS>
__global__ void __launch_bounds__(128) fwd_simt(const Params p) {
  constexpr int kBr = 16, kBc = 32;
  DYNAMIC_SMEM(float, smf);
  float* sQ = smf;               // [kBr][kDM]
  float* sK = sQ + kBr * kDM;    // [kBc][kDS]
  float* sV = sK + kBc * kDS;    // [kBc][kDM]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const TS* kg = static_cast<const TS*>(p.k) + kv_base(p, b, g);
  const TS* vg = static_cast<const TS*>(p.v) + kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sQ, kDM, static_cast<const TS*>(p.q) + q_base(p, b, h), qstride, q0, kBr, T, D);
  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int qseg[4];
  float m[4], l[4], o[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    qseg[i] = __ldg(segb + min(q0 + warp * 4 + i, T - 1));
    m[i] = -INFINITY;
    l[i] = 0.f;
    o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  }
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  for (int n = 0; n < n_end; ++n) {
    const int k0 = n * kBc;
    const int kind = classify_tile(q0, kBr, qrange, k0, kBc, warp_seg_range(segb, k0, kBc, T), T, causal);
    if (kind == kEmpty) continue;
    __syncthreads();
    load_rows_f32(sK, kDS, kg, kvstride, k0, kBc, T, D);
    load_rows_f32(sV, kDM, vg, kvstride, k0, kBc, T, D);
    __syncthreads();
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    for (int d = 0; d < D; d += 4) {
      const float4 kv = ld4(sK + lane * kDS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i] = dot4(ld4(sQ + (warp * 4 + i) * kDM + d), kv, s[i]);
    }
    const int kj = k0 + lane;
    const int kseg = __ldg(segb + min(kj, T - 1));
    float pr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool vis = kind == kFull || visible(q0 + warp * 4 + i, qseg[i], kj, kseg, T, causal);
      const float sc = vis ? s[i] * p.scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(sc));
      const float m_use = m_new == -INFINITY ? 0.f : m_new;
      const float alpha = expf(m[i] - m_use);
      pr[i] = expf(sc - m_use);
      l[i] = l[i] * alpha + pr[i];
      m[i] = m_new;
#pragma unroll
      for (int c = 0; c < 4; ++c) o[i][c] *= alpha;
    }
    for (int j = 0; j < kBc; ++j) {
      float pj[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) pj[i] = __shfl_sync(kFull32, pr[i], j);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          const float vv = sV[j * kDM + d];
#pragma unroll
          for (int i = 0; i < 4; ++i) o[i][c] = fmaf(pj[i], vv, o[i][c]);
        }
      }
    }
  }
  TS* og = static_cast<TS*>(p.out) + q_base(p, b, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float L = warp_sum(l[i]);
    const int t = q0 + warp * 4 + i;
    if (t < T) {
      const float inv = L > 0.f ? 1.f / L : 0.f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) og[(int64_t)t * qstride + d] = from_float<TS>(o[i][c] * inv);
      }
      if (lane == 0) p.lse[row_base(p, b, h) + t] = L > 0.f ? m[i] + logf(L) : -INFINITY;
    }
  }
}

// dQ and Drow: 16 query rows a block (4 a warp), key tiles of 32 (one a lane).
template <typename TS>
__global__ void __launch_bounds__(128) bwd_dq_simt(const Params p) {
  constexpr int kBr = 16, kBc = 32;
  DYNAMIC_SMEM(float, smf);
  float* sQ = smf;               // [kBr][kDM]
  float* sdO = sQ + kBr * kDM;   // [kBr][kDM]
  float* sK = sdO + kBr * kDM;   // [kBc][kDS]
  float* sV = sK + kBc * kDS;    // [kBc][kDS]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const auto [b, h, g, q0] = query_block(p, kBr);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
  const TS* kg = static_cast<const TS*>(p.k) + kv_base(p, b, g);
  const TS* vg = static_cast<const TS*>(p.v) + kv_base(p, b, g);
  const TS* dog = static_cast<const TS*>(p.dout) + qb;
  const TS* og = static_cast<const TS*>(p.o) + qb;
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sQ, kDM, static_cast<const TS*>(p.q) + qb, qstride, q0, kBr, T, D);
  load_rows_f32(sdO, kDM, dog, qstride, q0, kBr, T, D);
  const SegRange qrange = warp_seg_range(segb, q0, kBr, T);
  int qseg[4];
  float lse[4], drow[4], acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    qseg[i] = __ldg(segb + min(t, T - 1));
    lse[i] = t < T ? p.lse_in[rb + t] : 0.f;
    float dd = 0.f;
    if (t < T)
      for (int d = lane; d < D; d += 32) dd = fmaf(to_float(dog[(int64_t)t * qstride + d]), to_float(og[(int64_t)t * qstride + d]), dd);
    drow[i] = warp_sum(dd);
    if (lane == 0 && t < T) p.dsum[rb + t] = drow[i];
    acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  }
  int n_end = (T + kBc - 1) / kBc;
  if (causal) n_end = min(n_end, (min(q0 + kBr, T) + kBc - 1) / kBc);
  for (int n = 0; n < n_end; ++n) {
    const int k0 = n * kBc;
    const int kind = classify_tile(q0, kBr, qrange, k0, kBc, warp_seg_range(segb, k0, kBc, T), T, causal);
    if (kind == kEmpty) continue;
    __syncthreads();
    load_rows_f32(sK, kDS, kg, kvstride, k0, kBc, T, D);
    load_rows_f32(sV, kDS, vg, kvstride, k0, kBc, T, D);
    __syncthreads();
    float s[4] = {0.f, 0.f, 0.f, 0.f}, dp[4] = {0.f, 0.f, 0.f, 0.f};
    for (int d = 0; d < D; d += 4) {
      const float4 kv = ld4(sK + lane * kDS + d), vv = ld4(sV + lane * kDS + d);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[i] = dot4(ld4(sQ + (warp * 4 + i) * kDM + d), kv, s[i]);
        dp[i] = dot4(ld4(sdO + (warp * 4 + i) * kDM + d), vv, dp[i]);
      }
    }
    const int kj = k0 + lane;
    const int kseg = __ldg(segb + min(kj, T - 1));
    float ds[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const bool vis = kind == kFull || visible(q0 + warp * 4 + i, qseg[i], kj, kseg, T, causal);
      ds[i] = vis ? expf(s[i] * p.scale - lse[i]) * (dp[i] - drow[i]) : 0.f;
    }
    for (int j = 0; j < kBc; ++j) {
      float dj[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) dj[i] = __shfl_sync(kFull32, ds[i], j);
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          const float kv = sK[j * kDS + d];
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[i][c] = fmaf(dj[i], kv, acc[i][c]);
        }
      }
    }
  }
  TS* dqg = static_cast<TS*>(p.dq) + dq_base(p, b, h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = q0 + warp * 4 + i;
    if (t < T) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) dqg[(int64_t)t * p.dq_stride + d] = from_float<TS>(acc[i][c] * p.scale);
      }
    }
  }
}

// dK, dV: 16 key rows a block (4 a warp), over the group's q heads and query tiles of 32 (one a
// lane). Reads Drow written by bwd_dq_simt.
template <typename TS>
__global__ void __launch_bounds__(128) bwd_dkdv_simt(const Params p) {
  constexpr int kBc = 16, kBr = 32;
  DYNAMIC_SMEM(float, smf);
  float* sK = smf;               // [kBc][kDM]
  float* sV = sK + kBc * kDM;    // [kBc][kDM]
  float* sQ = sV + kBc * kDM;    // [kBr][kDS]
  float* sdO = sQ + kBr * kDS;   // [kBr][kDS]
  float* sL = sdO + kBr * kDS;   // [kBr]
  float* sDr = sL + kBr;         // [kBr]
  const int T = p.T, D = p.D;
  const bool causal = p.causal;
  const KeyBlock blk = key_block(p, kBc);  // (not a structured binding: the lambdas below capture b and g)
  const int b = blk.b, g = blk.g, k0 = blk.k0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t qstride = (int64_t)p.H * D, kvstride = (int64_t)p.G * D;
  const int64_t kb = kv_base(p, b, g);
  const int* segb = p.seg + (int64_t)b * T;

  load_rows_f32(sK, kDM, static_cast<const TS*>(p.k) + kb, kvstride, k0, kBc, T, D);
  load_rows_f32(sV, kDM, static_cast<const TS*>(p.v) + kb, kvstride, k0, kBc, T, D);
  const SegRange krange = warp_seg_range(segb, k0, kBc, T);
  int kseg[4];
  float dk[4][4], dv[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    kseg[i] = __ldg(segb + min(k0 + warp * 4 + i, T - 1));
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[i][c] = dv[i][c] = 0.f;
  }
  const int m_begin = causal ? k0 / kBr : 0;
  const int m_end = (T + kBr - 1) / kBr;
  for (int hq = 0; hq < p.group; ++hq) {
    const int h = g * p.group + hq;
    const int64_t qb = q_base(p, b, h), rb = row_base(p, b, h);
    for (int m = m_begin; m < m_end; ++m) {
      const int q0 = m * kBr;
      const int kind = classify_tile(q0, kBr, warp_seg_range(segb, q0, kBr, T), k0, kBc, krange, T, causal);
      if (kind == kEmpty) continue;
      __syncthreads();
      load_rows_f32(sQ, kDS, static_cast<const TS*>(p.q) + qb, qstride, q0, kBr, T, D);
      load_rows_f32(sdO, kDS, static_cast<const TS*>(p.dout) + qb, qstride, q0, kBr, T, D);
      if (threadIdx.x < kBr) {
        const int t = q0 + threadIdx.x;
        sL[threadIdx.x] = t < T ? p.lse_in[rb + t] : 0.f;
        sDr[threadIdx.x] = t < T ? p.dsum[rb + t] : 0.f;
      }
      __syncthreads();
      const int qi = q0 + lane;
      const int qseg = __ldg(segb + min(qi, T - 1));
      const float lse = sL[lane], dr = sDr[lane];
      float pr[4], ds[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float s = 0.f, dp = 0.f;
        for (int d = 0; d < D; d += 4) {
          s = dot4(ld4(sK + (warp * 4 + i) * kDM + d), ld4(sQ + lane * kDS + d), s);
          dp = dot4(ld4(sV + (warp * 4 + i) * kDM + d), ld4(sdO + lane * kDS + d), dp);
        }
        const bool vis = kind == kFull || visible(qi, qseg, k0 + warp * 4 + i, kseg[i], T, causal);
        pr[i] = vis ? expf(s * p.scale - lse) : 0.f;
        ds[i] = pr[i] * (dp - dr);
      }
      for (int j = 0; j < kBr; ++j) {
        float pj[4], dj[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          pj[i] = __shfl_sync(kFull32, pr[i], j);
          dj[i] = __shfl_sync(kFull32, ds[i], j);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = lane + 32 * c;
          if (d < D) {
            const float qv = sQ[j * kDS + d], ov = sdO[j * kDS + d];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
              dv[i][c] = fmaf(pj[i], ov, dv[i][c]);
              dk[i][c] = fmaf(dj[i], qv, dk[i][c]);
            }
          }
        }
      }
    }
  }
  TS* dkg = static_cast<TS*>(p.dk) + dkv_base(p, b, g);
  TS* dvg = static_cast<TS*>(p.dv) + dkv_base(p, b, g);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = k0 + warp * 4 + i;
    if (t < T) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int d = lane + 32 * c;
        if (d < D) {
          dkg[(int64_t)t * p.dkv_stride + d] = from_float<TS>(dk[i][c] * p.scale);
          dvg[(int64_t)t * p.dkv_stride + d] = from_float<TS>(dv[i][c]);
        }
      }
    }
  }
}

constexpr size_t kFwdSimtSmem = size_t(16 * kDM + 32 * kDS + 32 * kDM) * sizeof(float);
constexpr size_t kDqSimtSmem = size_t(2 * 16 * kDM + 2 * 32 * kDS) * sizeof(float);
constexpr size_t kDkvSimtSmem = size_t(2 * 16 * kDM + 2 * 32 * kDS + 2 * 32) * sizeof(float);

}  // namespace
}  // namespace attn
}  // namespace mdlm
