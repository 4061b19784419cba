// swiglu: out = silu(gate) * up with silu(x) = x * sigmoid(x); swiglu_backward: dgate, dup.
// Element-wise over n = rows * hidden. The *4 entry points take vec4 i over elements 4i..4i+3 of
// the first 4 * floor(n / 4); a vec4 binding cannot reach the last n % 4 elements, so the *_tail
// entry points do those through scalar views of the same tensors, with the same vec4 math.
// swiglu_joined and swiglu_backward_joined (matmul_swiglu's and matmul_swiglu_backward's second
// halves) read gate and up as the two halves of one tensor, gu = [gate; up], n elements each, and
// write dgate and dup as those of dgu: their split need not fall on a bindable offset.
struct Params { n: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> gate4: array<vec4f>;
@group(0) @binding(2) var<storage, read> up4: array<vec4f>;
@group(0) @binding(3) var<storage, read> dout4: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> out4: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> dgate4: array<vec4f>;
@group(0) @binding(6) var<storage, read_write> dup4: array<vec4f>;
@group(0) @binding(7) var<storage, read> gate: array<f32>;
@group(0) @binding(8) var<storage, read> up: array<f32>;
@group(0) @binding(9) var<storage, read> dout: array<f32>;
@group(0) @binding(10) var<storage, read_write> out: array<f32>;
@group(0) @binding(11) var<storage, read_write> dgate: array<f32>;
@group(0) @binding(12) var<storage, read_write> dup: array<f32>;
@group(0) @binding(13) var<storage, read> gu: array<f32>;
@group(0) @binding(14) var<storage, read_write> dgu: array<f32>;

const WG = 256u;

// sigmoid(x) and sigmoid(-x) = 1 - sigmoid(x), both from exp(-|x|), which lies in (0, 1]: no
// overflow (and inf / inf) for large |x|, and no cancellation in 1 - sigmoid(x) for large x.
struct Sigmoids { pos: vec4f, neg: vec4f }

fn sigmoids(x: vec4f) -> Sigmoids {
  let e = exp(-abs(x));
  let r = 1.0 / (1.0 + e);
  let up = x >= vec4f(0.0);
  return Sigmoids(select(e * r, r, up), select(r, e * r, up));
}

fn swiglu4(g: vec4f, u: vec4f) -> vec4f {
  return g * sigmoids(g).pos * u;
}

struct Grads { dg: vec4f, du: vec4f }

fn swiglu_grad4(dy: vec4f, g: vec4f, u: vec4f) -> Grads {
  let s = sigmoids(g);
  // d/dg [g * s(g)] = s + g * s * (1 - s)
  return Grads(dy * u * (s.pos + g * s.pos * s.neg), dy * g * s.pos);
}

fn vec_index(gid: vec3u, nwg: vec3u) -> u32 {
  return gid.x + gid.y * nwg.x * WG;
}

fn tail_index(lid: u32) -> u32 {
  return (params.n & ~3u) + lid;
}

@compute @workgroup_size(WG)
fn swiglu(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n / 4u) {
    out4[i] = swiglu4(gate4[i], up4[i]);
  }
}

@compute @workgroup_size(4)
fn swiglu_tail(@builtin(local_invocation_index) lid: u32) {
  let i = tail_index(lid);
  if (i < params.n) {
    out[i] = swiglu4(vec4f(gate[i]), vec4f(up[i])).x;
  }
}

@compute @workgroup_size(WG)
fn swiglu_backward(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n / 4u) {
    let g = swiglu_grad4(dout4[i], gate4[i], up4[i]);
    dgate4[i] = g.dg;
    dup4[i] = g.du;
  }
}

@compute @workgroup_size(4)
fn swiglu_backward_tail(@builtin(local_invocation_index) lid: u32) {
  let i = tail_index(lid);
  if (i < params.n) {
    let g = swiglu_grad4(vec4f(dout[i]), vec4f(gate[i]), vec4f(up[i]));
    dgate[i] = g.dg.x;
    dup[i] = g.du.x;
  }
}

@compute @workgroup_size(WG)
fn swiglu_joined(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n) {
    out[i] = swiglu4(vec4f(gu[i]), vec4f(gu[params.n + i])).x;
  }
}

@compute @workgroup_size(WG)
fn swiglu_backward_joined(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = vec_index(gid, nwg);
  if (i < params.n) {
    let g = swiglu_grad4(vec4f(dout[i]), vec4f(gu[i]), vec4f(gu[params.n + i]));
    dgu[i] = g.dg.x;
    dgu[params.n + i] = g.du.x;
  }
}
