/**
 * n standard normals of a PhiloxStream times `scale`: the values its normal() would return in
 * turn, and the stream left where those calls would leave it. Large draws (harness inputs at bench
 * sizes: the 412 M logits of one cross-entropy case took ~25 s on one core) are filled over worker
 * threads: pair k of the draw is a pure function of stream words w + 2k and w + 2k + 1.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runBlocking } from '../runtime/blocking_workers.js';
import { PhiloxStream, boxMullerAngle, boxMullerRadius } from './philox.js';

/** The compiled worker (dist/ is what runs; tests run after `npm run build` too). */
export const NORMALS_WORKER = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'rng', 'normals_worker.js');

/** Below this many values a worker's start-up costs more than it saves. */
const MIN_PARALLEL = 1 << 24;
/** Pairs a worker fills before reporting progress. */
const PIECE_PAIRS = 1 << 21;

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

export function normals(rng: PhiloxStream, n: number, scale = 1, opts: { threads?: number; minValues?: number } = {}): Float64Array {
  const threads = Math.max(1, Math.min(opts.threads ?? availableParallelism(), 32));
  const parallel = threads > 1 && n >= (opts.minValues ?? MIN_PARALLEL) && existsSync(NORMALS_WORKER);
  const out = parallel ? new Float64Array(new SharedArrayBuffer(n * 8)) : new Float64Array(n);
  const { word, spare } = rng.position;
  const at = spare !== null && n > 0 ? 1 : 0;
  if (at) out[0] = spare! * scale;
  const pairs = Math.floor((n - at) / 2);
  const id: StreamId = { seed: rng.seed, purpose: rng.purpose, step: rng.step, rank: rng.rank };
  if (parallel) {
    const shares: { from: number; to: number }[][] = Array.from({ length: threads }, () => []);
    let next = 0;
    for (let from = 0; from < pairs; from += PIECE_PAIRS) shares[next++ % threads]!.push({ from, to: Math.min(pairs, from + PIECE_PAIRS) });
    const busy = shares.filter((s) => s.length > 0);
    runBlocking(NORMALS_WORKER, busy.map((pieces) => ({ id, word, pieces, out: out.buffer, at, scale })), busy.reduce((c, s) => c + s.length, 0), 'normals');
  } else {
    fillPairs(id, word, 0, pairs, out, at, scale);
  }
  // The stream after the pairs (the spare, if any, was out[0]); an odd count ends on a normal()
  // of its own, which leaves the pair's second value as the stream's spare.
  rng.seekPosition(word + 2 * pairs, n > 0 ? null : spare);
  if ((n - at) % 2 === 1) out[n - 1] = rng.normal() * scale;
  return out;
}
