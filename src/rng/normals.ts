/**
 * n standard normals of a PhiloxStream times `scale`: the values its normal() would return in
 * turn, and the stream left where those calls would leave it. Pair k of a draw is a pure function
 * of stream words w + 2k and w + 2k + 1, so a large draw (harness inputs at bench sizes: hundreds
 * of millions of values) can be filled in pieces on several threads. How the pairs are filled is
 * a NormalsFiller: this thread by default; Node passes one over worker threads
 * (src/runtime/parallel_normals.ts), with the same bits.
 */
import { PhiloxStream, boxMullerAngle, boxMullerRadius } from './philox.js';

/** A stream's identity, what a worker needs to draw from it. */
export interface StreamId {
  readonly seed: number;
  readonly purpose: PhiloxStream['purpose'];
  readonly step: number;
  readonly rank: number;
}

/** Pairs [from, to) of a draw whose pair 0 starts at stream word `word`, into out[at + 2k], out[at + 2k + 1]. */
export function fillPairs(id: StreamId, word: number, from: number, to: number, out: Float64Array, at: number, scale: number): void {
  const s = new PhiloxStream(id.seed, id.purpose, id.step, id.rank);
  s.seekPosition(word + 2 * from, null);
  for (let k = from; k < to; k++) {
    const r = boxMullerRadius(s.nextU32());
    const a = boxMullerAngle(s.nextU32());
    out[at + 2 * k] = r * Math.cos(a) * scale;
    out[at + 2 * k + 1] = r * Math.sin(a) * scale;
  }
}

/** The pairs of one draw: pair k from stream words word + 2k and word + 2k + 1, into out[at + 2k] and out[at + 2k + 1] of n values. */
export interface PairsJob {
  readonly id: StreamId;
  readonly word: number;
  readonly pairs: number;
  readonly n: number;
  readonly at: number;
  readonly scale: number;
}

/** Makes the n-value array of a draw with its pairs filled (the values outside them are the caller's). */
export type NormalsFiller = (job: PairsJob) => Float64Array;

/** Fills the pairs on the calling thread. */
export const fillOnThisThread: NormalsFiller = (job) => {
  const out = new Float64Array(job.n);
  fillPairs(job.id, job.word, 0, job.pairs, out, job.at, job.scale);
  return out;
};

let defaultFiller: NormalsFiller = fillOnThisThread;

/**
 * Sets the filler of normals() calls that name none (the ops' random inputs, through randn);
 * returns the one it replaces. `mdlm bench kernels` sets worker threads for its bench-size inputs.
 */
export function setNormalsFiller(fill: NormalsFiller): NormalsFiller {
  const previous = defaultFiller;
  defaultFiller = fill;
  return previous;
}

export function normals(rng: PhiloxStream, n: number, scale = 1, fill: NormalsFiller = defaultFiller): Float64Array {
  const { word, spare } = rng.position;
  const at = spare !== null && n > 0 ? 1 : 0;
  const pairs = Math.floor((n - at) / 2);
  const out = fill({ id: { seed: rng.seed, purpose: rng.purpose, step: rng.step, rank: rng.rank }, word, pairs, n, at, scale });
  if (at) out[0] = spare! * scale;
  // The stream after the pairs (the spare, if any, was out[0]); an odd count ends on a normal()
  // of its own, which leaves the pair's second value as the stream's spare.
  rng.seekPosition(word + 2 * pairs, n > 0 ? null : spare);
  if ((n - at) % 2 === 1) out[n - 1] = rng.normal() * scale;
  return out;
}
