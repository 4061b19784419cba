// matmul: out[b] (+)= op(A[b]) · op(B[b]) with op = identity or transpose, f32 accumulate; with
// ACCUMULATE the product is added to what out holds (GEMM beta = 1).
// matmul_add (RESIDUAL): out[b] = residual[b] + op(A[b]) · op(B[b]). Plain matmul binds a
// placeholder there that it never reads.
//
// - Blocks: one workgroup of 256 threads (16 x 16) computes a 64 x 128 block of out. A thread owns
//   rows 4·ty + i (i < 4) and vec4 columns 4·tx + 64·q (q < 2), so a warp's vec4 reads of the
//   shared tiles hit consecutive words and each vec4 of A and B feeds 16 FMAs. Four rows a thread
//   beat eight (128 x 128 blocks) on large matrices, though eight need fewer shared-memory reads
//   a FMA.
// - Order: workgroups are taken in groups of GROUP_M row blocks, column by column within a group,
//   so the blocks in flight at one time share GROUP_M row blocks of A and a few column blocks of
//   B (L2 reuse on large matrices).
// - Loads: each thread moves groups of 4 consecutive values of an operand's contiguous global
//   dimension. On an interior tile (rows and k in range, contiguous extent a multiple of 4) a group
//   is one vec4 load from an offset computed once per workgroup plus k0 times a stride; tiles at
//   the edges load the group's values one by one, zero outside, so any m, n, k is correct.
// - Shared tiles are k-major whatever the transposes (so the inner loop is the same for all) and
//   unpadded, in rows of 64 values: A's value (k, m) is at row buffer·BK + k, vec4 column m/4;
//   B's (k, n) at row (buffer·BK + k)·2 + n/64, vec4 column (n % 64)/4. Groups along m (aᵀ) or n (b) are stored as one vec4;
//   groups along k (a, bᵀ) as 4 scalars into 4 k rows, at vec4 column XORed with swizzle(k) so a
//   warp's scalar stores hit 32 different banks; the inner loop applies the same XOR when it reads
//   them. Indices in the inner loop are constants (after unrolling) plus tx or ty, so the bounds
//   clamps Dawn adds to workgroup array accesses fold or hoist out of the loop.
// - Steps of BK = 16 (a k-contiguous row read is 64 bytes, a whole DRAM burst), double-buffered:
//   step s multiplies one buffer while the next tile, loaded into registers at the step's start
//   (its latency hidden by the FMAs), is stored into the other; one barrier a step. The step loop
//   is unrolled by two so the buffer index is a constant in each half. 24 KiB of workgroup memory.

struct Params {
  m: u32,
  n: u32,
  k: u32,
  // elements between consecutive batch items of a, b and out
  batch_stride_a: u32,
  batch_stride_b: u32,
  batch_stride_out: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4f>;
@group(0) @binding(2) var<storage, read> b: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(4) var<storage, read> residual: array<f32>;

// a is [k, m] (else [m, k]); b is [n, k] (else [k, n])
override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ACCUMULATE: bool = false;
override RESIDUAL: bool = false;

const THREADS = 256u;
const BK = 16u;
const BM = 64u;
const BN = 128u;
// row blocks a group of workgroups shares (see Order above)
const GROUP_M = 16u;
// vec4s of one buffer of each tile
const TILE_A = BK * BM / 4u;
const TILE_B = BK * BN / 4u;
// 64-value rows of each tile, both buffers
const ROWS_A = 2u * BK;
const ROWS_B = 2u * BK * BN / 64u;
var<workgroup> tile_a: array<array<vec4f, 16>, ROWS_A>;
var<workgroup> tile_b: array<array<vec4f, 16>, ROWS_B>;

// 4-value groups per thread and tile: 1 for A, 2 for B
const GROUPS_MAX = 2u;
const GROUPS_A = TILE_A / THREADS;
const GROUPS_B = TILE_B / THREADS;

// This thread's groups: global element offset of the first value at k0 = 0, and the values in
// flight between the global load and the shared store.
var<private> off_a: array<u32, GROUPS_MAX> = array<u32, GROUPS_MAX>();
var<private> off_b: array<u32, GROUPS_MAX> = array<u32, GROUPS_MAX>();
var<private> reg_a: array<vec4f, GROUPS_MAX> = array<vec4f, GROUPS_MAX>();
var<private> reg_b: array<vec4f, GROUPS_MAX> = array<vec4f, GROUPS_MAX>();

// Group g of the A tile: (row of out, k) of its first value. Groups run along the contiguous
// dimension first, so consecutive threads read consecutive addresses.
fn group_a(g: u32) -> vec2u {
  if (TRANS_A) {
    return vec2u(4u * (g % (BM / 4u)), g / (BM / 4u));
  }
  return vec2u(g / (BK / 4u), 4u * (g % (BK / 4u)));
}

// Group g of the B tile: (column of out, k) of its first value.
fn group_b(g: u32) -> vec2u {
  if (TRANS_B) {
    return vec2u(g / (BK / 4u), 4u * (g % (BK / 4u)));
  }
  return vec2u(4u * (g % (BN / 4u)), g / (BN / 4u));
}

// XOR applied to the vec4 column of a tile written by scalar stores (groups along k): a warp's
// groups cover 8 consecutive m (or n) and the 4 k-groups; XORing the vec4 column with twice the
// k-group spreads them over all 8 vec4 columns of a bank row.
fn swizzle(kk: u32, along_k: bool) -> u32 {
  return select(0u, (kk / 4u) * 2u, along_k);
}

fn init_offsets(t: u32, m0: u32, n0: u32, base_a: u32, base_b: u32) {
  for (var j = 0u; j < GROUPS_A; j++) {
    let c = group_a(t + THREADS * j);
    off_a[j] = base_a + select((m0 + c.x) * params.k + c.y, c.y * params.m + m0 + c.x, TRANS_A);
  }
  for (var j = 0u; j < GROUPS_B; j++) {
    let c = group_b(t + THREADS * j);
    off_b[j] = base_b + select(c.y * params.n + n0 + c.x, (n0 + c.x) * params.k + c.y, TRANS_B);
  }
}

// Global -> registers: this thread's groups of the tiles at k0.
fn fetch(t: u32, m0: u32, n0: u32, k0: u32) {
  let k_in = k0 + BK <= params.k;
  let fast_a = k_in && m0 + BM <= params.m && select(params.k, params.m, TRANS_A) % 4u == 0u;
  let step_a = k0 * select(1u, params.m, TRANS_A);
  for (var j = 0u; j < GROUPS_A; j++) {
    let g = t + THREADS * j;
    let o = off_a[j] + step_a;
    if (fast_a) {
      reg_a[j] = a[o / 4u];
      continue;
    }
    let c = group_a(g);
    var v = vec4f(0.0);
    for (var e = 0u; e < 4u; e++) {
      let row = m0 + c.x + select(0u, e, TRANS_A);
      let kk = k0 + c.y + select(e, 0u, TRANS_A);
      if (row < params.m && kk < params.k) { v[e] = a[(o + e) / 4u][(o + e) % 4u]; }
    }
    reg_a[j] = v;
  }
  let fast_b = k_in && n0 + BN <= params.n && select(params.n, params.k, TRANS_B) % 4u == 0u;
  let step_b = k0 * select(params.n, 1u, TRANS_B);
  for (var j = 0u; j < GROUPS_B; j++) {
    let g = t + THREADS * j;
    let o = off_b[j] + step_b;
    if (fast_b) {
      reg_b[j] = b[o / 4u];
      continue;
    }
    let c = group_b(g);
    var v = vec4f(0.0);
    for (var e = 0u; e < 4u; e++) {
      let col = n0 + c.x + select(e, 0u, TRANS_B);
      let kk = k0 + c.y + select(0u, e, TRANS_B);
      if (col < params.n && kk < params.k) { v[e] = b[(o + e) / 4u][(o + e) % 4u]; }
    }
    reg_b[j] = v;
  }
}

// Registers -> shared buffer `buf`.
fn stash(t: u32, buf: u32) {
  for (var j = 0u; j < GROUPS_A; j++) {
    let c = group_a(t + THREADS * j);
    let col = c.x / 4u;
    if (TRANS_A) {
      tile_a[buf * BK + c.y][col] = reg_a[j];
    } else {
      for (var e = 0u; e < 4u; e++) {
        let kk = c.y + e;
        tile_a[buf * BK + kk][col ^ swizzle(kk, true)][c.x % 4u] = reg_a[j][e];
      }
    }
  }
  for (var j = 0u; j < GROUPS_B; j++) {
    let c = group_b(t + THREADS * j);
    let col = (c.x % 64u) / 4u;
    if (TRANS_B) {
      for (var e = 0u; e < 4u; e++) {
        let kk = c.y + e;
        tile_b[(buf * BK + kk) * (BN / 64u) + c.x / 64u][col ^ swizzle(kk, true)][c.x % 4u] = reg_b[j][e];
      }
    } else {
      tile_b[(buf * BK + c.y) * (BN / 64u) + c.x / 64u][col] = reg_b[j];
    }
  }
}

// One k-step on shared buffer `buf`: fetch the next tile into registers, multiply, store the next
// tile into the other buffer.
fn step(t: u32, m0: u32, n0: u32, s: u32, steps: u32, buf: u32, acc: ptr<function, array<vec4f, 8>>) {
  if (s + 1u < steps) {
    fetch(t, m0, n0, (s + 1u) * BK);
  }
  let tx = t % 16u;
  let ty = t / 16u;
  for (var kk = 0u; kk < BK; kk++) {
    var bv = array<vec4f, 2>();
    for (var q = 0u; q < 2u; q++) {
      bv[q] = tile_b[(buf * BK + kk) * (BN / 64u) + q][tx ^ swizzle(kk, TRANS_B)];
    }
    let av = tile_a[buf * BK + kk][ty ^ swizzle(kk, !TRANS_A)];
    for (var i = 0u; i < 4u; i++) {
      for (var q = 0u; q < 2u; q++) {
        let r = i * 2u + q;
        (*acc)[r] = fma(vec4f(av[i]), bv[q], (*acc)[r]);
      }
    }
  }
  // the other buffer was last read in the previous step, before its closing barrier
  if (s + 1u < steps) { stash(t, 1u - buf); }
  workgroupBarrier();
}

// (column block, row block) of workgroup wid in a grid of nwg (see Order above)
fn block_of(wid: vec3u, nwg: vec3u) -> vec2u {
  let linear = wid.y * nwg.x + wid.x;
  let per_group = GROUP_M * nwg.x;
  let first_m = (linear / per_group) * GROUP_M;
  let rows = min(nwg.y - first_m, GROUP_M);
  let r = linear % per_group;
  return vec2u(r / rows, first_m + r % rows);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u, @builtin(local_invocation_index) t: u32) {
  let tx = t % 16u;
  let ty = t / 16u;
  let blk = block_of(wid, nwg);
  let m0 = blk.y * BM;
  let n0 = blk.x * BN;
  init_offsets(t, m0, n0, wid.z * params.batch_stride_a, wid.z * params.batch_stride_b);

  // acc[i·2 + q]: row 4·ty + i, vec4 column q
  var acc = array<vec4f, 8>();

  let steps = (params.k + BK - 1u) / BK;
  fetch(t, m0, n0, 0u);
  stash(t, 0u);
  workgroupBarrier();
  // steps in pairs, so each call's buffer is a constant once the driver inlines it
  for (var s = 0u; s < steps; s += 2u) {
    step(t, m0, n0, s, steps, 0u, &acc);
    if (s + 1u < steps) {
      step(t, m0, n0, s + 1u, steps, 1u, &acc);
    }
  }

  let base_out = wid.z * params.batch_stride_out;
  for (var i = 0u; i < 4u; i++) {
    let row = m0 + 4u * ty + i;
    if (row >= params.m) { continue; }
    for (var q = 0u; q < 2u; q++) {
      let v = acc[i * 2u + q];
      let col0 = n0 + 64u * q + 4u * tx;
      for (var j = 0u; j < 4u; j++) {
        if (col0 + j >= params.n) { continue; }
        let o = base_out + row * params.n + col0 + j;
        if (ACCUMULATE) {
          out[o] += v[j];
        } else if (RESIDUAL) {
          out[o] = residual[o] + v[j];
        } else {
          out[o] = v[j];
        }
      }
    }
  }
}
