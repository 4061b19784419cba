/**
 * FP8 linear layers (train.precision fp8): the GEMMs of a block's linear layers read FP8 operands,
 * E4M3 for activations and weights, E5M2 for output gradients, each tensor with its own
 * power-of-two scale (src/ops/fp8.ts); the rest of the model keeps the compute dtype.
 *
 * For y = x · Wᵀ with x [rows, in], W [out, in] and dy [rows, out], FP8 tensor cores take both
 * operands with the summed dimension contiguous, so each GEMM reads the layout it needs:
 * - forward: y = Q(x) · Q(W)ᵀ, x [rows, in] and W [out, in] as they are;
 * - weight gradient: dW += Q(dyᵀ) · Q(xᵀ)ᵀ, dy and x quantised transposed ([out, rows], [in, rows]);
 * - input gradient: dx = Q(dy) · Q(Wᵀ)ᵀ, W's transposed copy [in, out].
 * A matrix a layer stores transposed (the MLP's [hidden, rows] activations) is quantised the other
 * way round. A tensor needed both ways is read once for both (quantize_fp8's 'both' layout): dy
 * for the backward's two GEMMs, and each weight, whose FP8 copies W and Wᵀ are written whenever
 * the working copy changes: after each optimizer update (with the delayed recipe's scale update
 * first) and after the masters are set.
 *
 * Each quantised tensor is a site with a meta record in one of two tables (E4M3, E5M2); the
 * quantised activations live in scratch buffers shared by every layer (one layer runs at a time,
 * and every backend runs work in the order it is queued): one E4M3, and two E5M2 for dy in both
 * layouts.
 */
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { type Fp8Format, type Fp8Scaling, metaLength } from '../ops/fp8.js';
import { fp8ScaleUpdate } from '../ops/fp8_scale_update.js';
import { matmulFp8, matmulFp8Add, matmulFp8Attrs } from '../ops/matmul_fp8.js';
import { quantizeFp8, quantizeFp8Attrs } from '../ops/quantize_fp8.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParamStore } from './params.js';

/** How FP8 tensors are scaled (train.fp8). */
export interface Fp8Recipe {
  readonly scaling: Fp8Scaling;
  /** Amax history length (delayed; current keeps one). */
  readonly historyLen: number;
  /** Scales are divided by 2^margin. */
  readonly margin: number;
}

/** A logical [rows, cols] matrix held in `t`, row-major or (transposed) as its transpose [cols, rows]. */
export interface Matrix {
  readonly t: Tensor;
  readonly rows: number;
  readonly cols: number;
  readonly transposed: boolean;
}

export function matrix(t: Tensor, rows: number, cols: number, transposed = false): Matrix {
  return { t, rows, cols, transposed };
}

/** One quantised tensor's place in a meta table. */
export class Fp8Site {
  constructor(readonly table: MetaTable, readonly index: number) {}

  get meta(): Tensor {
    return this.table.record(this.index);
  }

  get scaleInv(): Tensor {
    return this.table.scaleInv(this.index);
  }
}

/** The meta records of one format's sites: [sites, historyLen + 2] f32. */
class MetaTable {
  private tensor: Tensor | null = null;
  private records: Tensor[] = [];
  private inverses: Tensor[] = [];
  count = 0;

  constructor(private readonly b: Backend, readonly format: Fp8Format, readonly historyLen: number) {}

  add(): Fp8Site {
    if (this.tensor) throw new Error('fp8: a site declared after the tables were allocated');
    return new Fp8Site(this, this.count++);
  }

  /** Allocate the table with every history 0 and every scale 1. */
  allocate(): void {
    if (this.count === 0) return;
    const len = metaLength(this.historyLen);
    this.tensor = this.b.alloc([this.count * len], 'f32');
    this.records = Array.from({ length: this.count }, (_, i) => this.b.view(this.tensor!, i * len, [len]));
    this.inverses = Array.from({ length: this.count }, (_, i) => this.b.view(this.tensor!, i * len + this.historyLen + 1, [1]));
  }

  /** Every history 0, every scale 1 (before the first step). */
  reset(): void {
    if (!this.tensor) return;
    const len = metaLength(this.historyLen);
    const host = new Float32Array(this.count * len);
    for (let i = 0; i < this.count; i++) host.fill(1, i * len + this.historyLen, (i + 1) * len);
    this.b.upload(this.tensor, host);
  }

  get table(): Tensor | null {
    return this.tensor;
  }

  record(i: number): Tensor {
    return this.records[i]!;
  }

  scaleInv(i: number): Tensor {
    return this.inverses[i]!;
  }
}

/** The FP8 copies of one weight matrix [out, in] (or of several stored back to back: a joined projection). */
export class Fp8Weight {
  /** Q(W) [out, in] and Q(Wᵀ) [in, out]. */
  q!: Tensor;
  qT!: Tensor;

  constructor(readonly first: Param, readonly out: number, readonly inFeatures: number, readonly site: Fp8Site) {}
}

/** Where a layer's GEMM sites are: its input x (E4M3), its output gradient dy (E5M2) and its weight. */
export interface Fp8Linear {
  readonly weight: Fp8Weight;
  readonly x: Fp8Site;
  readonly dy: Fp8Site;
}

export class Fp8Context {
  private readonly forwardTable: MetaTable;
  private readonly backwardTable: MetaTable;
  private readonly weights: Fp8Weight[] = [];
  /** Elements of the largest quantised input (E4M3 scratch) and output gradient (each E5M2 scratch). */
  private xElems = 0;
  private dyElems = 0;
  private xScratch: Tensor | null = null;
  /** Q(dy) and Q(dyᵀ). */
  private dyScratch: Tensor | null = null;
  private dyTScratch: Tensor | null = null;
  /**
   * Whether the delayed recipe has amaxes to go by. Until the first optimizer update it has none
   * (every scale 1 would flush small gradients to zero), so the first step scales as `current`
   * does, which also records the histories the first update reads.
   */
  private calibrated = false;

  constructor(readonly backend: Backend, readonly recipe: Fp8Recipe, readonly store: ParamStore) {
    const len = recipe.scaling === 'current' ? 1 : recipe.historyLen;
    this.forwardTable = new MetaTable(backend, 'e4m3', len);
    this.backwardTable = new MetaTable(backend, 'e5m2', len);
  }

  /**
   * The sites of a linear layer whose weight is `out` × `inFeatures` starting at `first` (the
   * parameters stored after it, for a joined projection), over up to `tokens` rows: its input
   * [tokens, inFeatures] and output gradient [tokens, out] size the scratch.
   */
  linear(first: Param, out: number, inFeatures: number, tokens: number): Fp8Linear {
    const weight = new Fp8Weight(first, out, inFeatures, this.forwardTable.add());
    this.weights.push(weight);
    this.xElems = Math.max(this.xElems, tokens * inFeatures);
    this.dyElems = Math.max(this.dyElems, tokens * out);
    return { weight, x: this.forwardTable.add(), dy: this.backwardTable.add() };
  }

  /** Allocate the tables, the scratch and the FP8 weights (once every layer has declared its sites). */
  allocate(): void {
    const b = this.backend;
    this.forwardTable.allocate();
    this.backwardTable.allocate();
    this.forwardTable.reset();
    this.backwardTable.reset();
    this.xScratch = b.alloc([this.xElems], 'fp8e4m3');
    this.dyScratch = b.alloc([this.dyElems], 'fp8e5m2');
    this.dyTScratch = b.alloc([this.dyElems], 'fp8e5m2');
    for (const w of this.weights) {
      w.q = b.alloc([w.out, w.inFeatures], 'fp8e4m3');
      w.qT = b.alloc([w.inFeatures, w.out], 'fp8e4m3');
    }
  }

  /**
   * Restore the meta tables (a resume; `tables` by the names of `tables`), then write the FP8
   * weights again with the restored scales: the state an uninterrupted run has at that step (the
   * weights' amaxes are in the histories already, so quantising them again changes nothing there).
   */
  restore(tables: Readonly<Record<string, Float32Array>>, source: string): void {
    for (const { name, tensor } of this.tables) {
      const t = tables[name];
      if (!t || t.length !== tensor.size) fail('BAD_FILE', `${source}: FP8 scaling state '${name}' is missing or has ${t?.length ?? 0} values, expected ${tensor.size} (saved with other train.fp8 settings?)`);
      this.backend.upload(tensor, t);
    }
    this.calibrated = true;
    this.weightsChanged(false);
  }

  /** The meta tables (E4M3 then E5M2), what a checkpoint saves. */
  get tables(): { readonly name: string; readonly tensor: Tensor }[] {
    return [
      { name: 'fp8.e4m3', tensor: this.forwardTable.table },
      { name: 'fp8.e5m2', tensor: this.backwardTable.table },
    ].filter((t): t is { name: string; tensor: Tensor } => t.tensor !== null);
  }

  /**
   * The working copy changed: after an optimizer update (`updated`) the delayed recipe's scales
   * move to their histories first; then the FP8 weights are written from the working copy.
   */
  weightsChanged(updated: boolean): void {
    if (updated) this.calibrated = true;
    if (updated && this.recipe.scaling === 'delayed') {
      for (const table of [this.forwardTable, this.backwardTable]) {
        if (!table.table) continue;
        this.backend.run(fp8ScaleUpdate, { meta: table.table }, { sites: table.count, historyLen: table.historyLen, format: table.format, margin: this.recipe.margin });
      }
    }
    for (const w of this.weights) {
      this.quantizeInto(matrix(this.backend.view(w.first.compute, 0, [w.out, w.inFeatures]), w.out, w.inFeatures), w.site, w.q, w.qT);
    }
  }

  /** Bytes of what `allocate` allocated: the meta tables, the scratch and the FP8 weights. */
  get bytes(): number {
    const own = this.owned.reduce((n, t) => n + (t?.byteSize ?? 0), 0);
    return this.weights.reduce((n, w) => n + w.q.byteSize + w.qT.byteSize, own);
  }

  /** The tables and the scratch. */
  private get owned(): (Tensor | null)[] {
    return [this.forwardTable.table, this.backwardTable.table, this.xScratch, this.dyScratch, this.dyTScratch];
  }

  /** Free what `allocate` allocated. */
  destroy(): void {
    const b = this.backend;
    for (const t of this.owned) if (t) b.free(t);
    for (const w of this.weights) {
      if (w.q) b.free(w.q);
      if (w.qT) b.free(w.qT);
    }
  }

  /** Q(m) row-major [m.rows, m.cols] in the E4M3 scratch (an input's site). */
  quantize(m: Matrix, site: Fp8Site): Tensor {
    const out = this.backend.view(this.xScratch!, 0, [m.rows, m.cols]);
    this.quantizeInto(m, site, out, null);
    return out;
  }

  /**
   * Q(m) row-major [m.rows, m.cols] into `q` and Q(mᵀ) [m.cols, m.rows] into `qT`, either null for
   * a layout not wanted, from one read of m.
   */
  private quantizeInto(m: Matrix, site: Fp8Site, q: Tensor | null, qT: Tensor | null): void {
    // The op reads its input row-major: a matrix held transposed is quantised the other way.
    const [rows, cols] = m.transposed ? [m.cols, m.rows] : [m.rows, m.cols];
    const [out, outT] = m.transposed ? [qT, q] : [q, qT];
    const layout = out && outT ? 'both' : out ? 'rows' : 'cols';
    const b = this.backend;
    const none = b.view((out ?? outT)!, 0, [0]);
    const x = b.view(m.t, 0, [rows, cols]);
    const r = this.recipe;
    const scaling = this.calibrated ? r.scaling : 'current';
    b.run(quantizeFp8, { x, meta: site.meta, out: out ?? none, outT: outT ?? none }, quantizeFp8Attrs(rows, cols, site.table.format, scaling, site.table.historyLen, r.margin, layout));
  }

  /**
   * out [m, n] (+)= A · Bᵀ of two quantised operands A [m, k] and B [n, k], or with `residual`
   * out = residual + A · Bᵀ.
   */
  gemm(a: Tensor, aSite: Fp8Site, b: Tensor, bSite: Fp8Site, out: Tensor, opts: { accumulate?: boolean; outF32?: boolean; residual?: Tensor } = {}): void {
    const [m, k] = a.shape as [number, number];
    const n = b.shape[0]!;
    const be = this.backend;
    const args = { a, b, aScaleInv: aSite.scaleInv, bScaleInv: bSite.scaleInv };
    const o = be.view(out, 0, [m, n]);
    const fa = aSite.table.format, fb = bSite.table.format;
    if (opts.residual) {
      be.run(matmulFp8Add, { ...args, residual: be.view(opts.residual, 0, [m, n]), out: o }, { m, n, k, aFormat: fa, bFormat: fb, aBlocks: 'tensor', bBlocks: 'tensor' });
    } else {
      be.run(matmulFp8, { ...args, out: o }, matmulFp8Attrs(m, n, k, fa, fb, { accumulate: opts.accumulate ?? false, outF32: opts.outF32 ?? false }));
    }
  }

  /** y [rows, out] = x · Wᵀ (+ residual), x a [rows, in] matrix. */
  forward(l: Fp8Linear, x: Matrix, y: Tensor, residual?: Tensor): void {
    const xq = this.quantize(x, l.x);
    this.gemm(xq, l.x, l.weight.q, l.weight.site, y, residual ? { residual } : {});
  }

  /** yᵀ [out, rows] = W · xᵀ: the output transposed, x a [rows, in] matrix. */
  forwardTransposed(l: Fp8Linear, x: Matrix, yT: Tensor): void {
    const xq = this.quantize(x, l.x);
    this.gemm(l.weight.q, l.weight.site, xq, l.x, yT);
  }

  /**
   * A linear layer's backward, dy quantised once (both layouts; dyᵀ only without dx): dW (+)= dyᵀ ·
   * x into the f32 gradient `grad` [out, in], then, with `dx`, dx = or (addDx) += dy · W; x [rows,
   * in] and dy [rows, out] matrices, dx a [rows, in] one (held transposed, [in, rows]: the GEMM
   * writes it that way round).
   */
  backward(l: Fp8Linear, x: Matrix, dy: Matrix, grad: Tensor, accumulate: boolean, dx: Matrix | null, addDx = false): void {
    const b = this.backend;
    const dyq = b.view(this.dyScratch!, 0, [dy.rows, dy.cols]);
    const dyT = b.view(this.dyTScratch!, 0, [dy.cols, dy.rows]);
    this.quantizeInto(dy, l.dy, dx ? dyq : null, dyT);
    const xT = b.view(this.xScratch!, 0, [x.cols, x.rows]);
    this.quantizeInto(x, l.x, null, xT);
    this.gemm(dyT, l.dy, xT, l.x, grad, { accumulate, outF32: true });
    if (!dx) return;
    if (dx.transposed) this.gemm(l.weight.qT, l.weight.site, dyq, l.dy, dx.t, { accumulate: addDx });
    else this.gemm(dyq, l.dy, l.weight.qT, l.weight.site, dx.t, { accumulate: addDx });
  }
}
