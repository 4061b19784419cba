/** Parameter init over worker threads gives fillSequential's bits (tests run after npm run build: the worker is dist's). */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { type InitJob, fillInit, fillSequential } from '../src/nn/params.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';
import { INIT_WORKER, parallelFiller } from '../src/runtime/parallel_init.js';

describe('parameter init', () => {
  it('fills a parameter in pieces cut at block boundaries with the values of one pass', () => {
    const job: InitJob = { offset: 3, n: 1001, init: { kind: 'normal', std: 0.5 }, index: 7 };
    const whole = new Float32Array(1010);
    fillInit(whole, job, 42);
    const pieces = new Float32Array(1010);
    for (const [from, to] of [[0, 400], [400, 804], [804, 1001]] as const) fillInit(pieces, job, 42, from, to);
    expect(pieces).toEqual(whole);
    expect(() => new PhiloxStream(1, RngPurpose.init).seekWord(6)).toThrow(/not a block boundary/);
  });

  it('over worker threads equals the sequential fill bit for bit (normal, ones and zeros, pieces of large parameters)', () => {
    expect(existsSync(INIT_WORKER), `${INIT_WORKER} (npm run build)`).toBe(true);
    const jobs: InitJob[] = [
      { offset: 0, n: 5_000_001, init: { kind: 'normal', std: 0.02 }, index: 0 },
      { offset: 5_000_064, n: 64, init: { kind: 'ones' }, index: 1 },
      { offset: 5_000_128, n: 3_000_000, init: { kind: 'normal', std: 0.1 }, index: 2 },
      { offset: 8_000_128, n: 100, init: { kind: 'zeros' }, index: 3 },
      { offset: 8_000_256, n: 777, init: { kind: 'normal', std: 1 }, index: 4 },
    ];
    const size = 8_001_088;
    const want = fillSequential(size, jobs, 99);
    const got = parallelFiller({ threads: 3, minValues: 0 })(size, jobs, 99);
    expect(got.buffer).toBeInstanceOf(ArrayBuffer);
    expect(got.length).toBe(size);
    expect(Buffer.from(got.buffer).equals(Buffer.from(want.buffer))).toBe(true);
  });
});
