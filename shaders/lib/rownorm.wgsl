// The row machinery of rmsnorm's shader, apart from its math: the thread layout, deterministic
// tree reductions in workgroup memory, and the pass that sums per-workgroup parameter-gradient
// partials. A workgroup of 256 threads holds 256 / THREADS_PER_ROW row slots; the lane of a slot
// owns the vec4 columns lane + k * THREADS_PER_ROW (k < VEC_PER_THREAD) and keeps them in
// registers, so every row is read from memory once.
struct Params {
  rows: u32,
  dim: u32,
  eps: f32,
  // backward: rows each workgroup walks (a multiple of the row slots); its partials cover them
  rows_per_group: u32,
}

@group(0) @binding(0) var<uniform> params: Params;

override THREADS_PER_ROW: u32 = 64u; // power of two dividing WG_SIZE
override VEC_PER_THREAD: u32 = 1u;   // ceil(dim / 4 / THREADS_PER_ROW), at most MAX_VEC_PER_THREAD
const WG_SIZE: u32 = 256u;
const MAX_VEC_PER_THREAD: u32 = 8u;

alias RowVecs = array<vec4f, MAX_VEC_PER_THREAD>;

var<workgroup> row_scratch: array<f32, WG_SIZE>;
var<workgroup> col_scratch: array<vec4f, WG_SIZE>;

struct Lane {
  lid: u32,
  slot: u32,  // row slot within the workgroup
  lane: u32,  // thread within the row slot
  group: u32, // linear workgroup index (grid1d folds it into x and y)
}

fn lane_of(lid: u32, wid: vec3u, nwg: vec3u) -> Lane {
  return Lane(lid, lid / THREADS_PER_ROW, lid % THREADS_PER_ROW, wid.x + wid.y * nwg.x);
}

fn slots() -> u32 {
  return WG_SIZE / THREADS_PER_ROW;
}

fn dim4() -> u32 {
  return params.dim / 4u;
}

fn column(l: Lane, k: u32) -> u32 {
  return l.lane + k * THREADS_PER_ROW;
}

// Sum of v over the lanes of this thread's row slot, the same in every lane. Call from uniform
// control flow; ends with a barrier so the scratch can be reused at once.
fn row_sum(l: Lane, v: f32) -> f32 {
  row_scratch[l.lid] = v;
  workgroupBarrier();
  for (var s = THREADS_PER_ROW / 2u; s > 0u; s >>= 1u) {
    if (l.lane < s) {
      row_scratch[l.lid] += row_scratch[l.lid + s];
    }
    workgroupBarrier();
  }
  let total = row_scratch[l.slot * THREADS_PER_ROW];
  workgroupBarrier();
  return total;
}

// Sum of v over the row slots for this thread's lane; valid in slot 0. Uniform control flow.
fn slot_sum(l: Lane, v: vec4f) -> vec4f {
  col_scratch[l.lid] = v;
  workgroupBarrier();
  for (var s = slots() / 2u; s > 0u; s >>= 1u) {
    if (l.slot < s) {
      col_scratch[l.lid] += col_scratch[l.lid + s * THREADS_PER_ROW];
    }
    workgroupBarrier();
  }
  let total = col_scratch[l.lid];
  workgroupBarrier();
  return total;
}

// Second stage of a parameter gradient: dparam[c] (+)= sum over groups g of partials[g, c], in a
// fixed order (added to dparam with ACCUMULATE). A workgroup takes REDUCE_COLS vec4 columns with
// REDUCE_LANES threads on each.
const REDUCE_COLS: u32 = 16u;
const REDUCE_LANES: u32 = 16u;
override ACCUMULATE: bool = false;

@group(0) @binding(14) var<storage, read> partials: array<vec4f>;
@group(0) @binding(15) var<storage, read_write> dparam: array<vec4f>;

@compute @workgroup_size(256)
fn reduce_partials(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let col = (wid.x + wid.y * nwg.x) * REDUCE_COLS + lid % REDUCE_COLS;
  let lane = lid / REDUCE_COLS;
  let groups = (params.rows + params.rows_per_group - 1u) / params.rows_per_group;
  var acc = vec4f(0.0);
  if (col < dim4()) {
    for (var g = lane; g < groups; g += REDUCE_LANES) {
      acc += partials[g * dim4() + col];
    }
  }
  col_scratch[lid] = acc;
  workgroupBarrier();
  for (var s = REDUCE_LANES / 2u; s > 0u; s >>= 1u) {
    if (lane < s) {
      col_scratch[lid] += col_scratch[lid + s * REDUCE_COLS];
    }
    workgroupBarrier();
  }
  if (lane == 0u && col < dim4()) {
    if (ACCUMULATE) {
      dparam[col] += col_scratch[lid];
    } else {
      dparam[col] = col_scratch[lid];
    }
  }
}
