// rmsnorm: y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps), one row per row slot.
// rmsnorm_backward: dx = rstd * (g - x * rstd^2 * mean(g * x)) + dresidual with g = dy * weight;
// dweight partials per workgroup (summed by reduce_partials), no atomics.
//!import lib/rownorm

@group(0) @binding(1) var<storage, read> x: array<vec4f>;
@group(0) @binding(2) var<storage, read> weight: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>;
@group(0) @binding(5) var<storage, read> dy: array<vec4f>;
@group(0) @binding(6) var<storage, read> saved_rstd: array<f32>;
@group(0) @binding(7) var<storage, read> dresidual: array<vec4f>;
@group(0) @binding(8) var<storage, read_write> dx: array<vec4f>;
@group(0) @binding(9) var<storage, read_write> dweight_partials: array<vec4f>;

@compute @workgroup_size(256)
fn rmsnorm(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let l = lane_of(lid, wid, nwg);
  let row = l.group * slots() + l.slot;
  var v: RowVecs;
  var ss = 0.0;
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (row < params.rows && c < dim4()) {
      v[k] = x[row * dim4() + c];
      ss += dot(v[k], v[k]);
    }
  }
  // row_sum holds workgroup barriers: every lane calls it before idle slots return
  let r = inverseSqrt(row_sum(l, ss) / f32(params.dim) + params.eps);
  if (row >= params.rows) {
    return;
  }
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (c < dim4()) {
      y[row * dim4() + c] = v[k] * r * weight[c];
    }
  }
  if (l.lane == 0u) {
    rstd[row] = r;
  }
}

@compute @workgroup_size(256)
fn rmsnorm_backward(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let l = lane_of(lid, wid, nwg);
  var w: RowVecs;
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    if (c < dim4()) {
      w[k] = weight[c];
    }
  }
  var dw: RowVecs; // this lane's dweight over the rows of its slot
  for (var first = 0u; first < params.rows_per_group; first += slots()) {
    let row = l.group * params.rows_per_group + first + l.slot;
    let live = row < params.rows;
    var xv: RowVecs;
    var dyv: RowVecs;
    var gx = 0.0;
    for (var k = 0u; k < VEC_PER_THREAD; k++) {
      let c = column(l, k);
      if (live && c < dim4()) {
        xv[k] = x[row * dim4() + c];
        dyv[k] = dy[row * dim4() + c];
        gx += dot(dyv[k] * w[k], xv[k]);
      }
    }
    let total = row_sum(l, gx);
    if (live) {
      let r = saved_rstd[row];
      let coef = r * r * r * total / f32(params.dim);
      for (var k = 0u; k < VEC_PER_THREAD; k++) {
        let c = column(l, k);
        if (c < dim4()) {
          let i = row * dim4() + c;
          dx[i] = r * dyv[k] * w[k] - coef * xv[k] + dresidual[i];
          dw[k] += dyv[k] * xv[k] * r;
        }
      }
    }
  }
  for (var k = 0u; k < VEC_PER_THREAD; k++) {
    let c = column(l, k);
    let total = slot_sum(l, dw[k]);
    if (l.slot == 0u && c < dim4()) {
      dweight_partials[l.group * dim4() + c] = total;
    }
  }
}
