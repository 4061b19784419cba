// diffusion_mask: one workgroup per sequence; each thread owns a contiguous chunk of positions.
// A workgroup scan of (non-padding, masked) counts per chunk gives the row totals and, when the
// row drew no mask, which thread holds the fallback's j-th non-padding position. With EMPIRICAL
// each thread then rescales the weights of its own masked positions by real / masked. Draws are
// keyed by the global row (rowOffset + b) of a global batch of totalRows rows.
//!import lib/philox

struct Params { batch: u32, seqLen: u32, step: u32, rank: u32, purpose: u32, keyLo: u32, keyHi: u32, maskId: i32, rowOffset: u32, totalRows: u32 }

override EMPIRICAL: bool = false;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> tokens: array<i32>;
@group(0) @binding(2) var<storage, read> maskProb: array<f32>;
@group(0) @binding(3) var<storage, read> lossWeight: array<f32>;
@group(0) @binding(4) var<storage, read_write> noised: array<i32>;
@group(0) @binding(5) var<storage, read_write> mask: array<i32>;
@group(0) @binding(6) var<storage, read_write> weights: array<f32>;

const WG = 256u;
var<workgroup> counts: array<vec2u, WG>;

fn draw(index: u32) -> u32 {
  return philox4x32(vec4u(index, params.step, params.rank, params.purpose), vec2u(params.keyLo, params.keyHi)).x;
}

fn emit(at: u32, token: i32, masked: bool, weight: f32) {
  noised[at] = select(token, params.maskId, masked);
  mask[at] = i32(masked);
  weights[at] = select(0.0, weight, masked);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let b = wid.x + wid.y * nwg.x;
  let inBatch = b < params.batch;
  let len = params.seqLen;
  let row = b * len;
  let drawRow = (params.rowOffset + b) * len;
  let chunk = (len + WG - 1u) / WG;
  let lo = min(lid * chunk, len);
  let hi = select(lo, min(lo + chunk, len), inBatch);
  var p = 0.0;
  var w = 0.0;
  if (inBatch) {
    p = maskProb[b];
    w = lossWeight[b];
  }
  var real = 0u;
  var masked = 0u;
  for (var i = lo; i < hi; i++) {
    let token = tokens[row + i];
    var m = false;
    if (token >= 0) {
      real++;
      m = uniform01(draw(drawRow + i)) < p;
    }
    masked += u32(m);
    emit(row + i, token, m, w);
  }

  // Inclusive scan over the chunks' counts (integers: the order does not change the result).
  counts[lid] = vec2u(real, masked);
  for (var s = 1u; s < WG; s <<= 1u) {
    workgroupBarrier();
    let left = select(vec2u(0u), counts[lid - s], lid >= s);
    workgroupBarrier();
    counts[lid] += left;
  }
  workgroupBarrier();
  let total = counts[WG - 1u];
  let fallback = total.y == 0u && total.x > 0u;
  if (fallback) {
    let j = draw(params.totalRows * len + params.rowOffset + b) % total.x;
    let before = counts[lid].x - real;
    if (j >= before && j < before + real) {
      var seen = before;
      for (var i = lo; i < hi; i++) {
        let token = tokens[row + i];
        if (token >= 0) {
          if (seen == j) {
            emit(row + i, token, true, w);
            break;
          }
          seen++;
        }
      }
    }
  }
  if (EMPIRICAL && total.x > 0u) {
    // The fallback's position is in its owner's chunk, written by that same thread above.
    let scaled = w * (f32(total.x) / f32(select(total.y, 1u, fallback)));
    for (var i = lo; i < hi; i++) {
      if (mask[row + i] != 0) {
        weights[row + i] = scaled;
      }
    }
  }
}
