// cast: out = x converted between f32, f16, bf16 and fp8 (E4M3, E5M2), bit for bit as
// src/convert.ts (cuda/convert.cuh): decode to f32 (exact), encode with round to nearest even.
// Four elements a thread, as one vector access each side when both pointers allow it.
#include <type_traits>

#include "common.cuh"
#include "convert.cuh"

namespace mdlm {

// A dtype's storage word and its exact conversions from and to f32.
template <DType D>
struct Storage;
template <>
struct Storage<DType::f32> {
  using T = uint32_t;
  __device__ static float decode(T v) { return bits_f32(v); }
  __device__ static T encode(float x) { return f32_bits(x); }
};
template <>
struct Storage<DType::bf16> {
  using T = uint16_t;
  __device__ static float decode(T v) { return bf16_to_f32(v); }
  __device__ static T encode(float x) { return f32_to_bf16(x); }
};
template <typename Mini, typename Word>
struct MiniStorage {
  using T = Word;
  __device__ static float decode(T v) { return Mini::decode(v); }
  __device__ static T encode(float x) { return static_cast<T>(Mini::encode(x)); }
};
template <>
struct Storage<DType::f16> : MiniStorage<F16, uint16_t> {};
template <>
struct Storage<DType::fp8e4m3> : MiniStorage<E4M3, uint8_t> {};
template <>
struct Storage<DType::fp8e5m2> : MiniStorage<E5M2, uint8_t> {};

constexpr int kCastVec = 4;

template <DType FROM, DType TO, int VEC>
__global__ void __launch_bounds__(256) cast_kernel(const typename Storage<FROM>::T* x, typename Storage<TO>::T* out, int64_t n) {
  using In = typename Storage<FROM>::T;
  using Out = typename Storage<TO>::T;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (first + VEC <= n) {
    const Pack<In, VEC> a = *reinterpret_cast<const Pack<In, VEC>*>(x + first);
    Pack<Out, VEC> b;
#pragma unroll
    for (int e = 0; e < VEC; e++) b.v[e] = Storage<TO>::encode(Storage<FROM>::decode(a.v[e]));
    *reinterpret_cast<Pack<Out, VEC>*>(out + first) = b;
  } else {
    for (int64_t e = first; e < n; e++) out[e] = Storage<TO>::encode(Storage<FROM>::decode(x[e]));
  }
}

// Calls f(std::integral_constant<DType, d>) for a float storage dtype.
template <typename F>
void with_storage(const OpCall& call, DType d, F&& f) {
  switch (d) {
    case DType::f32: f(std::integral_constant<DType, DType::f32>{}); break;
    case DType::f16: f(std::integral_constant<DType, DType::f16>{}); break;
    case DType::bf16: f(std::integral_constant<DType, DType::bf16>{}); break;
    case DType::fp8e4m3: f(std::integral_constant<DType, DType::fp8e4m3>{}); break;
    case DType::fp8e5m2: f(std::integral_constant<DType, DType::fp8e5m2>{}); break;
    default: call.unsupported(std::string("casting ") + dtype_name(d));
  }
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace mdlm

MDLM_OP(cast) {
  using namespace mdlm;
  const Arg& x = call.arg("x"_arg);
  const Arg& out = call.arg("out"_arg);
  if (x.dtype == out.dtype) {
    // Every value of a format is exact in it: the cast is a copy (as the reference's roundTo).
    const size_t bytes = static_cast<size_t>(x.numel) * dtype_bytes(x.dtype);
    check_cuda(cudaMemcpyAsync(out.ptr, x.ptr, bytes, cudaMemcpyDeviceToDevice, call.stream), "cast: cudaMemcpyAsync");
    return;
  }
  with_storage(call, x.dtype, [&](auto from) {
    with_storage(call, out.dtype, [&](auto to) {
      constexpr DType FROM = decltype(from)::value, TO = decltype(to)::value;
      if constexpr (FROM != TO) {
        using In = typename Storage<FROM>::T;
        using Out = typename Storage<TO>::T;
        const auto* in_p = static_cast<const In*>(x.ptr);
        auto* out_p = static_cast<Out*>(out.ptr);
        const int64_t n = x.numel;
        const int threads = 256;
        if (aligned_to(in_p, kCastVec * sizeof(In)) && aligned_to(out_p, kCastVec * sizeof(Out))) {
          check_cuda(launch_kernel(cast_kernel<FROM, TO, kCastVec>, blocks_for((n + kCastVec - 1) / kCastVec, threads), threads, 0, call.stream, in_p, out_p, n), "cast_kernel");
        } else {
          check_cuda(launch_kernel(cast_kernel<FROM, TO, 1>, blocks_for(n, threads), threads, 0, call.stream, in_p, out_p, n), "cast_kernel");
        }
      }
    });
  });
}
