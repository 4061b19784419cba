// reduce: each output combines one segment of one row of x: x is [rows, cols], each row is cut
// into `segments` pieces of segLen (the last may be shorter); output o = row * segments + seg.
// SPAN threads cooperate on an output (strided, coalesced loads), 256 / SPAN outputs per group.
// One segment per row reduces rows directly; several give partials that a second pass over
// [rows, segments] combines, so a single huge row still spreads over the whole GPU.
//!import lib/tree_reduce

struct Params {
  outputs: u32,
  cols: u32,
  segments: u32,
  segLen: u32,
  scale: f32, // multiplies each result (1 / cols for a mean)
}

override SPAN: u32 = 256u;
override MAP: u32 = 0u; // element map: 0 x, 1 x * x, 2 |x|
override USE_MAX: bool = false;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

fn mapped(e: f32) -> f32 {
  switch MAP {
    case 1u: { return e * e; }
    case 2u: { return abs(e); }
    default: { return e; }
  }
}

@compute @workgroup_size(256)
fn segments(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let o = (wid.x + wid.y * nwg.x) * (256u / SPAN) + lid / SPAN;
  let lane = lid % SPAN;
  // 0 is the identity for sums and for maxima of |x| (the only maximum taken).
  var acc = 0.0;
  if (o < params.outputs) {
    let row = o / params.segments;
    let begin = (o % params.segments) * params.segLen;
    let end = min(begin + params.segLen, params.cols);
    let base = row * params.cols;
    for (var j = begin + lane; j < end; j += SPAN) {
      let e = mapped(x[base + j]);
      acc = select(acc + e, max(acc, e), USE_MAX);
    }
  }
  let total = tree_reduce(lid, acc, SPAN, USE_MAX);
  if (o < params.outputs && lane == 0u) {
    out[o] = total * params.scale;
  }
}
