/**
 * Objectives turn a batch of token windows into the batch the model consumes (its ModelBatch:
 * targets, documents, positions, and the input ids and loss weights or the noise they are drawn
 * from), handed over through model.setBatch with whether attention is causal. Both objectives
 * share every kernel; only these differ.
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
}

export interface Objective {
  readonly name: 'ar' | 'mdlm';
  readonly causal: boolean;
  /** Whether only some rows carry a loss (masked diffusion: the masked tokens), so packing them pays (train.lossRows). */
  readonly sparseLoss: boolean;
  /**
   * Hand the model the batch for `step` (noise keyed by seed, step and rank). Async so that an
   * objective may read from the device; neither does (both only hand over host arrays).
   */
  prepare(model: LlamaModel, batch: TokenBatch, step: number, rank: number): Promise<void>;
}
