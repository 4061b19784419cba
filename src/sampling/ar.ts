/**
 * Autoregressive sampling: one model call per new token on a sliding window of the last `seqLen`
 * tokens (prompt + generated so far); the next token comes from the last position's logits. With
 * an incremental `decoder` (a KV cache, src/model/decode.ts) each token is one one-row pass while
 * the sequence fits the context; past it the window slides and positions shift, so the full
 * recomputation takes over.
 */
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { checkFilterOptions, sampleFromLogits } from './filter.js';
import { checkInt, checkLogits, checkSeed, checkTokenIds } from './check.js';
import type { IncrementalLogits, LogitsFn } from './types.js';

export interface ArSampleOptions {
  logits: LogitsFn;
  /** Incremental logits over a cache (same values as `logits` at the last position, faster). */
  decoder?: IncrementalLogits;
  /** Context to continue; at least one token (e.g. BOS). */
  prompt: number[];
  maxNewTokens: number;
  /** The model's context length: only the last seqLen tokens are fed to it. */
  seqLen: number;
  vocab: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 = off. */
  topK: number;
  /** 1 = off; in (0, 1]. */
  topP: number;
  eosId?: number;
  /** Stop after generating eosId (which is included in the result). Defaults to true when eosId is given. */
  stopAtEos?: boolean;
  seed: number;
  /** Called with each new id as soon as it is chosen (streaming output). */
  onToken?: (id: number) => void;
  /** Stop once this says the ids generated so far are complete (e.g. they end a chat turn). */
  stop?: (generated: readonly number[]) => boolean;
}

const WHERE = 'sampleAr';

/** Generate up to maxNewTokens ids after the prompt; returns only the generated ids. */
export async function sampleAr(opts: ArSampleOptions): Promise<number[]> {
  const { logits, prompt, onToken } = opts;
  if (typeof logits !== 'function') fail('BAD_ARGUMENT', `${WHERE}: logits must be a function (tokens, rows, seqLen) => Promise<Float32Array>`);
  const vocab = checkInt(WHERE, 'vocab', opts.vocab, 1);
  const seqLen = checkInt(WHERE, 'seqLen', opts.seqLen, 1);
  const maxNewTokens = checkInt(WHERE, 'maxNewTokens', opts.maxNewTokens, 0);
  const seed = checkSeed(WHERE, opts.seed);
  checkFilterOptions(opts, WHERE);
  if (!Array.isArray(prompt) || prompt.length === 0) {
    fail('BAD_ARGUMENT', `${WHERE}: prompt has ${Array.isArray(prompt) ? 0 : 'no'} tokens; autoregressive sampling needs at least one (e.g. BOS)`);
  }
  checkTokenIds(WHERE, 'prompt', prompt, vocab);
  const eosId = opts.eosId;
  if (eosId !== undefined) checkTokenIds(WHERE, 'eosId', [eosId], vocab);
  const stopAtEos = opts.stopAtEos ?? eosId !== undefined;
  if (stopAtEos && eosId === undefined) fail('BAD_ARGUMENT', `${WHERE}: stopAtEos is true but no eosId is given; pass eosId or set stopAtEos: false`);

  const filter = { temperature: opts.temperature, topK: opts.topK, topP: opts.topP };
  const rng = new PhiloxStream(seed, RngPurpose.sampling);
  const all = prompt.slice();
  const out: number[] = [];
  const decoder = opts.decoder;
  decoder?.reset();
  for (let n = 0; n < maxNewTokens; n++) {
    let last: Float32Array;
    if (decoder && all.length <= decoder.maxLen) {
      // Feed what the cache lacks: the whole prompt first, then one token a step.
      let lg: Float32Array = new Float32Array(0);
      while (decoder.position < all.length) lg = await decoder.next(all[decoder.position]!);
      last = checkLogits(WHERE, lg, 1, 1, vocab);
    } else {
      const len = Math.min(all.length, seqLen);
      const ctx = new Int32Array(len); // fresh: the model may keep it
      for (let i = 0; i < len; i++) ctx[i] = all[all.length - len + i]!;
      last = checkLogits(WHERE, await logits(ctx, 1, len), 1, len, vocab).subarray((len - 1) * vocab, len * vocab);
    }
    const id = sampleFromLogits(last, filter, rng);
    all.push(id);
    out.push(id);
    onToken?.(id);
    if ((stopAtEos && id === eosId) || opts.stop?.(out)) break;
  }
  return out;
}
