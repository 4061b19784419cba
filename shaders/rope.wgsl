// Rotary position embedding, Hugging Face Llama convention ("rotate_half"): in every head of
// [B, T, H, D], element i < D/2 pairs with i + D/2 and the pair turns by pos * inv_freq[i],
// inv_freq[i] = base^(-2i/D). rope turns by +angle, rope_backward by -angle (its transpose:
// attention_backward's q and k gradients, kernels/attention.ts).
// A thread takes four pairs (a vec4 of each half) of one token and walks the heads, so the angles
// are computed once per token. Tokens are x_stride4 and y_stride4 vec4s apart in src and dst
// (more than the heads where a fused q/k/v projection is read or written a part at a time), and
// the first is x_offset4 vec4s into src (matmul_rope's k part of its projection, where a view
// would have to start at a 256-byte boundary); rotate 0 copies (c = 1, s = 0).
//
// Angles follow HF's fp32 arithmetic, angle = f32(pos) * f32(inv_freq). inv_freq is exp2 of an
// exponent split so that its fractional part is exact (so it is as good as the GPU's exp2, a few
// ulp), and the angle is reduced to [-pi, pi] in three steps before cos/sin, which are only
// accurate there, so large positions lose nothing more.
struct Params {
  tokens: u32,
  heads: u32,
  half_dim: u32,
  // 2 * log2(base) / D split as exp_hi (12 significant bits, so i * exp_hi is exact for i < 4096)
  // plus exp_lo
  exp_hi: f32,
  exp_lo: f32,
  x_stride4: u32,
  y_stride4: u32,
  rotate: u32,
  x_offset4: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<vec4f>;
@group(0) @binding(2) var<storage, read> positions: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<vec4f>;

const INV_TWO_PI: f32 = 0.15915494309189535;
// 2 pi = TWO_PI_1 + TWO_PI_2 + TWO_PI_3, the first two with 9 significant bits, so k * TWO_PI_1
// and k * TWO_PI_2 are exact for |k| < 2^15 (angles up to ~2e5 rad).
const TWO_PI_1: f32 = 6.28125;
const TWO_PI_2: f32 = 0.001934051513671875;
const TWO_PI_3: f32 = 1.2556658930407139e-6;

fn inv_freq(i: vec4f) -> vec4f {
  let e = i * params.exp_hi;
  let whole = floor(e);
  let frac = (e - whole) + i * params.exp_lo;
  return ldexp(exp2(-frac), -vec4i(whole));
}

fn reduce_angle(a: vec4f) -> vec4f {
  let k = round(a * INV_TWO_PI);
  return ((a - k * TWO_PI_1) - k * TWO_PI_2) - k * TWO_PI_3;
}

fn rotate(gid: vec3u, nwg: vec3u, sign: f32) {
  let item = gid.x + gid.y * nwg.x * 256u;
  let quads = params.half_dim / 4u;
  if (item >= params.tokens * quads) {
    return;
  }
  let token = item / quads;
  let q = item % quads;
  let i = vec4f(vec4u(4u * q) + vec4u(0u, 1u, 2u, 3u));
  let angle = reduce_angle(f32(positions[token]) * inv_freq(i));
  let turn = params.rotate != 0u;
  let c = select(vec4f(1.0), cos(angle), turn);
  let s = select(vec4f(0.0), sin(angle) * sign, turn);
  for (var h = 0u; h < params.heads; h++) {
    let xlo = params.x_offset4 + token * params.x_stride4 + h * 2u * quads + q;
    let ylo = token * params.y_stride4 + h * 2u * quads + q;
    let x1 = src[xlo];
    let x2 = src[xlo + quads];
    dst[ylo] = x1 * c - x2 * s;
    dst[ylo + quads] = x2 * c + x1 * s;
  }
}

@compute @workgroup_size(256)
fn rope(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  rotate(gid, nwg, 1.0);
}

@compute @workgroup_size(256)
fn rope_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  rotate(gid, nwg, -1.0);
}
