// scale: out = alpha * x; one vec4 per thread, the last vec4 masked lane by lane.
struct Params { n: u32, alpha: f32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4f>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * 256u;
  let first = 4u * i;
  if (first >= params.n) { return; }
  let y = params.alpha * x[i];
  if (first + 4u <= params.n) {
    out[i] = y;
  } else {
    for (var c = 0u; c < params.n - first; c++) { out[i][c] = y[c]; }
  }
}
