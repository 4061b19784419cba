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

// 0.5 (1 + tanh(u)) = sigmoid(2u), and 0.5 (1 - tanh(u)^2) = 2 sigmoid(2u) sigmoid(-2u). In that form
// no tanh is evaluated (on some drivers tanh of a large argument is inf / inf = NaN), and 1 + tanh(u)
// does not cancel for negative x. Both sigmoids come from exp(-|2u|), in [0, 1]: no overflow, even
// when x^3 is inf.
struct Sigmoids { pos: vec4f, neg: vec4f } // sigmoid(z), sigmoid(-z)

fn sigmoids(z: vec4f) -> Sigmoids {
  let e = exp(-abs(z));
  let r = 1.0 / (1.0 + e);
  let up = z >= vec4f(0.0);
  return Sigmoids(select(e * r, r, up), select(r, e * r, up));
}

fn inner(v: vec4f) -> vec4f {
  return GELU_K * (v + GELU_C * v * v * v);
}

fn gelu4(v: vec4f) -> vec4f {
  return v * sigmoids(2.0 * inner(v)).pos;
}

fn gelu_grad4(v: vec4f) -> vec4f {
  let s = sigmoids(2.0 * inner(v));
  // Past |x| = 10 the second term is below 1e-35; clamping x there keeps x^2 finite (0 * inf = NaN).
  let vc = clamp(v, vec4f(-10.0), vec4f(10.0));
  return s.pos + 2.0 * vc * s.pos * s.neg * GELU_K * (1.0 + 3.0 * GELU_C * vc * vc);
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
