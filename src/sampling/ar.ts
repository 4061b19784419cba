/**
 * Autoregressive sampling: one model call per new token on a sliding window of the last `seqLen`
 * tokens (prompt + generated so far); the next token comes from the last position's logits.
 */
import { fail } from '../errors.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { checkFilterOptions, sampleFromLogits } from './filter.js';
import { checkInt, checkLogits, checkSeed, checkTokenIds } from './check.js';
import type { LogitsFn } from './types.js';

export interface ArSampleOptions {
  logits: LogitsFn;
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
  for (let n = 0; n < maxNewTokens; n++) {
    const len = Math.min(all.length, seqLen);
    const ctx = new Int32Array(len); // fresh: the model may keep it
    for (let i = 0; i < len; i++) ctx[i] = all[all.length - len + i]!;
    const lg = checkLogits(WHERE, await logits(ctx, 1, len), 1, len, vocab);
    const id = sampleFromLogits(lg.subarray((len - 1) * vocab, len * vocab), filter, rng);
    all.push(id);
    out.push(id);
    onToken?.(id);
    if (stopAtEos && id === eosId) break;
  }
  return out;
}
