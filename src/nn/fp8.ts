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
 * first) and after the masters are set. A layer whose input the model keeps for nothing but the
 * weight gradient (a norm's output, the SwiGLU product) has Q(xᵀ) written by its forward beside
 * Q(x) and kept for its backward (`saveInput`): one read of x instead of two, and 1 byte an
 * element kept instead of the input's 2 (the model then keeps no copy of that input).
 *
 * Per-tensor scaling: each quantised tensor is a site with a meta record in one of two tables
 * (E4M3, E5M2). Blockwise scaling (the DeepSeek-V3 recipe) keeps no state: activations and
 * gradients take a factor per row and 128 columns of the GEMM operand (1x128), weights one per
 * 128 x 128 tile, each from its block's own amax (quantize_fp8_blockwise), and the GEMM reads the
 * factors beside the values. The quantised activations (and their factors) live in scratch buffers
 * shared by every layer (one layer runs at a time, and every backend runs work in the order it is
 * queued): one E4M3, and two E5M2 for dy in both layouts.
 */
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { type Fp8Format, type Fp8Scaling, metaLength } from '../ops/fp8.js';
import { fp8ScaleUpdate } from '../ops/fp8_scale_update.js';
import { type Fp8Blocks, matmulFp8, matmulFp8Add, matmulFp8Attrs } from '../ops/matmul_fp8.js';
import { quantizeFp8, quantizeFp8Attrs } from '../ops/quantize_fp8.js';
import { type Fp8Block, blockScaleShape, quantizeFp8Blockwise, quantizeFp8BlockwiseAttrs } from '../ops/quantize_fp8_blockwise.js';
import { type Tensor, numel } from '../tensor.js';
import type { Param, ParamStore } from './params.js';

/** How FP8 tensors are scaled (train.fp8.scaling): per tensor, delayed or current; or per block. */
export type Fp8RecipeScaling = Fp8Scaling | 'blockwise';

/** How FP8 tensors are scaled (train.fp8). */
export interface Fp8Recipe {
  readonly scaling: Fp8RecipeScaling;
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

/** A quantised GEMM operand [rows, k]: its FP8 values, their dequantisation factors and how those are laid out. */
export interface Quantized {
  readonly t: Tensor;
  readonly scaleInv: Tensor;
  readonly blocks: Fp8Blocks;
  readonly format: Fp8Format;
}

/** Where a quantisation writes one layout: the FP8 values and (blockwise) their factors. */
interface Target {
  readonly t: Tensor;
  readonly scaleInv: Tensor | null;
}

/** Elements of the factors of a blockwise operand [rows, cols]. */
function blockScaleElems(rows: number, cols: number, block: Fp8Block): number {
  return numel(blockScaleShape(rows, cols, block));
}

/**
 * The FP8 copies of one weight matrix [out, in] (or of several stored back to back: a joined
 * projection, whose parts the forward may read apart: `parts`, row counts).
 */
export class Fp8Weight {
  /** Q(W) [out, in] and Q(Wᵀ) [in, out]. */
  q!: Tensor;
  qT!: Tensor;
  /** Blockwise: the factors of each part of q (each part on a 128 x 128 grid of its own) and of qT. */
  qScales: Tensor[] = [];
  qTScale: Tensor | null = null;

  /** The first row of each part. */
  readonly partOffsets: readonly number[];

  constructor(readonly first: Param, readonly out: number, readonly inFeatures: number, readonly site: Fp8Site, readonly parts: readonly number[]) {
    this.partOffsets = parts.map((_, i) => parts.slice(0, i).reduce((a, r) => a + r, 0));
  }
}

/** Q(xᵀ) [in, rows] of a layer's input as its forward quantised it, kept for its backward (with, blockwise, its factors). */
class SavedInput {
  t!: Tensor;
  scaleInv: Tensor | null = null;
  constructor(readonly inFeatures: number, readonly tokens: number) {}
}

/**
 * Where a layer's GEMM sites are: its input x (E4M3), its output gradient dy (E5M2) and its
 * weight; and, for a layer that keeps Q(xᵀ) from its forward, where it is kept.
 */
export interface Fp8Linear {
  readonly weight: Fp8Weight;
  readonly x: Fp8Site;
  readonly dy: Fp8Site;
  readonly saved: SavedInput | null;
}

export class Fp8Context {
  private readonly forwardTable: MetaTable;
  private readonly backwardTable: MetaTable;
  private readonly weights: Fp8Weight[] = [];
  private readonly saved: SavedInput[] = [];
  private readonly blockwise: boolean;
  /** Elements of the largest quantised input (E4M3 scratch) and output gradient (each E5M2 scratch), and (blockwise) of their factors. */
  private readonly sizes = { x: 0, dy: 0, xScale: 0, dyScale: 0, dyTScale: 0 };
  private xScratch: Tensor | null = null;
  /** Q(dy) and Q(dyᵀ). */
  private dyScratch: Tensor | null = null;
  private dyTScratch: Tensor | null = null;
  /** Blockwise: the factors of what the three scratch buffers hold. */
  private xScale: Tensor | null = null;
  private dyScale: Tensor | null = null;
  private dyTScale: Tensor | null = null;
  /**
   * Whether the delayed recipe has amaxes to go by. Until the first optimizer update it has none
   * (every scale 1 would flush small gradients to zero), so the first step scales as `current`
   * does, which also records the histories the first update reads.
   */
  private calibrated = false;

  constructor(readonly backend: Backend, readonly recipe: Fp8Recipe, readonly store: ParamStore) {
    const len = recipe.scaling === 'delayed' ? recipe.historyLen : 1;
    this.blockwise = recipe.scaling === 'blockwise';
    this.forwardTable = new MetaTable(backend, 'e4m3', len);
    this.backwardTable = new MetaTable(backend, 'e5m2', len);
  }

  /**
   * The sites of a linear layer whose weight is `out` × `inFeatures` starting at `first` (the
   * parameters stored after it, for a joined projection, whose row counts `parts` gives when the
   * forward reads them apart), over up to `tokens` rows: its input [tokens, inFeatures] and output
   * gradient [tokens, out] size the scratch. With `saveInput` the forward keeps Q(xᵀ) for the
   * backward (the caller then keeps no copy of x for it, and passes none to `backward`).
   */
  linear(first: Param, out: number, inFeatures: number, tokens: number, parts: readonly number[] = [out], saveInput = false): Fp8Linear {
    const weight = new Fp8Weight(first, out, inFeatures, this.forwardTable.add(), parts);
    this.weights.push(weight);
    const z = this.sizes;
    z.x = Math.max(z.x, tokens * inFeatures);
    z.dy = Math.max(z.dy, tokens * out);
    if (this.blockwise) {
      // x is quantised as it is (forward) and transposed (backward) into the one E4M3 scratch.
      z.xScale = Math.max(z.xScale, blockScaleElems(tokens, inFeatures, '1x128'), blockScaleElems(inFeatures, tokens, '1x128'));
      z.dyScale = Math.max(z.dyScale, blockScaleElems(tokens, out, '1x128'));
      z.dyTScale = Math.max(z.dyTScale, blockScaleElems(out, tokens, '1x128'));
    }
    const saved = saveInput ? new SavedInput(inFeatures, tokens) : null;
    if (saved) this.saved.push(saved);
    return { weight, x: this.forwardTable.add(), dy: this.backwardTable.add(), saved };
  }

  /** Allocate the tables, the scratch and the FP8 weights (once every layer has declared its sites). */
  allocate(): void {
    const b = this.backend;
    if (!this.blockwise) {
      this.forwardTable.allocate();
      this.backwardTable.allocate();
      this.forwardTable.reset();
      this.backwardTable.reset();
    }
    const z = this.sizes;
    this.xScratch = b.alloc([z.x], 'fp8e4m3');
    this.dyScratch = b.alloc([z.dy], 'fp8e5m2');
    this.dyTScratch = b.alloc([z.dy], 'fp8e5m2');
    if (this.blockwise) {
      this.xScale = b.alloc([z.xScale], 'f32');
      this.dyScale = b.alloc([z.dyScale], 'f32');
      this.dyTScale = b.alloc([z.dyTScale], 'f32');
    }
    for (const s of this.saved) {
      s.t = b.alloc([s.inFeatures, s.tokens], 'fp8e4m3');
      if (this.blockwise) s.scaleInv = b.alloc(blockScaleShape(s.inFeatures, s.tokens, '1x128'), 'f32');
    }
    for (const w of this.weights) {
      w.q = b.alloc([w.out, w.inFeatures], 'fp8e4m3');
      w.qT = b.alloc([w.inFeatures, w.out], 'fp8e4m3');
      if (this.blockwise) {
        w.qScales = w.parts.map((rows) => b.alloc(blockScaleShape(rows, w.inFeatures, '128x128'), 'f32'));
        w.qTScale = b.alloc(blockScaleShape(w.inFeatures, w.out, '128x128'), 'f32');
      }
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

  /** The meta tables (E4M3 then E5M2), what a checkpoint saves (none under blockwise scaling, which keeps no state). */
  get tables(): { readonly name: string; readonly tensor: Tensor }[] {
    return [
      { name: 'fp8.e4m3', tensor: this.forwardTable.table },
      { name: 'fp8.e5m2', tensor: this.backwardTable.table },
    ].filter((t): t is { name: string; tensor: Tensor } => t.tensor !== null);
  }

  /**
   * The working copy changed: after an optimizer update (`updated`) the delayed recipe's scales
   * move to their histories first; then the FP8 weights are written from the working copy
   * (blockwise: each part of W on a block grid of its own, then Wᵀ whole).
   */
  weightsChanged(updated: boolean): void {
    if (updated) this.calibrated = true;
    if (updated && this.recipe.scaling === 'delayed') {
      for (const table of [this.forwardTable, this.backwardTable]) {
        if (!table.table) continue;
        this.backend.run(fp8ScaleUpdate, { meta: table.table }, { sites: table.count, historyLen: table.historyLen, format: table.format, margin: this.recipe.margin });
      }
    }
    const b = this.backend;
    for (const w of this.weights) {
      const d = w.inFeatures;
      const whole = matrix(b.view(w.first.compute, 0, [w.out, d]), w.out, d);
      if (!this.blockwise) {
        this.quantizeInto(whole, w.site, '128x128', { t: w.q, scaleInv: null }, { t: w.qT, scaleInv: null });
        continue;
      }
      w.partOffsets.forEach((row, i) => {
        const rows = w.parts[i]!;
        const part = matrix(b.view(w.first.compute, row * d, [rows, d]), rows, d);
        this.quantizeInto(part, w.site, '128x128', { t: b.view(w.q, row * d, [rows, d]), scaleInv: w.qScales[i]! }, null);
      });
      this.quantizeInto(whole, w.site, '128x128', null, { t: w.qT, scaleInv: w.qTScale });
    }
  }

  /** Bytes of what `allocate` allocated: the meta tables, the scratch, the kept inputs and the FP8 weights (with their factors). */
  get bytes(): number {
    const own = [...this.owned, ...this.savedTensors].reduce((n, t) => n + (t?.byteSize ?? 0), 0);
    return this.weights.reduce((n, w) => n + w.q.byteSize + w.qT.byteSize + w.qScales.reduce((a, t) => a + t.byteSize, 0) + (w.qTScale?.byteSize ?? 0), own);
  }

  /** The tables and the scratch. */
  private get owned(): (Tensor | null)[] {
    return [this.forwardTable.table, this.backwardTable.table, this.xScratch, this.dyScratch, this.dyTScratch, this.xScale, this.dyScale, this.dyTScale];
  }

  private get savedTensors(): (Tensor | null)[] {
    return this.saved.flatMap((s) => [s.t, s.scaleInv]);
  }

  /** Free what `allocate` allocated. */
  destroy(): void {
    const b = this.backend;
    for (const t of [...this.owned, ...this.savedTensors]) if (t) b.free(t);
    for (const w of this.weights) for (const t of [w.q, w.qT, ...w.qScales, w.qTScale]) if (t) b.free(t);
  }

  /** A scratch buffer's first elements as an operand [rows, cols], with (blockwise) its factors' buffer's. */
  private target(values: Tensor, scales: Tensor | null, rows: number, cols: number): Target {
    const b = this.backend;
    return { t: b.view(values, 0, [rows, cols]), scaleInv: scales ? b.view(scales, 0, blockScaleShape(rows, cols, '1x128')) : null };
  }

  /** What a quantisation into `target` gives a GEMM. */
  private operand(target: Target, site: Fp8Site, block: Fp8Block): Quantized {
    const format = site.table.format;
    return target.scaleInv ? { t: target.t, scaleInv: target.scaleInv, blocks: block, format } : { t: target.t, scaleInv: site.scaleInv, blocks: 'tensor', format };
  }

  /** Part `i` of a weight's Q(W) (the whole of it with one part) as an operand. */
  private weightPart(w: Fp8Weight, i: number): Quantized {
    const row = w.partOffsets[i]!, rows = w.parts[i]!;
    const t = this.backend.view(w.q, row * w.inFeatures, [rows, w.inFeatures]);
    return this.operand({ t, scaleInv: this.blockwise ? w.qScales[i]! : null }, w.site, '128x128');
  }

  private whole(w: Fp8Weight): Quantized {
    if (w.parts.length !== 1) throw new Error('fp8: a weight read in parts has no whole Q(W) (blockwise grids are per part)');
    return this.weightPart(w, 0);
  }

  private weightT(w: Fp8Weight): Quantized {
    return this.operand({ t: w.qT, scaleInv: w.qTScale }, w.site, '128x128');
  }

  /** A layer's input x: Q(x) row-major [x.rows, x.cols] in the E4M3 scratch, and Q(xᵀ) where the layer keeps it. */
  private quantizeInput(l: Fp8Linear, x: Matrix): Quantized {
    const target = this.target(this.xScratch!, this.xScale, x.rows, x.cols);
    this.quantizeInto(x, l.x, '1x128', target, l.saved ? this.savedTarget(l.saved, x.rows) : null);
    return this.operand(target, l.x, '1x128');
  }

  /** Where Q(xᵀ) [in, rows] of a layer's input of `rows` rows is kept (and its factors). */
  private savedTarget(s: SavedInput, rows: number): Target {
    const b = this.backend;
    return { t: b.view(s.t, 0, [s.inFeatures, rows]), scaleInv: s.scaleInv ? b.view(s.scaleInv, 0, blockScaleShape(s.inFeatures, rows, '1x128')) : null };
  }

  /**
   * Q(m) row-major [m.rows, m.cols] into `q` and Q(mᵀ) [m.cols, m.rows] into `qT`, either null for
   * a layout not wanted: per tensor from one read of m (quantize_fp8's layouts); blockwise one
   * quantize_fp8_blockwise a layout, `block` blocks along each layout's rows.
   */
  private quantizeInto(m: Matrix, site: Fp8Site, block: Fp8Block, q: Target | null, qT: Target | null): void {
    const b = this.backend;
    // The ops read their input row-major: a matrix held transposed is quantised the other way.
    const [rows, cols] = m.transposed ? [m.cols, m.rows] : [m.rows, m.cols];
    const x = b.view(m.t, 0, [rows, cols]);
    const r = this.recipe;
    const format = site.table.format;
    if (this.blockwise) {
      for (const [target, transposed] of [[q, false], [qT, true]] as const) {
        if (!target) continue;
        const attrs = quantizeFp8BlockwiseAttrs(rows, cols, format, block, transposed !== m.transposed, r.margin);
        b.run(quantizeFp8Blockwise, { x, out: target.t, scaleInv: target.scaleInv! }, attrs);
      }
      return;
    }
    const [out, outT] = m.transposed ? [qT?.t, q?.t] : [q?.t, qT?.t];
    const layout = out && outT ? 'both' : out ? 'rows' : 'cols';
    const none = b.view((out ?? outT)!, 0, [0]);
    const scaling = this.calibrated || r.scaling === 'current' ? (r.scaling as Fp8Scaling) : 'current';
    b.run(quantizeFp8, { x, meta: site.meta, out: out ?? none, outT: outT ?? none }, quantizeFp8Attrs(rows, cols, format, scaling, site.table.historyLen, r.margin, layout));
  }

  /**
   * out [m, n] (+)= A · Bᵀ of two quantised operands A [m, k] and B [n, k], or with `residual`
   * out = residual + A · Bᵀ.
   */
  private gemm(a: Quantized, bq: Quantized, out: Tensor, opts: { accumulate?: boolean; outF32?: boolean; residual?: Tensor } = {}): void {
    const [m, k] = a.t.shape as [number, number];
    const n = bq.t.shape[0]!;
    const be = this.backend;
    const args = { a: a.t, b: bq.t, aScaleInv: a.scaleInv, bScaleInv: bq.scaleInv };
    const o = be.view(out, 0, [m, n]);
    const attrs = matmulFp8Attrs(m, n, k, a.format, bq.format, { aBlocks: a.blocks, bBlocks: bq.blocks, accumulate: opts.accumulate ?? false, outF32: opts.outF32 ?? false });
    if (opts.residual) {
      const { accumulate: _a, outF32: _o, ...addAttrs } = attrs;
      be.run(matmulFp8Add, { ...args, residual: be.view(opts.residual, 0, [m, n]), out: o }, addAttrs);
    } else {
      be.run(matmulFp8, { ...args, out: o }, attrs);
    }
  }

  /** y [rows, out] = x · Wᵀ (+ residual), x a [rows, in] matrix. */
  forward(l: Fp8Linear, x: Matrix, y: Tensor, residual?: Tensor): void {
    this.gemm(this.quantizeInput(l, x), this.whole(l.weight), y, residual ? { residual } : {});
  }

  /** yᵀ [out, rows] = W · xᵀ: the output transposed, x a [rows, in] matrix. */
  forwardTransposed(l: Fp8Linear, x: Matrix, yT: Tensor): void {
    const xq = this.quantizeInput(l, x);
    this.gemm(this.whole(l.weight), xq, yT);
  }

  /** ys[i] [rows, parts[i]] = x · W_iᵀ for each part W_i of the weight, x [rows, in] quantised once. */
  forwardParts(l: Fp8Linear, x: Matrix, ys: readonly Tensor[]): void {
    const xq = this.quantizeInput(l, x);
    ys.forEach((y, i) => this.gemm(xq, this.weightPart(l.weight, i), y));
  }

  /**
   * A linear layer's backward, dy quantised once (both layouts; dyᵀ only without dx): dW (+)= dyᵀ ·
   * x into the f32 gradient `grad` [out, in], then, with `dx`, dx = or (addDx) += dy · W; x [rows,
   * in] and dy [rows, out] matrices, dx a [rows, in] one (held transposed, [in, rows]: the GEMM
   * writes it that way round). x is null for a layer that kept Q(xᵀ) from its forward.
   */
  backward(l: Fp8Linear, x: Matrix | null, dy: Matrix, grad: Tensor, accumulate: boolean, dx: Matrix | null, addDx = false): void {
    const dyq = this.target(this.dyScratch!, this.dyScale, dy.rows, dy.cols);
    const dyT = this.target(this.dyTScratch!, this.dyTScale, dy.cols, dy.rows);
    this.quantizeInto(dy, l.dy, '1x128', dx ? dyq : null, dyT);
    let xT: Target;
    if (l.saved) {
      xT = this.savedTarget(l.saved, dy.rows);
    } else {
      if (!x) throw new Error('fp8: a layer that keeps no Q(xᵀ) needs its input in backward');
      xT = this.target(this.xScratch!, this.xScale, x.cols, x.rows);
      this.quantizeInto(x, l.x, '1x128', null, xT);
    }
    this.gemm(this.operand(dyT, l.dy, '1x128'), this.operand(xT, l.x, '1x128'), grad, { accumulate, outF32: true });
    if (!dx) return;
    const dyOp = this.operand(dyq, l.dy, '1x128');
    if (dx.transposed) this.gemm(this.weightT(l.weight), dyOp, dx.t, { accumulate: addDx });
    else this.gemm(dyOp, this.weightT(l.weight), dx.t, { accumulate: addDx });
  }
}
