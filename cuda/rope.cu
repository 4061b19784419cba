// Rotary position embedding, Hugging Face Llama convention ("rotate_half"): in each head of
// x [B, T, H, D], element i < D/2 pairs with i + D/2 and the pair turns by θ = pos · inv_freq[i],
// inv_freq[i] = base^(−2i/D):
//   y[i] = x[i] · cos θ − x[i + D/2] · sin θ,   y[i + D/2] = x[i + D/2] · cos θ + x[i] · sin θ.
// Positions [B, T] are an input (they restart at every packed document). Tokens are x_stride and
// y_stride elements apart (more than the heads where a fused q/k/v projection is read or written
// a part at a time); rotate false copies.
// Semantics: src/ops/rope.ts.
//
// The angle is the reference's to the bit: inv_freq = f32(pow(base, −2i/D)) in double, then
// θ = f32(pos) · inv_freq in f32 (one rounding of an exact product, as Math.fround does), and
// sincosf is accurate to ~1 ulp with a full range reduction.
#include "common.cuh"

namespace mdlm {

// Heads a thread turns with one set of angles. A thread per (token, VEC pairs) walking all of a
// token's heads leaves too few threads in flight for the memory; a few heads a thread keeps the
// sincosf work small.
constexpr int kRopeHeads = 4;

// One thread per (token, kRopeHeads heads, VEC pairs): the angles once, then those heads. inv_freq
// is one table a block in dynamic shared memory, head_dim / 2 floats (a double pow per pair and
// thread was most of the kernel's time).
template <typename T, int VEC>
__global__ void __launch_bounds__(256) rope_kernel(const T* __restrict__ src, const int* __restrict__ positions,
                                                   T* __restrict__ dst, int64_t tokens, int heads, int head_dim,
                                                   int64_t x_stride, int64_t y_stride, double base, float sign, bool rotate) {
  extern __shared__ float inv_freq[];
  const int half = head_dim / 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) inv_freq[i] = rope_inv_freq(base, i, head_dim);
  __syncthreads();
  const int groups = half / VEC;  // of VEC pairs per head
  const int per_token = (heads + kRopeHeads - 1) / kRopeHeads * groups;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= tokens * per_token) return;
  const int64_t token = item / per_token;
  const int rest = static_cast<int>(item - token * per_token);
  const int h0 = rest / groups * kRopeHeads, i0 = rest % groups * VEC;
  const float pos = static_cast<float>(positions[token]);
  float c[VEC], s[VEC];
#pragma unroll
  for (int e = 0; e < VEC; e++) {
    if (rotate) {
      sincosf(pos * inv_freq[i0 + e], &s[e], &c[e]);
      s[e] *= sign;
    } else {
      c[e] = 1.f, s[e] = 0.f;
    }
  }
  const T* in = src + token * x_stride + h0 * head_dim + i0;
  T* out = dst + token * y_stride + h0 * head_dim + i0;
  const int h_end = min(h0 + kRopeHeads, heads);
#pragma unroll
  for (int h = h0; h < h_end; h++, in += head_dim, out += head_dim) {
    float lo[VEC], hi[VEC], ylo[VEC], yhi[VEC];
    load<T, VEC>(in, lo);
    load<T, VEC>(in + half, hi);
#pragma unroll
    for (int e = 0; e < VEC; e++) {
      ylo[e] = lo[e] * c[e] - hi[e] * s[e];
      yhi[e] = hi[e] * c[e] + lo[e] * s[e];
    }
    store<T, VEC>(out, ylo);
    store<T, VEC>(out + half, yhi);
  }
}

void launch_rope(const OpCall& call, ArgName src_name, ArgName dst_name, float sign) {
  const DType dtype = float_dtype_of(call, {src_name, dst_name});
  const int64_t tokens = static_cast<int64_t>(call.i32("batch"_attr)) * call.i32("seqLen"_attr);
  const int heads = call.i32("heads"_attr), head_dim = call.i32("headDim"_attr);
  const double base = call.num("base"_attr);
  // token strides (elements; attributes absent: the heads), and rotate (absent: true)
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  const int64_t x_stride = call.has("xStride"_attr) ? static_cast<int64_t>(call.num("xStride"_attr)) : width;
  const int64_t y_stride = call.has("yStride"_attr) ? static_cast<int64_t>(call.num("yStride"_attr)) : width;
  const bool rotate = !call.has("rotate"_attr) || call.flag("rotate"_attr);
  const void* src = call.arg(src_name).ptr;
  void* dst = call.arg(dst_name).ptr;
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool strides16 = (x_stride * sizeof(T)) % 16 == 0 && (y_stride * sizeof(T)) % 16 == 0;
    with_vec<T>(all_aligned16({src, dst}) && strides16 && (head_dim / 2) % kVec16<T> == 0, [&](auto vec) {
      constexpr int VEC = decltype(vec)::value;
      const int64_t items = tokens * ((heads + kRopeHeads - 1) / kRopeHeads) * (head_dim / 2 / VEC);
      check_cuda(launch_kernel(rope_kernel<T, VEC>, blocks_for(items, 256), 256, sizeof(float) * (head_dim / 2), call.stream,
          static_cast<const T*>(src), static_cast<const int*>(call.arg("positions"_arg).ptr), static_cast<T*>(dst), tokens, heads,
          head_dim, x_stride, y_stride, base, sign, rotate), call.op.c_str());
    });
  });
}

}  // namespace mdlm

MDLM_OP(rope) { mdlm::launch_rope(call, "x"_arg, "y"_arg, 1.0f); }
