/**
 * A pre-norm decoder block: h2 = h + attn(norm1(h)); out = h2 + mlp(norm2(h2)). Both residual
 * adds are in the output projections' GEMMs (matmul_add: attention's Wo writes h2, the MLP's down
 * projection writes out), so each norm reads one tensor: a fused add in the norm instead read the
 * branch and the residual and wrote their sum besides the norm. Backward writes the block input's
 * gradient in place of the output gradient (the stream gradient buffer is updated block by block).
 */
import type { Backend } from '../backend/backend.js';
import type { Tensor } from '../tensor.js';
import type { Arena } from './arena.js';
import type { Fp8Context } from './fp8.js';
import { type AttentionScratch, type AttentionShape, type KvCache, SelfAttention } from './attention.js';
import { type MlpScratch, SwiGluMlp, gateUpJoined } from './mlp.js';
import type { ParamStore } from './params.js';
import { RMSNorm } from './rmsnorm.js';

/** Temporaries shared by all blocks. */
export class BlockScratch {
  readonly dNorm: Tensor;
  readonly dMid: Tensor;
  /** The norms' outputs of the FP8 blocks that keep them quantised instead (fp8KeepsInputs), if any. */
  readonly n1: Tensor | null;
  readonly n2: Tensor | null;
  constructor(arena: Arena, rows: number, dModel: number, sharedNorms: { n1: boolean; n2: boolean } = { n1: false, n2: false }) {
    this.dNorm = arena.alloc([rows, dModel]);
    this.dMid = arena.alloc([rows, dModel]);
    this.n1 = sharedNorms.n1 ? arena.alloc([rows, dModel]) : null;
    this.n2 = sharedNorms.n2 ? arena.alloc([rows, dModel]) : null;
  }
}

/**
 * Which inputs an FP8 block keeps as Q(xᵀ) for its backward rather than in the compute dtype
 * (src/nn/fp8.ts): the first norm's output where q, k and v are fused, the second's and the
 * SwiGLU product where gate and up are joined. A block keeps none of those otherwise.
 */
export function fp8KeepsInputs(d: BlockDims): { n1: boolean; n2: boolean } {
  return { n1: SelfAttention.fuses(d), n2: gateUpJoined(d.dModel, d.ffnHidden) };
}

export interface BlockDims extends AttentionShape {
  readonly dModel: number;
  readonly ffnHidden: number;
  /** Recompute the MLP's SwiGLU product in backward instead of keeping it (train.recompute swiglu). */
  readonly recomputeSwiglu?: boolean;
}

export class DecoderBlock {
  readonly norm1: RMSNorm;
  readonly attn: SelfAttention;
  readonly norm2: RMSNorm;
  readonly mlp: SwiGluMlp;
  private readonly n1: Tensor;
  private readonly rstd1: Tensor;
  private readonly mid: Tensor; // h2
  private readonly n2: Tensor;
  private readonly rstd2: Tensor;
  private readonly rows: number;
  /** An FP8 block's inputs kept as Q(xᵀ) (fp8KeepsInputs); none for a block in the compute dtype. */
  private readonly keeps: { n1: boolean; n2: boolean };

  /** `fp8`: the block will run its linear layers in FP8 (useFp8). */
  constructor(
    store: ParamStore, arena: Arena, index: number, readonly d: BlockDims,
    private readonly scratch: BlockScratch, attnScratch: AttentionScratch, mlpScratch: MlpScratch, std: number, outStd: number, fp8 = false,
  ) {
    const name = `layers.${index}`;
    this.rows = d.batch * d.seqLen;
    this.norm1 = new RMSNorm(store, `${name}.attn_norm`, d.dModel, d.normEps);
    this.attn = new SelfAttention(store, arena, `${name}.attn`, d.dModel, d, attnScratch, std, outStd);
    this.norm2 = new RMSNorm(store, `${name}.mlp_norm`, d.dModel, d.normEps);
    this.keeps = fp8 ? fp8KeepsInputs(d) : { n1: false, n2: false };
    this.mlp = new SwiGluMlp(store, arena, `${name}.mlp`, d.dModel, d.ffnHidden, this.rows, mlpScratch, std, outStd, d.recomputeSwiglu, this.keeps.n2);
    const nd = [this.rows, d.dModel];
    const shared = (t: Tensor | null): Tensor => {
      if (!t) throw new Error('block: the shared norm outputs were not allocated (BlockScratch sharedNorms)');
      return t;
    };
    this.n1 = this.keeps.n1 ? shared(scratch.n1) : arena.alloc(nd);
    this.rstd1 = arena.alloc([this.rows], 'f32');
    this.mid = arena.alloc(nd);
    this.n2 = this.keeps.n2 ? shared(scratch.n2) : arena.alloc(nd);
    this.rstd2 = arena.alloc([this.rows], 'f32');
  }

  /**
   * The block on input h into out (the next block's input). h must stay untouched until backward
   * (the model keeps every block input).
   */
  forward(b: Backend, h: Tensor, out: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    this.norm1.forward(b, h, this.n1, this.rstd1, this.rows);
    this.attn.forward(b, this.n1, h, this.mid, segIds, positions, causal);
    this.norm2.forward(b, this.mid, this.n2, this.rstd2, this.rows);
    this.mlp.forward(b, this.n2, this.mid, out);
  }

  /**
   * One new token of one sequence (incremental decoding): x [1, dModel] -> out [1, dModel], which
   * may be x itself. The first rows of the block's buffers serve as scratch.
   */
  decode(b: Backend, x: Tensor, out: Tensor, cache: KvCache, pos: number, positions: Tensor): void {
    const first = (t: Tensor) => b.view(t, 0, [1, this.d.dModel]);
    const [n1, mid, n2] = [this.n1, this.mid, this.n2].map(first) as [Tensor, Tensor, Tensor];
    this.norm1.forward(b, x, n1, b.view(this.rstd1, 0, [1]), 1);
    this.attn.decode(b, n1, x, mid, cache, pos, positions);
    this.norm2.forward(b, mid, n2, b.view(this.rstd2, 0, [1]), 1);
    this.mlp.forward(b, n2, mid, out, 1);
  }

  /** Run the block's linear layers in FP8 from now on (src/nn/fp8.ts). */
  useFp8(ctx: Fp8Context): void {
    this.attn.useFp8(ctx, this.keeps.n1);
    this.mlp.useFp8(ctx, this.keeps.n2);
  }

  /** On entry `dStream` holds d(out); on exit d(h). */
  backward(b: Backend, h: Tensor, dStream: Tensor, segIds: Tensor, positions: Tensor, causal: boolean): void {
    const sc = this.scratch;
    this.mlp.backward(b, this.n2, dStream, sc.dNorm);
    this.norm2.backward(b, sc.dNorm, this.mid, this.rstd2, dStream, sc.dMid, this.rows);
    this.attn.backward(b, this.n1, sc.dMid, sc.dNorm, segIds, positions, causal);
    this.norm1.backward(b, sc.dNorm, h, this.rstd1, sc.dMid, dStream, this.rows);
  }
}
