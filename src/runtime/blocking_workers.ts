/**
 * Work spread over worker threads while the calling thread blocks (Atomics.wait), for host-side
 * work that must stay synchronous (parameter init inside ParamStore.materialize, harness inputs
 * inside an op's sample()). Each worker gets `done` (a SharedArrayBuffer of one Int32) in its
 * workerData and adds 1 there, with Atomics.notify, per piece it finishes.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/** Below this many values a worker's start-up costs more than it saves. */
export const MIN_PARALLEL_VALUES = 1 << 24;

/** The worker threads to use: `threads`, or the machine's parallelism, from 1 to 32. */
export function workerThreads(threads?: number): number {
  return Math.max(1, Math.min(threads ?? availableParallelism(), 32));
}

/**
 * `pieces` dealt round-robin to `threads` workers (in the order given), each worker's share turned
 * into its workerData by `share`; blocks until every piece is done.
 */
export function runPieces<P>(file: string, pieces: readonly P[], threads: number, share: (pieces: P[]) => Record<string, unknown>, what: string): void {
  const shares: P[][] = Array.from({ length: threads }, () => []);
  pieces.forEach((piece, i) => shares[i % threads]!.push(piece));
  runBlocking(file, shares.filter((s) => s.length > 0).map(share), pieces.length, what);
}

export function runBlocking(file: string, shares: readonly Record<string, unknown>[], pieces: number, what: string): void {
  const done = new SharedArrayBuffer(4);
  const counter = new Int32Array(done);
  const workers = shares.map((share) => new Worker(file, { workerData: { ...share, done } }));
  try {
    // A worker that dies stops counting (its error event cannot be delivered while this thread
    // waits): give up after a minute without progress.
    let seen = 0;
    let idle = 0;
    while (seen < pieces && idle < 600) {
      Atomics.wait(counter, 0, seen, 100);
      const now = Atomics.load(counter, 0);
      idle = now === seen ? idle + 1 : 0;
      seen = now;
    }
    if (seen < pieces) throw new Error(`${what}: the workers stopped after ${seen} of ${pieces} pieces (${file})`);
  } finally {
    for (const w of workers) void w.terminate();
  }
}
