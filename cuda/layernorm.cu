// layernorm: y = (x − mean) · rstd · weight + bias, rstd = 1 / sqrt(var + eps) per row; mean and
// var in two passes over the registers (no E[x²] − E[x]² cancellation); saves mean and rstd.
// layernorm_backward, xhat = (x − mean) · rstd, g = dy · weight:
//   dx = rstd · (g − mean(g) − xhat · mean(g · xhat)) + dresidual,
//   dweight = Σ_rows dy · xhat,  dbias = Σ_rows dy.
// Layout and deterministic parameter gradients: rownorm.cuh. Semantics: src/ops/layernorm.ts.
#include "rownorm.cuh"

namespace mdlm {

template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    layernorm_kernel(const T* __restrict__ x, const T* __restrict__ weight, const T* __restrict__ bias, T* __restrict__ y,
                     float* __restrict__ mean, float* __restrict__ rstd, int rows, int dim, float eps) {
  wait_previous_kernel();
  const int row = blockIdx.x * blockDim.y + threadIdx.y;
  const bool live = row < rows;  // a dead team still meets the block at team_sum's barriers
  const int64_t base = static_cast<int64_t>(row) * dim;
  float v[kRowVecs<VEC>][VEC];
  float s[1] = {0.0f};
  for_row_vecs<VEC>(dim, [&](int k, int j) {
    if (!live) return;
    load<T, VEC>(x + base + j, v[k]);
#pragma unroll
    for (int e = 0; e < VEC; e++) s[0] += v[k][e];
  });
  team_sum(s);
  const float mu = s[0] / dim;
  float ss[1] = {0.0f};
  for_row_vecs<VEC>(dim, [&](int k, int) {
    if (!live) return;
#pragma unroll
    for (int e = 0; e < VEC; e++) ss[0] += (v[k][e] - mu) * (v[k][e] - mu);
  });
  team_sum(ss);
  if (!live) return;
  const float r = 1.0f / sqrtf(ss[0] / dim + eps);
  for_row_vecs<VEC>(dim, [&](int k, int j) {
    float w[VEC], b[VEC], out[VEC];
    load<T, VEC>(weight + j, w);
    load<T, VEC>(bias + j, b);
#pragma unroll
    for (int e = 0; e < VEC; e++) out[e] = (v[k][e] - mu) * r * w[e] + b[e];
    store<T, VEC>(y + base + j, out);
  });
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

// Teams walk rows blockIdx.x · teams + team, stepping by gridDim.x · teams; partials:
// [dweight, dbias][gridDim.x][dim].
template <typename T, int VEC>
__global__ void __launch_bounds__(kMaxRowThreads)
    layernorm_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ weight,
                              const float* __restrict__ mean, const float* __restrict__ rstd, const T* __restrict__ dresidual,
                              T* __restrict__ dx, float* __restrict__ partials, int rows, int dim) {
  wait_previous_kernel();
  extern __shared__ float column_acc[];
  constexpr int R = kRowVecs<VEC>;
  float w[R][VEC], dw[R][VEC] = {}, db[R][VEC] = {};
  for_row_vecs<VEC>(dim, [&](int k, int j) { load<T, VEC>(weight + j, w[k]); });
  for (int first = blockIdx.x * blockDim.y; first < rows; first += gridDim.x * blockDim.y) {
    const int row = first + threadIdx.y;
    const bool live = row < rows;
    const int64_t base = static_cast<int64_t>(row) * dim;
    const float mu = live ? mean[row] : 0.0f;
    const float r = live ? rstd[row] : 0.0f;
    float xhat[R][VEC], dyv[R][VEC];
    float sums[2] = {0.0f, 0.0f};  // Σ g, Σ g · xhat
    for_row_vecs<VEC>(dim, [&](int k, int j) {
      if (!live) return;
      load<T, VEC>(x + base + j, xhat[k]);
      load<T, VEC>(dy + base + j, dyv[k]);
#pragma unroll
      for (int e = 0; e < VEC; e++) {
        xhat[k][e] = (xhat[k][e] - mu) * r;
        const float g = dyv[k][e] * w[k][e];
        sums[0] += g;
        sums[1] += g * xhat[k][e];
      }
    });
    team_sum(sums);
    if (!live) continue;
    const float mean_g = sums[0] / dim, mean_gx = sums[1] / dim;
    for_row_vecs<VEC>(dim, [&](int k, int j) {
      float out[VEC];
      load<T, VEC>(dresidual + base + j, out);
#pragma unroll
      for (int e = 0; e < VEC; e++) {
        out[e] += r * (dyv[k][e] * w[k][e] - mean_g - xhat[k][e] * mean_gx);
        dw[k][e] += dyv[k][e] * xhat[k][e];
        db[k][e] += dyv[k][e];
      }
      store<T, VEC>(dx + base + j, out);
    });
  }
  const int64_t grid_dim = static_cast<int64_t>(gridDim.x) * dim;
  write_block_columns<VEC>(dw, dim, partials + static_cast<int64_t>(blockIdx.x) * dim, column_acc);
  write_block_columns<VEC>(db, dim, partials + grid_dim + static_cast<int64_t>(blockIdx.x) * dim, column_acc);
}

}  // namespace mdlm

MDLM_OP(layernorm) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"x", "weight", "bias", "y"});
  const int rows = call.i32("rows"), dim = call.i32("dim");
  const float eps = static_cast<float>(call.num("eps"));
  const void* x = call.arg("x").ptr;
  const void* weight = call.arg("weight").ptr;
  const void* bias = call.arg("bias").ptr;
  void* y = call.arg("y").ptr;
  const bool aligned = all_aligned16({x, weight, bias, y});
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vec<T>(aligned && dim % kVec16<T> == 0, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      const RowLayout layout = row_layout<VEC>(call, dim, 256);
      check_cuda(launch_kernel(layernorm_kernel<T, VEC>, blocks_for(rows, layout.rows_per_block), layout.block(), 0, call.stream,
          static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<const T*>(bias), static_cast<T*>(y),
          static_cast<float*>(call.arg("mean").ptr), static_cast<float*>(call.arg("rstd").ptr), rows, dim, eps), call.op.c_str());
    });
  });
}

MDLM_OP(layernorm_backward) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"dy", "x", "weight", "dresidual", "dx", "dweight", "dbias"});
  const int rows = call.i32("rows"), dim = call.i32("dim");
  const void* dy = call.arg("dy").ptr;
  const void* x = call.arg("x").ptr;
  const void* weight = call.arg("weight").ptr;
  const void* dresidual = call.arg("dresidual").ptr;
  void* dx = call.arg("dx").ptr;
  const bool aligned = all_aligned16({dy, x, weight, dresidual, dx});
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vec<T>(aligned && dim % kVec16<T> == 0, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      launch_row_backward<T>(call, layernorm_backward_kernel<T, VEC>, row_layout<VEC>(call, dim, 512), rows, dim,
                             static_cast<T*>(call.arg("dweight").ptr), static_cast<T*>(call.arg("dbias").ptr), false,
                             static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<const T*>(weight),
                             static_cast<const float*>(call.arg("mean").ptr), static_cast<const float*>(call.arg("rstd").ptr),
                             static_cast<const T*>(dresidual), static_cast<T*>(dx));
    });
  });
}
