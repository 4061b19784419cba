// Element-wise ops over n elements of float storage: NIN inputs, NOUT outputs, f32 math in a
// functor. One thread per 16-byte vector of every argument (when all are 16-byte aligned), the
// n % VEC tail one element per thread in the same launch.
#pragma once

#include <algorithm>
#include <array>

#include "common.cuh"

namespace mdlm {

template <typename T, int N>
struct Ptrs {
  T* p[N];
};

// F: __device__ void operator()(const float (&in)[NIN], float (&out)[NOUT]) const.
template <typename T, int VEC, int NIN, int NOUT, typename F>
__global__ void __launch_bounds__(256) map_kernel(Ptrs<const T, NIN> in, Ptrs<T, NOUT> out, int64_t n, F f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nvec = n / VEC;
  if (i < nvec) {
    float a[NIN][VEC], b[NOUT][VEC];
#pragma unroll
    for (int j = 0; j < NIN; j++) load<T, VEC>(in.p[j] + i * VEC, a[j]);
#pragma unroll
    for (int e = 0; e < VEC; e++) {
      float x[NIN], y[NOUT];
#pragma unroll
      for (int j = 0; j < NIN; j++) x[j] = a[j][e];
      f(x, y);
#pragma unroll
      for (int j = 0; j < NOUT; j++) b[j][e] = y[j];
    }
#pragma unroll
    for (int j = 0; j < NOUT; j++) store<T, VEC>(out.p[j] + i * VEC, b[j]);
  } else if (i - nvec < n - nvec * VEC) {
    const int64_t e = nvec * VEC + (i - nvec);
    float x[NIN], y[NOUT];
#pragma unroll
    for (int j = 0; j < NIN; j++) x[j] = load1(in.p[j] + e);
    f(x, y);
#pragma unroll
    for (int j = 0; j < NOUT; j++) store1(out.p[j] + e, y[j]);
  }
}

// Runs F over the named arguments (all 'float', all of the same numel).
template <int NIN, int NOUT, typename F>
void launch_map(const OpCall& call, const std::array<ArgName, NIN>& ins, const std::array<ArgName, NOUT>& outs, F f) {
  std::array<ArgName, NIN + NOUT> names;
  std::copy(ins.begin(), ins.end(), names.begin());
  std::copy(outs.begin(), outs.end(), names.begin() + NIN);
  bool aligned = true;
  for (const ArgName name : names) aligned = aligned && aligned16(call.arg(name).ptr);
  const int64_t n = call.arg(ins[0]).numel;
  with_float_type(float_dtype_of(call, names.data(), names.size()), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vec<T>(aligned, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      Ptrs<const T, NIN> in;
      Ptrs<T, NOUT> out;
      for (int j = 0; j < NIN; j++) in.p[j] = static_cast<const T*>(call.arg(ins[j]).ptr);
      for (int j = 0; j < NOUT; j++) out.p[j] = static_cast<T*>(call.arg(outs[j]).ptr);
      const int64_t nvec = n / VEC;
      const int threads = 256;
      check_cuda(launch_kernel(map_kernel<T, VEC, NIN, NOUT, F>, blocks_for(nvec + (n - nvec * VEC), threads), threads, 0, call.stream, in, out, n, f), call.op.c_str());
    });
  });
}

}  // namespace mdlm
