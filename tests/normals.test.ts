/** Large normal draws over worker threads give the bits of the sequential draw (tests run after npm run build: the worker is dist's). */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { randn } from '../src/ops/op.js';
import { type NormalsFiller, fillOnThisThread, normals, setNormalsFiller } from '../src/rng/normals.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';
import { NORMALS_WORKER, parallelNormals } from '../src/runtime/parallel_normals.js';

/** n calls of normal() × scale, then the next draw of the stream. */
function oneByOne(rng: PhiloxStream, n: number, scale: number): [Float64Array, number] {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.normal() * scale;
  return [out, rng.normal()];
}

describe('normals', () => {
  // Each stream starts mid-way: an odd number of normals drawn (a spare pending) or a word used.
  const starts: [string, (r: PhiloxStream) => void][] = [
    ['a fresh stream', () => {}],
    ['a pending spare', (r) => r.normal()],
    ['one word into a block', (r) => r.nextU32()],
    ['three words in, spare pending', (r) => { r.nextU32(); r.normal(); }],
  ];
  for (const [label, start] of starts) {
    for (const n of [0, 1, 2, 7, 1000]) {
      it(`draws what normal() would, one thread: ${n} from ${label}`, () => {
        const a = new PhiloxStream(5, RngPurpose.harness, 2, 1);
        const b = new PhiloxStream(5, RngPurpose.harness, 2, 1);
        start(a);
        start(b);
        const [want, nextWant] = oneByOne(a, n, 0.5);
        const got = normals(b, n, 0.5, fillOnThisThread);
        expect(Array.from(got)).toEqual(Array.from(want));
        expect(b.normal()).toBe(nextWant);
      });
    }
  }

  it('over worker threads equals the sequential draw bit for bit, and leaves the stream where it would be', () => {
    expect(existsSync(NORMALS_WORKER), `${NORMALS_WORKER} (npm run build)`).toBe(true);
    for (const [n, start] of [[9_000_001, starts[1]![1]], [9_000_002, starts[2]![1]]] as const) {
      const a = new PhiloxStream(11, RngPurpose.harness);
      const b = new PhiloxStream(11, RngPurpose.harness);
      start(a);
      start(b);
      const [want, nextWant] = oneByOne(a, n, 2);
      const got = normals(b, n, 2, parallelNormals({ threads: 3, minValues: 0 }));
      expect(got.buffer).toBeInstanceOf(SharedArrayBuffer);
      expect(Buffer.from(new Uint8Array(got.buffer)).equals(Buffer.from(want.buffer))).toBe(true);
      expect(b.normal()).toBe(nextWant);
    }
  });

  it('randn draws through the filler set with setNormalsFiller, with the same values', () => {
    const jobs: number[] = [];
    const counting: NormalsFiller = (job) => {
      jobs.push(job.n);
      return fillOnThisThread(job);
    };
    const previous = setNormalsFiller(counting);
    try {
      const got = randn(new PhiloxStream(3, RngPurpose.harness), 101, 0.25);
      expect(jobs).toEqual([101]);
      const [want] = oneByOne(new PhiloxStream(3, RngPurpose.harness), 101, 0.25);
      expect(Array.from(got)).toEqual(Array.from(want));
    } finally {
      expect(setNormalsFiller(previous)).toBe(counting);
    }
  });
});
