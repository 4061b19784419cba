/**
 * The decoder: token embedding, N pre-norm blocks (RMSNorm, RoPE grouped-query attention, SwiGLU),
 * final RMSNorm, LM head (tied to the embedding or not). Parameter names and shapes are those of
 * src/checkpoint/hf.ts's paramSpecs, so checkpoints map one to one onto Hugging Face names. The
 * inputs (src/model/inputs.ts) and all activations are allocated at construction for a fixed
 * (batch, seqLen); a step allocates nothing. Built against an allocation plan (src/model/plan.ts)
 * with no initial values, the model is its own memory estimate (src/train/memory.ts).
 */
import type { Backend, Recording } from '../backend/backend.js';
import { fail } from '../errors.js';
import { compactRows } from '../ops/compact_rows.js';
import { crossEntropy, crossEntropyBackward, crossEntropyFused } from '../ops/cross_entropy.js';
import { embedding } from '../ops/embedding.js';
import { reduce } from '../ops/reduce.js';
import type { FloatDType, Tensor } from '../tensor.js';
import { Arena } from '../nn/arena.js';
import { AttentionScratch } from '../nn/attention.js';
import { BlockScratch, DecoderBlock, fp8KeepsInputs } from '../nn/block.js';
import { Embedding } from '../nn/embedding.js';
import { Fp8Context, type Fp8Recipe } from '../nn/fp8.js';
import { Linear } from '../nn/linear.js';
import { MlpScratch } from '../nn/mlp.js';
import { type MasterRanks, type ParamFiller, ParamStore } from '../nn/params.js';
import { RMSNorm } from '../nn/rmsnorm.js';
import { type ModelBatch, ModelInputs } from './inputs.js';
import type { ModelConfig } from '../config/schema.js';
import { type ActivationSaving, type Fp8Blocks, SharedBlockActivations, logitChunksOf, logitRows } from './saving.js';

/** Work a pass queues first, before its forward (forwardBackward); `key` tells its recordings from the pass's others. */
export interface PassPrelude {
  readonly key: string;
  run(): void;
}

/** One block of rows of the LM head and the loss: views of the per-token buffers. */
interface LogitBlock {
  readonly rows: number;
  readonly normed: Tensor;
  readonly dNormed: Tensor;
  readonly logits: Tensor;
  readonly targets: Tensor;
  readonly weights: Tensor;
  readonly dloss: Tensor;
  readonly loss: Tensor;
  readonly lse: Tensor;
}

export class LlamaModel {
  readonly store: ParamStore;
  readonly rows: number;
  readonly embed: Embedding;
  readonly blocks: DecoderBlock[];
  readonly finalNorm: RMSNorm;
  readonly head: Linear;
  /** The FP8 blocks' sites, weights and scratch (train.precision fp8), else null. */
  readonly fp8: Fp8Context | null;
  private readonly arena: Arena;
  private readonly inputs: ModelInputs;
  // Activations.
  private readonly streams: Tensor[];
  private readonly normed: Tensor;
  private readonly rstdFinal: Tensor;
  /** The logits of one block of rows (logitRows of them); their gradient overwrites them. */
  private readonly logits: Tensor;
  readonly logitRows: number;
  /** The blocks of rows the head and the loss run over in turn (one without logitChunks). */
  private readonly logitBlocks: readonly LogitBlock[];
  /** With packLossRows: the same blocks over the rows that carry a loss, packed to the front (compact_rows). */
  private readonly packed: {
    readonly blocks: readonly LogitBlock[];
    readonly order: Tensor; readonly slot: Tensor; readonly count: Tensor; readonly targets: Tensor; readonly weights: Tensor;
  } | null;
  private readonly tokenLoss: Tensor;
  private readonly lse: Tensor;
  private readonly lossSum: Tensor;
  // Gradients.
  private readonly dLoss: Tensor;
  private readonly dNormed: Tensor;
  private readonly dStream: Tensor;
  private readonly zeros: Tensor;
  private causal = true;
  /** train.recompute full: the blocks share their activations, and the backward runs each block's forward again first. */
  private readonly recomputeBlocks: boolean;
  readonly dtype: FloatDType;
  private recordSteps: boolean;
  /** forward + backward recorded per (attention kind, overwriteGrads), and those run once unrecorded. */
  private readonly recordings = new Map<string, Recording>();
  private readonly warmed = new Set<string>();

  /**
   * `dtype` is the compute dtype of activations and of the weights' working copy (bf16 for
   * mixed precision); master weights, gradients and optimizer state are f32 either way.
   * `record`: `forwardBackward` records the pass (a CUDA graph on CUDA) and replays it. `fill`
   * computes the initial values (default: on this thread; src/runtime/parallel_init.ts: workers);
   * null computes none (the values are loaded next, or the backend is an allocation plan).
   * `recompute`: activations recomputed in backward instead of kept (train.recompute).
   * `logitChunks`: the LM head and the loss run over that many blocks of rows in turn, holding one
   * block's logits (train.logitChunks).
   * `deterministic`: the attention backward gives the same bits on every run (train.deterministic).
   * `packLossRows`: forwardBackward runs the head and the loss over the rows with a target and a
   * nonzero weight only (masked diffusion: the masked tokens), packed to the front; blocks past the
   * last such row are skipped where the backend can decide that on the device (CUDA graphs).
   * `fp8`: the blocks between fp8.keepFirst and fp8.keepLast run their linear layers' GEMMs in
   * FP8 (src/nn/fp8.ts).
   * `masterRanks`: the f32 masters are sharded over these ranks (train.zero 1; ParamStore).
   */
  constructor(
    readonly backend: Backend, readonly cfg: ModelConfig, readonly batch: number, seed: number,
    opts: { dtype?: FloatDType; record?: boolean; fill?: ParamFiller | null; deterministic?: boolean; masterRanks?: MasterRanks } & ActivationSaving = {},
  ) {
    validateModel(cfg);
    const dtype = opts.dtype ?? 'f32';
    this.dtype = dtype;
    this.recordSteps = opts.record ?? false;
    if (!backend.floatDtypes.has(dtype)) {
      fail('BAD_CONFIG', `compute dtype ${dtype}: the ${backend.name} backend's kernels take ${[...backend.floatDtypes].join(', ')}`);
    }
    const b = backend;
    const T = cfg.seqLen;
    const N = batch * T;
    const headDim = cfg.dModel / cfg.nHeads;
    this.rows = N;
    this.store = new ParamStore(b, dtype, opts.masterRanks ?? null);
    this.arena = new Arena(b, dtype);
    const std = cfg.initStd;
    const outStd = std / Math.sqrt(2 * cfg.nLayers);
    const dims = {
      batch, seqLen: T, heads: cfg.nHeads, kvHeads: cfg.nKvHeads, headDim, ropeBase: cfg.ropeTheta,
      dModel: cfg.dModel, ffnHidden: cfg.ffnHidden, normEps: cfg.normEps, qkvBias: cfg.qkvBias, qkNorm: cfg.qkNorm,
      recomputeSwiglu: opts.recompute === 'swiglu', deterministic: opts.deterministic ?? false,
    };
    this.embed = new Embedding(this.store, 'embed', cfg.vocabSize, cfg.dModel, std);
    const fp8Blocks = opts.fp8 ? LlamaModel.fp8Range(opts.fp8, cfg.nLayers) : null;
    const blockScratch = new BlockScratch(this.arena, N, cfg.dModel, fp8Blocks ? fp8KeepsInputs(dims) : undefined);
    const attnScratch = new AttentionScratch(this.arena, dims);
    const mlpScratch = new MlpScratch(this.arena, N, cfg.dModel, cfg.ffnHidden, opts.fp8 !== undefined);
    const inFp8 = (i: number): boolean => fp8Blocks !== null && i >= fp8Blocks.from && i < fp8Blocks.to;
    // train.recompute full: the blocks share one set of activations (SharedBlockActivations).
    const shared = opts.recompute === 'full' ? new SharedBlockActivations(this.arena) : null;
    this.recomputeBlocks = shared !== null;
    this.blocks = Array.from({ length: cfg.nLayers }, (_, i) => new DecoderBlock(this.store, shared?.arenaFor(i) ?? this.arena, i, dims, blockScratch, attnScratch, mlpScratch, std, outStd, inFp8(i)));
    this.finalNorm = new RMSNorm(this.store, 'final_norm', cfg.dModel, cfg.normEps);
    this.head = cfg.tieEmbeddings
      ? Linear.sharing(this.embed.table, cfg.dModel, cfg.vocabSize)
      : new Linear(this.store, 'lm_head', cfg.dModel, cfg.vocabSize, std);
    const a = this.arena;
    this.inputs = new ModelInputs(a, batch, T);
    this.streams = Array.from({ length: cfg.nLayers + 1 }, () => a.alloc([N, cfg.dModel]));
    this.normed = a.alloc([N, cfg.dModel]);
    this.rstdFinal = a.alloc([N], 'f32');
    const chunks = logitChunksOf(opts);
    if (!(Number.isInteger(chunks) && chunks >= 1)) fail('BAD_CONFIG', `train.logitChunks: ${chunks} is not a whole number >= 1`);
    this.logitRows = logitRows(N, chunks);
    this.logits = a.alloc([this.logitRows, cfg.vocabSize]);
    this.tokenLoss = a.alloc([N], 'f32');
    this.lse = a.alloc([N], 'f32');
    this.lossSum = a.alloc([1], 'f32');
    this.dLoss = a.alloc([N], 'f32');
    this.dNormed = a.alloc([N, cfg.dModel]);
    this.dStream = a.alloc([N, cfg.dModel]);
    this.zeros = a.alloc([N, cfg.dModel]);
    b.zero(this.zeros);
    const blockStarts = Array.from({ length: Math.ceil(N / this.logitRows) }, (_, i) => i * this.logitRows);
    const perToken = { normed: this.normed, dNormed: this.dNormed, targets: this.inputs.targets, weights: this.inputs.weights };
    this.logitBlocks = blockStarts.map((r0) => this.logitBlock(perToken, r0, Math.min(this.logitRows, N - r0)));
    if (opts.packLossRows) {
      const targets = a.alloc([N], 'i32');
      const weights = a.alloc([N], 'f32');
      // No new [N, d] buffers: the packed head input lives in dNormed (normed is not read again
      // once packed; dNormed is written last, from the packed gradient) and the packed head input
      // gradient in dStream (the final norm's backward writes it only after that).
      const rows = { normed: this.dNormed, dNormed: this.dStream, targets, weights };
      this.packed = {
        blocks: blockStarts.map((r0) => this.logitBlock(rows, r0, Math.min(this.logitRows, N - r0))),
        order: a.alloc([N], 'i32'), slot: a.alloc([N], 'i32'), count: a.alloc([1], 'i32'), targets, weights,
      };
    } else {
      this.packed = null;
    }
    // The loss is normalised by the token count: d(mean)/d(token loss) = 1/N.
    b.upload(this.dLoss, new Float32Array(N).fill(1 / N));
    this.store.materialize(seed, opts.fill);
    // After materialize: the layers see from the parameters' offsets which of them are joined.
    this.fp8 = opts.fp8 && fp8Blocks ? this.useFp8(fp8Blocks.from, fp8Blocks.to, opts.fp8, opts.fill !== null) : null;
  }

  /**
   * FP8 for blocks [from, to): their sites and FP8 weights, written now when the parameters have
   * values (`initialised`) and whenever the working copy is from then on (ParamStore.onWorkingCopy).
   */
  /** The FP8 blocks [from, to): all but fp8.keepFirst at the start and fp8.keepLast at the end. */
  private static fp8Range(fp8: Fp8Blocks, nLayers: number): { from: number; to: number } {
    const from = fp8.keepFirst, to = nLayers - fp8.keepLast;
    if (!(from >= 0 && from < to && to <= nLayers)) fail('BAD_CONFIG', `train.fp8: blocks ${from} to ${to - 1} of ${nLayers} leave none in FP8`);
    return { from, to };
  }

  private useFp8(from: number, to: number, recipe: Fp8Recipe, initialised: boolean): Fp8Context {
    const ctx = new Fp8Context(this.backend, recipe, this.store);
    for (let i = from; i < to; i++) this.blocks[i]!.useFp8(ctx);
    ctx.allocate();
    this.store.onWorkingCopy((updated) => ctx.weightsChanged(updated));
    if (initialised) ctx.weightsChanged(false);
    return ctx;
  }

  /**
   * Scale of the loss gradient: 1/gradAccum, so accumulated gradients are of the mean loss; under
   * fp16 loss scaling S/gradAccum, the gradients S times larger (AdamW.setLossScale undoes it).
   */
  setLossScale(scale: number): void {
    this.backend.upload(this.dLoss, new Float32Array(this.rows).fill(scale / this.rows));
  }

  get paramCount(): number {
    return this.store.count;
  }

  get activationBytes(): number {
    return this.arena.totalBytes;
  }

  /**
   * Hand the model a batch: its token ids, targets, loss weights, documents and positions (or the
   * noise that draws the ids and weights: masking), and whether attention is causal.
   */
  setBatch(batch: ModelBatch, causal: boolean): void {
    this.inputs.set(batch);
    this.causal = causal;
  }

  /** The ids, targets and loss weights of the last setBatch, as the model reads them (waits for the device). */
  downloadInputs(): Promise<{ ids: Int32Array; targets: Int32Array; weights: Float32Array }> {
    return this.inputs.download();
  }

  /** Forward pass to the logits only (inference: sampling, `mdlm eval --save-logits`). */
  forwardLogits(): void {
    if (this.logitBlocks.length > 1) fail('BAD_CONFIG', `forwardLogits: this model holds the logits of ${this.logitRows} of its ${this.rows} rows at a time (logitChunks); build it without logitChunks to read all of them`);
    this.forwardHidden();
    this.head.forward(this.backend, this.normed, this.logits, this.rows);
  }

  /** Forward pass to the final norm's output, the LM head's input. */
  private forwardHidden(): void {
    const b = this.backend;
    const N = this.rows;
    this.embed.forward(b, this.inputs.ids, this.streams[0]!, N);
    this.blocks.forEach((blk, i) => blk.forward(b, this.streams[i]!, this.streams[i + 1]!, this.inputs.segIds, this.inputs.positions, this.causal));
    this.finalNorm.forward(b, this.streams[this.cfg.nLayers]!, this.normed, this.rstdFinal, N);
  }

  /**
   * The LM head and the loss, one block of logitRows rows at a time: `block(v)` runs after the
   * block's logits are in `v.logits` (the head's forward), `v` holding that block's rows of every
   * per-token buffer.
   */
  private eachLogitBlock(block: (v: LogitBlock) => void): void {
    for (const v of this.logitBlocks) {
      this.head.forward(this.backend, v.normed, v.logits, v.rows);
      block(v);
    }
  }

  /** Rows [r0, r0 + n) of the per-token buffers (the head's input, its gradient, targets and weights from `src`), and the logits buffer's first n rows. */
  private logitBlock(src: { normed: Tensor; dNormed: Tensor; targets: Tensor; weights: Tensor }, r0: number, n: number): LogitBlock {
    const b = this.backend;
    const d = this.cfg.dModel;
    const rows = (t: Tensor) => b.view(t, r0, [n]);
    return {
      rows: n,
      normed: b.view(src.normed, r0 * d, [n, d]), dNormed: b.view(src.dNormed, r0 * d, [n, d]),
      logits: b.view(this.logits, 0, [n, this.cfg.vocabSize]),
      targets: rows(src.targets), weights: rows(src.weights), dloss: rows(this.dLoss), loss: rows(this.tokenLoss), lse: rows(this.lse),
    };
  }

  /** The head's backward for one block: dNormed of its rows, and its share of the head's weight gradient. */
  private headBackward(v: LogitBlock): void {
    this.head.backward(this.backend, v.normed, v.logits, v.dNormed, 'write', v.rows);
  }

  /** The [batch·seqLen, vocab] logits of the last forwardLogits (waits for the device); a backward overwrites them with their gradient. */
  async downloadLogits(): Promise<Float32Array> {
    return (await this.backend.download(this.logits)) as Float32Array;
  }

  /** Forward pass to the per-token weighted losses; their sum lands in `lossSum`. */
  forward(): void {
    const b = this.backend;
    this.forwardHidden();
    this.eachLogitBlock((v) => {
      b.run(crossEntropy, { logits: v.logits, targets: v.targets, weights: v.weights, loss: v.loss, lse: v.lse }, { rows: v.rows, vocab: this.cfg.vocabSize });
    });
    this.sumLoss();
  }

  /** lossSum = Σ tokenLoss. */
  private sumLoss(): void {
    const b = this.backend;
    const N = this.rows;
    b.run(reduce, { x: b.view(this.tokenLoss, 0, [1, N]), out: this.lossSum }, { rows: 1, cols: N, kind: 'sum' });
  }

  /** The mean weighted loss of the last forward (waits for the device). */
  async loss(): Promise<number> {
    const [s] = (await this.backend.download(this.lossSum)) as Float32Array;
    return s! / this.rows;
  }

  /** Per-token weighted losses of the last forward (after a forwardBackward over packed loss rows: in packed order, zeros after them). */
  async tokenLosses(): Promise<Float32Array> {
    return (await this.backend.download(this.tokenLoss)) as Float32Array;
  }

  /** Accumulate parameter gradients of the mean loss of the last forward. */
  backward(): void {
    // In place: the logits' gradient overwrites the logits (one buffer, not two).
    const vocab = this.cfg.vocabSize;
    const gradient = (v: LogitBlock) => {
      this.backend.run(crossEntropyBackward, { logits: v.logits, targets: v.targets, weights: v.weights, lse: v.lse, dloss: v.dloss, dlogits: v.logits }, { rows: v.rows, vocab });
      this.headBackward(v);
    };
    // In blocks the forward kept only the last block's logits, so each block's are computed again.
    if (this.logitBlocks.length > 1) this.eachLogitBlock(gradient);
    else gradient(this.logitBlocks[0]!);
    this.backwardBelowHead();
  }

  /** backward() below the LM head: from dNormed down. */
  private backwardBelowHead(): void {
    const b = this.backend;
    const N = this.rows;
    const cfg = this.cfg;
    this.finalNorm.backward(b, this.dNormed, this.streams[cfg.nLayers]!, this.rstdFinal, this.zeros, this.dStream, N);
    for (let i = cfg.nLayers - 1; i >= 0; i--) {
      const blk = this.blocks[i]!;
      // Shared activations hold the last block's, from the forward; each other block's forward runs
      // again from its kept input (rewriting its output, the next block's input, with the same bits).
      if (this.recomputeBlocks && i < cfg.nLayers - 1) blk.forward(b, this.streams[i]!, this.streams[i + 1]!, this.inputs.segIds, this.inputs.positions, this.causal);
      blk.backward(b, this.streams[i]!, this.dStream, this.inputs.segIds, this.inputs.positions, this.causal);
    }
    this.embed.backward(b, this.inputs.ids, this.dStream, N);
  }

  /**
   * forward() then backward(). With `record`, the first call per attention kind runs them directly
   * (sizing the kernels' scratch, caching GEMM plans), the second records them and every call
   * replays the recording: on CUDA one graph launch instead of hundreds of kernel launches. The
   * inputs live in fixed device buffers, so a replay reads whatever the last setBatch put there. `overwriteGrads`: the pass's gradients replace what the gradient buffer holds, so
   * it needs no zeroing first (a step's first micro-batch; ParamStore.beginGradients); else they
   * add to it. `prelude` is queued first, inside the recording (a deferred optimizer update:
   * AdamW.takeDeferred). Each setting records its own pass.
   */
  forwardBackward(overwriteGrads = false, prelude?: PassPrelude): void {
    // forward() then backward() with the loss and its gradient in one op (cross_entropy_fused): the
    // loss gradient dLoss is known before the forward, and each row of logits is read once.
    const run = (): void => {
      prelude?.run();
      this.store.beginGradients(overwriteGrads);
      this.forwardHidden();
      const lossBlock = (v: LogitBlock): void => {
        this.head.forward(this.backend, v.normed, v.logits, v.rows);
        const args = { logits: v.logits, targets: v.targets, weights: v.weights, dloss: v.dloss, loss: v.loss, lse: v.lse, dlogits: v.logits };
        this.backend.run(crossEntropyFused, args, { rows: v.rows, vocab: this.cfg.vocabSize });
        this.headBackward(v);
      };
      if (this.packed) this.packedLoss(this.packed, lossBlock);
      else this.logitBlocks.forEach(lossBlock);
      this.sumLoss();
      this.backwardBelowHead();
      this.store.endGradients();
    };
    if (!this.recordSteps) return run();
    const key = `${this.causal} ${overwriteGrads} ${prelude?.key ?? ''}`;
    const rec = this.recordings.get(key);
    if (rec) return rec.replay();
    if (!this.warmed.has(key)) {
      this.warmed.add(key);
      return run();
    }
    const recorded = this.backend.record(run);
    this.recordings.set(key, recorded);
    recorded.replay();
  }

  /**
   * The head and the loss over the rows that carry a loss only: pack them to the front, run the
   * blocks (the first always: it writes the head's weight gradient; the others only when a packed
   * row reaches them), unpack the head input's gradient into dNormed. A block past the last packed
   * row holds zero rows with no target, so running it anyway changes nothing.
   */
  private packedLoss(p: NonNullable<LlamaModel['packed']>, lossBlock: (v: LogitBlock) => void): void {
    const b = this.backend;
    const N = this.rows;
    const d = this.cfg.dModel;
    b.run(compactRows, { targets: this.inputs.targets, weights: this.inputs.weights, order: p.order, slot: p.slot, count: p.count, packedTargets: p.targets, packedWeights: p.weights }, { rows: N });
    b.run(embedding, { ids: p.order, table: this.normed, out: this.dNormed }, { tokens: N, vocab: N, dim: d });
    // Skipped blocks leave their rows' losses as they were: clear them all first.
    if (p.blocks.length > 1) b.zero(this.tokenLoss);
    p.blocks.forEach((v, i) => (i === 0 ? lossBlock(v) : b.whenAbove(p.count, i * this.logitRows, () => lossBlock(v))));
    b.run(embedding, { ids: p.slot, table: this.dStream, out: this.dNormed }, { tokens: N, vocab: N, dim: d });
  }

  /** Run forward and backward directly from now on, releasing the recordings (op-by-op profiling). */
  stopRecording(): void {
    this.recordSteps = false;
    for (const r of this.recordings.values()) r.destroy();
    this.recordings.clear();
  }

  /** Upload every parameter from host arrays by mdlm name (a checkpoint's tensors). */
  loadParams(tensors: Readonly<Record<string, Float32Array>>, source: string): void {
    const host = new Float32Array(this.store.size);
    for (const p of this.store.list) {
      const t = tensors[p.name];
      if (!t || t.length !== p.grad.size) fail('BAD_FILE', `${source}: parameter '${p.name}' is missing or has ${t?.length ?? 0} values, expected ${p.grad.size}`);
      host.set(t, p.offset);
    }
    this.store.upload(host);
  }

  destroy(): void {
    this.stopRecording();
    this.fp8?.destroy();
    this.arena.destroy();
    this.store.destroy();
  }
}

export function validateModel(cfg: ModelConfig): void {
  const bad = (field: string, why: string): never => fail('BAD_CONFIG', `model.${field}: ${why}`);
  if (cfg.dModel % cfg.nHeads !== 0) bad('nHeads', `${cfg.nHeads} heads do not divide dModel ${cfg.dModel}`);
  if (cfg.nHeads % cfg.nKvHeads !== 0) bad('nKvHeads', `${cfg.nKvHeads} KV heads do not divide ${cfg.nHeads} heads`);
  if ((cfg.dModel / cfg.nHeads) % 8 !== 0) bad('nHeads', `head dimension ${cfg.dModel / cfg.nHeads} must be a multiple of 8 (the RoPE kernel loads vec4 halves)`);
  if (cfg.dModel % 4 !== 0) bad('dModel', `${cfg.dModel} must be a multiple of 4 (vectorised norm kernels)`);
}
