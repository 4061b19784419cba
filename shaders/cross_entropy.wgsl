// cross_entropy: per row, lse = log sum_j exp(logits_j) and loss = weight * (lse - logits[target]),
// 0 where the target is ignored (< 0). cross_entropy_backward: dlogits = dloss * weight *
// (exp(logits - lse) - onehot(target)), 0 rows where ignored.
// Targets >= vocab are treated as ignored so no read goes out of bounds; the data loader
// validates token ids (the CPU reference throws on them).
//
// logits and logits4 are scalar and vec4 views of the same tensor (likewise dlogits): rows start
// at row * vocab, which need not be a multiple of 4.
struct Params { rows: u32, vocab: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> logits4: array<vec4f>;
@group(0) @binding(3) var<storage, read> targets: array<i32>;
@group(0) @binding(4) var<storage, read> weights: array<f32>;
@group(0) @binding(5) var<storage, read_write> loss: array<f32>;
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;
@group(0) @binding(7) var<storage, read> lse_saved: array<f32>;
@group(0) @binding(8) var<storage, read> dloss: array<f32>;
@group(0) @binding(9) var<storage, read_write> dlogits4: array<vec4f>;
@group(0) @binding(10) var<storage, read_write> dlogits: array<f32>;

const WG = 256u;
// Start of a running max: exp(LOWEST - m) is 0 for any real logit m, with no inf - inf.
const LOWEST = -3.4028234e38;

// A running (max, sum of exp(x - max)) over part of a row.
struct Online { m: f32, s: f32 }

fn merge(a: Online, b: Online) -> Online {
  let m = max(a.m, b.m);
  return Online(m, a.s * exp(a.m - m) + b.s * exp(b.m - m));
}

fn push1(a: Online, x: f32) -> Online {
  return merge(a, Online(x, 1.0));
}

fn push4(a: Online, v: vec4f) -> Online {
  let m = max(a.m, max(max(v.x, v.y), max(v.z, v.w)));
  return Online(m, a.s * exp(a.m - m) + dot(exp(v - vec4f(m)), vec4f(1.0)));
}

// The row's target if it is in [0, vocab), else -1 (ignored).
fn target_of(row: u32) -> i32 {
  let t = targets[row];
  return select(-1, t, t >= 0 && u32(t) < params.vocab);
}

var<workgroup> red_m: array<f32, WG>;
var<workgroup> red_s: array<f32, WG>;

// One workgroup per row: each thread keeps an online (max, sum) over a fixed stride of the row
// (scalar head up to the first 16-byte boundary, vec4 body, scalar tail), then a fixed-order tree
// merges the threads: deterministic.
@compute @workgroup_size(WG)
fn cross_entropy(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= params.rows) {
    return;
  }
  let start = row * params.vocab;
  let end = start + params.vocab;
  let body_start = min((start + 3u) & ~3u, end);
  let body_end = max(end & ~3u, body_start);
  var acc = Online(LOWEST, 0.0);
  for (var i = start + lid; i < body_start; i += WG) {
    acc = push1(acc, logits[i]);
  }
  for (var q = body_start / 4u + lid; q < body_end / 4u; q += WG) {
    acc = push4(acc, logits4[q]);
  }
  for (var i = body_end + lid; i < end; i += WG) {
    acc = push1(acc, logits[i]);
  }
  red_m[lid] = acc.m;
  red_s[lid] = acc.s;
  workgroupBarrier();
  for (var width = WG / 2u; width > 0u; width /= 2u) {
    if (lid < width) {
      let r = merge(Online(red_m[lid], red_s[lid]), Online(red_m[lid + width], red_s[lid + width]));
      red_m[lid] = r.m;
      red_s[lid] = r.s;
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let m = red_m[0];
    let log_s = log(red_s[0]);
    lse[row] = m + log_s;
    let t = target_of(row);
    var row_loss = 0.0;
    if (t >= 0) {
      // (m - logit) + log s: two non-negative terms, no cancellation when the target dominates.
      row_loss = weights[row] * ((m - logits[start + u32(t)]) + log_s);
    }
    loss[row] = row_loss;
  }
}

// exp(d) - 1 (WGSL has no expm1): at the target of a confident row exp(d) is close to 1 and
// the subtraction would keep few bits, so small |d| take the Taylor series (error < 1e-9 relative).
fn expm1(d: f32) -> f32 {
  if (abs(d) < 0.1) {
    return d * (1.0 + d / 2.0 * (1.0 + d / 3.0 * (1.0 + d / 4.0 * (1.0 + d / 5.0 * (1.0 + d / 6.0)))));
  }
  return exp(d) - 1.0;
}

// softmax - onehot at (row, col), scaled by dloss * weight; 0 for ignored rows.
fn dlogit(row: u32, col: u32, x: f32) -> f32 {
  let t = target_of(row);
  if (t < 0) {
    return 0.0;
  }
  let d = x - lse_saved[row];
  var g: f32;
  if (col == u32(t)) {
    g = expm1(d);
  } else {
    g = exp(d);
  }
  return dloss[row] * weights[row] * g;
}

// dlogit at (row, col + j) for j < 4, all in one row: the same values, one exp per vec4.
fn dlogit4(row: u32, col: u32, x: vec4f) -> vec4f {
  let t = target_of(row);
  if (t < 0) {
    return vec4f(0.0);
  }
  let d = x - lse_saved[row];
  var g = exp(d);
  let k = u32(t) - col; // wraps to a large value when the target lies before col
  if (k < 4u) {
    g[k] = expm1(d[k]);
  }
  return dloss[row] * weights[row] * g;
}

// Flat over the rows * vocab elements: vec4 q holds elements 4q..4q+3, which straddle two rows
// only when vocab % 4 != 0 and the row ends inside it.
@compute @workgroup_size(WG)
fn cross_entropy_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let q = gid.x + gid.y * nwg.x * WG;
  if (q >= params.rows * params.vocab / 4u) {
    return;
  }
  let e = 4u * q;
  var row = e / params.vocab;
  var col = e - row * params.vocab;
  let x = logits4[q];
  if (col + 3u < params.vocab) {
    dlogits4[q] = dlogit4(row, col, x);
    return;
  }
  var g: vec4f;
  for (var j = 0u; j < 4u; j++) {
    g[j] = dlogit(row, col, x[j]);
    col += 1u;
    if (col == params.vocab) {
      col = 0u;
      row += 1u;
    }
  }
  dlogits4[q] = g;
}

// The last (rows * vocab) % 4 elements, which dlogits4 cannot reach.
@compute @workgroup_size(4)
fn cross_entropy_backward_tail(@builtin(local_invocation_index) lid: u32) {
  let n = params.rows * params.vocab;
  let e = (n & ~3u) + lid;
  if (e < n) {
    let row = e / params.vocab;
    dlogits[e] = dlogit(row, e - row * params.vocab, logits[e]);
  }
}
