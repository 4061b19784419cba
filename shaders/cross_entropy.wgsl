// cross_entropy: per row, lse = log sum_j exp(logits_j) and loss = weight * (lse - logits[target]),
// 0 where the target is ignored (< 0). cross_entropy_backward: dlogits = dloss * weight *
// (exp(logits - lse) - onehot(target)), 0 rows where ignored.
// Targets >= vocab are treated as ignored so no read goes out of bounds; the data loader
// validates token ids (the CPU reference throws on them).
//
// logits and logits4 are scalar and vec4 views of the same tensor (likewise dlogits): rows start
// at row * vocab, which need not be a multiple of 4.
// lse = m + log s rounds away what the gradient needs where the target dominates (x ~ lse, so
// x - lse keeps only lse's f32 error: 2e-5 of the target's gradient at 1 x 3): the loss entry
// also writes each row's (m, log s) to lse_parts, and with LSE_PARTS the gradient takes x - lse
// as (x - m) - log s from parts_saved. (A TwoSum error term would not do: lavapipe's compiler
// treats float arithmetic as reassociable and folds it to 0.)
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
@group(0) @binding(11) var<storage, read_write> lse_parts: array<vec2f>;
@group(0) @binding(12) var<storage, read> parts_saved: array<vec2f>;

// cross_entropy_fused: parts_saved holds the loss entry's lse_parts (else it is not read).
override LSE_PARTS: bool = false;

const WG = 256u;
// Start of a running max: exp(LOWEST - m) is 0 for any real logit m, with no inf - inf.
const LOWEST = -3.4028234e38;

// A running max m over part of a row, and t = sum of exp(x - m) less the max's own term, 1: the
// other terms kept apart from the 1 that f32 would round them against. Where the target dominates
// they are all of log s (= log1p(t)) and of the target's gradient: s itself in f32 put a relative
// 2e-5 into that gradient at 1 x 3 (s = 1.0024). Empty: (LOWEST, -1).
struct Online { m: f32, t: f32 }

fn merge(a: Online, b: Online) -> Online {
  if (a.m >= b.m) {
    return Online(a.m, a.t + (b.t + 1.0) * exp(b.m - a.m));
  }
  return Online(b.m, b.t + (a.t + 1.0) * exp(a.m - b.m));
}

fn push1(a: Online, x: f32) -> Online {
  return merge(a, Online(x, 0.0));
}

fn push4(a: Online, v: vec4f) -> Online {
  let m4 = max(max(v.x, v.y), max(v.z, v.w));
  if (m4 <= a.m) {
    return Online(a.m, a.t + dot(exp(v - vec4f(a.m)), vec4f(1.0)));
  }
  // A new max: each element equal to it gives exactly 1, and one of those 1s is the max's own.
  let top = v == vec4f(m4);
  let below = dot(select(exp(v - vec4f(m4)), vec4f(0.0), top), vec4f(1.0));
  let ties = dot(select(vec4f(0.0), vec4f(1.0), top), vec4f(1.0)) - 1.0;
  return Online(m4, below + ties + (a.t + 1.0) * exp(a.m - m4));
}

// The row's target if it is in [0, vocab), else -1 (ignored).
fn target_of(row: u32) -> i32 {
  let t = targets[row];
  return select(-1, t, t >= 0 && u32(t) < params.vocab);
}

// log(1 + t) for t >= 0 (WGSL has no log1p). WGSL's log is only absolutely accurate on [0.5, 2]
// (2^-21: a relative 6e-5 of log s = 0.0086 where the target dominates, passed on to its
// gradient), so for t < 1 it is 2 atanh(u), u = t / (t + 2) <= 1/3, by its series to u^19 (a
// relative 1e-10 at most); above, log's relative error is a few ulp.
fn log1p(t: f32) -> f32 {
  if (t >= 1.0) {
    return log(1.0 + t);
  }
  let u = t / (t + 2.0);
  let u2 = u * u;
  var sum = 1.0 / 19.0;
  for (var k = 17.0; k > 0.0; k -= 2.0) {
    sum = 1.0 / k + u2 * sum;
  }
  return 2.0 * u * sum;
}

var<workgroup> red_m: array<f32, WG>;
var<workgroup> red_t: array<f32, WG>;

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
  var acc = Online(LOWEST, -1.0);
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
  red_t[lid] = acc.t;
  workgroupBarrier();
  for (var width = WG / 2u; width > 0u; width /= 2u) {
    if (lid < width) {
      let r = merge(Online(red_m[lid], red_t[lid]), Online(red_m[lid + width], red_t[lid + width]));
      red_m[lid] = r.m;
      red_t[lid] = r.t;
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let m = red_m[0];
    let log_s = log1p(red_t[0]);
    lse[row] = m + log_s;
    lse_parts[row] = vec2f(m, log_s);
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

// x - lse of the row: (x - m) - log s with LSE_PARTS, else against the lse given.
fn x_minus_lse(row: u32, x: vec4f) -> vec4f {
  if (LSE_PARTS) {
    let p = parts_saved[row];
    return (x - vec4f(p.x)) - vec4f(p.y);
  }
  return x - vec4f(lse_saved[row]);
}

// softmax - onehot at (row, col), scaled by dloss * weight; 0 for ignored rows.
fn dlogit(row: u32, col: u32, x: f32) -> f32 {
  let t = target_of(row);
  if (t < 0) {
    return 0.0;
  }
  let d = x_minus_lse(row, vec4f(x)).x;
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
  let d = x_minus_lse(row, x);
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
