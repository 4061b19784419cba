/**
 * Supervised fine-tuning's share of the objectives: a batch's loss mask (1 on the assistant's
 * tokens) decides which tokens the loss is on, and each row's loss is the mean over its tokens in
 * the loss, so the batch's loss (the model normalises by batch · seqLen) is the mean over the
 * rows of each row's mean, in training and evaluation alike: a row's weight per token is
 * seqLen / (its tokens in the loss). A row with none weighs nothing. A row's weight depends on the
 * row alone, so W ranks of B rows train as one process of W·B rows.
 */

/** Per row: seqLen / (tokens in the loss), 0 where there are none. `inLoss(i)` says whether token i (of batch·seqLen) is. */
export function rowWeights(batch: number, seqLen: number, inLoss: (i: number) => boolean): Float32Array {
  const w = new Float32Array(batch);
  for (let b = 0; b < batch; b++) {
    let n = 0;
    for (let j = 0; j < seqLen; j++) if (inLoss(b * seqLen + j)) n++;
    w[b] = n > 0 ? seqLen / n : 0;
  }
  return w;
}

/**
 * Autoregressive SFT: the next-token targets whose token is in the loss (the others −1), and their
 * weights. `targets` is −1 where a token has no next token in its document, so the last position
 * of a row never reads past it.
 */
export function arTargets(seqLen: number, targets: Int32Array, lossMask: Uint8Array): { targets: Int32Array; weights: Float32Array } {
  const kept = targets.map((t, i) => (t >= 0 && (i + 1) % seqLen !== 0 && lossMask[i + 1] ? t : -1));
  const rows = rowWeights(targets.length / seqLen, seqLen, (i) => kept[i]! >= 0);
  const weights = Float32Array.from(kept, (t, i) => (t >= 0 ? rows[Math.floor(i / seqLen)]! : 0));
  return { targets: kept, weights };
}

/** How many tokens a batch's loss is the mean over: seqLen for each row with a token in the loss. */
export function scoredRowTokens(batch: number, seqLen: number, inLoss: (i: number) => boolean): number {
  return rowWeights(batch, seqLen, inLoss).reduce((n, w) => n + (w > 0 ? seqLen : 0), 0);
}
