/**
 * Evaluation over a fixed, deterministic sequence of batches (`evalBatches`): the trainer's
 * periodic eval and `mdlm eval` both run this.
 *
 *   ar:   mean next-token cross-entropy over the positions that have a target (ppl = exp).
 *   mdlm: the ELBO per token at the objective's fixed noise levels (midpoints of equal slices of
 *         [tMin, tMax]), with ELBO weights whatever the training weighting, masks drawn from a
 *         fixed eval stream — exp of it bounds the perplexity from above.
 *   chat data (conversations): either, over the assistant's tokens only, as the mean over the
 *         rows of each row's mean (src/objectives/sft.ts), the training loss's definition.
 */
import { type Collectives, SOLO, sumOverRanks } from '../dist/collectives.js';
import type { ConversationRows } from '../data/conversations.js';
import type { LoaderMode } from '../data/loader.js';
import { evalBatchCount, evalBatches } from '../data/loader.js';
import type { TokenSource } from '../data/source.js';
import type { LlamaModel } from '../model/llama.js';
import { MdlmObjective } from '../objectives/mdlm.js';
import type { Objective } from '../objectives/objective.js';
import { shardOf } from './step.js';
import { EventLoopTurns } from './turns.js';

export interface EvaluateOptions {
  readonly seqLen: number;
  readonly batchSize: number;
  readonly mode: LoaderMode;
  /** Chat data: rows of whole conversations laid out so (the loss on the assistant's tokens). */
  readonly conversations?: ConversationRows;
  /** At most this many batches (default: every full batch of the source). */
  readonly maxBatches?: number;
  /** Called before the first batch and after each, with the batches done and their total. */
  readonly onBatch?: (done: number, total: number) => void;
  /** Aborted: stop between batches, rejecting with the signal's reason. */
  readonly signal?: AbortSignal;
  /**
   * The data-parallel ranks (default: this process alone): each evaluates its rows of every
   * global batch (batchSize a rank) and the loss and token sums are added over the ranks, so every
   * rank gets what one process of batchSize · worldSize rows gets.
   */
  readonly group?: Collectives;
}

export interface Evaluation {
  /** Mean loss per scored token (nats). */
  readonly loss: number;
  /** exp(loss): the perplexity (ar) or its ELBO bound (mdlm). */
  readonly ppl: number;
  /** Tokens scored (ar: positions with a next token; mdlm: every token; chat data: seqLen a row with tokens in the loss). */
  readonly tokens: number;
  readonly batches: number;
  /** Noise levels per batch (1 for ar). */
  readonly noiseLevels: number;
}

/** First counter step of the eval masks: far from any training step, the same at every eval. */
const EVAL_STEP_BASE = 2 ** 31;

export async function evaluateModel(model: LlamaModel, objective: Objective, source: TokenSource, opts: EvaluateOptions): Promise<Evaluation> {
  if (model.rows !== opts.batchSize * opts.seqLen) {
    throw new Error(`evaluateModel: the model holds ${model.rows} rows, the batches ${opts.batchSize}·${opts.seqLen}`);
  }
  const group = opts.group ?? SOLO;
  const place = { rank: group.rank, worldSize: group.worldSize };
  const shard = shardOf(group, opts);
  const count = evalBatchCount(source, { ...opts, ...place });
  const levels = objective instanceof MdlmObjective ? objective.evalNoiseLevels() : [undefined];
  let lossSum = 0;
  let tokens = 0;
  let pass = 0;
  let done = 0;
  const pause = new EventLoopTurns();
  opts.onBatch?.(0, count);
  for (const batch of evalBatches(source, { ...opts, ...place, maxBatches: count })) {
    await pause.maybe();
    opts.signal?.throwIfAborted();
    for (const t of levels) {
      if (objective instanceof MdlmObjective) await objective.prepare(model, batch, EVAL_STEP_BASE + pass, shard, t);
      else await objective.prepare(model, batch, 0, shard);
      model.forward();
      lossSum += (await model.loss()) * model.rows;
      tokens += objective.scoredTokens(batch);
      pass++;
    }
    opts.onBatch?.(++done, count);
  }
  [lossSum, tokens] = (await sumOverRanks(group, [lossSum, tokens])) as [number, number];
  const loss = lossSum / tokens;
  return { loss, ppl: Math.exp(loss), tokens: tokens / levels.length, batches: count, noiseLevels: levels.length };
}
