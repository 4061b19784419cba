// embedding: gather table rows by id; embedding_backward: the deterministic scatter-add
// dtable[v] = Σ_{i : ids[i] = v} dout[i] in a fixed order, with no float atomics: positions are
// sorted by id with a stable LSD radix sort (8-bit digits: per-tile histograms -> one scan ->
// stable scatter, as shaders/embedding.wgsl), then each vocab row sums its positions in sorted
// order, a long row's full chunks of 64 through partial sums. Out-of-range ids read nothing: the
// gather writes zeros, the sort keys them `vocab`, which no row claims. f32 or bf16 storage; sums
// in f32. With `accumulate` the sums are added to dtable, which is f32 with `outF32` (the master
// gradient of a bf16 model).
#include "reduce.cuh"

namespace mdlm {

constexpr int kTile = 256;  // threads a block = keys a sort tile = radix buckets
constexpr int kRadixBits = 8;
constexpr int kScanThreads = 1024, kScanItems = 8;  // radix_scan_kernel: 8192 counts a round
constexpr int kRowsPerBlock = 16;  // vocab rows a row_sum block: one round of bound searches for 16 rows
constexpr int kChunk = 64;         // sorted positions a chunk sum covers

template <typename T, int VEC>
__global__ void __launch_bounds__(256) embedding_kernel(const int32_t* __restrict__ ids, const T* __restrict__ table, T* __restrict__ out, int64_t tokens,
                                                        int vocab, int dim) {
  const int vecs = dim / VEC;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= tokens * vecs) return;
  const int64_t i = e / vecs;
  const int c = static_cast<int>(e % vecs) * VEC;
  const int32_t id = ids[i];
  Pack<T, VEC> v;
  if (id >= 0 && id < vocab) {
    v = *reinterpret_cast<const Pack<T, VEC>*>(table + static_cast<int64_t>(id) * dim + c);
  } else {
#pragma unroll
    for (int k = 0; k < VEC; k++) v.v[k] = from_float<T>(0.0f);
  }
  *reinterpret_cast<Pack<T, VEC>*>(out + i * dim + c) = v;
}

// keys = ids (out of range -> vocab), vals = positions.
__global__ void __launch_bounds__(kTile) sort_keys_kernel(const int32_t* __restrict__ ids, uint32_t* __restrict__ keys, uint32_t* __restrict__ vals, int tokens,
                                                          int vocab) {
  const int i = blockIdx.x * kTile + threadIdx.x;
  if (i >= tokens) return;
  const int32_t id = ids[i];
  keys[i] = id >= 0 && id < vocab ? static_cast<uint32_t>(id) : static_cast<uint32_t>(vocab);
  vals[i] = static_cast<uint32_t>(i);
}

__device__ __forceinline__ uint32_t digit_of(uint32_t key, int shift) { return (key >> shift) & (kTile - 1); }

// tile_counts[digit · tiles + tile] = how many keys of the tile have that digit (integer atomics:
// the count does not depend on their order).
__global__ void __launch_bounds__(kTile) radix_histogram_kernel(const uint32_t* __restrict__ keys, uint32_t* __restrict__ tile_counts, int tokens, int tiles,
                                                                int shift) {
  __shared__ uint32_t hist[kTile];
  hist[threadIdx.x] = 0;
  __syncthreads();
  const int i = blockIdx.x * kTile + threadIdx.x;
  if (i < tokens) atomicAdd(&hist[digit_of(keys[i], shift)], 1u);
  __syncthreads();
  tile_counts[threadIdx.x * tiles + blockIdx.x] = hist[threadIdx.x];
}

// Exclusive scan of the n = kTile · tiles counts, digit-major, in place, in one block: rounds of
// kScanThreads · kScanItems counts, each thread a run of kScanItems consecutive counts, the
// rounds chained by their totals. (Thread d walking digit d's tiles alone would be slow: its
// reads 256 B apart and one after another.)
__global__ void __launch_bounds__(kScanThreads) radix_scan_kernel(uint32_t* __restrict__ counts, int n) {
  uint32_t carry = 0;
  for (int base = 0; base < n; base += kScanThreads * kScanItems) {
    const int first = base + static_cast<int>(threadIdx.x) * kScanItems;
    uint32_t v[kScanItems];
    uint32_t own = 0;
#pragma unroll
    for (int i = 0; i < kScanItems; i++) {
      v[i] = first + i < n ? counts[first + i] : 0u;
      own += v[i];
    }
    uint32_t round_total;
    uint32_t run = carry + block_inclusive_scan<kScanThreads>(own, round_total) - own;
#pragma unroll
    for (int i = 0; i < kScanItems; i++) {
      if (first + i < n) counts[first + i] = run;
      run += v[i];
    }
    carry += round_total;
    __syncthreads();  // the scan's shared partials are read before the next round writes them
  }
}

// Stable: a key's place within its tile is the number of equal digits before it in the tile.
__global__ void __launch_bounds__(kTile) radix_scatter_kernel(const uint32_t* __restrict__ keys_in, const uint32_t* __restrict__ vals_in,
                                                              const uint32_t* __restrict__ tile_counts, uint32_t* __restrict__ keys_out,
                                                              uint32_t* __restrict__ vals_out, int tokens, int tiles, int shift) {
  __shared__ uint32_t digits[kTile];
  const int i = blockIdx.x * kTile + threadIdx.x;
  const bool valid = i < tokens;
  const uint32_t key = valid ? keys_in[i] : 0;
  const uint32_t digit = valid ? digit_of(key, shift) : kTile;  // kTile matches no real digit
  digits[threadIdx.x] = digit;
  __syncthreads();
  if (!valid) return;
  uint32_t rank = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); j++) rank += digits[j] == digit;
  const uint32_t dest = tile_counts[digit * tiles + blockIdx.x] + rank;
  keys_out[dest] = key;
  vals_out[dest] = vals_in[i];
}

// First index of sorted keys[0, n) that is >= v.
__device__ uint32_t lower_bound(const uint32_t* keys, uint32_t n, uint32_t v) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (keys[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// acc += Σ dout[positions[q]] (column block c) over q in [lo, hi), in order.
template <typename T, int VEC>
__device__ __forceinline__ void add_positions(const uint32_t* positions, const T* dout, uint32_t lo, uint32_t hi, int dim, int c, float (&acc)[VEC]) {
  for (uint32_t q = lo; q < hi; q++) {
    float v[VEC];
    load<T, VEC>(dout + static_cast<int64_t>(positions[q]) * dim + c, v);
#pragma unroll
    for (int k = 0; k < VEC; k++) acc[k] += v[k];
  }
}

// A long row (the [MASK] id of a diffusion batch holds half the tokens) would leave one thread
// summing thousands of positions: the sorted positions are cut into chunks of kChunk, and every
// full chunk inside one row's run is summed first, by a block of its own.
// chunk_sums[c] = Σ dout[positions[q]], q in [c·kChunk, (c + 1)·kChunk), for chunks of one real row;
// other chunks are never read.
template <typename T, int VEC>
__global__ void __launch_bounds__(128) embedding_chunk_sum_kernel(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ positions,
                                                                  const T* __restrict__ dout, float* __restrict__ chunk_sums, int vocab, int dim) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kChunk;
  if (keys[first] != keys[first + kChunk - 1] || keys[first] >= static_cast<uint32_t>(vocab)) return;
  for (int c = threadIdx.x * VEC; c < dim; c += blockDim.x * VEC) {
    float acc[VEC] = {};
    add_positions<T, VEC>(positions, dout, static_cast<uint32_t>(first), static_cast<uint32_t>(first + kChunk), dim, c, acc);
    store<float, VEC>(chunk_sums + blockIdx.x * static_cast<int64_t>(dim) + c, acc);
  }
}

// kRowsPerBlock vocab rows a block; threads run over (row, vector of columns). A row's sum is its
// positions in sorted (increasing) order, with the full chunks inside its run taken from
// chunk_sums: the same order on every run, so the same bits. dout is T, dtable TO.
template <typename T, typename TO, int VEC>
__global__ void __launch_bounds__(256) embedding_row_sum_kernel(const uint32_t* __restrict__ keys, const uint32_t* __restrict__ positions,
                                                                const T* __restrict__ dout, const float* __restrict__ chunk_sums, TO* __restrict__ dtable,
                                                                int tokens, int vocab, int dim, bool accumulate) {
  __shared__ uint32_t bounds[kRowsPerBlock + 1];
  const int first = blockIdx.x * kRowsPerBlock;
  const int count = min(kRowsPerBlock, vocab - first);
  if (static_cast<int>(threadIdx.x) <= count) bounds[threadIdx.x] = lower_bound(keys, tokens, first + threadIdx.x);
  __syncthreads();
  const int vecs = dim / VEC;
  for (int item = threadIdx.x; item < count * vecs; item += blockDim.x) {
    const int r = item / vecs, c = (item % vecs) * VEC;
    const uint32_t lo = bounds[r], hi = bounds[r + 1];
    // Accumulating, a row no token holds stays as it is: a 124M step's batch holds a fraction of
    // the vocabulary, and the f32 table is 154 MB to read and write back.
    if (accumulate && lo == hi) continue;
    TO* dst = dtable + static_cast<int64_t>(first + r) * dim + c;
    float acc[VEC] = {};
    if (accumulate) load<TO, VEC>(dst, acc);
    const uint32_t chunk_lo = (lo + kChunk - 1) / kChunk, chunk_hi = hi / kChunk;
    if (chunk_hi > chunk_lo) {
      add_positions<T, VEC>(positions, dout, lo, chunk_lo * kChunk, dim, c, acc);
      for (uint32_t k = chunk_lo; k < chunk_hi; k++) {
        float v[VEC];
        load<float, VEC>(chunk_sums + static_cast<int64_t>(k) * dim + c, v);
#pragma unroll
        for (int j = 0; j < VEC; j++) acc[j] += v[j];
      }
      add_positions<T, VEC>(positions, dout, chunk_hi * kChunk, hi, dim, c, acc);
    } else {
      add_positions<T, VEC>(positions, dout, lo, hi, dim, c, acc);
    }
    store<TO, VEC>(dst, acc);
  }
}

struct EmbeddingShape {
  int tokens, vocab, dim;
};

EmbeddingShape embedding_shape(const OpCall& call) { return {call.i32("tokens"_attr), call.i32("vocab"_attr), call.i32("dim"_attr)}; }

// Calls f(TypeTag<T>, integral_constant<VEC>) for the float args: 16-byte vectors when every row
// start is 16-byte aligned.
template <typename F>
void with_rows(const OpCall& call, std::initializer_list<ArgName> names, int dim, F&& f) {
  bool aligned = true;
  for (const ArgName n : names) aligned = aligned && aligned16(call.arg(n).ptr);
  with_float_type(float_dtype_of(call, names), [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_vec<T>(aligned && dim % kVec16<T> == 0, [&](auto vec) { f(tag, vec); });
  });
}

}  // namespace mdlm

MDLM_OP(embedding) {
  using namespace mdlm;
  const EmbeddingShape s = embedding_shape(call);
  with_rows(call, {"table"_arg, "out"_arg}, s.dim, [&](auto tag, auto vec) {
    using T = typename decltype(tag)::type;
    constexpr int VEC = decltype(vec)::value;
    const int64_t items = static_cast<int64_t>(s.tokens) * (s.dim / VEC);
    check_cuda(launch_kernel(embedding_kernel<T, VEC>, blocks_for(items, 256), 256, 0, call.stream, static_cast<const int32_t*>(call.arg("ids"_arg).ptr),
        static_cast<const T*>(call.arg("table"_arg).ptr),
        static_cast<T*>(call.arg("out"_arg).ptr), s.tokens, s.vocab, s.dim), "embedding_kernel");
  });
}

MDLM_OP(embedding_backward) {
  using namespace mdlm;
  const EmbeddingShape s = embedding_shape(call);
  const int tiles = (s.tokens + kTile - 1) / kTile;
  const auto scratch_u32 = [&](int64_t n) { return static_cast<uint32_t*>(call.scratch->get(sizeof(uint32_t) * n)); };
  uint32_t* keys = scratch_u32(s.tokens);
  uint32_t* vals = scratch_u32(s.tokens);
  uint32_t* keys_next = scratch_u32(s.tokens);
  uint32_t* vals_next = scratch_u32(s.tokens);
  uint32_t* tile_counts = scratch_u32(static_cast<int64_t>(kTile) * tiles);
  const int chunks = s.tokens / kChunk;  // full chunks only: a partial one is summed position by position
  float* chunk_sums = chunks > 0 ? static_cast<float*>(call.scratch->get(sizeof(float) * chunks * static_cast<size_t>(s.dim))) : nullptr;
  check_cuda(launch_kernel(sort_keys_kernel, tiles, kTile, 0, call.stream, static_cast<const int32_t*>(call.arg("ids"_arg).ptr), keys, vals, s.tokens, s.vocab), "sort_keys_kernel");
  // Keys run up to vocab itself (the out-of-range key).
  const int bits = 32 - __builtin_clz(static_cast<unsigned>(s.vocab));
  for (int shift = 0; shift < bits; shift += kRadixBits) {
    check_cuda(launch_kernel(radix_histogram_kernel, tiles, kTile, 0, call.stream, keys, tile_counts, s.tokens, tiles, shift), "radix_histogram_kernel");
    check_cuda(launch_kernel(radix_scan_kernel, 1, kScanThreads, 0, call.stream, tile_counts, kTile * tiles), "radix_scan_kernel");
    check_cuda(launch_kernel(radix_scatter_kernel, tiles, kTile, 0, call.stream, keys, vals, tile_counts, keys_next, vals_next, s.tokens, tiles, shift), "radix_scatter_kernel");
    std::swap(keys, keys_next);
    std::swap(vals, vals_next);
  }
  const Arg& dtable = call.arg("dtable"_arg);
  const bool accumulate = call.flag("accumulate"_attr);
  const DType dout_dtype = call.float_dtype("dout"_arg, {DType::f32, DType::bf16});
  // The TypeScript side has checked dtable's dtype: dout's own, or f32 with outF32.
  with_float_type(dout_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    with_float_type(dtable.dtype, [&](auto out_tag) {
      using TO = typename decltype(out_tag)::type;
      // VEC elements of T are 16 bytes; of TO up to 32 (bf16 in, f32 out): each pointer must be
      // aligned to its own vector size.
      constexpr int V = kVec16<T>;
      const bool vectorised = s.dim % V == 0 && aligned16(call.arg("dout"_arg).ptr) &&
                              reinterpret_cast<uintptr_t>(dtable.ptr) % (V * sizeof(TO)) == 0;
      with_vec<T>(vectorised, [&](auto vec) {
        constexpr int VEC = decltype(vec)::value;
        const T* dout = static_cast<const T*>(call.arg("dout"_arg).ptr);
        if (chunks > 0) {
          check_cuda(launch_kernel(embedding_chunk_sum_kernel<T, VEC>, chunks, 128, 0, call.stream, keys, vals, dout, chunk_sums, s.vocab, s.dim), "embedding_chunk_sum_kernel");
        }
        check_cuda(launch_kernel(embedding_row_sum_kernel<T, TO, VEC>, (s.vocab + kRowsPerBlock - 1) / kRowsPerBlock, 256, 0, call.stream,
            keys, vals, dout, chunk_sums, static_cast<TO*>(dtable.ptr), s.tokens, s.vocab, s.dim, accumulate), "embedding_row_sum_kernel");
      });
    });
  });
}
