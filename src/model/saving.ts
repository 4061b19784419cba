/**
 * What a training model trades compute for memory with, and the blocks of rows its LM head and
 * loss run in: train.recompute, train.logitChunks and train.lossRows as the model takes them.
 */
import type { Recompute } from '../config/schema.js';
import { Arena } from '../nn/arena.js';
import type { Fp8Recipe } from '../nn/fp8.js';
import type { DType, Shape, Tensor } from '../tensor.js';

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

/**
 * One set of activation tensors for all the decoder blocks (train.recompute full): the first
 * block's allocations are made in `arena` and remembered, and every later block asks for the same
 * shapes in the same order and gets those tensors back. The model then keeps only the blocks'
 * inputs (its residual streams) and runs each block's forward again just before its backward.
 */
export class SharedBlockActivations {
  private readonly tensors: Tensor[] = [];

  constructor(private readonly arena: Arena) {}

  /** The arena block `index` allocates its activations from. */
  arenaFor(index: number): Arena {
    return index === 0 ? new Remembering(this.arena, this.tensors) : new Replaying(this.arena, this.tensors, index);
  }
}

/** Allocates in the model's arena (which counts the bytes) and remembers each tensor. */
class Remembering extends Arena {
  constructor(private readonly inner: Arena, private readonly log: Tensor[]) {
    super(inner.backend, inner.floatDtype);
  }

  override alloc(shape: Shape, dtype: DType = this.floatDtype): Tensor {
    const t = this.inner.alloc(shape, dtype);
    this.log.push(t);
    return t;
  }
}

/** Hands back the first block's tensors in order, each checked against what is asked for. */
class Replaying extends Arena {
  private next = 0;

  constructor(inner: Arena, private readonly log: readonly Tensor[], private readonly block: number) {
    super(inner.backend, inner.floatDtype);
  }

  override alloc(shape: Shape, dtype: DType = this.floatDtype): Tensor {
    const t = this.log[this.next++];
    if (!t || t.dtype !== dtype || t.shape.join(',') !== shape.join(',')) {
      throw new Error(`SharedBlockActivations: block ${this.block} asks for [${shape.join(', ')}] ${dtype} as its tensor ${this.next - 1}, which block 0 allocated as ${t ? `[${t.shape.join(', ')}] ${t.dtype}` : 'nothing'}`);
    }
    return t;
  }
}
