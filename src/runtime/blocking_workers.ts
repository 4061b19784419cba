/**
 * Work spread over worker threads while the calling thread blocks (Atomics.wait), for host-side
 * work that must stay synchronous (parameter init inside ParamStore.materialize, harness inputs
 * inside an op's sample()). Each worker gets `done` (a SharedArrayBuffer of one Int32) in its
 * workerData and adds 1 there, with Atomics.notify, per piece it finishes.
 */
import { Worker } from 'node:worker_threads';

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
