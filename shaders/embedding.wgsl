// embedding: gather rows of the table by id (forward), and the deterministic scatter-add
// (backward). The backward sorts positions by id with a stable LSD radix sort (8-bit digits:
// per-tile histograms -> one scan -> stable scatter), so each id's positions come out in
// increasing order; then one workgroup per vocab row sums its positions in that order, a long
// row's full chunks of CHUNK sorted positions through per-chunk partial sums (chunk_sum).
// Out-of-range ids read nothing: the gather writes zeros, the sort keys them as `vocab`, which
// no row claims. The vocab-sized tensor (table, dtable) may pass the storage binding limit, so it
// is bound in chunks of rows [rowBase, rowBase + rows) and gather/row_sum run once per chunk.

struct Params { tokens: u32, vocab: u32, dim: u32, shift: u32, tiles: u32, rowBase: u32, rows: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> ids: array<i32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> keysIn: array<u32>;
@group(0) @binding(5) var<storage, read> valsIn: array<u32>;
@group(0) @binding(6) var<storage, read_write> keysOut: array<u32>;
@group(0) @binding(7) var<storage, read_write> valsOut: array<u32>;
// Digit-major: tileCounts[digit * tiles + tile]; the scan turns counts into output offsets.
@group(0) @binding(8) var<storage, read_write> tileCounts: array<u32>;
@group(0) @binding(9) var<storage, read> dout: array<f32>;
@group(0) @binding(10) var<storage, read_write> dtable: array<f32>;
// chunkSums[c * dim + channel]: chunk c's sum, for the chunks of one real row.
@group(0) @binding(11) var<storage, read_write> chunkSums: array<f32>;

const WG = 256u; // threads per workgroup = positions per sort tile = radix buckets

var<workgroup> hist: array<atomic<u32>, WG>;
var<workgroup> digits: array<u32, WG>;
var<workgroup> sums: array<u32, WG>;

fn linearGroup(wid: vec3u, nwg: vec3u) -> u32 {
  return wid.x + wid.y * nwg.x;
}

// Writes the positions whose id lies in this chunk; the first chunk also zeroes invalid ids.
@compute @workgroup_size(WG)
fn gather(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let e = linearGroup(wid, nwg) * WG + lid;
  if (e >= params.tokens * params.dim) {
    return;
  }
  let i = e / params.dim;
  let c = e - i * params.dim;
  let id = ids[i];
  let valid = id >= 0 && u32(id) < params.vocab;
  let row = u32(id) - params.rowBase; // wraps above `rows` for ids below the chunk
  if (valid && row < params.rows) {
    out[e] = table[row * params.dim + c];
  } else if (!valid && params.rowBase == 0u) {
    out[e] = 0.0;
  }
}

// keys = ids (invalid -> vocab), vals = positions.
@compute @workgroup_size(WG)
fn sort_keys(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let i = linearGroup(wid, nwg) * WG + lid;
  if (i >= params.tokens) {
    return;
  }
  let id = ids[i];
  keysOut[i] = select(params.vocab, u32(id), id >= 0 && u32(id) < params.vocab);
  valsOut[i] = i;
}

fn digitOf(key: u32) -> u32 {
  return (key >> params.shift) & (WG - 1u);
}

@compute @workgroup_size(WG)
fn radix_histogram(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tile = linearGroup(wid, nwg);
  atomicStore(&hist[lid], 0u);
  workgroupBarrier();
  let i = tile * WG + lid;
  if (tile < params.tiles && i < params.tokens) {
    atomicAdd(&hist[digitOf(keysIn[i])], 1u);
  }
  workgroupBarrier();
  if (tile < params.tiles) {
    tileCounts[lid * params.tiles + tile] = atomicLoad(&hist[lid]);
  }
}

// Exclusive scan of all WG·tiles counts in one workgroup: thread d owns digit d's tiles.
@compute @workgroup_size(WG)
fn radix_scan(@builtin(local_invocation_index) lid: u32) {
  let n = params.tiles;
  let base = lid * n;
  var own = 0u;
  for (var t = 0u; t < n; t++) {
    own += tileCounts[base + t];
  }
  sums[lid] = own;
  for (var s = 1u; s < WG; s <<= 1u) {
    workgroupBarrier();
    let left = select(0u, sums[lid - s], lid >= s);
    workgroupBarrier();
    sums[lid] += left;
  }
  var run = sums[lid] - own;
  for (var t = 0u; t < n; t++) {
    let c = tileCounts[base + t];
    tileCounts[base + t] = run;
    run += c;
  }
}

// Stable: a key's place within its tile is the number of equal digits before it in the tile.
@compute @workgroup_size(WG)
fn radix_scatter(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let tile = linearGroup(wid, nwg);
  let i = tile * WG + lid;
  let valid = tile < params.tiles && i < params.tokens;
  var key = 0u;
  var digit = WG; // matches no real digit
  if (valid) {
    key = keysIn[i];
    digit = digitOf(key);
  }
  digits[lid] = digit;
  workgroupBarrier();
  if (valid) {
    var rank = 0u;
    for (var j = 0u; j < lid; j++) {
      rank += u32(digits[j] == digit);
    }
    let dest = tileCounts[digit * params.tiles + tile] + rank;
    keysOut[dest] = key;
    valsOut[dest] = valsIn[i];
  }
}

// A long row (the [MASK] id holds half of a diffusion batch) would leave each of its threads
// summing thousands of positions: the sorted positions are cut into chunks of CHUNK, and every full
// chunk that lies inside one real row's run is summed first, by a workgroup of its own. Other
// chunks are never read.
const CHUNK = 64u;

@compute @workgroup_size(WG)
fn chunk_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let c = linearGroup(wid, nwg);
  if (c >= params.tokens / CHUNK) {
    return;
  }
  let first = c * CHUNK;
  let key = keysIn[first];
  if (key != keysIn[first + CHUNK - 1u] || key >= params.vocab) {
    return;
  }
  for (var ch = lid; ch < params.dim; ch += WG) {
    chunkSums[c * params.dim + ch] = sumPositions(first, first + CHUNK, ch);
  }
}

// Σ dout[valsIn[p], channel] over sorted positions p in [lo, hi), in order.
fn sumPositions(lo: u32, hi: u32, channel: u32) -> f32 {
  var acc = 0.0;
  for (var p = lo; p < hi; p++) {
    acc += dout[valsIn[p] * params.dim + channel];
  }
  return acc;
}

// First index of sorted keysIn[0, tokens) that is >= v.
fn lowerBound(v: u32) -> u32 {
  var lo = 0u;
  var hi = params.tokens;
  while (lo < hi) {
    let mid = (lo + hi) / 2u;
    if (keysIn[mid] < v) {
      lo = mid + 1u;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// ROWS consecutive vocab rows of the chunk per workgroup, so the latency of the binary searches
// (one per row boundary, in parallel) is paid once per ROWS rows; threads run over channels and
// each row sums its positions in sorted (increasing) order, its full chunks from chunkSums.
const ROWS = 16u;
// row_sum adds to dtable instead of overwriting it (embedding_backward's accumulate).
override ACCUMULATE: bool = false;
var<workgroup> bounds: array<u32, ROWS + 1u>;

@compute @workgroup_size(WG)
fn row_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) lid: u32) {
  let first = linearGroup(wid, nwg) * ROWS;
  if (first >= params.rows) {
    return;
  }
  let count = min(ROWS, params.rows - first);
  if (lid <= count) {
    bounds[lid] = lowerBound(params.rowBase + first + lid);
  }
  workgroupBarrier();
  let dim = params.dim;
  for (var r = 0u; r < count; r++) {
    let start = bounds[r];
    let end = bounds[r + 1u];
    if (ACCUMULATE && start == end) {
      continue;  // a row no token holds: left as it is, not read and written back
    }
    let row = first + r;
    let chunkLo = (start + CHUNK - 1u) / CHUNK;
    let chunkHi = end / CHUNK;
    for (var c = lid; c < dim; c += WG) {
      var acc = 0.0;
      if (chunkHi > chunkLo) {
        acc = sumPositions(start, chunkLo * CHUNK, c);
        for (var q = chunkLo; q < chunkHi; q++) {
          acc += chunkSums[q * dim + c];
        }
        acc += sumPositions(chunkHi * CHUNK, end, c);
      } else {
        acc = sumPositions(start, end, c);
      }
      if (ACCUMULATE) {
        dtable[row * dim + c] += acc;
      } else {
        dtable[row * dim + c] = acc;
      }
    }
  }
}
