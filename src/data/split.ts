/**
 * The train/val split of `mdlm data prepare`, written as the documents stream past.
 *
 * Non-empty document i (0-based, in input order) goes to val when its draw
 * u_i = philox4x32([i_lo, i_hi, 0xffffffff, dataOrder], seed)[0] / 2^32 is below valFraction: a
 * pure function of (seed, i). When that leaves val fewer than min(valTokens, a tenth of all
 * tokens) tokens — a small corpus, or a small fraction — the training documents with the smallest
 * draws move to val until it has them. Val always gets at least one document and train keeps at
 * least one. Moving documents rewrites both shards once, in input order; a corpus whose fraction
 * alone gives val enough tokens is written in one pass.
 */
import { philox4x32, RngPurpose, seedKey } from '../rng/philox.js';
import { ShardWriter, openShard, type ShardSummary, type ShardWriterOptions } from './shard.js';

/**
 * Default least number of val tokens: two evaluation batches of the largest presets (llama-124m
 * and llama-1.3b: 16384 tokens a batch), the whole evaluation of the nano default run (8 × 16 × 64).
 */
export const DEFAULT_VAL_TOKENS = 32768;
/** The val minimum takes at most this share of the tokens. */
const MAX_MIN_SHARE = 0.1;

export interface SplitOptions {
  /** Probability that a document goes to val, in [0, 1). */
  readonly valFraction: number;
  /** Least number of val tokens (EOS included), up to a tenth of the data. */
  readonly valTokens: number;
  readonly seed: number;
}

/** Document i's draw, an unsigned 32-bit integer. */
export function splitDraw(seed: number, i: number): number {
  const out = philox4x32([i >>> 0, Math.floor(i / 2 ** 32) >>> 0, 0xffffffff, RngPurpose.dataOrder], seedKey(seed)) as Uint32Array;
  return out[0]!;
}

/** Whether document i goes to val by its draw (before any documents move to meet the minimum). */
export function isValDocument(seed: number, i: number, valFraction: number): boolean {
  return splitDraw(seed, i) / 2 ** 32 < valFraction;
}

interface Candidate {
  readonly draw: number;
  readonly index: number;
  readonly tokens: number;
}

/** Ascending by draw, then by index. */
function before(a: Candidate, b: Candidate): boolean {
  return a.draw < b.draw || (a.draw === b.draw && a.index < b.index);
}

/** Streams documents into train.bin and val.bin (see the file comment). */
export class SplitWriter {
  private lengths = new Uint32Array(1024);
  private inVal = new Uint8Array(1024);
  private count = 0;
  /** Training documents with the smallest draws, ascending, just enough to cover valTokens. */
  private readonly candidates: Candidate[] = [];
  private candidateTokens = 0;
  /** The val document with the largest draw: the one that goes back should train be empty. */
  private lastVal: Candidate | undefined;

  private constructor(
    private readonly train: ShardWriter,
    private readonly val: ShardWriter,
    private readonly shard: ShardWriterOptions,
    private readonly split: SplitOptions,
  ) {}

  static async create(trainPath: string, valPath: string, shard: ShardWriterOptions, split: SplitOptions): Promise<SplitWriter> {
    const [train, val] = await createPair([trainPath, valPath], shard);
    return new SplitWriter(train, val, shard, split);
  }

  get documents(): number {
    return this.count;
  }

  /** Append one non-empty document (its EOS is added), with its loss mask where the shards have one. */
  async add(ids: ArrayLike<number>, lossMask?: ArrayLike<number>): Promise<void> {
    const i = this.count;
    const draw = splitDraw(this.split.seed, i);
    const toVal = draw / 2 ** 32 < this.split.valFraction;
    const doc = { draw, index: i, tokens: ids.length + 1 };
    if (i === this.lengths.length) {
      this.lengths = grow(this.lengths);
      this.inVal = grow(this.inVal);
    }
    this.lengths[i] = doc.tokens;
    this.inVal[i] = toVal ? 1 : 0;
    this.count++;
    if (toVal) {
      if (!this.lastVal || before(this.lastVal, doc)) this.lastVal = doc;
      await this.val.writeDocument(ids, lossMask);
    } else {
      this.offer(doc);
      await this.train.writeDocument(ids, lossMask);
    }
  }

  private offer(doc: Candidate): void {
    const c = this.candidates;
    const need = Math.max(this.split.valTokens, 1);
    if (this.candidateTokens >= need && !before(doc, c[c.length - 1]!)) return;
    let lo = 0, hi = c.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (before(c[mid]!, doc)) lo = mid + 1;
      else hi = mid;
    }
    c.splice(lo, 0, doc);
    this.candidateTokens += doc.tokens;
    while (c.length > 1 && this.candidateTokens - c[c.length - 1]!.tokens >= need) this.candidateTokens -= c.pop()!.tokens;
  }

  /** Close both shards, moving documents first where the split needs it. At least two documents. */
  async finish(): Promise<{ train: ShardSummary; val: ShardSummary }> {
    const moves = new Set<number>();
    let valTokens = this.val.tokenCount, valDocs = this.val.documentCount, trainDocs = this.train.documentCount;
    if (trainDocs === 0 && this.lastVal) {
      moves.add(this.lastVal.index);
      valTokens -= this.lastVal.tokens;
      valDocs--;
      trainDocs++;
    }
    const want = Math.min(this.split.valTokens, Math.floor(MAX_MIN_SHARE * (this.train.tokenCount + this.val.tokenCount)));
    for (const c of this.candidates) {
      if ((valDocs > 0 && valTokens >= want) || trainDocs <= 1) break;
      moves.add(c.index);
      valTokens += c.tokens;
      valDocs++;
      trainDocs--;
    }
    if (moves.size === 0) return { train: await this.train.close(), val: await this.val.close() };
    // A side the first pass left empty has nothing to read back.
    const paths = [this.train.path, this.val.path] as const;
    const read: boolean[] = [];
    for (const w of [this.train, this.val]) {
      if (w.tokenCount === 0) await w.abort();
      else await w.close();
      read.push(w.tokenCount > 0);
    }
    return this.rewrite(paths, read, moves);
  }

  /** Write both shards again, in input order, with the documents in `moves` on the other side. */
  private async rewrite(paths: readonly [string, string], read: readonly boolean[], moves: ReadonlySet<number>): Promise<{ train: ShardSummary; val: ShardSummary }> {
    const from = paths.map((p, side) => (read[side] ? openShard(p) : undefined));
    const at: [number, number] = [0, 0];
    try {
      const [train, val] = await createPair(paths, this.shard);
      try {
        for (let i = 0; i < this.count; i++) {
          const side = this.inVal[i]! as 0 | 1;
          const n = this.lengths[i]!;
          const ids = from[side]!.read(at[side], n - 1);
          const mask = from[side]!.lossMask?.read(at[side], n - 1);
          at[side] += n;
          await ((side === 1) !== moves.has(i) ? val : train).writeDocument(ids, mask);
        }
        return { train: await train.close(), val: await val.close() };
      } catch (e) {
        await train.abort();
        await val.abort();
        throw e;
      }
    } finally {
      for (const f of from) f?.close();
    }
  }

  async abort(): Promise<void> {
    await this.train.abort();
    await this.val.abort();
  }
}

/** Writers for train and val, or neither. */
async function createPair(paths: readonly [string, string], shard: ShardWriterOptions): Promise<[ShardWriter, ShardWriter]> {
  const train = await ShardWriter.create(paths[0], shard);
  try {
    return [train, await ShardWriter.create(paths[1], shard)];
  } catch (e) {
    await train.abort();
    throw e;
  }
}

function grow<T extends Uint32Array | Uint8Array>(a: T): T {
  const b = new (a.constructor as new (n: number) => T)(a.length * 2);
  b.set(a);
  return b;
}
