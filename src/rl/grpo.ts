/**
 * GRPO's arithmetic (DeepSeekMath, Shao et al. 2024), on the host: group-normalised advantages,
 * and the per-token loss weights through which the model's weighted cross-entropy carries the
 * clipped-ratio objective with a KL penalty to a frozen reference.
 *
 * For completion i of M (|oᵢ| tokens) and its token t, with r = π(t)/π_old(t) (π_old: the policy
 * that sampled it) and Aᵢ the group-normalised advantage, the loss is
 *   L = −(1/M) Σᵢ (1/|oᵢ|) Σₜ [ min(r·Aᵢ, clip(r, 1−ε, 1+ε)·Aᵢ) − β·KLₜ ],
 *   KLₜ = π_ref/π − log(π_ref/π) − 1   (the unbiased, non-negative k3 estimate).
 * Its gradient in log π(t) is −(1/(M|oᵢ|)) [Aᵢ·r·[unclipped] − β(1 − π_ref/π)], where a token is
 * clipped when the min picks the clipped term (r > 1+ε with A > 0, r < 1−ε with A < 0): its
 * gradient is zero. The model's loss is Σ w·(−log π) / N over its N = batch·seqLen tokens, whose
 * gradient in log π(t) is −w/N; so the weight of token t is
 *   w = N/(M|oᵢ|) · [Aᵢ·r·[unclipped] − β(1 − π_ref/π)],
 * and one backward pass of the model's loss with these weights is the gradient of L at the
 * current parameters (the weights are constants there, as the gradient needs).
 */

/**
 * Each group's rewards minus its mean, over its standard deviation (population) plus `eps`:
 * `rewards` is `groups` runs of `size` completions of the same prompt. A group whose rewards are
 * all equal has advantages 0 (it teaches nothing).
 */
export function groupAdvantages(rewards: readonly number[], size: number, eps = 1e-4): Float64Array {
  if (!Number.isInteger(size) || size < 1 || rewards.length % size !== 0) throw new RangeError(`groupAdvantages: ${rewards.length} rewards are not groups of ${size}`);
  const out = new Float64Array(rewards.length);
  for (let g = 0; g < rewards.length; g += size) {
    const group = rewards.slice(g, g + size);
    const mean = group.reduce((s, r) => s + r, 0) / size;
    const std = Math.sqrt(group.reduce((s, r) => s + (r - mean) ** 2, 0) / size);
    for (let i = 0; i < size; i++) out[g + i] = (group[i]! - mean) / (std + eps);
  }
  return out;
}

/** One completion's tokens in the model's batch: its log-probabilities at its token positions. */
export interface CompletionTokens {
  /** The indices (in the batch's batch·seqLen tokens) whose targets are the completion's tokens. */
  readonly positions: readonly number[];
  readonly advantage: number;
}

export interface GrpoWeightInputs {
  readonly completions: readonly CompletionTokens[];
  /** [batch·seqLen] log π(target) under the current parameters. */
  readonly logp: Float32Array;
  /** [batch·seqLen] under the policy that sampled the completions. */
  readonly oldLogp: Float32Array;
  /** [batch·seqLen] under the frozen reference (unread where beta is 0). */
  readonly refLogp?: Float32Array;
  /** ε of the clipped ratio. */
  readonly clip: number;
  /** β, the KL penalty's coefficient. */
  readonly beta: number;
}

export interface GrpoWeights {
  /** [batch·seqLen] the loss weights (0 off the completions). */
  readonly weights: Float32Array;
  /** The objective L (above) at the current parameters. */
  readonly loss: number;
  /** The share of completion tokens whose ratio is clipped. */
  readonly clipFraction: number;
  /** The mean over the completions of each one's mean KLₜ to the reference (0 without one). */
  readonly kl: number;
}

/** The loss weights that make the model's loss gradient GRPO's (the header's formula), and the step's statistics. */
export function grpoWeights(inp: GrpoWeightInputs): GrpoWeights {
  const { completions, logp, oldLogp, refLogp, clip, beta } = inp;
  const N = logp.length;
  const M = completions.length;
  const weights = new Float32Array(N);
  let loss = 0;
  let clipped = 0;
  let tokens = 0;
  let kl = 0;
  for (const c of completions) {
    const n = c.positions.length;
    if (n === 0) continue;
    const A = c.advantage;
    let klRow = 0;
    for (const i of c.positions) {
      const r = Math.exp(logp[i]! - oldLogp[i]!);
      const rc = Math.min(Math.max(r, 1 - clip), 1 + clip);
      const isClipped = rc * A < r * A;
      const refRatio = beta > 0 ? Math.exp(refLogp![i]! - logp[i]!) : 1;
      const k3 = refRatio - Math.log(refRatio) - 1;
      weights[i] = (N / (M * n)) * ((isClipped ? 0 : A * r) - beta * (1 - refRatio));
      loss -= (Math.min(r * A, rc * A) - beta * k3) / (M * n);
      if (isClipped) clipped++;
      klRow += k3;
      tokens++;
    }
    kl += klRow / n / M;
  }
  return { weights, loss, clipFraction: tokens > 0 ? clipped / tokens : 0, kl: beta > 0 ? kl : 0 };
}
