// grad_norm, second pass: one workgroup sums the partial sums of squares (from reduce.wgsl) in a
// fixed order and writes [norm · gradScale, gradScale · clip scale], so the optimizer can undo a
// loss scale and clip without a host round-trip.
//!import lib/tree_reduce

struct Params {
  count: u32,
  maxNorm: f32, // 0: no clipping
  clipEps: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> partials: array<f32>;
@group(0) @binding(2) var<storage, read> gradScale: array<f32>; // 1 / the loss scale (1 without one)
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn finalize(@builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var j = lid; j < params.count; j += 256u) { acc += partials[j]; }
  let sumsq = tree_reduce(lid, acc, 256u, false);
  if (lid == 0u) {
    let g = gradScale[0];
    let norm = sqrt(sumsq) * g;
    out[0] = norm;
    out[1] = g * select(1.0, min(1.0, params.maxNorm / (norm + params.clipEps)), params.maxNorm > 0.0);
  }
}
