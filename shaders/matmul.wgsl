// matmul: out[b] (+)= op(A[b]) · op(B[b]) with op = identity or transpose, f32 accumulate; with
// ACCUMULATE the product is added to what out holds (GEMM beta = 1).
//
// One workgroup of 256 threads (16 x 16) computes a (16·TM) x 128 block of out; each thread owns
// TM x 8 outputs, split in two column halves of 4 (cols tx·4.. and 64 + tx·4..) and, for TM = 8,
// two row halves (rows ty·4.. and 64 + ty·4..), so a warp's vec4 reads of the shared tiles hit
// consecutive words (no bank conflicts) and each vec4 of A and B feeds 16 FMAs.
// K advances in steps of BK = 16 through a shared tile: the next global tile is loaded into
// registers while the current one is multiplied (so a step's compute hides the load latency, which
// matters once the matrices outgrow L2), then stored after a barrier. BK = 16 makes each row read
// of a k-contiguous operand 64 bytes, a whole DRAM burst. Tiles are kept k-major in shared memory (tileA[k][m], tileB[k][n]) whatever
// the transposes, so the inner loop is the same for every variant; the transposes only change the
// global load pattern (chosen by pipeline constants, so each variant compiles to straight code).
// Out-of-range rows, columns and k are loaded as zero, so any m, n, k is correct.
//
// This is the `default` kernel variant. MDLM_MATMUL_VARIANT (src/backend/webgpu/kernels/matmul.ts)
// picks the others, all in matmul_vec4.wgsl: `vec4` (this step structure with vec4 global loads on
// interior tiles and vec4 shared stores where the layout allows), `db` (vec4 plus double-buffered
// shared tiles, one barrier per step), `db8` (db with BK = 8) and `wide` (db8 with 128 x 256 blocks,
// 8 x 16 outputs per thread).

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
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// a is [k, m] (else [m, k]); b is [n, k] (else [k, n])
override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ACCUMULATE: bool = false;
// rows of out per thread: 8 (128 x 128 block) or 4 (64 x 128 block, for grids too small to fill the GPU)
override TM: u32 = 8u;

const BK = 16u;
const BN = 128u;
const BM_MAX = 128u; // = BN
const THREADS = 256u;

// [k][column / 4]; one vec4 of padding per row shifts banks between k rows
const ROW_VEC4 = BM_MAX / 4u + 1u;
var<workgroup> tile_a: array<array<vec4f, ROW_VEC4>, BK>;
var<workgroup> tile_b: array<array<vec4f, ROW_VEC4>, BK>;
// per-thread share of a tile: (16·TM·BK or BN·BK) / THREADS values
const SHARE_MAX = BN * BK / THREADS;

fn load_a(base: u32, row: u32, kk: u32) -> f32 {
  if (row >= params.m || kk >= params.k) {
    return 0.0;
  }
  return a[base + select(row * params.k + kk, kk * params.m + row, TRANS_A)];
}

fn load_b(base: u32, col: u32, kk: u32) -> f32 {
  if (col >= params.n || kk >= params.k) {
    return 0.0;
  }
  return b[base + select(kk * params.n + col, col * params.k + kk, TRANS_B)];
}

// Global -> registers: this thread's share of the A tile (TM values) and B tile (8 values) at k0.
// Value j of thread t is tile element e = t + 256·j in the order of the tile's contiguous global
// dimension, so each load instruction of a warp reads 32 consecutive or 4 x 8 consecutive floats.
fn a_coord(e: u32) -> vec2u {
  // (row of out, k) within the tile
  if (TRANS_A) {
    return vec2u(e % (16u * TM), e / (16u * TM));
  }
  return vec2u(e / BK, e % BK);
}

fn b_coord(e: u32) -> vec2u {
  // (column of out, k) within the tile
  if (TRANS_B) {
    return vec2u(e / BK, e % BK);
  }
  return vec2u(e % BN, e / BN);
}

fn fetch_a(base: u32, m0: u32, k0: u32, t: u32) -> array<f32, SHARE_MAX> {
  var v: array<f32, SHARE_MAX>;
  for (var j = 0u; j < TM; j++) {
    let c = a_coord(t + THREADS * j);
    v[j] = load_a(base, m0 + c.x, k0 + c.y);
  }
  return v;
}

fn fetch_b(base: u32, n0: u32, k0: u32, t: u32) -> array<f32, SHARE_MAX> {
  var v: array<f32, SHARE_MAX>;
  for (var j = 0u; j < SHARE_MAX; j++) {
    let c = b_coord(t + THREADS * j);
    v[j] = load_b(base, n0 + c.x, k0 + c.y);
  }
  return v;
}

// Registers -> shared tiles (k-major; the padded rows keep these scattered stores nearly conflict-free).
fn stash(va: array<f32, SHARE_MAX>, vb: array<f32, SHARE_MAX>, t: u32) {
  for (var j = 0u; j < TM; j++) {
    let c = a_coord(t + THREADS * j);
    tile_a[c.y][c.x / 4u][c.x % 4u] = va[j];
  }
  for (var j = 0u; j < SHARE_MAX; j++) {
    let c = b_coord(t + THREADS * j);
    tile_b[c.y][c.x / 4u][c.x % 4u] = vb[j];
  }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_index) t: u32) {
  let tx = t % 16u;
  let ty = t / 16u;
  let m0 = wid.y * 16u * TM;
  let n0 = wid.x * BN;
  let base_a = wid.z * params.batch_stride_a;
  let base_b = wid.z * params.batch_stride_b;

  // acc[2·i + h]: row i of this thread's rows, column half h
  var acc: array<vec4f, 16>;
  for (var i = 0u; i < 16u; i++) { acc[i] = vec4f(0.0); }

  let steps = (params.k + BK - 1u) / BK;
  var next_a = fetch_a(base_a, m0, 0u, t);
  var next_b = fetch_b(base_b, n0, 0u, t);
  for (var s = 0u; s < steps; s++) {
    workgroupBarrier(); // the previous step's reads of the tiles are done
    stash(next_a, next_b, t);
    workgroupBarrier();
    if (s + 1u < steps) {
      next_a = fetch_a(base_a, m0, (s + 1u) * BK, t);
      next_b = fetch_b(base_b, n0, (s + 1u) * BK, t);
    }
    for (var kk = 0u; kk < BK; kk++) {
      let b_lo = tile_b[kk][tx];
      let b_hi = tile_b[kk][tx + 16u];
      for (var h = 0u; h < TM / 4u; h++) {
        let av = tile_a[kk][ty + 16u * h];
        for (var i = 0u; i < 4u; i++) {
          let r = 2u * (4u * h + i);
          acc[r] = fma(vec4f(av[i]), b_lo, acc[r]);
          acc[r + 1u] = fma(vec4f(av[i]), b_hi, acc[r + 1u]);
        }
      }
    }
  }

  let base_out = wid.z * params.batch_stride_out;
  for (var h = 0u; h < TM / 4u; h++) {
    for (var i = 0u; i < 4u; i++) {
      let row = m0 + 64u * h + 4u * ty + i;
      if (row >= params.m) { continue; }
      for (var half = 0u; half < 2u; half++) {
        let v = acc[2u * (4u * h + i) + half];
        let col0 = n0 + 64u * half + 4u * tx;
        for (var j = 0u; j < 4u; j++) {
          if (col0 + j >= params.n) { continue; }
          let o = base_out + row * params.n + col0 + j;
          if (ACCUMULATE) { out[o] += v[j]; } else { out[o] = v[j]; }
        }
      }
    }
  }
}
