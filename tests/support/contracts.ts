/**
 * The contract every backend keeps, as vitest suites: validation errors naming op, argument and
 * shapes, pooled allocation with reuse, views, upload checks, bf16/f16 rounding. Run by
 * tests/backend.test.ts (cpu, webgpu) and tests/cuda.test.ts.
 */
import { describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { MdlmError } from '../../src/errors.js';
import { cast } from '../../src/ops/cast.js';
import { swiglu } from '../../src/ops/swiglu.js';

export async function expectMdlmError(p: Promise<unknown> | (() => unknown), code: string, ...fragments: string[]): Promise<void> {
  let err: unknown;
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    err = e;
  }
  expect(err, 'expected an MdlmError').toBeInstanceOf(MdlmError);
  expect((err as MdlmError).code).toBe(code);
  for (const f of fragments) expect((err as MdlmError).message).toContain(f);
}

export function contracts(name: string, get: () => Promise<Backend | null>, enabled: boolean): void {
  describe(`${name} backend contracts`, () => {
    it.skipIf(!enabled)('rejects a wrong shape naming op, argument, expected and given', async () => {
      const b = (await get())!;
      const gate = b.alloc([2, 4], 'f32');
      const up = b.alloc([2, 3], 'f32');
      const out = b.alloc([2, 4], 'f32');
      await expectMdlmError(() => b.run(swiglu, { gate, up, out }, { rows: 2, hidden: 4 }), 'BAD_SHAPE', "swiglu: argument 'up' expected shape [2, 4], got [2, 3]");
      [gate, up, out].forEach((t) => b.free(t));
    });

    it.skipIf(!enabled)('rejects wrong dtypes, missing and unknown arguments, and aliased outputs', async () => {
      const b = (await get())!;
      const a = b.alloc([1, 4], 'f32');
      const i = b.alloc([1, 4], 'i32');
      const out = b.alloc([1, 4], 'f32');
      const attrs = { rows: 1, hidden: 4 };
      await expectMdlmError(() => b.run(swiglu, { gate: a, up: i, out }, attrs), 'BAD_DTYPE', "'up'");
      await expectMdlmError(() => b.run(swiglu, { gate: a, out }, attrs), 'BAD_ARGUMENT', "missing argument 'up'");
      await expectMdlmError(() => b.run(swiglu, { gate: a, up: a, out, c: out }, attrs), 'BAD_ARGUMENT', "unknown argument 'c'");
      await expectMdlmError(() => b.run(swiglu, { gate: a, up: a, out: a }, attrs), 'BAD_ARGUMENT', "output 'out' overlaps");
      await expectMdlmError(() => b.run(swiglu, { gate: a, up: a, out }, { rows: 0, hidden: 4 }), 'BAD_ARGUMENT', "attribute 'rows'");
      [a, i, out].forEach((t) => b.free(t));
    });

    it.skipIf(!enabled)('whenAbove: skips the ops at or below the threshold where the backend decides on the device (skipsConditional), else runs them', async () => {
      const b = (await get())!;
      const count = b.alloc([1], 'i32');
      const [x, y] = [b.alloc([5], 'f32'), b.alloc([5], 'bf16')];
      b.upload(x, Float32Array.from([1, 2, 3, 4, 5]));
      const read = async () => Array.from((await b.download(y)) as Float32Array);
      const ran = [1, 2, 3, 4, 5], kept = [0, 0, 0, 0, 0];
      // y = x rounded to bf16 (exact here; a kernel, not a copy), only when count > 2
      const copied = () => b.whenAbove(count, 2, () => b.run(cast, { x, out: y }, { n: 5, from: 'f32', to: 'bf16' }));
      const cases = [[2, true], [3, false], [-5, true]] as const;
      for (const [n, below] of cases) {
        b.upload(count, Int32Array.from([n]));
        b.upload(y, new Float32Array(5));
        copied();
        expect(await read(), `direct, count ${n}`).toEqual(below && b.skipsConditional === 'always' ? kept : ran);
      }
      const rec = b.record(copied);
      for (const [n, below] of cases) {
        b.upload(count, Int32Array.from([n]));
        b.upload(y, new Float32Array(5));
        rec.replay();
        const skips = b.skipsConditional === 'always' || (b.skipsConditional === 'recorded' && rec.native);
        expect(await read(), `recorded, count ${n}`).toEqual(below && skips ? kept : ran);
      }
      rec.destroy();
      b.upload(count, Int32Array.from([10]));
      expect(() => b.whenAbove(count, 2, () => b.whenAbove(count, 3, () => {}))).toThrow('whenAbove: conditional regions do not nest');
      await expectMdlmError(() => b.whenAbove(y, 2, () => {}), 'BAD_ARGUMENT', 'whenAbove: the count must be one i32');
      await expectMdlmError(() => b.whenAbove(count, 0.5, () => {}), 'BAD_ARGUMENT', 'whenAbove: threshold 0.5');
      [count, x, y].forEach((t) => b.free(t));
    });

    it.skipIf(!enabled)('zeroes a view in order with earlier work, leaving its neighbours alone', async () => {
      const b = (await get())!;
      for (const dtype of ['f32', 'bf16'] as const) {
        if (!b.dtypes.has(dtype)) continue;
        const base = b.alloc([200], dtype);
        const twos = b.alloc([200], 'f32');
        b.upload(twos, new Float32Array(200).fill(2));
        b.upload(base, new Float32Array(200).fill(-3));
        // Enqueued before the zero, so overwritten by it where they overlap.
        b.run(cast, { x: twos, out: base }, { n: 200, from: 'f32', to: dtype });
        b.zero(b.view(base, 66, [70]));
        const got = Array.from((await b.download(base)) as Float32Array);
        expect(got.slice(0, 66).every((v) => v === 2), dtype).toBe(true);
        expect(got.slice(66, 136).every((v) => v === 0 && !Object.is(v, -0)), dtype).toBe(true);
        expect(got.slice(136).every((v) => v === 2), dtype).toBe(true);
        [base, twos].forEach((t) => b.free(t));
      }
    });

    it.skipIf(!enabled)('records ops and zeroes without running them and replays them on the data of the moment', async () => {
      const b = (await get())!;
      const [x, z, out] = [b.alloc([5], 'f32'), b.alloc([5], 'f32'), b.alloc([5], 'bf16')];
      b.upload(x, new Float32Array(5).fill(1));
      b.upload(z, new Float32Array(5).fill(2));
      b.upload(out, new Float32Array(5).fill(9));
      const rec = b.record(() => {
        b.zero(z);
        b.run(cast, { x, out }, { n: 5, from: 'f32', to: 'bf16' });
      });
      expect(Array.from((await b.download(z)) as Float32Array)).toEqual([2, 2, 2, 2, 2]);
      expect(Array.from((await b.download(out)) as Float32Array)).toEqual([9, 9, 9, 9, 9]);
      rec.replay();
      expect(Array.from((await b.download(z)) as Float32Array)).toEqual([0, 0, 0, 0, 0]);
      expect(Array.from((await b.download(out)) as Float32Array)).toEqual([1, 1, 1, 1, 1]);
      b.upload(x, new Float32Array(5).fill(10));
      rec.replay();
      expect(Array.from((await b.download(out)) as Float32Array)).toEqual([10, 10, 10, 10, 10]);
      rec.destroy();
      await expectMdlmError(() => rec.replay(), 'BAD_ARGUMENT', 'destroyed');
      [x, z, out].forEach((t) => b.free(t));
    });

    it.skipIf(!enabled)('round-trips data and reuses pooled buffers in a steady-state loop', async () => {
      const b = (await get())!;
      const data = Float32Array.from({ length: 1000 }, (_, k) => k * 0.5 - 3);
      for (let step = 0; step < 3; step++) {
        const x = b.alloc([1000], 'f32');
        const y = b.alloc([1000], 'f32');
        const out = b.alloc([1000], 'f32');
        b.upload(x, data);
        b.upload(y, data);
        b.run(cast, { x: y, out }, { n: 1000, from: 'f32', to: 'f32' });
        const got = (await b.download(out)) as Float32Array;
        expect(got[10]).toBe(data[10]!);
        const before = b.poolStats().created;
        [x, y, out].forEach((t) => b.free(t));
        if (step > 0) expect(b.poolStats().created).toBe(before);
      }
      const created = b.poolStats().created;
      for (let step = 0; step < 5; step++) b.free(b.alloc([1000], 'f32'));
      expect(b.poolStats().created).toBe(created);
    });

    it.skipIf(!enabled)('views read and write a window of their base tensor', async () => {
      const b = (await get())!;
      const base = b.alloc([128], 'f32');
      b.upload(base, Float32Array.from({ length: 128 }, (_, k) => k));
      const v = b.view(base, 64, [8]);
      expect(Array.from((await b.download(v)) as Float32Array)).toEqual([64, 65, 66, 67, 68, 69, 70, 71]);
      await expectMdlmError(() => b.view(base, 125, [8]), 'BAD_SHAPE', 'does not fit');
      b.free(base);
    });

    it.skipIf(!enabled)('rejects uploads of the wrong kind or length', async () => {
      const b = (await get())!;
      const t = b.alloc([4], 'i32');
      await expectMdlmError(() => b.upload(t, new Float32Array(4)), 'BAD_DTYPE', 'Int32Array');
      await expectMdlmError(() => b.upload(t, new Int32Array(3)), 'BAD_SHAPE', '4 elements');
      b.free(t);
    });

    it.skipIf(!enabled)('stores bf16 and f16 with round-to-nearest-even', async () => {
      const b = (await get())!;
      for (const dtype of ['bf16', 'f16'] as const) {
        const t = b.alloc([3], dtype);
        b.upload(t, Float32Array.from([1, 1 + 2 ** -9, -2.5]));
        const got = Array.from((await b.download(t)) as Float32Array);
        expect(got).toEqual(dtype === 'bf16' ? [1, 1, -2.5] : [1, 1 + 2 ** -9, -2.5]);
        b.free(t);
      }
    });
  });
}
