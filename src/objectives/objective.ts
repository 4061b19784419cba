/**
 * Objectives turn a batch of token windows into the batch the model consumes (its ModelBatch:
 * targets, documents, positions, and the input ids and loss weights or the noise they are drawn
 * from), handed over through model.setBatch with whether attention is causal. Both objectives
 * share every kernel; only these differ.
 *
 * Supervised fine-tuning (a batch with a loss mask, src/objectives/sft.ts) is a mode of each
 * objective, not an objective of its own: the loss is on the masked-in tokens only, as the mean
 * over the rows of each row's mean.
 */
import type { LlamaModel } from '../model/llama.js';

/** What the data loader yields (structurally its Batch): rows of seqLen tokens. */
export interface TokenBatch {
  readonly batchSize: number;
  readonly seqLen: number;
  /** [batch·seqLen] input tokens. */
  readonly tokens: Int32Array;
  /** [batch·seqLen] the next token of each input (−1: none). */
  readonly targets: Int32Array;
  /** [batch·seqLen] document index per position (packed documents), else zeros. */
  readonly segIds: Int32Array;
  /** [batch·seqLen] position within its document. */
  readonly positions: Int32Array;
  /**
   * Chat data (supervised fine-tuning): [batch·seqLen] 1 where the token is in the loss (the
   * assistant's), else 0. Absent: every token is (pretraining).
   */
  readonly lossMask?: Uint8Array;
}

/**
 * Which rows of a global batch a batch holds: rows [first, first + batchSize) of `total`. Under
 * data parallelism rank r of W holds first = r·B of total = W·B; one process holds them all. An
 * objective keys its random draws by the global row, so W ranks of B rows draw what one process of
 * W·B rows draws.
 */
export interface BatchShard {
  readonly first: number;
  readonly total: number;
}

/** The shard of a batch that is the whole global batch. */
export function wholeBatch(batch: Pick<TokenBatch, 'batchSize'>): BatchShard {
  return { first: 0, total: batch.batchSize };
}

export interface Objective {
  readonly name: 'ar' | 'mdlm';
  readonly causal: boolean;
  /** Whether only some rows carry a loss (masked diffusion: the masked tokens), so packing them pays (train.lossRows). */
  readonly sparseLoss: boolean;
  /**
   * Hand the model the batch for `step` (noise keyed by seed, step and global row), which is
   * `shard` of a global batch (default: all of it). Async so that an objective may read from the
   * device; neither does (both only hand over host arrays).
   */
  prepare(model: LlamaModel, batch: TokenBatch, step: number, shard?: BatchShard): Promise<void>;
  /** The number of tokens the batch's loss (model.loss() · rows) is a sum over, for evaluation's mean. */
  scoredTokens(batch: TokenBatch): number;
}
