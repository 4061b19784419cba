/**
 * Parameter initialisation over worker threads, for models whose single-threaded init takes long
 * (llama-1.3b: 1.3 billion Box-Muller draws, ~80 s on one core). The values are fillInit's, the
 * same bits as fillSequential: each parameter draws from its own Philox stream, and a large one is
 * cut into pieces at stream-block boundaries. The main thread blocks until the workers are done
 * (runBlocking), so ParamStore.materialize stays synchronous.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { type InitJob, type ParamFiller, fillInit, fillSequential } from '../nn/params.js';
import { PACKAGE_ROOT } from './backends.js';
import { runBlocking } from './blocking_workers.js';

/** The compiled worker (dist/ is what runs; tests run after `npm run build` too). */
export const INIT_WORKER = join(PACKAGE_ROOT, 'dist', 'runtime', 'init_worker.js');

/** Below this many values a worker's start-up costs more than it saves. */
const MIN_PARALLEL = 1 << 24;
/** Values a piece of a large parameter holds (a multiple of 4). */
const PIECE = 1 << 22;

export function parallelFiller(opts: { threads?: number; minValues?: number } = {}): ParamFiller {
  const threads = Math.max(1, Math.min(opts.threads ?? availableParallelism(), 32));
  const minValues = opts.minValues ?? MIN_PARALLEL;
  return (size, jobs, seed) => {
    const random = jobs.filter((j) => j.init.kind === 'normal');
    const total = random.reduce((n, j) => n + j.n, 0);
    if (threads < 2 || total < minValues || !existsSync(INIT_WORKER)) return fillSequential(size, jobs, seed);
    const shared = new SharedArrayBuffer(size * 4);
    const values = new Float32Array(shared);
    for (const j of jobs) if (j.init.kind !== 'normal') fillInit(values, j, seed);
    // Pieces round-robin over the workers, largest parameters first.
    const shares: { job: InitJob; from: number; to: number }[][] = Array.from({ length: threads }, () => []);
    let next = 0;
    for (const job of [...random].sort((a, b) => b.n - a.n)) {
      for (let from = 0; from < job.n; from += PIECE) shares[next++ % threads]!.push({ job, from, to: Math.min(job.n, from + PIECE) });
    }
    const busy = shares.filter((s) => s.length > 0);
    runBlocking(INIT_WORKER, busy.map((pieces) => ({ values: shared, pieces, seed })), busy.reduce((n, s) => n + s.length, 0), 'parameter init');
    // Backends take ordinary Float32Arrays (native addons may not accept shared memory).
    return values.slice();
  };
}
