/**
 * Masked diffusion (MDLM / LLaDA / MegaDLMs): bidirectional attention, absorbing [MASK] noise.
 * Per sequence a noise level t ~ U(tMin, tMax) (antithetic across the batch by default); each
 * token is masked with probability 1 − α(t), drawn by the model on the device from the batch's
 * noise (src/model/inputs.ts: the Philox-keyed `diffusion_mask` op), so the same seed masks the
 * same tokens on every backend; masked tokens carry a loss weight, the rest zero; the loss is
 * normalised by the token count (batch · seqLen).
 *
 * Weighting: `elbo` gives masked tokens the schedule's ELBO weight w(t) (1/t for linear);
 * `empirical` (MegaDLMs) gives them 1/p, p = the realised masked fraction of the row's real tokens,
 * computed by the masking kernel itself from the mask it drew (no read-back, no host sync).
 *
 * Random-length truncation (MegaDLMs' varilen, `varilenProb`): with that probability a training
 * row keeps only a prefix of random length ℓ ~ U{2..T}; its tail is no token of the loss, is never
 * masked and sits in its own attention segment, so the prefix is trained exactly as a sequence of
 * length ℓ. MegaDLMs truncates a whole micro-batch at once because that shortens its tensors;
 * with fixed shapes nothing is gained that way, so each row draws on its own (same per-sequence
 * distribution). Draws are Philox-keyed by (seed, step, truncation), over the global batch.
 *
 * Evaluation (a fixed t) always uses the ELBO weight and no truncation: it reports the bound.
 *
 * Supervised fine-tuning (a batch with a loss mask: chat data), LLaDA-style: the tokens outside
 * the mask (the prompt) are never masked and carry no loss; the tokens in it (the reply, and the
 * EOS padding after it) are masked with probability 1 − α(t) and carry the loss with the same
 * weighting, scaled per row to its mean over those tokens (src/objectives/sft.ts). No truncation.
 */
import type { LlamaModel } from '../model/llama.js';
import { PhiloxStream, RngPurpose, uniformInt } from '../rng/philox.js';
import { type BatchShard, type Objective, type TokenBatch, wholeBatch } from './objective.js';
import { type Schedule, type ScheduleName, makeSchedule } from './schedules.js';
import { rowWeights, scoredRowTokens } from './sft.js';

export type Weighting = 'elbo' | 'empirical';

export interface MdlmOptions {
  readonly maskId: number;
  readonly seed: number;
  readonly schedule: ScheduleName;
  readonly exponent?: number;
  readonly tMin: number;
  readonly tMax: number;
  readonly antithetic: boolean;
  readonly weighting: Weighting;
  /** Probability that a training row is truncated to a random length. */
  readonly varilenProb: number;
  /** Number of fixed noise levels of the ELBO evaluation. */
  readonly evalNoiseLevels: number;
}

/** The rows as the noising sees them: tokens past a row's kept length are −1 (padding). */
interface NoisingRows {
  readonly tokens: Int32Array;
  readonly segIds: Int32Array;
}

export class MdlmObjective implements Objective {
  readonly name = 'mdlm' as const;
  readonly causal = false;
  readonly sparseLoss = true;
  readonly schedule: Schedule;

  constructor(readonly opts: MdlmOptions) {
    this.schedule = makeSchedule(opts.schedule, opts.exponent, opts.tMin);
  }

  /** Noise levels for the batch rows at `step`: antithetic (evenly spread, one random offset) or i.i.d. */
  noiseLevels(batch: number, step: number, rank: number): Float64Array {
    const rng = new PhiloxStream(this.opts.seed, RngPurpose.noiseLevel, step, rank);
    const { tMin, tMax, antithetic } = this.opts;
    const t = new Float64Array(batch);
    const offset = rng.uniform();
    for (let b = 0; b < batch; b++) {
      const u = antithetic ? (offset + b / batch) % 1 : rng.uniform();
      t[b] = tMin + (tMax - tMin) * u;
    }
    return t;
  }

  /** The evaluation's noise levels: midpoints of `evalNoiseLevels` equal slices of [tMin, tMax]. */
  evalNoiseLevels(): number[] {
    const { tMin, tMax, evalNoiseLevels: n } = this.opts;
    return Array.from({ length: n }, (_, k) => tMin + ((k + 0.5) / n) * (tMax - tMin));
  }

  /**
   * Kept length of each row at `step`: seqLen, or with probability varilenProb a length drawn
   * uniformly from 2..seqLen. Every row draws the same number of words whatever the outcome.
   */
  keptLengths(batch: number, seqLen: number, step: number, rank: number): Int32Array {
    const lengths = new Int32Array(batch).fill(seqLen);
    if (this.opts.varilenProb <= 0 || seqLen < 3) return lengths;
    const rng = new PhiloxStream(this.opts.seed, RngPurpose.truncation, step, rank);
    for (let b = 0; b < batch; b++) {
      const truncate = rng.uniform() < this.opts.varilenProb;
      const length = 2 + uniformInt(rng, seqLen - 1);
      if (truncate) lengths[b] = length;
    }
    return lengths;
  }

  /**
   * Hand the model the batch for `step` with its noise: per row a noise level, its mask
   * probability and loss weight, which the model draws the masks from. The batch is `shard` of a
   * global batch: the noise levels and lengths are drawn for the whole global batch (rank 0's
   * streams) and this batch takes its rows', and the masks are keyed by global row, so the split
   * of the global batch over ranks changes no draw. `fixedT` (evaluation): every row at that
   * noise level, ELBO weights, no truncation.
   */
  async prepare(model: LlamaModel, batch: TokenBatch, step: number, shard: BatchShard = wholeBatch(batch), fixedT?: number): Promise<void> {
    const B = batch.batchSize;
    const T = batch.seqLen;
    const { first, total } = shard;
    if (first < 0 || first + B > total) throw new Error(`MdlmObjective.prepare: rows ${first}..${first + B - 1} are not within a global batch of ${total}`);
    const mine = <A extends Float64Array | Int32Array>(all: A): A => all.subarray(first, first + B) as A;
    const training = fixedT === undefined;
    const sft = batch.lossMask ? fineTuningRows(batch, batch.lossMask) : undefined;
    const rows = sft ?? (training ? truncateRows(batch, mine(this.keptLengths(total, T, step, 0))) : batch);
    const t = training ? mine(this.noiseLevels(total, step, 0)) : new Float64Array(B).fill(fixedT);
    const empirical = training && this.opts.weighting === 'empirical';
    const scale = sft?.rowWeights;
    const masking = {
      maskProb: Float32Array.from(t, (x) => this.schedule.maskProb(x)),
      lossWeight: Float32Array.from(t, (x, b) => (empirical ? 1 : this.schedule.weight(x)) * (scale ? scale[b]! : 1)),
      maskId: this.opts.maskId, empirical, seed: this.opts.seed, step, rowOffset: first, totalRows: total,
    };
    // The clean tokens are the targets; a truncated tail (−1) is padding, a fine-tuning prompt (−1) stays visible.
    model.setBatch({ targets: rows.tokens, segIds: rows.segIds, positions: batch.positions, masking, ...(sft ? { visible: batch.tokens } : {}) }, this.causal);
  }

  scoredTokens(batch: TokenBatch): number {
    const mask = batch.lossMask;
    return mask ? scoredRowTokens(batch.batchSize, batch.seqLen, (i) => mask[i] === 1) : batch.tokens.length;
  }
}

/** Fine-tuning rows as the noising sees them: tokens outside the loss mask −1 (never masked), and each row's weight. */
function fineTuningRows(batch: TokenBatch, lossMask: Uint8Array): NoisingRows & { rowWeights: Float32Array } {
  return {
    tokens: batch.tokens.map((id, i) => (lossMask[i] ? id : -1)),
    segIds: batch.segIds,
    rowWeights: rowWeights(batch.batchSize, batch.seqLen, (i) => lossMask[i] === 1),
  };
}

/** Rows cut to their kept lengths: the tail becomes padding (−1) in a segment of its own. */
export function truncateRows(batch: TokenBatch, lengths: Int32Array): NoisingRows {
  const T = batch.seqLen;
  if (lengths.every((len) => len === T)) return batch;
  const tokens = batch.tokens.slice();
  const segIds = batch.segIds.slice();
  lengths.forEach((len, row) => {
    if (len === T) return;
    const o = row * T;
    tokens.fill(-1, o + len, o + T);
    segIds.fill(segIds[o + len - 1]! + 1, o + len, o + T);
  });
  return { tokens, segIds };
}
