// cast between f32, the 16-bit floats (stored two per u32, low half first) and fp8 (four codes
// per u32, low byte first). Each thread converts four elements: a vec4 on the f32 side, a
// vec2<u32> on the 16-bit side, one u32 on the fp8 side; the last group is masked element by
// element, keeping the rest of a shared last word intact. Entries are named by their sides.
//!import lib/float16
//!import lib/float8

struct Params { n: u32 }

override FROM_BF16: bool = false; // the packed input is bf16 (else f16)
override TO_BF16: bool = false;   // the packed output is bf16 (else f16)
override FROM_E5M2: bool = false; // the fp8 input is E5M2 (else E4M3)
override TO_E5M2: bool = false;   // the fp8 output is E5M2 (else E4M3)

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x32: array<vec4f>;
@group(0) @binding(2) var<storage, read> x16: array<vec2u>;
@group(0) @binding(3) var<storage, read_write> out32: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> out16: array<vec2u>;
@group(0) @binding(5) var<storage, read> x8: array<u32>;
@group(0) @binding(6) var<storage, read_write> out8: array<u32>;

fn decode(h: u32) -> u32 {
  return select(f16_bits_to_f32(h), bf16_bits_to_f32(h), FROM_BF16);
}

fn encode(b: u32) -> u32 {
  return select(f32_to_f16_bits(b), f32_to_bf16_bits(b), TO_BF16);
}

fn unpack_bits(w: vec2u) -> vec4u {
  return vec4u(decode(w.x & 0xffffu), decode(w.x >> 16u), decode(w.y & 0xffffu), decode(w.y >> 16u));
}

fn store_packed(i: u32, b: vec4u) {
  let h = vec4u(encode(b.x), encode(b.y), encode(b.z), encode(b.w));
  let words = vec2u(h.x | (h.y << 16u), h.z | (h.w << 16u));
  let count = params.n - 4u * i;
  if (count >= 4u) {
    out16[i] = words;
    return;
  }
  for (var w = 0u; w < 2u; w++) {
    if (2u * w + 1u < count) {
      out16[i][w] = words[w];
    } else if (2u * w < count) {
      out16[i][w] = (out16[i][w] & 0xffff0000u) | h[2u * w];
    }
  }
}

fn unpack_fp8(w: u32) -> vec4u {
  return vec4u(fp8_decode(w & 0xffu, FROM_E5M2), fp8_decode((w >> 8u) & 0xffu, FROM_E5M2), fp8_decode((w >> 16u) & 0xffu, FROM_E5M2), fp8_decode(w >> 24u, FROM_E5M2));
}

// Rounded as src/convert.ts casts: E5M2 overflows to infinity, E4M3 saturates.
fn store_fp8(i: u32, b: vec4u) {
  var word = 0u;
  for (var e = 0u; e < 4u; e++) { word |= fp8_encode(b[e], 0, TO_E5M2, false) << (8u * e); }
  let count = params.n - 4u * i;
  if (count < 4u) {
    let keep = 0xffffffffu << (8u * count);
    word = (word & ~keep) | (out8[i] & keep);
  }
  out8[i] = word;
}

fn store_f32(i: u32, b: vec4u) {
  let v = bitcast<vec4f>(b);
  let count = params.n - 4u * i;
  if (count >= 4u) {
    out32[i] = v;
    return;
  }
  for (var c = 0u; c < count; c++) { out32[i][c] = v[c]; }
}

fn group_index(gid: vec3u, nwg: vec3u) -> u32 {
  return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn from_f32(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_packed(i, bitcast<vec4u>(x32[i]));
}

@compute @workgroup_size(256)
fn to_f32(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_f32(i, unpack_bits(x16[i]));
}

@compute @workgroup_size(256)
fn between_16(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_packed(i, unpack_bits(x16[i]));
}

@compute @workgroup_size(256)
fn f32_to_fp8(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_fp8(i, bitcast<vec4u>(x32[i]));
}

@compute @workgroup_size(256)
fn fp8_to_f32(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_f32(i, unpack_fp8(x8[i]));
}

@compute @workgroup_size(256)
fn b16_to_fp8(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_fp8(i, unpack_bits(x16[i]));
}

@compute @workgroup_size(256)
fn fp8_to_b16(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_packed(i, unpack_fp8(x8[i]));
}

@compute @workgroup_size(256)
fn between_fp8(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  store_fp8(i, unpack_fp8(x8[i]));
}
