// attention: flash-style forward with an online softmax, and the flash-attention-2 backward
// (row_dot: Drow = rowsum(dO∘O); backward_kv: dK, dV per KV tile looping over Q tiles and the q
// heads of its GQA group; backward_q: dQ per Q tile looping over KV tiles). Tensors are
// [B, T, H, D] read as vec4 (D % 4 == 0); lse and Drow are [B, Hq, T]. Scores and probabilities
// live only in workgroup memory, one tile at a time.
//
// Each workgroup owns ROWS rows (queries in forward/backward_q, keys in backward_kv) whose
// outputs it accumulates in registers, and streams the other side through workgroup memory
// STREAM rows at a time. Thread layouts:
//   accumulate: thread (rg = lid / D4P, cg = lid % D4P) owns vec4 column cg of rows rg + i·RG
//   scores:     thread owns row lid / TPO and streamed rows lid % TPO + j·TPO, j < SC
// Tile rows are D4P vec4 wide (head_dim/4 padded to a power of two; padding is zero).
// Loops over head_dim and over the streamed rows run to their actual counts (params.d4, the rows
// left before T): besides skipping padding, this keeps lavapipe's LLVM from unrolling them, which
// would make each pipeline's compile far slower.
// Private arrays are declared with explicit initializers: on lavapipe a loop-scoped
// `var s: array<f32, 8>;` keeps its previous iteration's values instead of starting at zero.
// Workgroup arrays are sized for the largest configuration the host picks
// (src/backend/webgpu/kernels/attention.ts); each entry point stays under 32 KiB.

struct Params {
  batch: u32,
  seq_len: u32,
  heads: u32,
  kv_heads: u32,
  d4: u32,
  causal: u32,
  scale: f32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>;
@group(0) @binding(2) var<storage, read> k: array<vec4f>;
@group(0) @binding(3) var<storage, read> v: array<vec4f>;
@group(0) @binding(4) var<storage, read> seg_ids: array<i32>;
@group(0) @binding(5) var<storage, read_write> out: array<vec4f>;
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;
// The backward reads the forward's outputs through read-only bindings of their own.
@group(0) @binding(7) var<storage, read> saved_out: array<vec4f>;
@group(0) @binding(8) var<storage, read> saved_lse: array<f32>;
@group(0) @binding(9) var<storage, read> dout: array<vec4f>;
// (lse, Drow) of each query row, [B, Hq, T]: written by row_dot so the dK/dV and dQ kernels bind one
// buffer for both and stay within WebGPU's default of 8 storage buffers per stage.
@group(0) @binding(10) var<storage, read_write> row_stats: array<vec2f>;
@group(0) @binding(11) var<storage, read_write> dq: array<vec4f>;
@group(0) @binding(12) var<storage, read_write> dk: array<vec4f>;
@group(0) @binding(13) var<storage, read_write> dv: array<vec4f>;

const WG: u32 = 128u;
// Score of a masked (query, key) pair; also the running max before any key was seen.
const MASKED: f32 = -1e38;

override D4P: u32 = 16u;
override TM: u32 = 8u;
override STREAM: u32 = 16u;
override RG: u32 = WG / D4P;
override ROWS: u32 = TM * RG;
override TPO: u32 = WG / ROWS;
override SC: u32 = STREAM / TPO;

fn q_index(b: u32, t: u32, h: u32) -> u32 {
  return ((b * params.seq_len + t) * params.heads + h) * params.d4;
}

fn kv_index(b: u32, t: u32, h: u32) -> u32 {
  return ((b * params.seq_len + t) * params.kv_heads + h) * params.d4;
}

fn row_index(b: u32, h: u32, t: u32) -> u32 {
  return (b * params.heads + h) * params.seq_len + t;
}

fn seg_of(b: u32, t: u32) -> i32 {
  return seg_ids[b * params.seq_len + min(t, params.seq_len - 1u)];
}

fn visible(qi: u32, qseg: i32, kj: u32, kseg: i32) -> bool {
  let T = params.seq_len;
  return qi < T && kj < T && (params.causal == 0u || kj <= qi) && qseg == kseg;
}

// Element e of a rows × D4P tile starting at row t0 of a [B, T, H, D] tensor (zero past T or D).
fn q_elem(b: u32, h: u32, t0: u32, e: u32) -> vec4f {
  let t = t0 + e / D4P;
  let c = e % D4P;
  if (t < params.seq_len && c < params.d4) { return q[q_index(b, t, h) + c]; }
  return vec4f(0.0);
}

fn dout_elem(b: u32, h: u32, t0: u32, e: u32) -> vec4f {
  let t = t0 + e / D4P;
  let c = e % D4P;
  if (t < params.seq_len && c < params.d4) { return dout[q_index(b, t, h) + c]; }
  return vec4f(0.0);
}

fn k_elem(b: u32, h: u32, t0: u32, e: u32) -> vec4f {
  let t = t0 + e / D4P;
  let c = e % D4P;
  if (t < params.seq_len && c < params.d4) { return k[kv_index(b, t, h) + c]; }
  return vec4f(0.0);
}

fn v_elem(b: u32, h: u32, t0: u32, e: u32) -> vec4f {
  let t = t0 + e / D4P;
  let c = e % D4P;
  if (t < params.seq_len && c < params.d4) { return v[kv_index(b, t, h) + c]; }
  return vec4f(0.0);
}

// Causal: the last query tiles see the most keys, so they are dispatched first.
fn query_tile_start(wid_x: u32, groups_x: u32) -> u32 {
  return (groups_x - 1u - wid_x) * ROWS;
}

// Keys a query tile starting at q0 can see: with a causal mask none past its last row.
fn key_end(q0: u32) -> u32 {
  return select(params.seq_len, min(params.seq_len, q0 + ROWS), params.causal != 0u);
}

// --- forward ---

var<workgroup> f_q: array<vec4f, 1024>;  // Q tile, ROWS × D4P
var<workgroup> f_kv: array<vec4f, 512>;  // K tile, then V tile, STREAM × D4P
var<workgroup> f_s: array<f32, 1024>;    // scores, then probabilities, ROWS × STREAM
var<workgroup> f_kseg: array<i32, 16>;
var<workgroup> f_max: array<f32, 64>;    // running max of each row
var<workgroup> f_sum: array<f32, 64>;    // running sum of exp(score - max)
var<workgroup> f_alpha: array<f32, 64>;  // rescale of the accumulators by this tile's new max

@compute @workgroup_size(WG)
fn forward(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let b = wid.z;
  let h = wid.y;
  let kvh = h / (params.heads / params.kv_heads);
  let q0 = query_tile_start(wid.x, nwg.x);
  for (var e = lid; e < ROWS * D4P; e += WG) { f_q[e] = q_elem(b, h, q0, e); }
  for (var r = lid; r < ROWS; r += WG) {
    f_max[r] = MASKED;
    f_sum[r] = 0.0;
  }
  let so = lid / TPO;
  let sfirst = lid % TPO;
  let qi = q0 + so;
  let qseg = seg_of(b, qi);
  let rg = lid / D4P;
  let cg = lid % D4P;
  var acc = array<vec4f, 8>();

  let kend = key_end(q0);
  for (var k0 = 0u; k0 < kend; k0 += STREAM) {
    workgroupBarrier(); // the previous tile's f_kv and f_s are consumed
    for (var e = lid; e < STREAM * D4P; e += WG) { f_kv[e] = k_elem(b, kvh, k0, e); }
    if (lid < STREAM) { f_kseg[lid] = seg_of(b, k0 + lid); }
    workgroupBarrier();

    let kcount = min(STREAM, params.seq_len - k0);
    var s = array<f32, 8>();
    for (var d = 0u; d < params.d4; d++) {
      let qv = f_q[so * D4P + d];
      for (var j = 0u; j < SC; j++) { s[j] += dot(qv, f_kv[(sfirst + j * TPO) * D4P + d]); }
    }
    for (var j = 0u; j < SC; j++) {
      let c = sfirst + j * TPO;
      f_s[so * STREAM + c] = select(MASKED, s[j] * params.scale, visible(qi, qseg, k0 + c, f_kseg[c]));
    }
    workgroupBarrier();

    if (lid < ROWS) {
      let old_max = f_max[lid];
      var new_max = old_max;
      for (var c = 0u; c < kcount; c++) { new_max = max(new_max, f_s[lid * STREAM + c]); }
      var sum = 0.0;
      for (var c = 0u; c < kcount; c++) {
        let sc = f_s[lid * STREAM + c];
        let p = select(0.0, exp(sc - new_max), sc != MASKED);
        f_s[lid * STREAM + c] = p;
        sum += p;
      }
      let alpha = exp(old_max - new_max);
      f_alpha[lid] = alpha;
      f_sum[lid] = f_sum[lid] * alpha + sum;
      f_max[lid] = new_max;
    }
    for (var e = lid; e < STREAM * D4P; e += WG) { f_kv[e] = v_elem(b, kvh, k0, e); }
    workgroupBarrier();

    for (var i = 0u; i < TM; i++) { acc[i] *= f_alpha[rg + i * RG]; }
    for (var c = 0u; c < kcount; c++) {
      let vv = f_kv[c * D4P + cg];
      for (var i = 0u; i < TM; i++) { acc[i] += f_s[(rg + i * RG) * STREAM + c] * vv; }
    }
  }

  for (var i = 0u; i < TM; i++) {
    let r = rg + i * RG;
    let t = q0 + r;
    if (t < params.seq_len) {
      let sum = f_sum[r];
      if (cg < params.d4) { out[q_index(b, t, h) + cg] = acc[i] / sum; }
      if (cg == 0u) { lse[row_index(b, h, t)] = f_max[r] + log(sum); }
    }
  }
}

// --- backward ---

// Drow[b, h, t] = Σ_d dO·O, stored with the row's lse; one thread per (b, t, h) row.
@compute @workgroup_size(WG)
fn row_dot(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let n = gid.x + gid.y * nwg.x * WG;
  let T = params.seq_len;
  let H = params.heads;
  if (n >= params.batch * T * H) { return; }
  var acc = 0.0;
  for (var d = 0u; d < params.d4; d++) { acc += dot(dout[n * params.d4 + d], saved_out[n * params.d4 + d]); }
  let h = n % H;
  let t = (n / H) % T;
  let b = n / (H * T);
  let row = row_index(b, h, t);
  row_stats[row] = vec2f(saved_lse[row], acc);
}

// dK, dV of one KV tile (ROWS keys), over all queries of the q heads sharing this kv head.
var<workgroup> bk_k: array<vec4f, 512>;  // ROWS × D4P
var<workgroup> bk_v: array<vec4f, 512>;
var<workgroup> bk_x: array<vec4f, 512>;  // Q tile, then dO tile, then Q again: STREAM × D4P
var<workgroup> bk_p: array<f32, 512>;    // P, STREAM × ROWS
var<workgroup> bk_ds: array<f32, 512>;   // dS, STREAM × ROWS
var<workgroup> bk_lse: array<f32, 16>;
var<workgroup> bk_drow: array<f32, 16>;
var<workgroup> bk_qseg: array<i32, 16>;

@compute @workgroup_size(WG)
fn backward_kv(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u) {
  let T = params.seq_len;
  let b = wid.z;
  let kvh = wid.y;
  let k0 = wid.x * ROWS;
  let group = params.heads / params.kv_heads;
  for (var e = lid; e < ROWS * D4P; e += WG) {
    bk_k[e] = k_elem(b, kvh, k0, e);
    bk_v[e] = v_elem(b, kvh, k0, e);
  }
  let so = lid / TPO;
  let sfirst = lid % TPO;
  let kj = k0 + so;
  let kseg = seg_of(b, kj);
  let rg = lid / D4P;
  let cg = lid % D4P;
  var dk_acc = array<vec4f, 8>();
  var dv_acc = array<vec4f, 8>();
  // Causal: queries before this tile's first key see none of it.
  let qstart = select(0u, (k0 / STREAM) * STREAM, params.causal != 0u);

  for (var hi = 0u; hi < group; hi++) {
    let h = kvh * group + hi;
    for (var q0 = qstart; q0 < T; q0 += STREAM) {
      workgroupBarrier(); // the previous tile's bk_x, bk_ds and row values are consumed
      for (var e = lid; e < STREAM * D4P; e += WG) { bk_x[e] = q_elem(b, h, q0, e); }
      if (lid < STREAM) {
        let t = min(q0 + lid, T - 1u);
        let stats = row_stats[row_index(b, h, t)];
        bk_lse[lid] = stats.x;
        bk_drow[lid] = stats.y;
        bk_qseg[lid] = seg_of(b, t);
      }
      workgroupBarrier();

      let qcount = min(STREAM, T - q0);
      var s = array<f32, 8>();
      for (var d = 0u; d < params.d4; d++) {
        let kv = bk_k[so * D4P + d];
        for (var j = 0u; j < SC; j++) { s[j] += dot(bk_x[(sfirst + j * TPO) * D4P + d], kv); }
      }
      var p = array<f32, 8>();
      for (var j = 0u; j < SC; j++) {
        let r = sfirst + j * TPO;
        p[j] = select(0.0, exp(s[j] * params.scale - bk_lse[r]), visible(q0 + r, bk_qseg[r], kj, kseg));
        bk_p[r * ROWS + so] = p[j];
      }
      workgroupBarrier();
      for (var e = lid; e < STREAM * D4P; e += WG) { bk_x[e] = dout_elem(b, h, q0, e); }
      workgroupBarrier();

      var dp = array<f32, 8>();
      for (var d = 0u; d < params.d4; d++) {
        let vv = bk_v[so * D4P + d];
        for (var j = 0u; j < SC; j++) { dp[j] += dot(bk_x[(sfirst + j * TPO) * D4P + d], vv); }
      }
      for (var j = 0u; j < SC; j++) {
        let r = sfirst + j * TPO;
        bk_ds[r * ROWS + so] = p[j] * (dp[j] - bk_drow[r]);
      }
      for (var r = 0u; r < qcount; r++) {
        let ov = bk_x[r * D4P + cg];
        for (var i = 0u; i < TM; i++) { dv_acc[i] += bk_p[r * ROWS + rg + i * RG] * ov; }
      }
      workgroupBarrier();
      for (var e = lid; e < STREAM * D4P; e += WG) { bk_x[e] = q_elem(b, h, q0, e); }
      workgroupBarrier();

      for (var r = 0u; r < qcount; r++) {
        let qv = bk_x[r * D4P + cg];
        for (var i = 0u; i < TM; i++) { dk_acc[i] += bk_ds[r * ROWS + rg + i * RG] * qv; }
      }
    }
  }

  for (var i = 0u; i < TM; i++) {
    let t = k0 + rg + i * RG;
    if (t < T && cg < params.d4) {
      dk[kv_index(b, t, kvh) + cg] = dk_acc[i] * params.scale;
      dv[kv_index(b, t, kvh) + cg] = dv_acc[i];
    }
  }
}

// dQ of one Q tile (ROWS queries), over the keys it can see.
var<workgroup> bq_q: array<vec4f, 512>;   // ROWS × D4P
var<workgroup> bq_do: array<vec4f, 512>;
var<workgroup> bq_k: array<vec4f, 256>;   // STREAM × D4P
var<workgroup> bq_v: array<vec4f, 256>;
var<workgroup> bq_ds: array<f32, 1024>;   // dS, ROWS × STREAM
var<workgroup> bq_kseg: array<i32, 32>;

@compute @workgroup_size(WG)
fn backward_q(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let b = wid.z;
  let h = wid.y;
  let kvh = h / (params.heads / params.kv_heads);
  let q0 = query_tile_start(wid.x, nwg.x);
  for (var e = lid; e < ROWS * D4P; e += WG) {
    bq_q[e] = q_elem(b, h, q0, e);
    bq_do[e] = dout_elem(b, h, q0, e);
  }
  let so = lid / TPO;
  let sfirst = lid % TPO;
  let qi = q0 + so;
  let stats = row_stats[row_index(b, h, min(qi, params.seq_len - 1u))];
  let row_lse = stats.x;
  let row_drow = stats.y;
  let qseg = seg_of(b, qi);
  let rg = lid / D4P;
  let cg = lid % D4P;
  var acc = array<vec4f, 8>();

  let kend = key_end(q0);
  for (var k0 = 0u; k0 < kend; k0 += STREAM) {
    workgroupBarrier(); // the previous tile's bq_k and bq_ds are consumed
    for (var e = lid; e < STREAM * D4P; e += WG) {
      bq_k[e] = k_elem(b, kvh, k0, e);
      bq_v[e] = v_elem(b, kvh, k0, e);
    }
    if (lid < STREAM) { bq_kseg[lid] = seg_of(b, k0 + lid); }
    workgroupBarrier();

    let kcount = min(STREAM, params.seq_len - k0);
    var s = array<f32, 8>();
    var dp = array<f32, 8>();
    for (var d = 0u; d < params.d4; d++) {
      let qv = bq_q[so * D4P + d];
      let ov = bq_do[so * D4P + d];
      for (var j = 0u; j < SC; j++) {
        let c = (sfirst + j * TPO) * D4P + d;
        s[j] += dot(qv, bq_k[c]);
        dp[j] += dot(ov, bq_v[c]);
      }
    }
    for (var j = 0u; j < SC; j++) {
      let c = sfirst + j * TPO;
      let p = select(0.0, exp(s[j] * params.scale - row_lse), visible(qi, qseg, k0 + c, bq_kseg[c]));
      bq_ds[so * STREAM + c] = p * (dp[j] - row_drow);
    }
    workgroupBarrier();

    for (var c = 0u; c < kcount; c++) {
      let kv = bq_k[c * D4P + cg];
      for (var i = 0u; i < TM; i++) { acc[i] += bq_ds[(rg + i * RG) * STREAM + c] * kv; }
    }
  }

  for (var i = 0u; i < TM; i++) {
    let t = q0 + rg + i * RG;
    if (t < params.seq_len && cg < params.d4) { dq[q_index(b, t, h) + cg] = acc[i] * params.scale; }
  }
}
