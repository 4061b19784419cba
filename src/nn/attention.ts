/**
 * Self-attention: q/k/v projections, RoPE on q and k, flash attention (causal, bidirectional or
 * document-masked, grouped-query), output projection. Saves q, k, v, the output and the LSE.
 */
import type { Backend } from '../backend/backend.js';
import { attention, attentionBackward } from '../ops/attention.js';
import { rope, ropeBackward } from '../ops/rope.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import { Linear } from './linear.js';
import type { ParamStore } from './params.js';
import type { Workspace } from './workspace.js';

export interface AttentionShape {
  readonly batch: number;
  readonly seqLen: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  readonly ropeBase: number;
}

/** Temporaries shared by every attention layer (only one layer runs at a time). */
export class AttentionScratch {
  readonly qPre: Tensor;
  readonly kPre: Tensor;
  readonly dAttn: Tensor;
  readonly dq: Tensor;
  readonly dk: Tensor;
  readonly dv: Tensor;

  constructor(arena: Arena, s: AttentionShape) {
    const q = [s.batch, s.seqLen, s.heads, s.headDim];
    const kv = [s.batch, s.seqLen, s.kvHeads, s.headDim];
    this.qPre = arena.alloc(q);
    this.kPre = arena.alloc(kv);
    this.dAttn = arena.alloc(q);
    this.dq = arena.alloc(q);
    this.dk = arena.alloc(kv);
    this.dv = arena.alloc(kv);
  }
}

export class SelfAttention {
  readonly q: Linear;
  readonly k: Linear;
  readonly v: Linear;
  readonly o: Linear;
  private readonly savedQ: Tensor;
  private readonly savedK: Tensor;
  private readonly savedV: Tensor;
  private readonly savedOut: Tensor;
  private readonly savedLse: Tensor;

  constructor(store: ParamStore, arena: Arena, name: string, dModel: number, readonly s: AttentionShape, private readonly scratch: AttentionScratch, std: number, outStd: number) {
    this.q = new Linear(store, `${name}.wq`, dModel, s.heads * s.headDim, std);
    this.k = new Linear(store, `${name}.wk`, dModel, s.kvHeads * s.headDim, std);
    this.v = new Linear(store, `${name}.wv`, dModel, s.kvHeads * s.headDim, std);
    this.o = new Linear(store, `${name}.wo`, s.heads * s.headDim, dModel, outStd);
    this.savedQ = arena.alloc([s.batch, s.seqLen, s.heads, s.headDim]);
    this.savedK = arena.alloc([s.batch, s.seqLen, s.kvHeads, s.headDim]);
    this.savedV = arena.alloc([s.batch, s.seqLen, s.kvHeads, s.headDim]);
    this.savedOut = arena.alloc([s.batch, s.seqLen, s.heads, s.headDim]);
    this.savedLse = arena.alloc([s.batch, s.heads, s.seqLen]);
  }

  private attrs(causal: boolean) {
    const s = this.s;
    return { batch: s.batch, seqLen: s.seqLen, heads: s.heads, kvHeads: s.kvHeads, headDim: s.headDim, causal, scale: 1 / Math.sqrt(s.headDim) };
  }

  private ropeAttrs(heads: number) {
    const s = this.s;
    return { batch: s.batch, seqLen: s.seqLen, heads, headDim: s.headDim, base: s.ropeBase };
  }

  /** out [rows, dModel] from x [rows, dModel]. */
  forward(b: Backend, x: Tensor, out: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    const s = this.s;
    const rows = s.batch * s.seqLen;
    const sc = this.scratch;
    this.q.forward(b, x, as2d(b, sc.qPre), rows);
    this.k.forward(b, x, as2d(b, sc.kPre), rows);
    this.v.forward(b, x, as2d(b, this.savedV), rows);
    b.run(rope, { x: sc.qPre, positions, y: this.savedQ }, this.ropeAttrs(s.heads));
    b.run(rope, { x: sc.kPre, positions, y: this.savedK }, this.ropeAttrs(s.kvHeads));
    b.run(attention, { q: this.savedQ, k: this.savedK, v: this.savedV, segIds, out: this.savedOut, lse: this.savedLse }, this.attrs(causal));
    this.o.forward(b, as2d(b, this.savedOut), out, rows);
  }

  /** dx [rows, dModel] (written) from dout; parameter gradients accumulated. */
  backward(b: Backend, ws: Workspace, x: Tensor, dout: Tensor, dx: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    const s = this.s;
    const rows = s.batch * s.seqLen;
    const sc = this.scratch;
    this.o.backward(b, ws, as2d(b, this.savedOut), dout, as2d(b, sc.dAttn), 'write', rows);
    b.run(
      attentionBackward,
      { q: this.savedQ, k: this.savedK, v: this.savedV, segIds, out: this.savedOut, lse: this.savedLse, dout: sc.dAttn, dq: sc.dq, dk: sc.dk, dv: sc.dv },
      this.attrs(causal),
    );
    // Pre-rope gradients reuse the forward's pre-rope buffers.
    b.run(ropeBackward, { dy: sc.dq, positions, dx: sc.qPre }, this.ropeAttrs(s.heads));
    b.run(ropeBackward, { dy: sc.dk, positions, dx: sc.kPre }, this.ropeAttrs(s.kvHeads));
    this.q.backward(b, ws, x, as2d(b, sc.qPre), dx, 'write', rows);
    this.k.backward(b, ws, x, as2d(b, sc.kPre), dx, 'add', rows);
    this.v.backward(b, ws, x, as2d(b, sc.dv), dx, 'add', rows);
  }
}

/** [B, T, H, D] seen as [B·T, H·D]. */
export function as2d(b: Backend, t: Tensor): Tensor {
  const [B, T, H, D] = t.shape as [number, number, number, number];
  return b.view(t, 0, [B * T, H * D]);
}
