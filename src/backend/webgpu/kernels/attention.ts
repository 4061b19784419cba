import { type AttentionAttrs, attention, attentionBackward, gradRope } from '../../../ops/attention.js';
import type { Tensor } from '../../../tensor.js';
import { ceilDiv, defineKernel, grid1d, type KernelContext } from '../kernel.js';
import { dispatchRope } from './rope.js';

/** Threads per workgroup in shaders/attention.wgsl (WG). */
const WG = 128;

/** Pipeline constants of one entry point: padded vec4 columns, rows per thread, streamed tile rows. */
interface TileConfig {
  readonly D4P: number;
  readonly TM: number;
  readonly STREAM: number;
}

/**
 * Tile shapes by padded head width (D4P = headDim/4 rounded up to a power of two, at least 4),
 * chosen so each entry's workgroup arrays (sized in the shader for the largest of these) stay
 * under 32 KiB. A workgroup owns TM · (WG / D4P) rows.
 */
const FORWARD: Record<number, Omit<TileConfig, 'D4P'>> = {
  4: { TM: 2, STREAM: 16 }, // 64 query rows
  8: { TM: 4, STREAM: 16 },
  16: { TM: 8, STREAM: 16 },
  32: { TM: 8, STREAM: 16 }, // 32 query rows
};
const BACKWARD_KV: Record<number, Omit<TileConfig, 'D4P'>> = {
  4: { TM: 1, STREAM: 16 }, // 32 key rows
  8: { TM: 1, STREAM: 16 }, // 16 key rows
  16: { TM: 2, STREAM: 16 },
  32: { TM: 4, STREAM: 16 },
};
const BACKWARD_Q: Record<number, Omit<TileConfig, 'D4P'>> = {
  4: { TM: 1, STREAM: 32 }, // 32 query rows
  8: { TM: 1, STREAM: 32 }, // 16 query rows
  16: { TM: 2, STREAM: 16 },
  32: { TM: 4, STREAM: 8 },
};

function paddedColumns(headDim: number): number {
  let p = 4;
  while (p < headDim / 4) p *= 2;
  return p;
}

function tileConfig(table: Record<number, Omit<TileConfig, 'D4P'>>, headDim: number): TileConfig & { rows: number } {
  const D4P = paddedColumns(headDim);
  const c = table[D4P]!;
  return { D4P, ...c, rows: c.TM * (WG / D4P) };
}

function constants({ D4P, TM, STREAM }: TileConfig): Record<string, number> {
  return { D4P, TM, STREAM };
}

function uniformParams(a: AttentionAttrs) {
  return { batch: a.batch, seq_len: a.seqLen, heads: a.heads, kv_heads: a.kvHeads, d4: a.headDim / 4, causal: a.causal ? 1 : 0, scale: a.scale };
}

export const attentionKernel = defineKernel({
  op: attention,
  shaders: ['attention'],
  run(ctx: KernelContext, { q, k, v, segIds, out, lse }, a) {
    const cfg = tileConfig(FORWARD, a.headDim);
    ctx.dispatch({
      shader: 'attention',
      entry: 'forward',
      bindings: { params: uniformParams(a), q: q!, k: k!, v: v!, seg_ids: segIds!, out: out!, lse: lse! },
      workgroups: [ceilDiv(a.seqLen, cfg.rows), a.heads, a.batch],
      constants: constants(cfg),
    });
  },
});

export const attentionBackwardKernel = defineKernel({
  op: attentionBackward,
  shaders: ['attention', 'rope'],
  run(ctx: KernelContext, { q, k, v, segIds, out, lse, dout, positions, dq, dk, dv }, a) {
    const params = uniformParams(a);
    const rows = a.batch * a.seqLen * a.heads;
    // With gradStride or ropeBase the gradients are computed dense in scratch, then placed (dq and
    // dk turned back) by rope's kernel: dk and dv interleaved in one buffer's rows cannot be two
    // writable bindings of one dispatch.
    const placed = a.gradStride !== undefined || a.ropeBase !== undefined;
    const dense = (t: Tensor, heads: number) => (placed ? ctx.scratch([a.batch, a.seqLen, heads, a.headDim], t.dtype) : t);
    const g = { dq: dense(dq!, a.heads), dk: dense(dk!, a.kvHeads), dv: dense(dv!, a.kvHeads) };
    // (lse, Drow) per query row, interleaved.
    const rowStats = ctx.scratch([a.batch, a.heads, a.seqLen, 2], 'f32');
    ctx.dispatch({
      shader: 'attention',
      entry: 'row_dot',
      bindings: { params, dout: dout!, saved_out: out!, saved_lse: lse!, row_stats: rowStats },
      workgroups: grid1d(rows, WG),
    });
    const inputs = { params, q: q!, k: k!, v: v!, seg_ids: segIds!, dout: dout!, row_stats: rowStats };
    const kv = tileConfig(BACKWARD_KV, a.headDim);
    ctx.dispatch({
      shader: 'attention',
      entry: 'backward_kv',
      bindings: { ...inputs, dk: g.dk, dv: g.dv },
      workgroups: [ceilDiv(a.seqLen, kv.rows), a.kvHeads, a.batch],
      constants: constants(kv),
    });
    const qc = tileConfig(BACKWARD_Q, a.headDim);
    ctx.dispatch({
      shader: 'attention',
      entry: 'backward_q',
      bindings: { ...inputs, dq: g.dq },
      workgroups: [ceilDiv(a.seqLen, qc.rows), a.heads, a.batch],
      constants: constants(qc),
    });
    if (!placed) return;
    const turn = a.ropeBase !== undefined;
    dispatchRope(ctx, 'rope_backward', g.dq, positions!, dq!, gradRope(a, a.heads, undefined, turn));
    dispatchRope(ctx, 'rope_backward', g.dk, positions!, dk!, gradRope(a, a.kvHeads, undefined, turn));
    dispatchRope(ctx, 'rope_backward', g.dv, positions!, dv!, gradRope(a, a.kvHeads, undefined, false));
  },
});
