/**
 * The MDLM paper's diagnostics of generated text: generative perplexity (the perplexity of the
 * samples under an AR model: exp of the mean negative log-likelihood per predicted token, every
 * token of a sample but its first predicted from those before it) and sample entropy (the entropy,
 * in nats, of each sample's own distribution of token ids, averaged over the samples: low when a
 * sampler repeats itself).
 */
import { readFileSync } from 'node:fs';
import { fail } from '../errors.js';
import type { LlamaModel } from '../model/llama.js';
import { type Candidate, scoreCandidates } from './score.js';

export interface GenPplResult {
  readonly samples: number;
  /** Tokens predicted (each sample's length less one, after cutting it to the model's context). */
  readonly tokens: number;
  /** Mean negative log-likelihood per predicted token (nats) and its exp. */
  readonly nll: number;
  readonly genPpl: number;
  /** Mean over the samples of the entropy of each one's token distribution (nats). */
  readonly entropy: number;
  /** Samples longer than the model's context, scored on their first seqLen tokens. */
  readonly truncated: number;
}

/** The texts of a samples file: a .jsonl file's `field` of each line, else each non-empty line. */
export function readSamplesFile(path: string, field: string): string[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    return fail('NOT_FOUND', `--gen-ppl ${path}: cannot read it (${(e as Error).message})`);
  }
  const out: string[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    if (!path.endsWith('.jsonl')) {
      out.push(line);
      return;
    }
    let v: unknown;
    try {
      v = JSON.parse(line);
    } catch (e) {
      return fail('BAD_FILE', `${path}:${i + 1}: not valid JSON (${(e as Error).message})`);
    }
    const s = typeof v === 'object' && v !== null ? (v as Record<string, unknown>)[field] : undefined;
    if (typeof s !== 'string') fail('BAD_FILE', `${path}:${i + 1}: no string field "${field}" (--field names it)`);
    out.push(s);
  });
  if (out.length === 0) fail('BAD_FILE', `${path}: no samples`);
  return out;
}

/** Entropy (nats) of the distribution of token ids within one sample. */
export function sampleEntropy(ids: readonly number[]): number {
  const counts = new Map<number, number>();
  for (const id of ids) counts.set(id, (counts.get(id) ?? 0) + 1);
  let h = 0;
  for (const c of counts.values()) {
    const p = c / ids.length;
    h -= p * Math.log(p);
  }
  return h;
}

/** Generative perplexity of tokenised samples under `model` (an AR model; causal attention) and their entropy. */
export async function genPerplexity(model: LlamaModel, samples: readonly (readonly number[])[], where: string): Promise<GenPplResult> {
  const T = model.cfg.seqLen;
  let truncated = 0;
  const candidates: Candidate[] = samples.map((ids, i) => {
    if (ids.length < 2) fail('BAD_FILE', `${where}: sample ${i + 1} is ${ids.length} token${ids.length === 1 ? '' : 's'}, too short to predict any`);
    if (ids.length > T) truncated++;
    const kept = ids.slice(0, T);
    return { context: kept.slice(0, 1), continuation: kept.slice(1) };
  });
  const scores = await scoreCandidates(model, candidates, { kind: 'ar' });
  const tokens = candidates.reduce((a, c) => a + c.continuation.length, 0);
  const nll = -scores.reduce((a, s) => a + s.logLik, 0) / tokens;
  const entropy = samples.reduce((a, ids) => a + sampleEntropy(ids), 0) / samples.length;
  return { samples: samples.length, tokens, nll, genPpl: Math.exp(nll), entropy, truncated };
}
