// quantize_fp8: fp8(x · scale) per tensor into out (x's layout, 'rows'), outT (transposed,
// 'cols') or both from one read of x ('both'), and the site's meta record [amax history, scale,
// scaleInv] updated, as src/ops/quantize_fp8.ts (cuda/fp8.cuh's arithmetic, bit for bit).
// Everything stays on the device, on the call's stream (a CUDA graph may capture it):
// - current scaling: an amax pass over x, each block's maximum into a scratch slot; then the
//   quantisation pass, each of whose blocks takes the maximum of the slots and the scale from it
//   (block 0 also writes scale and scaleInv to meta and raises history[0]);
// - delayed scaling: the quantisation pass alone, with the scale in meta, each block raising
//   history[0] to its own maximum (a compare-and-swap loop) as it ends.
// amax = max |x| with NaN ignored (fmaxf drops a NaN operand; an infinity counts): the same bits
// in any order. Under current scaling a block may read meta's scale while block 0 writes it: the
// old scale is read only where the amax gives none (zero or not finite), and block 0 then writes
// that same value back.
// The plain layout moves 16 elements a thread an access (one 16-byte store of codes); the
// transposed one goes through shared memory in tiles of 128 rows by 64 columns, read and written
// in whole lines of x and of outT; 'both' takes the tiled kernel, which also stores each row's
// codes of a tile to out straight from registers. Unaligned views and odd sizes take the same
// kernels with element-wise loads and stores at the edges.
#include <type_traits>

#include "common.cuh"
#include "fp8.cuh"
#include "reduce.cuh"

namespace mdlm {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 16;            // elements a thread takes at once in the plain layout
constexpr int kTileRows = kFp8TileRows;  // rows of x a transposed tile holds (cuda/fp8.cuh)
constexpr int kTileCols = kFp8TileCols;  // columns of x a transposed tile holds
constexpr int kBlocksPerSm = 8;     // the passes' grids: persistent blocks, one amax slot each

// The block's max |x| (the threads' v) into partials[blockIdx.x].
__device__ __forceinline__ void block_amax(float v, float* partials) {
  v = block_combine<true>(v);
  if (threadIdx.x == 0) partials[blockIdx.x] = v;
}

// *slot = max(*slot, m) (m where *slot is NaN), atomically against the other blocks.
__device__ __forceinline__ void raise_amax(float* slot, float m) {
  auto* word = reinterpret_cast<unsigned int*>(slot);
  unsigned int seen = *word;
  for (;;) {
    const float old = __uint_as_float(seen);
    if (!(m > old || old != old)) return;
    const unsigned int was = atomicCAS(word, seen, __float_as_uint(m));
    if (was == seen) return;
    seen = was;
  }
}

// How a quantisation pass scales and what it records in the site's meta record.
enum class Pass { delayed, current };

// The pass's scale, read or made by every block as it starts: delayed, meta's; current, from the
// maximum of the amax pass's `count` slots (block 0 writing it, its inverse and history[0]).
template <Pass P>
__device__ __forceinline__ float pass_scale(float* meta, int history_len, const float* partials, int count, int max_exp, int margin) {
  if constexpr (P == Pass::delayed) {
    return meta[history_len];
  } else {
    __shared__ float shared_scale;
    float m = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) m = fmaxf(m, partials[i]);
    m = block_combine<true>(m);
    if (threadIdx.x == 0) {
      const float scale = pow2_scale(m, max_exp, margin, meta[history_len]);
      shared_scale = scale;
      if (blockIdx.x == 0) {
        meta[history_len] = scale;
        meta[history_len + 1] = inverse_pow2(scale);
        if (m > meta[0] || meta[0] != meta[0]) meta[0] = m;
      }
    }
    __syncthreads();
    return shared_scale;
  }
}

// The end of a pass: delayed, history[0] raised to the block's max |x| (the threads' m).
template <Pass P>
__device__ __forceinline__ void pass_end(float m, float* meta) {
  if constexpr (P == Pass::delayed) {
    m = block_combine<true>(m);
    if (threadIdx.x == 0) raise_amax(meta, m);
  }
}

// What every quantisation kernel takes besides its operands.
struct PassArgs {
  float* meta;
  int history_len;
  const float* partials;  // current: the amax pass's slots
  int count;
  int max_exp, margin;
};

// x[i, i + N) as floats: 16-byte loads when N > 1 (x + i on a 16-byte boundary).
template <typename T, int N>
__device__ __forceinline__ void load_run(const T* x, float (&v)[N]) {
  if constexpr (N == 1) {
    v[0] = load1(x);
  } else {
    constexpr int W = kVec16<T>;
#pragma unroll
    for (int j = 0; j < N / W; j++) load<T, W>(x + j * W, *reinterpret_cast<float(*)[W]>(v + j * W));
  }
}

// Grid-stride over x[0, n): f(i, v) with v the VEC elements from i, then (VEC > 1) the last
// n % VEC elements one at a time.
template <typename T, int VEC, typename Fn>
__device__ __forceinline__ void for_each_run(const T* x, int64_t n, Fn&& f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t runs = n / VEC;
  for (int64_t r = first; r < runs; r += stride) {
    float v[VEC];
    load_run<T, VEC>(x + r * VEC, v);
    f(r * VEC, v);
  }
  if constexpr (VEC > 1) {
    const int64_t i = runs * VEC + first;
    if (i < n) {
      float v[1] = {load1(x + i)};
      f(i, v);
    }
  }
}

// partials[block] = max |x| over the block's share of x (current scaling's first pass).
template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) fp8_amax_kernel(const T* __restrict__ x, int64_t n, float* __restrict__ partials) {
  float m = 0.0f;
  for_each_run<T, VEC>(x, n, [&](int64_t, const auto& v) {
#pragma unroll
    for (int e = 0; e < std::extent_v<std::remove_reference_t<decltype(v)>>; e++) m = fmaxf(m, fabsf(v[e]));
  });
  block_amax(m, partials);
}

// The plain layout: out[i] = fp8(x[i] · scale).
template <typename T, Fp8 F, int VEC, Pass P>
__global__ void __launch_bounds__(kThreads) quantize_fp8_kernel(const T* __restrict__ x, uint8_t* __restrict__ out, int64_t n, PassArgs pa) {
  constexpr bool AMAX = P == Pass::delayed;
  const float scale = pass_scale<P>(pa.meta, pa.history_len, pa.partials, pa.count, pa.max_exp, pa.margin);
  float m = 0.0f;
  for_each_run<T, VEC>(x, n, [&](int64_t i, const auto& v) {
    constexpr int N = std::extent_v<std::remove_reference_t<decltype(v)>>;
    if constexpr (AMAX) {
#pragma unroll
      for (int e = 0; e < N; e++) m = fmaxf(m, fabsf(v[e]));
    }
    if constexpr (N == 1) {
      out[i] = static_cast<uint8_t>(quantize_fp8<F>(v[0], scale));
    } else {
      uint32_t w[N / 4];
#pragma unroll
      for (int j = 0; j < N / 4; j++) {
        w[j] = quantize_fp8x2<F>(v[4 * j], v[4 * j + 1], scale) | quantize_fp8x2<F>(v[4 * j + 2], v[4 * j + 3], scale) << 16;
      }
      static_assert(N == 16, "one 16-byte store");
      *reinterpret_cast<uint4*>(out + i) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  });
  pass_end<P>(m, pa.meta);
}

// The transposed layout: out_t[c, r] = fp8(x[r, c] · scale), out_t [cols, rows]; with out (not
// null) also out[r, c], the plain layout, from the same reads. Each block walks tiles of
// kTileRows x kTileCols: its threads quantise 4 x 4 patches of x (a row's four columns in one
// load with VEC_IN), write them to shared memory transposed, four rows' codes of a column a
// 32-bit word, and store each row's four codes to out (one 32-bit word with out_words: cols % 4
// == 0 and out on a 4-byte boundary); then they store out_t's rows 16 bytes at a time (VEC_OUT:
// rows % 16 == 0 and out_t on a 16-byte boundary). The word stride of a tile row (kTileRows / 4 +
// 1) keeps the reads conflict-free. Cells past the edges take 0 and are not stored.
template <typename T, Fp8 F, bool VEC_IN, bool VEC_OUT, Pass P>
__global__ void __launch_bounds__(kThreads) quantize_fp8_transposed_kernel(const T* __restrict__ x, uint8_t* __restrict__ out_t,
                                                                           uint8_t* __restrict__ out, bool out_words, int64_t rows, int64_t cols,
                                                                           PassArgs pa) {
  constexpr bool AMAX = P == Pass::delayed;
  constexpr int kPatchCols = kTileCols / 4;
  constexpr int kPatches = kTileRows / 4 * kPatchCols;
  __shared__ uint32_t tile[kFp8TileCols][kFp8TileWords];
  const float scale = pass_scale<P>(pa.meta, pa.history_len, pa.partials, pa.count, pa.max_exp, pa.margin);
  const int64_t tiles_c = (cols + kTileCols - 1) / kTileCols;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows * tiles_c;
  float m = 0.0f;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * kTileRows, c0 = t % tiles_c * kTileCols;
    for (int p = threadIdx.x; p < kPatches; p += blockDim.x) {
      const int pr = p / kPatchCols * 4, pc = p % kPatchCols * 4;
      const int64_t c = c0 + pc;
      uint32_t w[4] = {0, 0, 0, 0};  // w[j]: column pc + j's codes, row pr + i in byte i
      uint32_t row_codes[4];         // row pr + i's four codes, column pc + j in byte j
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + pr + i;
        float v[4];
        load_fp8_patch_row<T, VEC_IN>(x, rows, cols, r, c, v);
        if constexpr (AMAX) m = fmaxf(m, fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
        const uint32_t lo = quantize_fp8x2<F>(v[0], v[1], scale), hi = quantize_fp8x2<F>(v[2], v[3], scale);
        row_codes[i] = lo | hi << 16;
        w[0] |= (lo & 0xffu) << (8 * i);
        w[1] |= (lo >> 8) << (8 * i);
        w[2] |= (hi & 0xffu) << (8 * i);
        w[3] |= (hi >> 8) << (8 * i);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) tile[pc + j][pr / 4] = w[j];
      if (out != nullptr) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
          const int64_t r = r0 + pr + i;
          if (r >= rows) break;
          uint8_t* dst = out + r * cols + c;
          if (out_words && c + 4 <= cols) {
            *reinterpret_cast<uint32_t*>(dst) = row_codes[i];
          } else {
            for (int j = 0; j < 4 && c + j < cols; j++) dst[j] = static_cast<uint8_t>(row_codes[i] >> (8 * j));
          }
        }
      }
    }
    __syncthreads();
    store_fp8_tile<VEC_OUT>(tile, out_t, rows, cols, r0, c0);
    __syncthreads();  // the tile is rewritten by the next iteration
  }
  pass_end<P>(m, pa.meta);
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace
}  // namespace mdlm

MDLM_OP(quantize_fp8) {
  using namespace mdlm;
  const Arg& x = call.arg("x"_arg);
  auto* meta = static_cast<float*>(call.arg("meta"_arg).ptr);
  auto* out = static_cast<uint8_t*>(call.arg("out"_arg).ptr);
  auto* out_t = static_cast<uint8_t*>(call.arg("outT"_arg).ptr);
  const int64_t rows = call.i64("rows"_attr), cols = call.i64("cols"_attr), n = rows * cols;
  const int history_len = call.i32("historyLen"_attr), margin = call.i32("margin"_attr);
  const std::string& layout = call.str("layout"_attr);
  if (layout != "rows" && layout != "cols" && layout != "both") call.unsupported("layout '" + layout + "'");
  const std::string& scaling = call.str("scaling"_attr);
  if (scaling != "current" && scaling != "delayed") call.unsupported("scaling '" + scaling + "'");
  const bool current = scaling == "current";
  const Fp8 format = fp8_format(call, "format"_attr);
  const DType dtype = call.float_dtype("x"_arg, {DType::f32, DType::bf16});
  // A pass's grid: a thread an item (a run of elements, or kThreads per tile), up to kBlocksPerSm
  // blocks an SM, each with an amax slot in partials.
  const int64_t most_blocks = static_cast<int64_t>(sm_count(call)) * kBlocksPerSm;
  const auto grid = [&](int64_t thread_items) {
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(most_blocks, (thread_items + kThreads - 1) / kThreads)));
  };
  auto* partials = static_cast<float*>(call.scratch->get(sizeof(float) * most_blocks));
  PassArgs pa{meta, history_len, partials, 0, fp8_max_exp(format), margin};
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* xp = static_cast<const T*>(x.ptr);
    if (current) {
      const unsigned blocks = grid(aligned16(xp) ? n / kVec : n);
      const auto kernel = aligned16(xp) ? fp8_amax_kernel<T, kVec> : fp8_amax_kernel<T, 1>;
      check_cuda(launch_kernel(kernel, blocks, kThreads, 0, call.stream, xp, n, partials), "fp8_amax_kernel");
      pa.count = static_cast<int>(blocks);
    }
    with_fp8(format, [&](auto f) {
      constexpr Fp8 F = decltype(f)::value;
      const auto run = [&](auto pass) {
        constexpr Pass P = decltype(pass)::value;
        if (layout != "rows") {
          const int64_t tiles = (rows + kTileRows - 1) / kTileRows * ((cols + kTileCols - 1) / kTileCols);
          const unsigned blocks = grid(tiles * kThreads);
          const bool vec_in = cols % 4 == 0 && aligned_to(xp, 4 * sizeof(T)), vec_out = rows % 16 == 0 && aligned16(out_t);
          uint8_t* plain = layout == "both" ? out : nullptr;
          const bool out_words = plain != nullptr && cols % 4 == 0 && aligned_to(plain, 4);
          const auto launch = [&](auto kernel) {
            check_cuda(launch_kernel(kernel, blocks, kThreads, 0, call.stream, xp, out_t, plain, out_words, rows, cols, pa), "quantize_fp8_transposed_kernel");
          };
          if (vec_in && vec_out) launch(quantize_fp8_transposed_kernel<T, F, true, true, P>);
          else if (vec_in) launch(quantize_fp8_transposed_kernel<T, F, true, false, P>);
          else if (vec_out) launch(quantize_fp8_transposed_kernel<T, F, false, true, P>);
          else launch(quantize_fp8_transposed_kernel<T, F, false, false, P>);
        } else {
          const bool vec = aligned16(xp) && aligned16(out);
          const auto kernel = vec ? quantize_fp8_kernel<T, F, kVec, P> : quantize_fp8_kernel<T, F, 1, P>;
          check_cuda(launch_kernel(kernel, grid(vec ? n / kVec : n), kThreads, 0, call.stream, xp, out, n, pa), "quantize_fp8_kernel");
        }
      };
      if (current) run(std::integral_constant<Pass, Pass::current>{});
      else run(std::integral_constant<Pass, Pass::delayed>{});
    });
  });
}
