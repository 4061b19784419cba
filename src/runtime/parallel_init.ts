/**
 * Parameter initialisation over worker threads, for models whose single-threaded init takes long
 * (llama-1.3b: 1.3 billion Box-Muller draws, ~80 s on one core). The values are fillInit's, the
 * same bits as fillSequential: each parameter draws from its own Philox stream, and a large one is
 * cut into pieces at stream-block boundaries. The main thread blocks until the workers are done
 * (runBlocking), so ParamStore.materialize stays synchronous.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { type InitJob, type ParamFiller, fillInit, fillSequential } from '../nn/params.js';
import { PACKAGE_ROOT } from './backends.js';
import { MIN_PARALLEL_VALUES, runPieces, workerThreads } from './blocking_workers.js';

/** The compiled worker (dist/ is what runs; tests run after `npm run build` too). */
export const INIT_WORKER = join(PACKAGE_ROOT, 'dist', 'runtime', 'init_worker.js');

/** Values a piece of a large parameter holds (a multiple of 4). */
const PIECE = 1 << 22;

export function parallelFiller(opts: { threads?: number; minValues?: number } = {}): ParamFiller {
  const threads = workerThreads(opts.threads);
  const minValues = opts.minValues ?? MIN_PARALLEL_VALUES;
  return (size, jobs, seed) => {
    const random = jobs.filter((j) => j.init.kind === 'normal');
    const total = random.reduce((n, j) => n + j.n, 0);
    if (threads < 2 || total < minValues || !existsSync(INIT_WORKER)) return fillSequential(size, jobs, seed);
    const shared = new SharedArrayBuffer(size * 4);
    const values = new Float32Array(shared);
    for (const j of jobs) if (j.init.kind !== 'normal') fillInit(values, j, seed);
    // Pieces round-robin over the workers, largest parameters first.
    const pieces: { job: InitJob; from: number; to: number }[] = [];
    for (const job of [...random].sort((a, b) => b.n - a.n)) {
      for (let from = 0; from < job.n; from += PIECE) pieces.push({ job, from, to: Math.min(job.n, from + PIECE) });
    }
    runPieces(INIT_WORKER, pieces, threads, (share) => ({ values: shared, pieces: share, seed }), 'parameter init');
    // Backends take ordinary Float32Arrays (native addons may not accept shared memory).
    return values.slice();
  };
}
