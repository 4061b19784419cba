/**
 * Worker of parallelFiller (./parallel_init.ts): fills its share of the flat parameter buffer
 * (a SharedArrayBuffer) with fillInit, counting each finished piece and waking the waiting main
 * thread.
 */
import { workerData } from 'node:worker_threads';
import { type InitJob, fillInit } from '../nn/params.js';

interface Piece {
  readonly job: InitJob;
  readonly from: number;
  readonly to: number;
}

const { values, done, pieces, seed } = workerData as { values: SharedArrayBuffer; done: SharedArrayBuffer; pieces: Piece[]; seed: number };
const out = new Float32Array(values);
const counter = new Int32Array(done);
for (const p of pieces) {
  fillInit(out, p.job, seed, p.from, p.to);
  Atomics.add(counter, 0, 1);
  Atomics.notify(counter, 0);
}
