/**
 * Parameter initialisation over worker threads, for models whose single-threaded init takes long
 * (llama-1.3b: 1.3 billion Box-Muller draws, ~80 s on one core). The values are fillInit's, the
 * same bits as fillSequential: each parameter draws from its own Philox stream, and a large one is
 * cut into pieces at stream-block boundaries. The main thread blocks (Atomics.wait) until the
 * workers are done, so ParamStore.materialize stays synchronous.
 */
import { existsSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { type InitJob, type ParamFiller, fillInit, fillSequential } from '../nn/params.js';
import { PACKAGE_ROOT } from './backends.js';

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
    const pieces = busy.reduce((n, s) => n + s.length, 0);
    const done = new SharedArrayBuffer(4);
    const counter = new Int32Array(done);
    const workers = busy.map((share) => new Worker(INIT_WORKER, { workerData: { values: shared, done, pieces: share, seed } }));
    try {
      // The workers count finished pieces. One that dies stops counting (its error event cannot be
      // delivered while this thread waits): give up after a minute without progress.
      let seen = 0;
      let idle = 0;
      while (seen < pieces && idle < 600) {
        Atomics.wait(counter, 0, seen, 100);
        const now = Atomics.load(counter, 0);
        idle = now === seen ? idle + 1 : 0;
        seen = now;
      }
      if (seen < pieces) throw new Error(`parameter init: the workers stopped after ${seen} of ${pieces} pieces (${INIT_WORKER})`);
    } finally {
      for (const w of workers) void w.terminate();
    }
    // Backends take ordinary Float32Arrays (native addons may not accept shared memory).
    return values.slice();
  };
}
