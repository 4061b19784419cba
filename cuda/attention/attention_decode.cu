// attention_decode: one block per (query head, sequence); one query against the first `length`
// cached keys, positions kv_stride elements apart (src/ops/attention_decode.ts,
// shaders/attention_decode.wgsl). The scaled scores live
// in dynamic shared memory (length floats), then their max and the sum of exponentials are block
// reductions in a fixed order, then threads over the head dimension sum the weighted values.
// f32 or bf16 storage, f32 math.
#include <cfloat>

#include "../common.cuh"

namespace mdlm {

constexpr int kDecodeThreads = 128;

// Fixed-order block reduction of v (max or sum); every thread gets the result.
__device__ float block_reduce(float v, bool take_max, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = take_max ? fmaxf(v, w) : v + w;
  }
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kDecodeThreads / 32; w++) r = take_max ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();  // scratch is reused by the next reduction
  return r;
}

template <typename T>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, int heads,
                            int kv_heads, int head_dim, int max_len, int length, int kv_stride, float scale) {
  extern __shared__ float scores[];
  __shared__ float scratch[kDecodeThreads / 32];
  const int h = blockIdx.x, b = blockIdx.y;
  const int g = h / (heads / kv_heads);
  const T* qh = q + (static_cast<int64_t>(b) * heads + h) * head_dim;
  const auto kv = [&](int j) { return (static_cast<int64_t>(b) * max_len + j) * kv_stride + static_cast<int64_t>(g) * head_dim; };
  float m = -FLT_MAX;
  for (int j = threadIdx.x; j < length; j += kDecodeThreads) {
    const T* kj = k + kv(j);
    float s = 0.0f;
    for (int d = 0; d < head_dim; d++) s = fmaf(to_float(qh[d]), to_float(kj[d]), s);
    s *= scale;
    scores[j] = s;
    m = fmaxf(m, s);
  }
  const float row_max = block_reduce(m, true, scratch);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < length; j += kDecodeThreads) {
    const float p = __expf(scores[j] - row_max);
    scores[j] = p;
    sum += p;
  }
  const float total = block_reduce(sum, false, scratch);  // its barrier also publishes scores[]
  T* oh = out + (static_cast<int64_t>(b) * heads + h) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kDecodeThreads) {
    float acc = 0.0f;
    for (int j = 0; j < length; j++) acc = fmaf(scores[j], to_float(v[kv(j) + d]), acc);
    oh[d] = from_float<T>(acc / total);
  }
}

}  // namespace mdlm

MDLM_OP(attention_decode) {
  using namespace mdlm;
  const DType dtype = float_dtype_of(call, {"q"_arg, "k"_arg, "v"_arg, "out"_arg});
  const int batch = call.i32("batch"_attr), heads = call.i32("heads"_attr), kv_heads = call.i32("kvHeads"_attr), head_dim = call.i32("headDim"_attr);
  const int max_len = call.i32("maxLen"_attr), length = call.i32("length"_attr), kv_stride = call.i32("kvStride"_attr);
  const float scale = static_cast<float>(call.num("scale"_attr));
  const size_t smem = sizeof(float) * length;  // at most MAX_DECODE_KEYS (4096) floats: 16 KiB
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    check_cuda(launch_kernel(attention_decode_kernel<T>, dim3(heads, batch), kDecodeThreads, smem, call.stream,
        static_cast<const T*>(call.arg("q"_arg).ptr), static_cast<const T*>(call.arg("k"_arg).ptr), static_cast<const T*>(call.arg("v"_arg).ptr),
        static_cast<T*>(call.arg("out"_arg).ptr), heads, kv_heads, head_dim, max_len, length, kv_stride, scale), "attention_decode_kernel");
  });
}
