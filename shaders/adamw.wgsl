// adamw: one fused AdamW step over flat fp32 buffers; one vec4 per thread, the last vec4 masked
// lane by lane. A non-finite norm clip[0] makes the step the identity (a skipped step). The
// learning rate and the bias corrections are read from `sched` (adamwSchedule in src/ops/adamw.ts),
// so an update recorded once serves every step.
// adamw_cast (entry main_cast): the same step, the updated values also stored into `work` (the
// working copy; f32 here, as WebGPU computes in f32).
struct Params {
  n: u32,
  beta1: f32,
  beta2: f32,
  eps: f32,
  weightDecay: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> param: array<vec4f>;
@group(0) @binding(2) var<storage, read> grad: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> m: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> v: array<vec4f>;
@group(0) @binding(5) var<storage, read> clip: array<f32>; // grad_norm's [norm, scale]
@group(0) @binding(6) var<storage, read> sched: array<f32>; // [lr, lr / (1 - beta1^step), 1 / sqrt(1 - beta2^step)]
@group(0) @binding(7) var<storage, read_write> work: array<vec4f>;

fn group_index(gid: vec3u, nwg: vec3u) -> u32 {
  return gid.x + gid.y * nwg.x * 256u;
}

// The step on vec4 i (in range), stored; returns the updated parameters.
fn update(i: u32) -> vec4f {
  // All exponent bits set: NaN or ±Inf (a bit test: WGSL gives no isnan, and may assume no NaNs).
  let skip = (bitcast<u32>(clip[0]) & 0x7f800000u) == 0x7f800000u;
  let g = grad[i] * clip[1];
  let m1 = select(params.beta1 * m[i] + (1.0 - params.beta1) * g, m[i], skip);
  let v1 = select(params.beta2 * v[i] + (1.0 - params.beta2) * g * g, v[i], skip);
  let p1 = select((1.0 - sched[0] * params.weightDecay) * param[i] - sched[1] * m1 / (sqrt(v1) * sched[2] + params.eps), param[i], skip);
  let first = 4u * i;
  if (first + 4u <= params.n) {
    m[i] = m1;
    v[i] = v1;
    param[i] = p1;
  } else {
    for (var c = 0u; c < params.n - first; c++) {
      m[i][c] = m1[c];
      v[i][c] = v1[c];
      param[i][c] = p1[c];
    }
  }
  return p1;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  if (4u * i >= params.n) { return; }
  update(i);
}

@compute @workgroup_size(256)
fn main_cast(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = group_index(gid, nwg);
  let first = 4u * i;
  if (first >= params.n) { return; }
  let p1 = update(i);
  if (first + 4u <= params.n) {
    work[i] = p1;
  } else {
    for (var c = 0u; c < params.n - first; c++) { work[i][c] = p1[c]; }
  }
}
