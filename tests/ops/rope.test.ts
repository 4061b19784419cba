import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { type RopeAttrs, rope, ropeRotate } from '../../src/ops/rope.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';

const attrs: RopeAttrs = { batch: 2, seqLen: 5, heads: 3, headDim: 16, base: 10000 };
const n = 2 * 5 * 3 * 16;

function sample(seed: number): { x: Float64Array; positions: Int32Array } {
  const s = rope.sample(new PhiloxStream(seed, RngPurpose.harness), attrs);
  return { x: s.x as Float64Array, positions: s.positions as Int32Array };
}

describe('rope reference', () => {
  it('pairs element i with i + D/2 and turns it by pos · base^(−2i/D) (rotate_half)', () => {
    const a: RopeAttrs = { batch: 1, seqLen: 1, heads: 1, headDim: 4, base: 10000 };
    const turn = (i: number, pos: number) => runReference(rope, { x: Float64Array.from([0, 1, 2, 3], (j) => (j === i ? 1 : 0)), positions: Int32Array.of(pos) }, a, 'f32').y!;
    const at3 = Math.fround(3 * Math.fround(10000 ** -0.5)); // pair 1: inv_freq = 10000^(−2/4)
    const e1 = turn(1, 3);
    [0, Math.cos(at3), 0, Math.sin(at3)].forEach((w, j) => expect(e1[j]).toBeCloseTo(w, 12));
    const e2 = turn(2, 3); // the second half turns the other way: y[i] = −x[i + D/2]·sin
    [-Math.sin(3), 0, Math.cos(3), 0].forEach((w, j) => expect(e2[j]).toBeCloseTo(w, 12));
  });

  it('is the identity at position 0', () => {
    const { x } = sample(5);
    const y = runReference(rope, { x, positions: new Int32Array(10) }, attrs, 'f32').y!;
    expect([...y]).toEqual([...x]);
  });

  it('keeps the norm of every rotated pair', () => {
    const { x, positions } = sample(6);
    const y = runReference(rope, { x, positions }, attrs, 'f32').y!;
    for (let head = 0; head < n / 16; head++) {
      for (let i = 0; i < 8; i++) {
        const lo = head * 16 + i;
        expect(y[lo]! ** 2 + y[lo + 8]! ** 2).toBeCloseTo(x[lo]! ** 2 + x[lo + 8]! ** 2, 12);
      }
    }
  });

  it('the transpose (sign −1, what attention_backward applies to dq and dk) undoes rope', () => {
    const { x, positions } = sample(7);
    const y = runReference(rope, { x, positions }, attrs, 'f32').y!;
    const back = new Float64Array(n);
    ropeRotate(y, positions, back, attrs, -1);
    back.forEach((v, i) => expect(v).toBeCloseTo(x[i]!, 12));
  });

  it('samples packed-document positions that restart at 0', () => {
    const p = rope.sample(new PhiloxStream(8, RngPurpose.harness), { ...attrs, batch: 4, seqLen: 256 }).positions!;
    let restarts = 0;
    for (let i = 1; i < p.length; i++) if (i % 256 !== 0 && p[i] === 0) restarts++;
    expect(restarts).toBeGreaterThan(0);
    expect(Math.max(...p)).toBeGreaterThan(256);
  });
});

describe('rope argument checks', () => {
  it('names the op, the argument and both shapes on a bad shape', () => {
    const cpu = new CpuBackend();
    const t = { x: cpu.alloc([2, 5, 3, 16], 'f32'), positions: cpu.alloc([2, 6], 'i32'), y: cpu.alloc([2, 5, 3, 16], 'f32') };
    const run = () => cpu.run(rope, t, attrs);
    expect(run).toThrow(MdlmError);
    expect(run).toThrow("rope: argument 'positions' expected shape [2, 5], got [2, 6]");
  });

  it('rejects a head dim that is not a multiple of 8 and a base not above 1', () => {
    expect(() => rope.validate!({ ...attrs, headDim: 12 })).toThrow(/rope: attribute 'headDim' is 12; expected a multiple of 8/);
    expect(() => rope.validate!({ ...attrs, base: 1 })).toThrow(/rope: attribute 'base' is 1/);
  });
});
