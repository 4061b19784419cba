// layernorm: y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps), with mean and var
// of the row computed in two passes over the registers (no E[x²] - E[x]² cancellation).
// layernorm_backward, with xhat = (x - mean) * rstd and g = dy * weight:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) + dresidual
//   dweight = sum over rows of dy * xhat, dbias = sum over rows of dy (per-workgroup partials,
//   summed by reduce_partials; no atomics).
//!import lib/rownorm

@group(0) @binding(1) var<storage, read> x: array<vec4f>;
@group(0) @binding(2) var<storage, read> weight: array<vec4f>;
@group(0) @binding(3) var<storage, read> bias: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> y: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> mean: array<f32>;
@group(0) @binding(6) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(7) var<storage, read> dy: array<vec4f>;
@group(0) @binding(8) var<storage, read> saved_mean: array<f32>;
@group(0) @binding(9) var<storage, read> saved_rstd: array<f32>;
@group(0) @binding(10) var<storage, read> dresidual: array<vec4f>;
@group(0) @binding(11) var<storage, read_write> dx: array<vec4f>;
@group(0) @binding(12) var<storage, read_write> dweight_partials: array<vec4f>;
@group(0) @binding(13) var<storage, read_write> dbias_partials: array<vec4f>;

@compute @workgroup_size(256)
fn layernorm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let l = lane_of(lid, wid, nwg);
  let row = l.group * slots() + l.slot;
  let live = row < params.rows;
  let n = f32(params.dim);
  var v: RowVecs;
  var s = 0.0;
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (live && c < dim4()) {
      v[k] = x[row * dim4() + c];
      s += dot(v[k], vec4f(1.0));
    }
  }
  let mu = row_sum(l, s) / n;
  var ss = 0.0;
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    if (live && column(l, k) < dim4()) {
      let d = v[k] - mu;
      ss += dot(d, d);
    }
  }
  let r = inverseSqrt(row_sum(l, ss) / n + params.eps);
  if (!live) {
    return;
  }
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (c < dim4()) {
      y[row * dim4() + c] = (v[k] - mu) * r * weight[c] + bias[c];
    }
  }
  if (l.lane == 0u) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

@compute @workgroup_size(256)
fn layernorm_backward(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let l = lane_of(lid, wid, nwg);
  let n = f32(params.dim);
  var w: RowVecs;
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (c < dim4()) {
      w[k] = weight[c];
    }
  }
  var dw: RowVecs; // this lane's dweight and dbias over the rows of its slot
  var db: RowVecs;
  for (var first = 0u; first < params.rows_per_group; first += slots()) {
    let row = l.group * params.rows_per_group + first + l.slot;
    let live = row < params.rows;
    var mu = 0.0;
    var r = 0.0;
    if (live) {
      mu = saved_mean[row];
      r = saved_rstd[row];
    }
    var xhat: RowVecs;
    var dyv: RowVecs;
    var sums = vec2f(0.0); // (sum of g, sum of g * xhat) over this lane's columns
    for (var k = 0u; k < VEC_PER_THREAD; k++) {
      let c = column(l, k);
      if (live && c < dim4()) {
        xhat[k] = (x[row * dim4() + c] - mu) * r;
        dyv[k] = dy[row * dim4() + c];
        let g = dyv[k] * w[k];
        sums += vec2f(dot(g, vec4f(1.0)), dot(g, xhat[k]));
      }
    }
    let m = row_sum2(l, sums) / n;
    if (live) {
      for (var k = 0u; k < VEC_PER_THREAD; k++) {
        let c = column(l, k);
        if (c < dim4()) {
          let i = row * dim4() + c;
          dx[i] = r * (dyv[k] * w[k] - m.x - xhat[k] * m.y) + dresidual[i];
          dw[k] += dyv[k] * xhat[k];
          db[k] += dyv[k];
        }
      }
    }
  }
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    let wsum = slot_sum(l, dw[k]);
    let bsum = slot_sum(l, db[k]);
    if (l.slot == 0u && c < dim4()) {
      dweight_partials[l.group * dim4() + c] = wsum;
      dbias_partials[l.group * dim4() + c] = bsum;
    }
  }
}
