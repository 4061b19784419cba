// cross_entropy: per row, lse = log Σ_j exp(logits_j) and loss = weight · (lse − logits[target]),
// (logits and dlogits in the float dtype; weights, loss, dloss and lse always f32)
// 0 where target < 0 (ignored). One block per row, one pass over the row with an online
// (max, Σ exp(x − max)); nothing but loss and lse is written.
// cross_entropy_backward: dlogits = dloss · weight · (exp(logits − lse) − onehot(target)), 0 rows
// where ignored; one pass, one exp per element (expm1 at the target, where exp ≈ 1 would cancel).
// dlogits may be logits itself (in place): each thread reads an element before it writes it and
// no other thread touches it, so logits and dlogits are not __restrict__.
// cross_entropy_fused: both in one block a row, the loss pass then the gradient pass, which finds
// the row in L2 (two blocks of 512 threads an SM keep two rows an SM in flight: 26 MB of a GPT-2
// vocabulary's bf16 rows on an H100/H200, within the 50 MB L2), so the logits are read from memory
// once. Rows in flight are the lever: one block of 1024 threads an SM leaves each SM idle through
// every row's reduction and launch; more rows in flight than two an SM (40-80 MB of rows) push
// rows out of L2 before their second read. The gradient pass's reads and writes are evicted
// first from L2, so that they keep the rows in L2 for the second read (gradient_row).
// In place, a block barrier parts the passes' reads from the writes.
// Semantics: src/ops/cross_entropy.ts.
//
// Targets ≥ vocab are a data error the kernels cannot throw: they write a NaN loss (forward) and
// a NaN dlogits row (backward), read nothing out of bounds, and the step's loss and gradient norm
// turn NaN instead of passing silently. lse is still computed for such rows.
#include <math_constants.h>

#include <cfloat>

#include "common.cuh"

namespace mdlm {

constexpr int kCeMaxThreads = 512, kCeFusedThreads = 512, kCeFusedBlocks = 2;
constexpr int kCeUnroll = 4;  // vectors a thread loads before using them (bytes in flight)

// Spreads the elements [0, n) of a row over the block: a scalar head of `head` elements (up to the
// first 16-byte boundary), VEC-element vectors, a scalar tail. load_at(j, v) fills v (float[1] or
// float[VEC]) with elements j...; use(j, v) consumes them.
template <int VEC, typename Load, typename Use>
__device__ __forceinline__ void sweep_row(int head, int n, Load&& load_at, Use&& use) {
  const int nvec = (n - head) / VEC;
  const int tail = head + nvec * VEC;
  for (int j = threadIdx.x; j < head; j += blockDim.x) {
    float v[1];
    load_at(j, v);
    use(j, v);
  }
  for (int j = tail + threadIdx.x; j < n; j += blockDim.x) {
    float v[1];
    load_at(j, v);
    use(j, v);
  }
  for (int q0 = threadIdx.x; q0 < nvec; q0 += kCeUnroll * blockDim.x) {
    float v[kCeUnroll][VEC];
#pragma unroll
    for (int u = 0; u < kCeUnroll; u++) {
      const int q = q0 + u * blockDim.x;
      if (q < nvec) load_at(head + q * VEC, v[u]);
    }
#pragma unroll
    for (int u = 0; u < kCeUnroll; u++) {
      const int q = q0 + u * blockDim.x;
      if (q < nvec) use(head + q * VEC, v[u]);
    }
  }
}

// Elements of a row before its first 16-byte boundary (none when not vectorised).
template <int VEC, typename T>
__device__ __forceinline__ int row_head(const T* row, int n) {
  if (VEC == 1) return 0;
  return min(n, static_cast<int>((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T)));
}

// A running max m and t = Σ exp(x − m) less the max's own term, 1: s = 1 + t, the other terms
// kept apart from the 1 that f32 would round them against. Where the target dominates they are
// all of log s (= log1p(t)) and of the target's gradient; s itself in f32 would keep them to
// ulp(1), short of the op's tolerance. Starting from the lowest float (not −inf) keeps exp(m − m') free of inf − inf; a NaN
// logit makes t NaN.
struct Online {
  float m = -FLT_MAX;
  float t = -1.0f;  // empty: s = 0

  template <int N>
  __device__ __forceinline__ void push(const float (&v)[N]) {
    float mv = v[0];
#pragma unroll
    for (int e = 1; e < N; e++) mv = fmaxf(mv, v[e]);
    if (mv > m) {  // a new max, from v: the old sum rescaled, and v's terms less one of its 1s
      t = (t + 1.0f) * __expf(m - mv);
      m = mv;
      bool own = false;
#pragma unroll
      for (int e = 0; e < N; e++) {
        if (!own && v[e] == mv) own = true;
        else t += __expf(v[e] - m);
      }
    } else {
#pragma unroll
      for (int e = 0; e < N; e++) t += __expf(v[e] - m);
    }
  }

  // Commutative to the bit, so every lane of a butterfly ends with the same (m, t).
  __device__ __forceinline__ void merge(float om, float ot) {
    if (m > om) {
      t += (ot + 1.0f) * __expf(om - m);
    } else if (om > m) {
      t = ot + (t + 1.0f) * __expf(m - om);
      m = om;
    } else {
      t = (t + ot) + 1.0f;
    }
  }
};

__device__ __forceinline__ Online warp_merge(Online a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a.merge(__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.t, o));
  return a;
}

// The row's (max, Σ exp(x − max) − 1) in every thread: warps in a butterfly, then warp 0 over the
// warps in the same way (a fixed order), shared through `red`. Ends with a block barrier, so
// every thread's reads of the row come before any thread's writes after it.
template <int kThreads>
__device__ __forceinline__ Online block_online(Online acc) {
  __shared__ float red[2][kThreads / 32];
  acc = warp_merge(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    red[0][warp] = acc.m;
    red[1][warp] = acc.t;
  }
  __syncthreads();
  if (warp == 0) {
    acc = Online{};
    if (lane < static_cast<int>(blockDim.x >> 5)) acc = Online{red[0][lane], red[1][lane]};
    acc = warp_merge(acc);  // its shuffles follow every lane's read of red, so lane 0 may overwrite it
  }
  if (threadIdx.x == 0) {
    red[0][0] = acc.m;
    red[1][0] = acc.t;
  }
  __syncthreads();
  return Online{red[0][0], red[1][0]};
}

// A row's lse as max + log Σ exp(x − max), the two kept apart: the gradient pass takes x − lse as
// (x − max) − log s, exact where the target dominates (x = max, log s small), where x − lse rounded
// lse's f32 error into a relative 2e-5 of the target's gradient (a 1 × 3 f32 case).
struct RowLse {
  float m, log_s;
};

// The loss pass over row `row`: lse, and the loss from the target's logit `xt` (read by thread 0
// before the pass). Returns the row's lse in its two parts.
template <int kThreads, typename T, int VEC>
__device__ __forceinline__ RowLse loss_row(const T* p, int row, int t, float xt, const float* weights, float* loss, float* lse, int vocab) {
  Online acc;
  sweep_row<VEC>(row_head<VEC>(p, vocab), vocab, [&](int j, auto& v) { load(p + j, v); }, [&](int, const auto& v) { acc.push(v); });
  acc = block_online<kThreads>(acc);
  const float log_s = log1pf(acc.t);
  if (threadIdx.x == 0) {
    lse[row] = acc.m + log_s;
    float l = 0.0f;
    if (t >= vocab) l = CUDART_NAN_F;
    // (m − logit) + log s: two non-negative terms, no cancellation when the target dominates.
    else if (t >= 0) l = weights[row] * ((acc.m - xt) + log_s);
    loss[row] = l;
  }
  return {acc.m, log_s};
}

// The target's logit, read by thread 0 before a pass may overwrite it (0 for other threads).
template <typename T>
__device__ __forceinline__ float target_logit(const T* p, int t, int vocab) {
  return threadIdx.x == 0 && t >= 0 && t < vocab ? load1(p + t) : 0.0f;
}

// The gradient pass over a row: q = scale · (exp(p − lse) − onehot(t)); an ignored row (t < 0)
// gets zeros without reading p, a bad target (t ≥ vocab) NaNs; neither uses scale or l.
// Its reads (the row's last) and writes (read by the next kernel only after all 1.6 GB of a
// llama-124m step's logits) are evicted first from L2: in the fused kernel the loss pass leaves
// each row in L2 for this pass, and the gradients in flight (26 MB, as much again as the rows in
// flight) would push rows out before their second read.
template <typename T, int VEC>
__device__ __forceinline__ void gradient_row(const T* p, T* q, int t, float scale, RowLse l, int vocab) {
  const int head = row_head<VEC>(p, vocab);
  if (t < 0 || t >= vocab) {
    const float fill = t < 0 ? 0.0f : CUDART_NAN_F;
    sweep_row<VEC>(head, vocab, [](int, auto&) {}, [&](int j, const auto& v) {
      float g[sizeof(v) / sizeof(float)];
      for (float& x : g) x = fill;
      store<T, sizeof(g) / sizeof(float), L2::evict_first>(q + j, g);
    });
    return;
  }
  sweep_row<VEC>(head, vocab, [&](int j, auto& v) { load<T, sizeof(v) / sizeof(float), L2::evict_first>(p + j, v); }, [&](int j, const auto& v) {
    constexpr int N = sizeof(v) / sizeof(float);
    float g[N];
#pragma unroll
    for (int e = 0; e < N; e++) g[e] = scale * __expf((v[e] - l.m) - l.log_s);
    if (static_cast<unsigned>(t - j) < static_cast<unsigned>(N)) {
#pragma unroll
      for (int e = 0; e < N; e++) {
        if (j + e == t) g[e] = scale * expm1f((v[e] - l.m) - l.log_s);
      }
    }
    store<T, N, L2::evict_first>(q + j, g);
  });
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kCeMaxThreads)
    cross_entropy_kernel(const T* __restrict__ logits, const int* __restrict__ targets, const float* __restrict__ weights,
                         float* __restrict__ loss, float* __restrict__ lse, int vocab) {
  const int row = blockIdx.x, t = targets[row];
  const T* p = logits + static_cast<int64_t>(row) * vocab;
  loss_row<kCeMaxThreads, T, VEC>(p, row, t, target_logit(p, t, vocab), weights, loss, lse, vocab);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kCeMaxThreads)
    cross_entropy_backward_kernel(const T* logits, const int* __restrict__ targets, const float* __restrict__ weights,
                                  const float* __restrict__ lse, const float* __restrict__ dloss, T* dlogits, int vocab) {
  const int row = blockIdx.x, t = targets[row];
  const int64_t start = static_cast<int64_t>(row) * vocab;  // dlogits' rows as aligned as the logits' (the launcher checks)
  gradient_row<T, VEC>(logits + start, dlogits + start, t, dloss[row] * weights[row], RowLse{lse[row], 0.0f}, vocab);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kCeFusedThreads, kCeFusedBlocks)
    cross_entropy_fused_kernel(const T* logits, const int* __restrict__ targets, const float* __restrict__ weights,
                               const float* __restrict__ dloss, float* __restrict__ loss, float* __restrict__ lse, T* dlogits, int vocab) {
  const int row = blockIdx.x, t = targets[row];
  const int64_t start = static_cast<int64_t>(row) * vocab;
  const T* p = logits + start;
  const RowLse l = loss_row<kCeFusedThreads, T, VEC>(p, row, t, target_logit(p, t, vocab), weights, loss, lse, vocab);
  gradient_row<T, VEC>(p, dlogits + start, t, dloss[row] * weights[row], l, vocab);
}

// One block per row, as many threads as the row has vectors up to `most`.
template <int VEC>
int ce_threads(int vocab, int most = kCeMaxThreads) {
  return std::min(most, round_up((vocab + VEC - 1) / VEC, 32));
}

}  // namespace mdlm

MDLM_OP(cross_entropy) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"logits"_arg});
  const int rows = call.i32("rows"_attr), vocab = call.i32("vocab"_attr);
  const void* logits = call.arg("logits"_arg).ptr;
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int VEC = kVec16<T>;  // always: each row finds its own 16-byte boundary
    check_cuda(launch_kernel(cross_entropy_kernel<T, VEC>, rows, ce_threads<VEC>(vocab), 0, call.stream,
        static_cast<const T*>(logits), static_cast<const int*>(call.arg("targets"_arg).ptr),
        static_cast<const float*>(call.arg("weights"_arg).ptr), static_cast<float*>(call.arg("loss"_arg).ptr),
        static_cast<float*>(call.arg("lse"_arg).ptr), vocab), call.op.c_str());
  });
}

namespace mdlm {

// f(T, VEC) for an op with logits and dlogits: vectors need each logits row and its dlogits row to
// share their offset from a 16-byte boundary.
template <typename F>
void with_gradient_types(const OpCall& call, F&& f) {
  const DType dtype = float_dtype_of(call, {"logits"_arg, "dlogits"_arg});
  const bool same_phase = reinterpret_cast<uintptr_t>(call.arg("logits"_arg).ptr) % 16 == reinterpret_cast<uintptr_t>(call.arg("dlogits"_arg).ptr) % 16;
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vec<T>(same_phase, [&](auto vec) { f(tag, vec); });
  });
}

}  // namespace mdlm

MDLM_OP(cross_entropy_backward) {
  using namespace mdlm;
  const int rows = call.i32("rows"_attr), vocab = call.i32("vocab"_attr);
  with_gradient_types(call, [&](auto tag, auto vec) {
    using T = typename decltype(tag)::type;
    constexpr int VEC = decltype(vec)::value;
    check_cuda(launch_kernel(cross_entropy_backward_kernel<T, VEC>, rows, ce_threads<VEC>(vocab), 0, call.stream,
        static_cast<const T*>(call.arg("logits"_arg).ptr), static_cast<const int*>(call.arg("targets"_arg).ptr),
        static_cast<const float*>(call.arg("weights"_arg).ptr), static_cast<const float*>(call.arg("lse"_arg).ptr),
        static_cast<const float*>(call.arg("dloss"_arg).ptr), static_cast<T*>(call.arg("dlogits"_arg).ptr), vocab), call.op.c_str());
  });
}

MDLM_OP(cross_entropy_fused) {
  using namespace mdlm;
  const int rows = call.i32("rows"_attr), vocab = call.i32("vocab"_attr);
  with_gradient_types(call, [&](auto tag, auto vec) {
    using T = typename decltype(tag)::type;
    constexpr int VEC = decltype(vec)::value;
    check_cuda(launch_kernel(cross_entropy_fused_kernel<T, VEC>, rows, ce_threads<VEC>(vocab, kCeFusedThreads), 0, call.stream,
        static_cast<const T*>(call.arg("logits"_arg).ptr), static_cast<const int*>(call.arg("targets"_arg).ptr),
        static_cast<const float*>(call.arg("weights"_arg).ptr), static_cast<const float*>(call.arg("dloss"_arg).ptr),
        static_cast<float*>(call.arg("loss"_arg).ptr), static_cast<float*>(call.arg("lse"_arg).ptr), static_cast<T*>(call.arg("dlogits"_arg).ptr), vocab), call.op.c_str());
  });
}
