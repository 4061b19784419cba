/**
 * Worker of parallelNormals (./parallel_normals.ts): fills its pieces of a draw (a
 * SharedArrayBuffer of f64), counting each finished piece and waking the waiting thread.
 */
import { workerData } from 'node:worker_threads';
import { type StreamId, fillPairs } from '../rng/normals.js';

const { id, word, pieces, out, at, scale, done } = workerData as {
  id: StreamId; word: number; pieces: { from: number; to: number }[]; out: SharedArrayBuffer; at: number; scale: number; done: SharedArrayBuffer;
};
const values = new Float64Array(out);
const counter = new Int32Array(done);
for (const p of pieces) {
  fillPairs(id, word, p.from, p.to, values, at, scale);
  Atomics.add(counter, 0, 1);
  Atomics.notify(counter, 0);
}
