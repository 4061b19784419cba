/** Autoregressive objective: causal attention, next-token cross-entropy with weight 1. */
import type { LlamaModel } from '../model/llama.js';
import type { Objective, TokenBatch } from './objective.js';

export class ArObjective implements Objective {
  readonly name = 'ar' as const;
  readonly causal = true;
  readonly sparseLoss = false;

  async prepare(model: LlamaModel, batch: TokenBatch): Promise<void> {
    // Every token weighs 1 (the batch's default); targets of −1 (no next token in the same
    // document) are ignored by the loss.
    model.setBatch({ inputs: batch.tokens, targets: batch.targets, segIds: batch.segIds, positions: batch.positions }, this.causal);
  }
}
