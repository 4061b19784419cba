/**
 * Batches of token windows from a TokenSource (mdlm shard or Megatron dataset).
 *
 * Windows: with n = floor((L − 1) / T) and an epoch phase p ∈ [0, L − 1 − nT], window w of epoch e
 * covers tokens [p + wT, p + wT + T] (T + 1 tokens: T inputs plus one for the last target). Each
 * epoch draws p and a Fisher–Yates permutation of the n windows from Philox
 * (seed, purpose = dataOrder, step = epoch) — the same on every rank. Global batch g of an epoch
 * takes permuted windows [g·B·W, (g+1)·B·W); rank r takes the B rows starting at g·B·W + r·B, so
 * ranks never share a window. An epoch has floor(n / (B·W)) batches (the remainder is dropped; the
 * next epoch's phase and permutation differ, so dropped windows are not always the same ones).
 *
 * The cursor {epoch, index} is the next global batch: `restore(state())` continues exactly.
 *
 * mode 'window': segIds = 0, positions = 0..T−1, targets = next token.
 * mode 'packed': the row is cut from the concatenated EOS-terminated documents; segIds count the
 * documents within the row (0, 1, …; a document's EOS belongs to it), positions restart at 0 at
 * each document start, and targets that would cross into the next document are −1.
 *
 * `conversations` (chat data, supervised fine-tuning): rows of whole conversations instead of
 * windows (src/data/conversations.ts), fixed once; the n rows take the windows' place in the
 * permutation (no phase), and each batch carries the loss mask.
 */
import type { DataFormat } from '../config/schema.js';
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose, uniformInt } from '../rng/philox.js';
import { ConversationPlan, type ConversationRows } from './conversations.js';
import type { TokenSource } from './source.js';

export type LoaderMode = 'window' | 'packed';

export interface LoaderOptions {
  seqLen: number;
  batchSize: number;
  seed: number;
  rank?: number;
  worldSize?: number;
  mode?: LoaderMode;
  /** Chat data: rows of whole conversations laid out so (mode is then not used). */
  conversations?: ConversationRows;
}

export interface LoaderState {
  epoch: number;
  index: number;
}

export interface Batch {
  /** Rows of this rank's batch, and tokens per row. */
  batchSize: number;
  seqLen: number;
  /** [B·T] input tokens. */
  tokens: Int32Array;
  /** [B·T] the next token of each input (−1: none, the next token is another document's). */
  targets: Int32Array;
  /** [B·T] document index within the row (packed mode; 0 in window mode). */
  segIds: Int32Array;
  /** [B·T] position within the document (packed) or the row (window). */
  positions: Int32Array;
  /** Token offset in the source of each row's first token. */
  starts: Float64Array;
  /** Conversation rows: [B·T] 1 where the token is in the loss (the assistant's), else 0. */
  lossMask?: Uint8Array;
  /** The cursor this batch was drawn at (epoch, global batch index). */
  cursor: LoaderState;
}

function checkInt(name: string, v: unknown, min: number): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) fail('BAD_ARGUMENT', `loader ${name} must be an integer ≥ ${min}, got ${String(v)}`);
  return v;
}

interface Geometry {
  T: number;
  n: number;
  slack: number;
}

/** Windows of token data, or the rows of a conversation plan (no slack: no phase). */
function layout(source: TokenSource, seqLen: number, conversations: ConversationRows | undefined): { geo: Geometry; plan: ConversationPlan | undefined } {
  if (!conversations) return { geo: geometry(source, seqLen), plan: undefined };
  const plan = new ConversationPlan(source, seqLen, conversations);
  return { geo: { T: seqLen, n: plan.rows, slack: 0 }, plan };
}

function geometry(source: TokenSource, seqLen: number): Geometry {
  const L = source.length;
  if (L < seqLen + 1) {
    fail('BAD_ARGUMENT', `${source.path} holds ${L} tokens, fewer than ${seqLen + 1} (model.seqLen + 1) needed for one window; lower --model.seqLen or give more data`);
  }
  const n = Math.floor((L - 1) / seqLen);
  return { T: seqLen, n, slack: L - 1 - n * seqLen };
}

/** Fill one batch's arrays from the given window starts (absolute token offsets). */
function fillBatch(source: TokenSource, mode: LoaderMode, T: number, starts: Float64Array, cursor: LoaderState, buf: Int32Array): Batch {
  const B = starts.length;
  const tokens = new Int32Array(B * T);
  const targets = new Int32Array(B * T);
  const segIds = new Int32Array(B * T);
  const positions = new Int32Array(B * T);
  const docStarts = source.documentStarts;
  const eos = source.eosId;
  for (let b = 0; b < B; b++) {
    const s = starts[b]!;
    source.read(s, T + 1, buf);
    const o = b * T;
    for (let j = 0; j < T; j++) {
      tokens[o + j] = buf[j]!;
      targets[o + j] = buf[j + 1]!;
    }
    if (mode === 'window') {
      for (let j = 0; j < T; j++) positions[o + j] = j;
      continue;
    }
    // packed: newDoc(j) — does token j of the row start a document (j ≥ 1)?
    let seg = 0;
    let pos = 0;
    let k = docStarts ? upperBound(docStarts, s) : 0; // first doc start > s
    for (let j = 0; j < T; j++) {
      if (j > 0) {
        let starts_ = false;
        if (docStarts) {
          if (k < docStarts.length && docStarts[k] === s + j) {
            starts_ = true;
            k++;
          }
        } else starts_ = buf[j - 1] === eos;
        if (starts_) {
          seg++;
          pos = 0;
          targets[o + j - 1] = -1;
        }
      }
      segIds[o + j] = seg;
      positions[o + j] = pos++;
    }
    const lastCrosses = docStarts ? k < docStarts.length && docStarts[k] === s + T : buf[T - 1] === eos;
    if (lastCrosses) targets[o + T - 1] = -1;
  }
  return { batchSize: B, seqLen: T, tokens, targets, segIds, positions, starts, cursor };
}

/** Index of the first element > x in a sorted array. */
function upperBound(a: Float64Array, x: number): number {
  let lo = 0, hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function checkMode(source: TokenSource, mode: unknown): LoaderMode {
  if (mode !== 'window' && mode !== 'packed') fail('BAD_ARGUMENT', `loader mode must be "window" or "packed", got ${String(mode)}`);
  if (mode === 'packed' && source.documentStarts === undefined && source.eosId === undefined) {
    fail('BAD_ARGUMENT', `${source.path}: packed mode needs document boundaries, but the source has neither an EOS id nor a document index; use mode "window" or pass the EOS id`);
  }
  return mode;
}

export class BatchLoader implements Iterable<Batch> {
  readonly source: TokenSource;
  readonly seqLen: number;
  readonly batchSize: number;
  readonly seed: number;
  readonly rank: number;
  readonly worldSize: number;
  readonly mode: LoaderMode;
  /** Windows (conversation rows) per epoch, and global batches per epoch. */
  readonly windows: number;
  readonly batchesPerEpoch: number;
  /** Chat data: the rows of whole conversations. */
  readonly conversations: ConversationPlan | undefined;
  private readonly geo: Geometry;
  private cursor: LoaderState = { epoch: 0, index: 0 };
  private planEpoch = -1;
  private perm = new Uint32Array(0);
  private phase = 0;
  private readonly buf: Int32Array;

  constructor(source: TokenSource, opts: LoaderOptions) {
    this.source = source;
    this.seqLen = checkInt('seqLen', opts.seqLen, 1);
    this.batchSize = checkInt('batchSize', opts.batchSize, 1);
    this.seed = checkInt('seed', opts.seed, 0);
    this.worldSize = checkInt('worldSize', opts.worldSize ?? 1, 1);
    this.rank = checkInt('rank', opts.rank ?? 0, 0);
    if (this.rank >= this.worldSize) fail('BAD_ARGUMENT', `loader rank ${this.rank} must be below worldSize ${this.worldSize}`);
    this.mode = checkMode(source, opts.mode ?? 'window');
    ({ geo: this.geo, plan: this.conversations } = layout(source, this.seqLen, opts.conversations));
    this.windows = this.geo.n;
    const global = this.batchSize * this.worldSize;
    this.batchesPerEpoch = Math.floor(this.geo.n / global);
    if (this.batchesPerEpoch === 0) {
      const rows = this.conversations ? `${this.geo.n} rows of conversations` : `${this.geo.n} windows of ${this.seqLen + 1} tokens`;
      fail('BAD_ARGUMENT', `${source.path}: ${source.length} tokens make ${rows}, fewer than one global batch (train.batchSize ${this.batchSize} × world size ${this.worldSize} = ${global}); lower --train.batchSize or --model.seqLen, or give more data`);
    }
    this.buf = new Int32Array(this.seqLen + 1);
  }

  /** The cursor of the next batch. */
  state(): LoaderState {
    return { ...this.cursor };
  }

  restore(state: LoaderState): void {
    if (!state || typeof state !== 'object') fail('BAD_ARGUMENT', `loader state must be an object {epoch, index}, got ${String(state)}`);
    const epoch = checkInt('state.epoch', state.epoch, 0);
    const index = checkInt('state.index', state.index, 0);
    if (index > this.batchesPerEpoch) {
      fail('BAD_ARGUMENT', `loader state index ${index} exceeds the ${this.batchesPerEpoch} batches per epoch; the checkpoint was saved with different data, model.seqLen, train.batchSize or world size`);
    }
    this.cursor = { epoch, index };
  }

  private plan(epoch: number): void {
    if (this.planEpoch === epoch) return;
    const rng = new PhiloxStream(this.seed, RngPurpose.dataOrder, epoch, 0);
    this.phase = uniformInt(rng, this.geo.slack + 1);
    const n = this.geo.n;
    if (this.perm.length !== n) this.perm = new Uint32Array(n);
    const p = this.perm;
    for (let i = 0; i < n; i++) p[i] = i;
    for (let i = n - 1; i > 0; i--) {
      const j = uniformInt(rng, i + 1);
      const t = p[i]!;
      p[i] = p[j]!;
      p[j] = t;
    }
    this.planEpoch = epoch;
  }

  next(): Batch {
    if (this.cursor.index >= this.batchesPerEpoch) this.cursor = { epoch: this.cursor.epoch + 1, index: 0 };
    const cursor = { ...this.cursor };
    this.plan(cursor.epoch);
    const B = this.batchSize, T = this.seqLen;
    const base = cursor.index * B * this.worldSize + this.rank * B;
    this.cursor.index++;
    if (this.conversations) return conversationBatch(this.conversations, this.perm.subarray(base, base + B), cursor);
    const starts = new Float64Array(B);
    for (let b = 0; b < B; b++) starts[b] = this.phase + this.perm[base + b]! * T;
    return fillBatch(this.source, this.mode, T, starts, cursor, this.buf);
  }

  *[Symbol.iterator](): Iterator<Batch> {
    for (;;) yield this.next();
  }
}

/** A batch of conversation rows. */
function conversationBatch(plan: ConversationPlan, rows: ArrayLike<number>, cursor: LoaderState): Batch {
  return { batchSize: rows.length, seqLen: plan.seqLen, ...plan.fill(rows), cursor };
}

/** A run's row layout: chat data (data.format chat) in rows of whole conversations laid out by sft.*; token data in windows. */
export function conversationRows(cfg: { readonly data: { readonly format: DataFormat }; readonly sft: ConversationRows }): { conversations?: ConversationRows } {
  return cfg.data.format === 'chat' ? { conversations: cfg.sft } : {};
}

export function createLoader(source: TokenSource, opts: LoaderOptions): BatchLoader {
  return new BatchLoader(source, opts);
}

export interface EvalOptions {
  seqLen: number;
  batchSize: number;
  rank?: number;
  worldSize?: number;
  mode?: LoaderMode;
  /** Chat data: rows of whole conversations laid out so. */
  conversations?: ConversationRows;
  /** At most this many global batches (default: all full batches). */
  maxBatches?: number;
}

/** How many batches `evalBatches` yields for these options. */
export function evalBatchCount(source: TokenSource, opts: EvalOptions): number {
  const T = checkInt('seqLen', opts.seqLen, 1);
  const B = checkInt('batchSize', opts.batchSize, 1);
  const W = checkInt('worldSize', opts.worldSize ?? 1, 1);
  const n = opts.conversations ? new ConversationPlan(source, T, opts.conversations).rows : source.length > T ? Math.floor((source.length - 1) / T) : 0;
  const count = Math.floor(n / (B * W));
  if (count === 0) {
    const rows = opts.conversations ? `${n} rows of conversations` : `${n} windows of ${T + 1}`;
    fail('BAD_ARGUMENT', `${source.path}: ${source.length} validation tokens make ${rows}, fewer than one eval batch (${B} rows × world size ${W}); lower --train.batchSize or --model.seqLen, or train on data prepared with more validation tokens (mdlm data prepare --val-tokens N)`);
  }
  return opts.maxBatches === undefined ? count : Math.min(count, checkInt('maxBatches', opts.maxBatches, 1));
}

/**
 * A fixed, finite sequence of validation batches: non-overlapping windows from the start of the
 * source, in order (window k starts at token kT), or the conversation rows in order, split across
 * ranks like training batches. No randomness, so every eval sees the same tokens.
 */
export function* evalBatches(source: TokenSource, opts: EvalOptions): Generator<Batch> {
  const count = evalBatchCount(source, opts);
  const T = opts.seqLen, B = opts.batchSize, W = opts.worldSize ?? 1;
  const rank = checkInt('rank', opts.rank ?? 0, 0);
  if (rank >= W) fail('BAD_ARGUMENT', `eval rank ${rank} must be below worldSize ${W}`);
  const mode = checkMode(source, opts.mode ?? 'window');
  const buf = new Int32Array(T + 1);
  const plan = opts.conversations && new ConversationPlan(source, T, opts.conversations);
  for (let g = 0; g < count; g++) {
    if (plan) {
      yield conversationBatch(plan, Array.from({ length: B }, (_, b) => g * B * W + rank * B + b), { epoch: 0, index: g });
      continue;
    }
    const starts = new Float64Array(B);
    for (let b = 0; b < B; b++) starts[b] = (g * B * W + rank * B + b) * T;
    yield fillBatch(source, mode, T, starts, { epoch: 0, index: g }, buf);
  }
}
