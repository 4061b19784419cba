// axpy: y += alpha * x, one element per thread (memory-bound; vectorising buys little here).
struct Params { n: u32, alpha: f32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < params.n) {
    y[i] = fma(params.alpha, x[i], y[i]);
  }
}
