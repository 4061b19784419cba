/** Option checks shared by the samplers: every message names the sampler, the option and what is allowed. */
import { fail } from '../errors.js';

export function checkInt(where: string, name: string, v: unknown, min: number, extra = ''): number {
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    fail('BAD_ARGUMENT', `${where}: ${name} is ${JSON.stringify(v)}; expected an integer ≥ ${min}${extra}`);
  }
  return v;
}

export function checkSeed(where: string, seed: unknown): number {
  return checkInt(where, 'seed', seed, 0, ' (≤ 2^53)');
}

export function checkTokenIds(where: string, name: string, ids: ArrayLike<number>, vocab: number): void {
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i]!;
    if (!Number.isInteger(t) || t < 0 || t >= vocab) {
      fail('BAD_ARGUMENT', `${where}: ${name}[${i}] is ${t}; token ids must be integers in [0, ${vocab}) (vocab = ${vocab})`);
    }
  }
}

/** The logits function returned what it promised: rows·seqLen·vocab floats. */
export function checkLogits(where: string, out: unknown, rows: number, seqLen: number, vocab: number): Float32Array {
  if (!(out instanceof Float32Array)) fail('BAD_SHAPE', `${where}: the logits function must return a Float32Array, got ${Object.prototype.toString.call(out)}`);
  const want = rows * seqLen * vocab;
  if (out.length !== want) {
    fail('BAD_SHAPE', `${where}: the logits function returned ${out.length} floats; expected rows·seqLen·vocab = ${rows}·${seqLen}·${vocab} = ${want}`);
  }
  return out;
}
