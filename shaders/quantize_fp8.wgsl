// quantize_fp8: fp8(x · scale) per tensor (src/ops/quantize_fp8.ts), x [rows, cols] f32, into out
// [rows, cols] and/or out_t [cols, rows] as fp8 codes packed four to a u32 word, low byte first;
// record is the site's meta record [amax history, scale, scaleInv] (`meta` is a reserved word in
// WGSL). Three passes:
// - amax: threads take grid-strided elements, each keeping the largest |x| as the u32 bits of a
//   non-negative f32 (NaN skipped, an infinity counts): for those, integer order is float order,
//   so a max of bits is exact and its order free. Each group combines its threads' maxima in a
//   workgroup atomic, then atomicMax's the group's into amax_bits[0] (zeroed by the kernel): the
//   result is the same whatever order groups finish in.
// - set_scale, one invocation: with CURRENT, scale and scaleInv from the amax (lib/float8); then
//   history[0] rises to the amax.
// - quantize: one invocation per word of out (one layout: x's, or with TRANSPOSE xᵀ's, bound as
//   out), so no two write the same word; quantize_both: one invocation per word of out and the
//   same word of out_t, one dispatch for both layouts (the transposed reads stride over x as
//   TRANSPOSE's do). With a scale that is a normal power of two 2^k (every scale the recipes
//   make), fp8(x · 2^k) on bits, exact; any other scale multiplies in f32 first, as the reference
//   does. A last word shared with whatever follows an output keeps the bytes past its end.
//!import lib/float8

struct Params {
  rows: u32,
  cols: u32,
  history_len: u32,
  margin: u32,
}

override E5M2: bool = false;    // out is E5M2 (else E4M3)
override CURRENT: bool = false; // current scaling: the scale comes from this tensor's amax
override TRANSPOSE: bool = false; // quantize: out holds xᵀ [cols, rows]

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> amax_bits: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> record: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;
@group(0) @binding(5) var<storage, read_write> out_t: array<u32>;

var<workgroup> group_max: atomic<u32>;

fn linear_id(gid: vec3u, nwg: vec3u) -> u32 {
  return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn amax(@builtin(global_invocation_id) gid: vec3u, @builtin(local_invocation_index) lid: u32, @builtin(num_workgroups) nwg: vec3u) {
  let n = params.rows * params.cols;
  var m = 0u;
  for (var i = gid.x; i < n; i += nwg.x * 256u) {
    let a = bitcast<u32>(x[i]) & 0x7fffffffu;
    m = select(m, a, a > m && a <= 0x7f800000u);
  }
  atomicMax(&group_max, m);
  workgroupBarrier();
  if (lid == 0u) { atomicMax(&amax_bits[0], atomicLoad(&group_max)); }
}

// a > m as f32 values, or m is NaN (reference: amax > history[0] || isNaN(history[0])), for a the
// bits of a non-negative f32 or +infinity.
fn raises(a: u32, m: u32) -> bool {
  let mag = m & 0x7fffffffu;
  if (mag > 0x7f800000u) { return true; }
  if (m != mag) { return a != 0u || mag != 0u; } // m negative (a > m unless both are zeros)
  return a > m;
}

@compute @workgroup_size(1)
fn set_scale() {
  let a = atomicLoad(&amax_bits[0]);
  let h = params.history_len;
  if (CURRENT) {
    let s = fp8_pow2_scale(a, E5M2, params.margin, bitcast<u32>(record[h]));
    record[h] = bitcast<f32>(s);
    record[h + 1u] = bitcast<f32>(fp8_inverse_pow2(s));
  }
  if (raises(a, bitcast<u32>(record[0]))) { record[0] = bitcast<f32>(a); }
}

// The scale as quantisation applies it: a normal power of two 2^k multiplies on the exponent
// bits (pow2); anything else is an f32 product (k = 0).
struct Scaling {
  value: f32,
  k: i32,
  pow2: bool,
}

fn scaling() -> Scaling {
  let scale = record[params.history_len];
  let sbits = bitcast<u32>(scale);
  let sexp = (sbits >> 23u) & 0xffu;
  let pow2 = (sbits & 0x807fffffu) == 0u && sexp != 0u && sexp != 0xffu;
  return Scaling(scale, select(0, i32(sexp) - 127, pow2), pow2);
}

// Word w of x's codes (transposed: of xᵀ's, [cols, rows]), n = rows · cols: its min(n - 4w, 4)
// codes, low byte first, the bytes past them 0.
fn codes(w: u32, n: u32, transposed: bool, s: Scaling) -> u32 {
  let count = min(n - 4u * w, 4u);
  var word = 0u;
  for (var e = 0u; e < count; e++) {
    let j = 4u * w + e;
    let src = select(j, (j % params.rows) * params.cols + j / params.rows, transposed);
    let v = x[src];
    let b = select(bitcast<u32>(v * s.value), bitcast<u32>(v), s.pow2);
    word |= fp8_encode(b, s.k, E5M2, true) << (8u * e);
  }
  return word;
}

// The bytes of word w that lie past the codes' end (a ragged last word): kept as they are.
fn tail_mask(w: u32, n: u32) -> u32 {
  let count = n - 4u * w;
  return select(0u, 0xffffffffu << (8u * count), count < 4u);
}

@compute @workgroup_size(256)
fn quantize(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let w = linear_id(gid, nwg);
  let n = params.rows * params.cols;
  if (4u * w >= n) { return; }
  var word = codes(w, n, TRANSPOSE, scaling());
  let keep = tail_mask(w, n);
  if (keep != 0u) { word |= out[w] & keep; }
  out[w] = word;
}

@compute @workgroup_size(256)
fn quantize_both(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let w = linear_id(gid, nwg);
  let n = params.rows * params.cols;
  if (4u * w >= n) { return; }
  let s = scaling();
  var word = codes(w, n, false, s);
  var word_t = codes(w, n, true, s);
  let keep = tail_mask(w, n);
  if (keep != 0u) {
    word |= out[w] & keep;
    word_t |= out_t[w] & keep;
  }
  out[w] = word;
  out_t[w] = word_t;
}
