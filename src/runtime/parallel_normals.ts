/**
 * A NormalsFiller over worker threads (src/rng/normals.ts): the pairs of a large draw are cut into
 * pieces dealt round-robin to the workers, each computing its pairs from their stream words, so
 * the values are those of the sequential fill bit for bit. The calling thread blocks until the
 * workers are done (runBlocking), so op sample() functions stay synchronous.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { type NormalsFiller, fillOnThisThread } from '../rng/normals.js';
import { PACKAGE_ROOT } from './backends.js';
import { runBlocking } from './blocking_workers.js';

/** The compiled worker (dist/ is what runs; tests run after `npm run build` too). */
export const NORMALS_WORKER = join(PACKAGE_ROOT, 'dist', 'runtime', 'normals_worker.js');

/** Below this many values a worker's start-up costs more than it saves. */
const MIN_PARALLEL = 1 << 24;
/** Pairs a worker fills before reporting progress. */
const PIECE_PAIRS = 1 << 21;

export function parallelNormals(opts: { threads?: number; minValues?: number } = {}): NormalsFiller {
  const threads = Math.max(1, Math.min(opts.threads ?? availableParallelism(), 32));
  const minValues = opts.minValues ?? MIN_PARALLEL;
  return (job) => {
    if (threads < 2 || job.n < minValues || !existsSync(NORMALS_WORKER)) return fillOnThisThread(job);
    const out = new Float64Array(new SharedArrayBuffer(job.n * 8));
    const shares: { from: number; to: number }[][] = Array.from({ length: threads }, () => []);
    let next = 0;
    for (let from = 0; from < job.pairs; from += PIECE_PAIRS) shares[next++ % threads]!.push({ from, to: Math.min(job.pairs, from + PIECE_PAIRS) });
    const busy = shares.filter((s) => s.length > 0);
    const { id, word, at, scale } = job;
    runBlocking(NORMALS_WORKER, busy.map((pieces) => ({ id, word, pieces, out: out.buffer, at, scale })), busy.reduce((c, s) => c + s.length, 0), 'normals');
    return out;
  };
}
