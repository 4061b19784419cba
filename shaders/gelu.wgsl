// gelu (tanh approximation, as GPT-2 and llm.c): out = 0.5 x (1 + tanh(k (x + c x^3))),
// k = sqrt(2 / pi), c = 0.044715; gelu_backward: dx = dout * gelu'(x).
// Element-wise over n = rows * hidden. The vec4 entry points take vec4 i over elements 4i..4i+3 of
// the first 4 * floor(n / 4); a vec4 binding cannot reach the last n % 4 elements, so the *_tail
// entry points do those through scalar views of the same tensors, with the same vec4 math.
struct Params { n: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x4: array<vec4f>;
@group(0) @binding(2) var<storage, read> dout4: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out4: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> dx4: array<vec4f>;
@group(0) @binding(5) var<storage, read> x: array<f32>;
@group(0) @binding(6) var<storage, read> dout: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;
@group(0) @binding(8) var<storage, read_write> dx: array<f32>;

const WG = 256u;
const GELU_K = 0.7978845608028654;
const GELU_C = 0.044715;

// tanh(±10) is ±1 in f32. Clamping keeps drivers that build tanh from exp(2u) from returning
// inf / inf = NaN for large |u| (and x^3 overflowing to inf is clamped too).
fn tanh_inner(v: vec4f) -> vec4f {
  let u = GELU_K * (v + GELU_C * v * v * v);
  return tanh(clamp(u, vec4f(-10.0), vec4f(10.0)));
}

fn gelu4(v: vec4f) -> vec4f {
  return 0.5 * v * (1.0 + tanh_inner(v));
}

fn gelu_grad4(v: vec4f) -> vec4f {
  let t = tanh_inner(v);
  // Past |x| = 6, t is +-1 in f32 and the sech^2 term is 0; clamping x there keeps x^2 finite
  // (0 * inf would be NaN).
  let vs = clamp(v, vec4f(-6.0), vec4f(6.0));
  return 0.5 * (1.0 + t) + 0.5 * vs * (1.0 - t * t) * GELU_K * (1.0 + 3.0 * GELU_C * vs * vs);
}

fn vec_index(gid: vec3u, nwg: vec3u) -> u32 {
  return gid.x + gid.y * nwg.x * WG;
}

fn tail_index(lid: u32) -> u32 {
  return (params.n & ~3u) + lid;
}

@compute @workgroup_size(WG)
fn gelu(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n / 4u) {
    out4[i] = gelu4(x4[i]);
  }
}

@compute @workgroup_size(4)
fn gelu_tail(@builtin(local_invocation_index) lid: u32) {
  let i = tail_index(lid);
  if (i < params.n) {
    out[i] = gelu4(vec4f(x[i])).x;
  }
}

@compute @workgroup_size(WG)
fn gelu_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n / 4u) {
    dx4[i] = dout4[i] * gelu_grad4(x4[i]);
  }
}

@compute @workgroup_size(4)
fn gelu_backward_tail(@builtin(local_invocation_index) lid: u32) {
  let i = tail_index(lid);
  if (i < params.n) {
    dx[i] = dout[i] * gelu_grad4(vec4f(x[i])).x;
  }
}
