// compact_rows: the rows with a target >= 0 and a weight != 0, in order, to the front. One
// workgroup; each thread owns a contiguous chunk of rows. A workgroup scan of the chunks' counts
// gives each thread where its rows go; past the total each thread fills its own chunk's slots of
// the packed arrays with "none" (order -1, target -1, weight 0).

struct Params { rows: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> targets: array<i32>;
@group(0) @binding(2) var<storage, read> weights: array<f32>;
@group(0) @binding(3) var<storage, read_write> order: array<i32>;
@group(0) @binding(4) var<storage, read_write> slot: array<i32>;
@group(0) @binding(5) var<storage, read_write> count: array<i32>;
@group(0) @binding(6) var<storage, read_write> packedTargets: array<i32>;
@group(0) @binding(7) var<storage, read_write> packedWeights: array<f32>;

const WG = 256u;
var<workgroup> counts: array<u32, WG>;

fn counted(r: u32) -> bool {
  return targets[r] >= 0 && weights[r] != 0.0;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32) {
  let n = params.rows;
  let chunk = (n + WG - 1u) / WG;
  let lo = min(lid * chunk, n);
  let hi = min(lo + chunk, n);
  var own = 0u;
  for (var r = lo; r < hi; r++) {
    own += u32(counted(r));
  }
  // Inclusive scan over the chunks' counts.
  counts[lid] = own;
  for (var s = 1u; s < WG; s <<= 1u) {
    workgroupBarrier();
    let left = select(0u, counts[lid - s], lid >= s);
    workgroupBarrier();
    counts[lid] += left;
  }
  workgroupBarrier();
  let total = counts[WG - 1u];
  var k = counts[lid] - own;
  for (var r = lo; r < hi; r++) {
    if (counted(r)) {
      order[k] = i32(r);
      slot[r] = i32(k);
      packedTargets[k] = targets[r];
      packedWeights[k] = weights[r];
      k++;
    } else {
      slot[r] = -1;
    }
  }
  for (var j = max(lo, total); j < hi; j++) {
    order[j] = -1;
    packedTargets[j] = -1;
    packedWeights[j] = 0.0;
  }
  if (lid == 0u) {
    count[0] = i32(total);
  }
}
