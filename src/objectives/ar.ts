/**
 * Autoregressive objective: causal attention, next-token cross-entropy with weight 1; on chat data
 * (a loss mask) only the targets that are the assistant's, each row's mean (src/objectives/sft.ts).
 */
import type { LlamaModel } from '../model/llama.js';
import type { Objective, TokenBatch } from './objective.js';
import { arTargets, scoredRowTokens } from './sft.js';

export class ArObjective implements Objective {
  readonly name = 'ar' as const;
  readonly causal = true;
  readonly sparseLoss = false;

  async prepare(model: LlamaModel, batch: TokenBatch): Promise<void> {
    const rows = { inputs: batch.tokens, segIds: batch.segIds, positions: batch.positions };
    if (batch.lossMask) {
      model.setBatch({ ...rows, ...arTargets(batch.seqLen, batch.targets, batch.lossMask) }, this.causal);
      return;
    }
    // Every token weighs 1 (the batch's default); targets of −1 (no next token in the same
    // document) are ignored by the loss.
    model.setBatch({ ...rows, targets: batch.targets }, this.causal);
  }

  scoredTokens(batch: TokenBatch): number {
    if (batch.lossMask) {
      const { targets } = arTargets(batch.seqLen, batch.targets, batch.lossMask);
      return scoredRowTokens(batch.batchSize, batch.seqLen, (i) => targets[i]! >= 0);
    }
    let n = 0;
    for (const t of batch.targets) if (t >= 0) n++;
    return n;
  }
}
