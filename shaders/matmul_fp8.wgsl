// matmul_fp8: out (+)= (a · sa) · (b · sb)ᵀ (src/ops/matmul_fp8.ts), a [m, k] and b [n, k] fp8
// codes packed four to a u32 word (low byte first), sa and sb the dequantisation factors; out f32.
// With ACCUMULATE the product is added to out; with RESIDUAL (matmul_fp8_add) out = residual +
// the product (plain matmul_fp8 binds a placeholder there that it never reads).
//
// A_BLOCKS and B_BLOCKS say what an operand's factors scale: 0 the whole tensor (one factor),
// 1 each 1x128 block along k, 2 each 128x128 block (quantize_fp8_blockwise's layouts).
//
// Products of fp8 values are exact in f32, so the codes are decoded to f32 as they are loaded,
// summed in f32, and the sum is multiplied by sa · sb (powers of two: exact) once; with a blocked
// operand, each 128 of k are summed apart and their sum, times the two blocks' factors, added to
// the total as the block ends (the promotion FP8 GEMMs make at block boundaries). Decoding is a
// look-up in a table of the 256 codes of each operand's format, which the workgroup fills first
// (lib/float8): one decode a thread and operand instead of one per value loaded.
// - Blocks: one workgroup of 256 threads (16 x 16) computes a 64 x 64 block of out, a thread rows
//   4·ty + i and columns 4·tx + j (i, j < 4).
// - Steps of BK = 16 along k: each thread loads one word (4 consecutive k) of one row of a and of
//   b, decoded into k-major shared tiles of vec4s (vec4 column = 4 rows of out or 4 columns).
//   When k is a multiple of 4 every row starts on a word and a word in range is one load; else
//   (and past the edges) the bytes are read one by one, zero outside, so any m, n, k is correct.
//!import lib/float8

struct Params {
  m: u32,
  n: u32,
  k: u32,
}

override A_E5M2: bool = false;
override B_E5M2: bool = false;
override ACCUMULATE: bool = false;
override RESIDUAL: bool = false;
override A_BLOCKS: u32 = 0u;
override B_BLOCKS: u32 = 0u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read> a_scale_inv: array<f32>;
@group(0) @binding(4) var<storage, read> b_scale_inv: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
@group(0) @binding(6) var<storage, read> residual: array<f32>;

const BK = 16u;
const BM = 64u;
const BN = 64u;
const L = 128u; // a block's length along k
var<workgroup> tile_a: array<array<vec4f, 16>, BK>;
var<workgroup> tile_b: array<array<vec4f, 16>, BK>;
// the value of code c: a's at c, b's at 256 + c
var<workgroup> codes: array<f32, 512>;

// Word i of a, or of b when is_b.
fn word(is_b: bool, i: u32) -> u32 {
  if (is_b) { return b[i]; }
  return a[i];
}

// Byte i of word w of a (of b when is_b), decoded.
fn decode(is_b: bool, w: u32, i: u32) -> f32 {
  return codes[select(0u, 256u, is_b) + ((w >> (8u * i)) & 0xffu)];
}

// Values k0 .. k0 + 3 of row `row` of a (of b when is_b), decoded; zero past the edges.
fn load(is_b: bool, row: u32, k0: u32) -> vec4f {
  var v = vec4f(0.0);
  if (row >= select(params.m, params.n, is_b)) { return v; }
  let o = row * params.k + k0;
  if (params.k % 4u == 0u && k0 + 4u <= params.k) {
    let w = word(is_b, o / 4u);
    return vec4f(decode(is_b, w, 0u), decode(is_b, w, 1u), decode(is_b, w, 2u), decode(is_b, w, 3u));
  }
  for (var e = 0u; e < 4u; e++) {
    if (k0 + e < params.k) { v[e] = decode(is_b, word(is_b, (o + e) / 4u), (o + e) % 4u); }
  }
  return v;
}

// v rounded up to a multiple of 4 (the scale layouts' padding).
fn round4(v: u32) -> u32 { return (v + 3u) / 4u * 4u; }

// The factor of row `row` of a (of b when is_b) for k block kb.
fn factor(is_b: bool, row: u32, kb: u32) -> f32 {
  let blocks = select(A_BLOCKS, B_BLOCKS, is_b);
  let rows = select(params.m, params.n, is_b);
  var i = 0u;
  if (blocks == 1u) {
    i = kb * round4(rows) + row;
  } else if (blocks == 2u) {
    i = (row / L) * round4((params.k + L - 1u) / L) + kb;
  }
  if (is_b) { return b_scale_inv[i]; }
  return a_scale_inv[i];
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) t: u32) {
  let tx = t % 16u;
  let ty = t / 16u;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  // this thread's load: row t / 4 of the block, k offset 4 · (t % 4) within the step
  let lr = t / 4u;
  let lk = 4u * (t % 4u);
  codes[t] = bitcast<f32>(fp8_decode(t, A_E5M2));
  codes[256u + t] = bitcast<f32>(fp8_decode(t, B_E5M2));
  workgroupBarrier();
  let blocked = A_BLOCKS != 0u || B_BLOCKS != 0u;
  // acc[i]: row 4·ty + i, columns 4·tx .. 4·tx + 3: the sums over k (blocked: over this k block),
  // total[i] the blocks' scaled sums so far
  var acc = array<vec4f, 4>();
  var total = array<vec4f, 4>();
  for (var k0 = 0u; k0 < params.k; k0 += BK) {
    let va = load(false, m0 + lr, k0 + lk);
    let vb = load(true, n0 + lr, k0 + lk);
    for (var e = 0u; e < 4u; e++) {
      tile_a[lk + e][lr / 4u][lr % 4u] = va[e];
      tile_b[lk + e][lr / 4u][lr % 4u] = vb[e];
    }
    workgroupBarrier();
    for (var kk = 0u; kk < BK; kk++) {
      let av = tile_a[kk][ty];
      let bv = tile_b[kk][tx];
      for (var i = 0u; i < 4u; i++) { acc[i] = fma(vec4f(av[i]), bv, acc[i]); }
    }
    workgroupBarrier();
    if (blocked && ((k0 + BK) % L == 0u || k0 + BK >= params.k)) {
      let kb = k0 / L;
      var fb = vec4f(0.0);
      for (var j = 0u; j < 4u; j++) { fb[j] = factor(true, min(n0 + 4u * tx + j, params.n - 1u), kb); }
      for (var i = 0u; i < 4u; i++) {
        let fa = factor(false, min(m0 + 4u * ty + i, params.m - 1u), kb);
        total[i] = fma(acc[i], vec4f(fa) * fb, total[i]);
        acc[i] = vec4f(0.0);
      }
    }
  }

  let s = a_scale_inv[0] * b_scale_inv[0];
  for (var i = 0u; i < 4u; i++) {
    let row = m0 + 4u * ty + i;
    if (row >= params.m) { continue; }
    for (var j = 0u; j < 4u; j++) {
      let col = n0 + 4u * tx + j;
      if (col >= params.n) { continue; }
      let o = row * params.n + col;
      let v = select(acc[i][j] * s, total[i][j], blocked);
      if (ACCUMULATE) {
        out[o] += v;
      } else if (RESIDUAL) {
        out[o] = residual[o] + v;
      } else {
        out[o] = v;
      }
    }
  }
}
