// Device and launch helpers shared by the kernels: float storage types (f32, bf16) with f32 math,
// vectorised loads and stores, dtype and vector-width dispatch, warp reductions, sigmoids.
#pragma once

#include <cuda_bf16.h>
#ifdef WARP_EMULATOR
#include "warp_emu.h"  // before the kernels: their CUDA names become the emulator's
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "op.h"

namespace mdlm {

// rope's inverse frequency of pair i < head_dim / 2: f32(base^(−2i/D)) computed in double, as
// src/ops/rope.ts's reference (rope's kernel on the device; the attention backward's turn on the host).
__host__ __device__ inline float rope_inv_freq(double base, int i, int head_dim) {
  return static_cast<float>(pow(base, -2.0 * i / head_dim));
}

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float v) { return __float2bfloat16_rn(v); }

// Elements of T in one 16-byte access: the vector width of the vectorised kernels.
template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// N consecutive elements of T, aligned so that a copy is one N * sizeof(T)-byte access.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// How long an access's line should stay in L2: the usual policy, or evicted first (PTX's .cs:
// bytes read for the last time, or written and not read again soon), so that a stream through L2
// does not push out lines that are still to be read.
enum class L2 { keep, evict_first };

// The unsigned type of 2, 4, 8 or 16 bytes that __ldcs and __stcs take.
template <int Bytes>
struct BitsOf;
template <>
struct BitsOf<2> { using type = unsigned short; };
template <>
struct BitsOf<4> { using type = unsigned; };
template <>
struct BitsOf<8> { using type = uint2; };
template <>
struct BitsOf<16> { using type = uint4; };

template <L2 hint, typename P>
__device__ __forceinline__ P load_pack(const P* p) {
  if constexpr (hint == L2::keep) {
    return *p;
  } else {
    using U = typename BitsOf<sizeof(P)>::type;
    const U bits = __ldcs(reinterpret_cast<const U*>(p));
    P v;
    memcpy(&v, &bits, sizeof(P));
    return v;
  }
}

template <L2 hint, typename P>
__device__ __forceinline__ void store_pack(P* p, const P& v) {
  if constexpr (hint == L2::keep) {
    *p = v;
  } else {
    using U = typename BitsOf<sizeof(P)>::type;
    U bits;
    memcpy(&bits, &v, sizeof(P));
    __stcs(reinterpret_cast<U*>(p), bits);
  }
}

// Loads p[0, N) (aligned to N elements) as floats.
template <typename T, int N, L2 hint = L2::keep>
__device__ __forceinline__ void load(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = load_pack<hint>(reinterpret_cast<const Pack<T, N>*>(p));
#pragma unroll
  for (int i = 0; i < N; i++) out[i] = to_float(pk.v[i]);
}

// Stores in[0, N) to p (aligned to N elements), rounding to T.
template <typename T, int N, L2 hint = L2::keep>
__device__ __forceinline__ void store(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; i++) pk.v[i] = from_float<T>(in[i]);
  store_pack<hint>(reinterpret_cast<Pack<T, N>*>(p), pk);
}

template <typename T>
__device__ __forceinline__ float load1(const T* p) { return to_float(*p); }

template <typename T>
__device__ __forceinline__ void store1(T* p, float v) { *p = from_float<T>(v); }

// Sum over the 32 lanes of a warp. The xor butterfly adds the same two values in every lane
// at every step (a + b == b + a bitwise), so all lanes hold the same bits: deterministic.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// sigmoid(z) and sigmoid(-z) = 1 - sigmoid(z), both from exp(-|z|) in (0, 1]: no overflow for any
// z, and no cancellation in 1 - sigmoid(z) for large z. __expf is a few ulp (plus |z| · 2^-24
// relative from its argument scaling), far inside the ops' 1e-5 tolerance.
struct Sigmoids {
  float pos, neg;
};

__device__ __forceinline__ Sigmoids sigmoids(float z) {
  const float e = __expf(-fabsf(z));
  const float r = __fdividef(1.0f, 1.0f + e);
  return z >= 0.0f ? Sigmoids{r, e * r} : Sigmoids{e * r, r};
}

// ---- host side ----

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<float>) or f(TypeTag<bf16>) for the call's float dtype.
template <typename F>
void with_float_type(DType d, F&& f) {
  switch (d) {
    case DType::f32: f(TypeTag<float>{}); break;
    case DType::bf16: f(TypeTag<bf16>{}); break;
    default: throw std::runtime_error(std::string("no float kernel instance for dtype ") + dtype_name(d));
  }
}

// Calls f(std::integral_constant<int, kVec16<T>>) when `vectorised`, else f(integral_constant<int, 1>).
template <typename T, typename F>
void with_vec(bool vectorised, F&& f) {
  if (vectorised) f(std::integral_constant<int, kVec16<T>>{});
  else f(std::integral_constant<int, 1>{});
}

// The call's float dtype (f32 or bf16; OpError otherwise), which every named float argument must
// share. op.h's float_dtype is asked about the first name only: it takes one name.
inline DType float_dtype_of(const OpCall& call, const ArgName* names, size_t count) {
  const DType d = call.float_dtype(names[0], {DType::f32, DType::bf16});
  for (size_t i = 1; i < count; i++) {
    if (call.arg(names[i]).dtype != d) {
      throw OpError("BAD_DTYPE", call.op + ": argument '" + names[i].str + "' is " + dtype_name(call.arg(names[i]).dtype) +
                                     " but '" + names[0].str + "' is " + dtype_name(d));
    }
  }
  return d;
}

inline DType float_dtype_of(const OpCall& call, std::initializer_list<ArgName> names) {
  return float_dtype_of(call, names.begin(), names.size());
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline bool all_aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps) {
    if (!aligned16(p)) return false;
  }
  return true;
}

inline int sm_count(const OpCall& call) {
  if (call.device) return call.device->multiProcessorCount;
  int dev = 0, n = 0;
  check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  return n;
}

inline int round_up(int n, int m) { return (n + m - 1) / m * m; }

#ifndef WARP_EMULATOR
// kernel<<<grid, block, smem, stream>>>(args...); returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid, config.blockDim = block, config.dynamicSmemBytes = smem, config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}
#else
// On the warp emulator (one-dimensional blocks), the kernel run to its end.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t, Args&&... args) {
  ::emu::launch(kernel, grid, static_cast<int>(block.x), smem, std::forward<Args>(args)...);
  return cudaSuccess;
}
#endif

// --- ops that stand for others (matmul_swiglu, matmul_rope): a fused kernel where it applies,
// else the ops they stand for, one after another ---

// Whether a fused Hopper kernel may take the call: an sm_90 GPU with the Hopper kernels on
// (KernelSettings), bf16, every extent an int.
inline bool hopper_bf16(const OpCall& call, DType dtype, std::initializer_list<int64_t> extents) {
  return call.settings.hopper_kernels && call.device && call.device->major == 9 && dtype == DType::bf16 &&
         std::max(extents) <= std::numeric_limits<int>::max();
}

// numel elements of a's tensor from element `offset` on.
inline Arg arg_part(const Arg& a, int64_t offset, int64_t numel) {
  Arg part = a;
  part.ptr = static_cast<char*>(a.ptr) + offset * static_cast<int64_t>(dtype_bytes(a.dtype));
  part.numel = numel;
  return part;
}

// numel elements of dtype in the call's scratch (valid until the call's work has run).
inline Arg scratch_arg(const OpCall& call, DType dtype, int64_t numel) {
  Arg a;
  a.dtype = dtype;
  a.numel = numel;
  a.ptr = call.scratch->get((size_t)numel * dtype_bytes(dtype));
  return a;
}

// The registered op `op` with these arguments and numbers, on the call's stream, device and scratch.
inline void run_op(const OpCall& call, const char* op, std::initializer_list<std::pair<ArgName, Arg>> args,
                   std::initializer_list<std::pair<AttrName, double>> nums) {
  OpCall c = call;
  c.op = op;
  c.args.clear();
  c.nums.clear();
  c.strs.clear();
  for (const auto& [name, a] : args) c.args[name.str] = a;
  for (const auto& [name, v] : nums) c.nums[name.str] = v;
  find_launcher(op)(c);
}

// The matmul op: out [m][n] = op(a) · bᵀ (a [m][k], or [k][m] when trans_a; b [n][k]), written.
inline void run_matmul(const OpCall& call, const Arg& a, const Arg& b, const Arg& out, int64_t m, int64_t n, int64_t k, bool trans_a) {
  run_op(call, "matmul", {{"a"_arg, a}, {"b"_arg, b}, {"out"_arg, out}},
         {{"batch"_attr, 1}, {"m"_attr, (double)m}, {"n"_attr, (double)n}, {"k"_attr, (double)k}, {"transA"_attr, trans_a ? 1.0 : 0.0},
          {"transB"_attr, 1}, {"accumulate"_attr, 0}, {"outF32"_attr, 0}});
}

}  // namespace mdlm
