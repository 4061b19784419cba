// fp8_scale_update: the delayed recipe's step-end update (src/ops/fp8_scale_update.ts), one
// invocation per site of record [sites, history_len + 2] (`meta` is a reserved word in WGSL): the
// scale from the history's maximum (lib/float8), scaleInv its inverse, the history rolled by one
// with history[0] = 0. The maximum is taken on bits: values that are positive f32s (sign clear,
// not NaN) order as their bits do, and only those can exceed the starting 0.
//!import lib/float8

struct Params {
  sites: u32,
  history_len: u32,
  margin: u32,
}

override E5M2: bool = false;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> record: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let site = gid.x + gid.y * nwg.x * 64u;
  if (site >= params.sites) { return; }
  let h = params.history_len;
  let o = site * (h + 2u);
  var amax = 0u;
  for (var i = 0u; i < h; i++) {
    let v = bitcast<u32>(record[o + i]);
    amax = select(amax, v, v > amax && v <= 0x7f800000u);
  }
  let scale = fp8_pow2_scale(amax, E5M2, params.margin, bitcast<u32>(record[o + h]));
  for (var i = h - 1u; i > 0u; i--) { record[o + i] = record[o + i - 1u]; }
  record[o] = 0.0;
  record[o + h] = bitcast<f32>(scale);
  record[o + h + 1u] = bitcast<f32>(fp8_inverse_pow2(scale));
}
