// quantize_fp8_blockwise: out = fp8(x · scale) with a scale per 1x128 or 128x128 block of out (x
// [rows, cols], or xᵀ with transpose), each from its block's amax, and scaleInv the factors in
// cuBLASLt's block-scaled layout, as src/ops/quantize_fp8_blockwise.ts (cuda/fp8.cuh's arithmetic,
// bit for bit). Two passes on the call's stream, any sizes (partial blocks at the edges):
// - the factors: a warp per 1x128 block of the plain layout (128 consecutive elements of a row);
//   for the blocks 128 rows of x tall (1x128 transposed: a column of x; 128x128 either way), a
//   block of 128 threads per strip of 128 x 128 elements of x, a thread a column (a warp reads 32
//   consecutive elements of a row at each step), the columns' maxima combined for a 128x128
//   block. scale = pow2Scale(amax) (1 for a block of zeros), factor = its inverse; the kernels
//   write the layout's padding (0) too. amax = max |x| with NaN ignored (fmaxf drops a NaN
//   operand; an infinity counts), the same bits in any order.
// - the quantisation, each element with its block's scale (the factor's exact inverse): the plain
//   layout 16 elements a thread (one 16-byte store of codes) when a row holds whole runs of 16 on
//   16-byte boundaries (a run then lies in one block), else element by element; the transposed
//   one through shared memory in tiles of 128 rows by 64 columns of x (each inside one block row
//   and column), read and written in whole lines.
// x is read twice, as quantize_fp8's current scaling reads it.
#include <algorithm>

#include "common.cuh"
#include "fp8.cuh"
#include "reduce.cuh"

namespace mdlm {
namespace {

constexpr int kL = 128;            // a block's length
constexpr int kThreads = 256;
constexpr int kVec = 16;           // elements a thread quantises at once in the plain layout
constexpr int kTileRows = kFp8TileRows;  // rows of x a transposed tile holds (cuda/fp8.cuh)
constexpr int kTileCols = kFp8TileCols;  // columns of x a transposed tile holds
constexpr int kBlocksPerSm = 8;    // the grid-strided passes' blocks an SM

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr int64_t round4(int64_t v) { return (v + 3) / 4 * 4; }

__device__ __forceinline__ float block_factor(float amax, int max_exp, int margin) {
  return inverse_pow2(pow2_scale(amax, max_exp, margin, 1.0f));
}

// 1x128 blocks of the plain layout: a warp per entry of scale_inv ([ceil(cols / 128), ld = round4(rows)]),
// grid-strided; lane l takes elements 4l .. 4l + 3 of the block (one load with VEC).
template <typename T, bool VEC>
__global__ void __launch_bounds__(kThreads) quantize_fp8_blockwise_row_scales_kernel(const T* __restrict__ x, float* __restrict__ scale_inv, int64_t rows,
                                                                        int64_t cols, int64_t ld, int max_exp, int margin) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  const int64_t entries = ceil_div(cols, kL) * ld;
  for (int64_t s = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32; s < entries; s += warps) {
    const int64_t r = s % ld, c = s / ld * kL + 4 * lane;
    float m = 0.0f;
    if (r < rows) {
      const T* src = x + r * cols + c;
      if (VEC && c + 4 <= cols) {
        float v[4];
        load<T, 4>(src, v);
        m = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
      } else {
        for (int j = 0; j < 4 && c + j < cols; j++) m = fmaxf(m, fabsf(load1(src + j)));
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0) scale_inv[s] = r < rows ? block_factor(m, max_exp, margin) : 0.0f;
  }
}

// Blocks 128 rows of x tall: a block of kL threads per strip of x rows [r0, r0 + 128) and columns
// [c0, c0 + 128), grid-strided; thread t takes column c0 + t. Without SQUARE (1x128 transposed:
// out row c, its 128-column block r0 / 128) a column is a block, its factor at
// (r0 / 128) · ld + c; with SQUARE the strip is one, its factor at (r0 / 128) · ld + c0 / 128, or
// transposed (c0 / 128) · ld + r0 / 128. ld is scale_inv's row length; each strip writes the
// padding of its row of scale_inv that lies past it.
template <typename T, bool SQUARE, bool TRANSPOSE>
__global__ void __launch_bounds__(kL) quantize_fp8_blockwise_strip_scales_kernel(const T* __restrict__ x, float* __restrict__ scale_inv, int64_t rows,
                                                                    int64_t cols, int64_t ld, int max_exp, int margin) {
  const int64_t strip_cols = ceil_div(cols, kL), strips = ceil_div(rows, kL) * strip_cols;
  for (int64_t t = blockIdx.x; t < strips; t += gridDim.x) {
    const int64_t rb = t / strip_cols, cb = t % strip_cols;
    const int64_t r0 = rb * kL, c0 = cb * kL, c = c0 + threadIdx.x, r1 = r0 + kL < rows ? r0 + kL : rows;
    float m = 0.0f;
    if (c < cols) {
      for (int64_t r = r0; r < r1; r++) m = fmaxf(m, fabsf(load1(x + r * cols + c)));
    }
    if constexpr (!SQUARE) {
      if (c < ld) scale_inv[rb * ld + c] = c < cols ? block_factor(m, max_exp, margin) : 0.0f;
    } else {
      m = block_combine<true>(m);
      if (threadIdx.x == 0) {
        // the row of scale_inv and this block's place in it, and that row's blocks
        const int64_t row = TRANSPOSE ? cb : rb, at = TRANSPOSE ? rb : cb, used = TRANSPOSE ? ceil_div(rows, kL) : strip_cols;
        scale_inv[row * ld + at] = block_factor(m, max_exp, margin);
        if (at == used - 1) {
          for (int64_t p = used; p < ld; p++) scale_inv[row * ld + p] = 0.0f;
        }
      }
      __syncthreads();  // block_combine's shared slots are reused by the next strip
    }
  }
}

// The scale of out[r, c] (out [R, C]): the exact inverse of its block's factor.
template <bool SQUARE>
__device__ __forceinline__ float scale_at(const float* scale_inv, int64_t r, int64_t c, int64_t ld) {
  return inverse_pow2(SQUARE ? scale_inv[r / kL * ld + c / kL] : scale_inv[c / kL * ld + r]);
}

// The plain layout: out[i] = fp8(x[i] · its block's scale), grid-strided; with VEC (cols % 16 ==
// 0, x and out on 16-byte boundaries) 16 elements at a time, one block's.
template <typename T, Fp8 F, bool VEC, bool SQUARE>
__global__ void __launch_bounds__(kThreads) quantize_fp8_blockwise_kernel(const T* __restrict__ x, uint8_t* __restrict__ out, int64_t rows,
                                                                      int64_t cols, const float* __restrict__ scale_inv, int64_t ld) {
  constexpr int N = VEC ? kVec : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t runs = rows * cols / N;
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; q < runs; q += stride) {
    const int64_t i = q * N, r = i / cols, c = i % cols;
    const float scale = scale_at<SQUARE>(scale_inv, r, c, ld);
    if constexpr (VEC) {
      float v[kVec];
      constexpr int W = kVec16<T>;
#pragma unroll
      for (int j = 0; j < kVec / W; j++) load<T, W>(x + i + j * W, *reinterpret_cast<float(*)[W]>(v + j * W));
      uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; j++) w[j] = quantize_fp8x2<F>(v[4 * j], v[4 * j + 1], scale) | quantize_fp8x2<F>(v[4 * j + 2], v[4 * j + 3], scale) << 16;
      *reinterpret_cast<uint4*>(out + i) = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
      out[i] = static_cast<uint8_t>(quantize_fp8<F>(load1(x + i), scale));
    }
  }
}

// The transposed layout: out[c, r] = fp8(x[r, c] · scale), out [cols, rows], blocks along out's
// rows. Each block walks tiles of kTileRows x kTileCols of x (inside one 128-row block and one
// 128-column block of x): its threads quantise 4 x 4 patches of x (a row's four columns in one
// load with VEC_IN), write them to shared memory transposed, four rows' codes of a column a 32-bit
// word, and then store out's rows 16 bytes at a time (VEC_OUT: rows % 16 == 0 and out on a
// 16-byte boundary). Cells past the edges take 0 and are not stored.
template <typename T, Fp8 F, bool SQUARE, bool VEC_IN, bool VEC_OUT>
__global__ void __launch_bounds__(kThreads) quantize_fp8_blockwise_transposed_kernel(const T* __restrict__ x, uint8_t* __restrict__ out, int64_t rows,
                                                                                 int64_t cols, const float* __restrict__ scale_inv, int64_t ld) {
  constexpr int kPatchCols = kTileCols / 4;
  constexpr int kPatches = kTileRows / 4 * kPatchCols;
  __shared__ uint32_t tile[kFp8TileCols][kFp8TileWords];
  const int64_t tiles_c = (cols + kTileCols - 1) / kTileCols;
  const int64_t tiles = (rows + kTileRows - 1) / kTileRows * tiles_c;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = t / tiles_c * kTileRows, c0 = t % tiles_c * kTileCols;
    for (int p = threadIdx.x; p < kPatches; p += blockDim.x) {
      const int pr = p / kPatchCols * 4, pc = p % kPatchCols * 4;
      const int64_t c = c0 + pc;
      float scale[4];  // out row c + j's, in its column block r0 / 128
#pragma unroll
      for (int j = 0; j < 4; j++) scale[j] = c + j < cols ? scale_at<SQUARE>(scale_inv, c + j, r0, ld) : 1.0f;
      uint32_t w[4] = {0, 0, 0, 0};  // w[j]: column pc + j's codes, row pr + i in byte i
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int64_t r = r0 + pr + i;
        float v[4];
        load_fp8_patch_row<T, VEC_IN>(x, rows, cols, r, c, v);
#pragma unroll
        for (int j = 0; j < 4; j++) w[j] |= quantize_fp8<F>(v[j], scale[j]) << (8 * i);
      }
#pragma unroll
      for (int j = 0; j < 4; j++) tile[pc + j][pr / 4] = w[j];
    }
    __syncthreads();
    store_fp8_tile<VEC_OUT>(tile, out, rows, cols, r0, c0);
    __syncthreads();  // the tile is rewritten by the next iteration
  }
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace
}  // namespace mdlm

MDLM_OP(quantize_fp8_blockwise) {
  using namespace mdlm;
  const Arg& x = call.arg("x"_arg);
  auto* out = static_cast<uint8_t*>(call.arg("out"_arg).ptr);
  auto* scale_inv = static_cast<float*>(call.arg("scaleInv"_arg).ptr);
  const int64_t rows = call.i64("rows"_attr), cols = call.i64("cols"_attr);
  const bool transpose = call.flag("transpose"_attr);
  const int margin = call.i32("margin"_attr);
  const std::string& block = call.str("block"_attr);
  if (block != "1x128" && block != "128x128") call.unsupported("block '" + block + "'");
  const bool square = block == "128x128";
  const Fp8 format = fp8_format(call, "format"_attr);
  const int max_exp = fp8_max_exp(format);
  const DType dtype = call.float_dtype("x"_arg, {DType::f32, DType::bf16});
  // scale_inv's row length (src/ops/quantize_fp8_blockwise.ts's layout, for out [R, C])
  const int64_t R = transpose ? cols : rows, C = transpose ? rows : cols;
  const int64_t ld = square ? round4(ceil_div(C, kL)) : round4(R);
  const int64_t most_blocks = static_cast<int64_t>(sm_count(call)) * kBlocksPerSm;
  const auto grid = [&](int64_t items, int64_t per_block) { return static_cast<unsigned>(std::max<int64_t>(1, std::min(most_blocks, ceil_div(items, per_block)))); };
  with_float_type(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* xp = static_cast<const T*>(x.ptr);
    // the factors
    if (!square && !transpose) {
      const bool vec = cols % 4 == 0 && aligned_to(xp, 4 * sizeof(T));
      const auto kernel = vec ? quantize_fp8_blockwise_row_scales_kernel<T, true> : quantize_fp8_blockwise_row_scales_kernel<T, false>;
      check_cuda(launch_kernel(kernel, grid(ceil_div(cols, kL) * ld, kThreads / 32), kThreads, 0, call.stream, xp, scale_inv, rows, cols, ld, max_exp, margin),
                 "quantize_fp8_blockwise_row_scales_kernel");
    } else {
      const auto kernel = !square ? quantize_fp8_blockwise_strip_scales_kernel<T, false, false>
                          : transpose ? quantize_fp8_blockwise_strip_scales_kernel<T, true, true>
                                      : quantize_fp8_blockwise_strip_scales_kernel<T, true, false>;
      check_cuda(launch_kernel(kernel, grid(ceil_div(rows, kL) * ceil_div(cols, kL), 1), kL, 0, call.stream, xp, scale_inv, rows, cols, ld, max_exp, margin),
                 "quantize_fp8_blockwise_strip_scales_kernel");
    }
    // the codes
    with_fp8(format, [&](auto f) {
      constexpr Fp8 F = decltype(f)::value;
      const auto run = [&](auto sq) {
        constexpr bool SQ = decltype(sq)::value;
        const float* factors = scale_inv;
        if (transpose) {
          const int64_t tiles = ceil_div(rows, kTileRows) * ceil_div(cols, kTileCols);
          const bool vec_in = cols % 4 == 0 && aligned_to(xp, 4 * sizeof(T)), vec_out = rows % 16 == 0 && aligned16(out);
          const auto launch = [&](auto kernel) {
            check_cuda(launch_kernel(kernel, grid(tiles, 1), kThreads, 0, call.stream, xp, out, rows, cols, factors, ld), "quantize_fp8_blockwise_transposed_kernel");
          };
          if (vec_in && vec_out) launch(quantize_fp8_blockwise_transposed_kernel<T, F, SQ, true, true>);
          else if (vec_in) launch(quantize_fp8_blockwise_transposed_kernel<T, F, SQ, true, false>);
          else if (vec_out) launch(quantize_fp8_blockwise_transposed_kernel<T, F, SQ, false, true>);
          else launch(quantize_fp8_blockwise_transposed_kernel<T, F, SQ, false, false>);
        } else {
          const bool vec = cols % kVec == 0 && aligned16(xp) && aligned16(out);
          const auto kernel = vec ? quantize_fp8_blockwise_kernel<T, F, true, SQ> : quantize_fp8_blockwise_kernel<T, F, false, SQ>;
          check_cuda(launch_kernel(kernel, grid(rows * cols / (vec ? kVec : 1), kThreads), kThreads, 0, call.stream, xp, out, rows, cols, factors, ld),
                     "quantize_fp8_blockwise_kernel");
        }
      };
      if (square) run(std::true_type{});
      else run(std::false_type{});
    });
  });
}
