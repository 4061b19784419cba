// attention_decode: one workgroup per (sequence, query head); one query against the first
// `length` cached keys (src/ops/attention_decode.ts). Three passes over workgroup memory: the
// scaled scores (threads over keys) and their max, the exponentials and their sum, then the
// weighted sum of values (threads over the head dimension). Reductions are fixed trees: the same
// bits every run.

struct Params { batch: u32, heads: u32, kv_heads: u32, head_dim: u32, max_len: u32, length: u32, kv_stride: u32, scale: f32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const WG = 64u;
const MAX_KEYS = 4096u; // MAX_DECODE_KEYS
var<workgroup> scores: array<f32, MAX_KEYS>;
var<workgroup> partial: array<f32, WG>;

// Tree reduction of partial[] (max or sum); every thread gets the result.
fn reduce(lid: u32, take_max: bool) -> f32 {
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lid < s) {
      let a = partial[lid];
      let b = partial[lid + s];
      partial[lid] = select(a + b, max(a, b), take_max);
    }
  }
  workgroupBarrier();
  let r = partial[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) lid: u32) {
  let h = wid.x;
  let b = wid.y;
  let D = params.head_dim;
  let g = h / (params.heads / params.kv_heads);
  let q0 = (b * params.heads + h) * D;
  var m = -3.4028234663852886e38;
  for (var j = lid; j < params.length; j += WG) {
    let k0 = (b * params.max_len + j) * params.kv_stride + g * D;
    var s = 0.0;
    for (var d = 0u; d < D; d++) {
      s = fma(q[q0 + d], k[k0 + d], s);
    }
    s *= params.scale;
    scores[j] = s;
    m = max(m, s);
  }
  partial[lid] = m;
  let row_max = reduce(lid, true);
  var sum = 0.0;
  for (var j = lid; j < params.length; j += WG) {
    let p = exp(scores[j] - row_max);
    scores[j] = p;
    sum += p;
  }
  partial[lid] = sum;
  let total = reduce(lid, false);
  for (var d = lid; d < D; d += WG) {
    var acc = 0.0;
    for (var j = 0u; j < params.length; j++) {
      acc = fma(scores[j], v[(b * params.max_len + j) * params.kv_stride + g * D + d], acc);
    }
    out[q0 + d] = acc / total;
  }
}
