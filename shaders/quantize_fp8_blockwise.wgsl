// quantize_fp8_blockwise: out = fp8(x · scale) with a scale per block of out
// (src/ops/quantize_fp8_blockwise.ts), x [rows, cols] f32, out [rows, cols] (or [cols, rows] with
// TRANSPOSE) as fp8 codes packed four to a u32 word, low byte first; scale_inv the blocks'
// factors 1 / scale in the declaration's layout (1x128: [ceil(C / 128), roundUp(R, 4)]; SQUARE,
// 128x128: [ceil(R / 128), roundUp(ceil(C / 128), 4)], for out [R, C]), its padding 0. Two passes:
// - scales: a workgroup per entry of scale_inv. A block's threads take its elements in turn, each
//   keeping the largest |x| as the u32 bits of a non-negative f32 (NaN skipped, an infinity
//   counts: for those, integer order is float order), combined in a workgroup atomic; then
//   scale = pow2Scale(amax) (1 for a block of zeros) and its inverse, on bits (lib/float8).
// - quantize: one invocation per word of out, so no two write the same word; each byte's scale
//   2^k from its block's factor 2^-k, and fp8(x · 2^k) on bits, exact. A last word shared with
//   whatever follows out keeps the bytes past out's end.
//!import lib/float8

struct Params {
  rows: u32,
  cols: u32,
  margin: u32,
  // scale_inv's second dimension (its row stride) and its element count
  scale_cols: u32,
  scale_count: u32,
}

override E5M2: bool = false;      // out is E5M2 (else E4M3)
override TRANSPOSE: bool = false; // out is xᵀ
override SQUARE: bool = false;    // 128x128 blocks (else 1x128)

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> scale_inv: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<u32>;

const L = 128u;

var<workgroup> group_max: atomic<u32>;

// out's rows and columns.
fn out_rows() -> u32 { return select(params.rows, params.cols, TRANSPOSE); }
fn out_cols() -> u32 { return select(params.cols, params.rows, TRANSPOSE); }

// x's element at out[r, c].
fn value(r: u32, c: u32) -> f32 {
  if (TRANSPOSE) { return x[c * params.cols + r]; }
  return x[r * params.cols + c];
}

// The index in scale_inv of out[r, c]'s block factor.
fn scale_index(r: u32, c: u32) -> u32 {
  if (SQUARE) { return (r / L) * params.scale_cols + c / L; }
  return (c / L) * params.scale_cols + r;
}

@compute @workgroup_size(256)
fn scales(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let s = wid.x + wid.y * nwg.x;
  if (s >= params.scale_count) { return; }
  let R = out_rows();
  let C = out_cols();
  // The block: out rows [r0, r0 + h), columns [c0, c0 + w); past the edges, padding.
  var r0 = s % params.scale_cols;
  var c0 = (s / params.scale_cols) * L;
  var h = 1u;
  if (SQUARE) {
    r0 = (s / params.scale_cols) * L;
    c0 = (s % params.scale_cols) * L;
    h = min(L, R - min(r0, R));
  }
  if (r0 >= R || c0 >= C) {
    if (lid == 0u) { scale_inv[s] = 0.0; }
    return;
  }
  let w = min(L, C - c0);
  var m = 0u;
  for (var e = lid; e < h * w; e += 256u) {
    let a = bitcast<u32>(value(r0 + e / w, c0 + e % w)) & 0x7fffffffu;
    m = select(m, a, a > m && a <= 0x7f800000u);
  }
  atomicMax(&group_max, m);
  workgroupBarrier();
  if (lid == 0u) {
    let scale = fp8_pow2_scale(atomicLoad(&group_max), E5M2, params.margin, 0x3f800000u);
    scale_inv[s] = bitcast<f32>(fp8_inverse_pow2(scale));
  }
}

@compute @workgroup_size(256)
fn quantize(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let w = gid.x + gid.y * nwg.x * 256u;
  let n = params.rows * params.cols;
  if (4u * w >= n) { return; }
  let C = out_cols();
  let count = min(n - 4u * w, 4u);
  var word = 0u;
  for (var e = 0u; e < count; e++) {
    let j = 4u * w + e;
    let r = j / C;
    let c = j % C;
    // factor 2^-k: its exponent field is 127 - k
    let k = 127 - i32((bitcast<u32>(scale_inv[scale_index(r, c)]) >> 23u) & 0xffu);
    word |= fp8_encode(bitcast<u32>(value(r, c)), k, E5M2, true) << (8u * e);
  }
  if (count < 4u) {
    word |= out[w] & (0xffffffffu << (8u * count));
  }
  out[w] = word;
}
