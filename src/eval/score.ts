/**
 * Log-likelihood of continuations given contexts, batched: many (context, continuation) rows in one
 * forward of a LlamaModel of fixed [batch, seqLen] shapes. A row is laid at the start of a model row,
 * the rest is padding in an attention segment of its own (as src/model/logits.ts), so a row's
 * logits are those of its tokens alone.
 *
 *   ar:   log p(continuation | context) = Σ_j log softmax(logits at the token before j)[token j],
 *         exact (standard error 0).
 *   mdlm: the ELBO bound of it, LLaDA's estimator for conditional likelihood: a sample draws a
 *         count ℓ uniformly from 1..L (L the continuation's length), masks ℓ of the continuation's
 *         tokens chosen uniformly (the context stays clean), and scores (L / ℓ) Σ_masked log p(x_i |
 *         noised row); log p(continuation | context) ≥ its expectation. The samples stratify ℓ (one
 *         random offset, evenly spread), and the score is their mean with its standard error
 *         (sample standard deviation / √samples). Every sample masks at least one token, so a short
 *         continuation's estimate carries no 1/t blow-up, unlike drawing t and forcing a mask.
 */
import type { LlamaModel } from '../model/llama.js';
import { paddedLogits } from '../model/logits.js';
import { PhiloxStream, RngPurpose, uniformInt } from '../rng/philox.js';

export interface Candidate {
  readonly context: readonly number[];
  readonly continuation: readonly number[];
}

export interface CandidateScore {
  /** log p(continuation | context) (ar), or its ELBO lower bound's Monte Carlo estimate (mdlm). */
  readonly logLik: number;
  /** Standard error of the estimate (0 for ar). */
  readonly stderr: number;
}

export type Scoring =
  | { readonly kind: 'ar' }
  | { readonly kind: 'mdlm'; readonly maskId: number; readonly samples: number; readonly seed: number };

/** Counter step of the scoring's draws: apart from every training step's. */
const SCORE_STEP = 2 ** 31 + 2 ** 30;

/** One model row to run: a candidate's tokens (with masks drawn, for mdlm) and what it scores. */
interface Row {
  readonly candidate: number;
  readonly sample: number;
  readonly inputs: readonly number[];
  /** Positions of the row whose token is scored, the token, and the weight of its log-probability. */
  readonly scored: readonly { readonly logitAt: number; readonly token: number; readonly weight: number }[];
}

export async function scoreCandidates(model: LlamaModel, candidates: readonly Candidate[], scoring: Scoring, onProgress?: (done: number, total: number) => void): Promise<CandidateScore[]> {
  const T = model.cfg.seqLen;
  candidates.forEach((c, i) => {
    if (c.continuation.length < 1) throw new Error(`scoreCandidates: candidate ${i} has an empty continuation`);
    if (scoring.kind === 'ar' && c.context.length < 1) throw new Error(`scoreCandidates: candidate ${i} has no context token to predict its first token from`);
    if (c.context.length + c.continuation.length > T) throw new Error(`scoreCandidates: candidate ${i} holds ${c.context.length + c.continuation.length} tokens, more than the model's ${T}`);
  });
  const samples = scoring.kind === 'ar' ? 1 : scoring.samples;
  const perSample: Float64Array[] = candidates.map(() => new Float64Array(samples));
  const total = candidates.length * samples;
  let done = 0;
  onProgress?.(0, total);
  let pending: Row[] = [];
  const flush = async (): Promise<void> => {
    const values = await runRows(model, pending, scoring.kind === 'ar');
    pending.forEach((row, r) => {
      perSample[row.candidate]![row.sample] = values[r]!;
    });
    done += pending.length;
    pending = [];
    onProgress?.(done, total);
  };
  for (let c = 0; c < candidates.length; c++) {
    const rows = scoring.kind === 'ar' ? [arRow(candidates[c]!, c)] : mdlmRows(candidates[c]!, c, scoring);
    for (const row of rows) {
      pending.push(row);
      if (pending.length === model.batch) await flush();
    }
  }
  if (pending.length > 0) await flush();
  return perSample.map((s) => {
    const { mean, stderr } = meanAndStderr(s);
    return { logLik: mean, stderr };
  });
}

function arRow(c: Candidate, candidate: number): Row {
  const L = c.context.length;
  return { candidate, sample: 0, inputs: [...c.context, ...c.continuation], scored: c.continuation.map((token, j) => ({ logitAt: L - 1 + j, token, weight: 1 })) };
}

/** The candidate's `samples` noised rows: ℓ stratified over 1..L, ℓ positions of the continuation masked. */
function mdlmRows(c: Candidate, candidate: number, s: Extract<Scoring, { kind: 'mdlm' }>): Row[] {
  const L = c.continuation.length;
  const Lc = c.context.length;
  const rng = new PhiloxStream(s.seed, RngPurpose.mask, SCORE_STEP, candidate);
  const offset = rng.uniform();
  const rows: Row[] = [];
  for (let k = 0; k < s.samples; k++) {
    const masked = 1 + Math.min(L - 1, Math.floor(((k + offset) / s.samples) * L));
    // A uniform choice of `masked` positions: the first `masked` of a Fisher–Yates shuffle.
    const order = Array.from({ length: L }, (_, j) => j);
    for (let j = 0; j < masked; j++) {
      const pick = j + uniformInt(rng, L - j);
      [order[j], order[pick]] = [order[pick]!, order[j]!];
    }
    const inputs = [...c.context, ...c.continuation];
    const scored = order.slice(0, masked).sort((a, b) => a - b).map((j) => {
      inputs[Lc + j] = s.maskId;
      return { logitAt: Lc + j, token: c.continuation[j]!, weight: L / masked };
    });
    rows.push({ candidate, sample: k, inputs, scored });
  }
  return rows;
}

/** One forward over up to model.batch rows: each row's Σ weight · log p(token) at its scored positions. */
async function runRows(model: LlamaModel, rows: readonly Row[], causal: boolean): Promise<Float64Array> {
  const T = model.cfg.seqLen;
  const V = model.cfg.vocabSize;
  const logits = await paddedLogits(model, rows.map((row) => row.inputs), causal);
  return Float64Array.from(rows, (row, r) => {
    let sum = 0;
    for (const { logitAt, token, weight } of row.scored) sum += weight * logSoftmaxAt(logits, (r * T + logitAt) * V, V, token);
    return sum;
  });
}

/** log softmax(logits[offset .. offset + V))[token], in f64. */
export function logSoftmaxAt(logits: Float32Array, offset: number, V: number, token: number): number {
  let max = -Infinity;
  for (let v = 0; v < V; v++) max = Math.max(max, logits[offset + v]!);
  let sum = 0;
  for (let v = 0; v < V; v++) sum += Math.exp(logits[offset + v]! - max);
  return logits[offset + token]! - max - Math.log(sum);
}

/** Mean and standard error (sample standard deviation / √n; 0 for one value). */
export function meanAndStderr(xs: ArrayLike<number>): { mean: number; stderr: number } {
  const n = xs.length;
  let mean = 0;
  for (let i = 0; i < n; i++) mean += xs[i]!;
  mean /= n;
  if (n < 2) return { mean, stderr: 0 };
  let ss = 0;
  for (let i = 0; i < n; i++) ss += (xs[i]! - mean) ** 2;
  return { mean, stderr: Math.sqrt(ss / (n - 1) / n) };
}
