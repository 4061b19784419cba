/**
 * What a training model trades compute for memory with, and the blocks of rows its LM head and
 * loss run in: train.recompute, train.logitChunks and train.lossRows as the model takes them.
 */
import type { Recompute } from '../config/schema.js';
import type { Fp8Recipe } from '../nn/fp8.js';

/** The FP8 blocks of a model (train.precision fp8, train.fp8): the recipe, and the blocks at either end that keep the compute dtype. */
export interface Fp8Blocks extends Fp8Recipe {
  readonly keepFirst: number;
  readonly keepLast: number;
}

/**
 * What a training model trades compute for memory with (train.recompute, train.logitChunks),
 * whether it packs the loss rows (train.lossRows), and which of its blocks compute in FP8 (they
 * hold FP8 weights and scratch besides).
 */
export interface ActivationSaving {
  readonly recompute?: Recompute;
  readonly logitChunks?: number;
  readonly packLossRows?: boolean;
  readonly fp8?: Fp8Blocks;
}

/** The fewest blocks packed loss rows run in: the blocks past the last packed row are skipped. */
export const PACKED_LOGIT_CHUNKS = 8;

/**
 * The blocks the LM head and the loss run over: train.logitChunks, and with packed loss rows at
 * least PACKED_LOGIT_CHUNKS (finer blocks skip more of the rows past the last packed one; at the
 * llama presets 8 blocks are faster than 4 or level).
 */
export function logitChunksOf(saving: ActivationSaving): number {
  const chunks = saving.logitChunks ?? 1;
  return saving.packLossRows ? Math.max(chunks, PACKED_LOGIT_CHUNKS) : chunks;
}

/**
 * Rows of logits a model holds at once when the LM head and the loss run over `chunks` blocks of
 * its `tokens` rows in turn: all of them for one block, else ⌈tokens / chunks⌉ rounded up to 64 (so
 * each block's views of the per-token buffers start on a 256-byte boundary, as WebGPU binds them;
 * hence at most `chunks` blocks, fewer on a short batch).
 */
export function logitRows(tokens: number, chunks: number): number {
  return chunks <= 1 ? tokens : Math.min(tokens, Math.ceil(tokens / chunks / 64) * 64);
}
