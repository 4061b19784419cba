// philox: out[i] = philox4x32(counter = [i, step, rank, purpose], key = [keyLo, keyHi]).
//!import lib/philox

struct Params { blocks: u32, step: u32, rank: u32, purpose: u32, keyLo: u32, keyHi: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4u>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < params.blocks) {
    out[i] = philox4x32(vec4u(i, params.step, params.rank, params.purpose), vec2u(params.keyLo, params.keyHi));
  }
}
