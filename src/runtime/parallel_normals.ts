/**
 * A NormalsFiller over worker threads (src/rng/normals.ts): the pairs of a large draw are cut into
 * pieces dealt round-robin to the workers, each computing its pairs from their stream words, so
 * the values are those of the sequential fill bit for bit. The calling thread blocks until the
 * workers are done (runBlocking), so op sample() functions stay synchronous.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type NormalsFiller, fillOnThisThread } from '../rng/normals.js';
import { PACKAGE_ROOT } from './backends.js';
import { MIN_PARALLEL_VALUES, runPieces, workerThreads } from './blocking_workers.js';

/** The compiled worker (dist/ is what runs; tests run after `npm run build` too). */
export const NORMALS_WORKER = join(PACKAGE_ROOT, 'dist', 'runtime', 'normals_worker.js');

/** Pairs a worker fills before reporting progress. */
const PIECE_PAIRS = 1 << 21;

export function parallelNormals(opts: { threads?: number; minValues?: number } = {}): NormalsFiller {
  const threads = workerThreads(opts.threads);
  const minValues = opts.minValues ?? MIN_PARALLEL_VALUES;
  return (job) => {
    if (threads < 2 || job.n < minValues || !existsSync(NORMALS_WORKER)) return fillOnThisThread(job);
    const out = new Float64Array(new SharedArrayBuffer(job.n * 8));
    const pieces: { from: number; to: number }[] = [];
    for (let from = 0; from < job.pairs; from += PIECE_PAIRS) pieces.push({ from, to: Math.min(job.pairs, from + PIECE_PAIRS) });
    const { id, word, at, scale } = job;
    runPieces(NORMALS_WORKER, pieces, threads, (share) => ({ id, word, pieces: share, out: out.buffer, at, scale }), 'normals');
    return out;
  };
}
