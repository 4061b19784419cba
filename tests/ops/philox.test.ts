import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { philox, type PhiloxAttrs } from '../../src/ops/philox.js';
import { philox4x32, seedKey, uniform01 } from '../../src/rng/philox.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const hex = (words: ArrayLike<number>) => Array.from(words, (w) => (w >>> 0).toString(16).padStart(8, '0')).join(' ');

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

describe('philox4x32 (TypeScript)', () => {
  // Random123 known-answer tests for Philox4x32-10.
  it('matches the Random123 known-answer vectors', () => {
    expect(hex(philox4x32([0, 0, 0, 0], [0, 0]))).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8');
    const ones = 0xffffffff;
    expect(hex(philox4x32([ones, ones, ones, ones], [ones, ones]))).toBe('408f276d 41c83b0e a20bc7c6 6d5451fd');
    expect(hex(philox4x32([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0]))).toBe(
      'd16cfe09 94fdcceb 5001e420 24126ea1',
    );
  });

  it('uniform01 keeps 24 bits and stays below 1', () => {
    expect(uniform01(0)).toBe(0);
    expect(uniform01(0xff)).toBe(0);
    expect(uniform01(0x100)).toBe(2 ** -24);
    expect(uniform01(0xffffffff)).toBe(1 - 2 ** -24);
  });

  it('seedKey splits a seed above 2^32 into lo and hi words', () => {
    expect(seedKey(2 ** 40 + 5)).toEqual([5, 256]);
  });
});

describe('philox op', () => {
  const attrs: PhiloxAttrs = { seed: 2 ** 45 + 99, step: 12, rank: 1, purpose: 3, blocks: 517 };
  const expected = new Uint32Array(4 * attrs.blocks);
  for (let i = 0; i < attrs.blocks; i++) expected.set(philox4x32([i, attrs.step, attrs.rank, attrs.purpose], seedKey(attrs.seed)), 4 * i);

  it('cpu: block i is philox4x32([i, step, rank, purpose], seedKey(seed))', async () => {
    const { out } = await runOp(new CpuBackend(), philox, attrs, {});
    expect(out).toEqual(expected);
  });

  it.skipIf(!hasWebGpu)('webgpu: the same blocks bit for bit, and the zero-key known answer', async () => {
    const gpu = (await webgpuBackend())!;
    const { out } = await runOp(gpu, philox, attrs, {});
    expect(out).toEqual(expected);
    const zero = await runOp(gpu, philox, { seed: 0, step: 0, rank: 0, purpose: 0, blocks: 1 }, {});
    expect(hex(zero.out!)).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8');
  });

  it.each([
    ['seed', { seed: -1 }],
    ['seed', { seed: 1.5 }],
    ['seed', { seed: 2 ** 53 }],
    ['step', { step: 2 ** 32 }],
    ['purpose', { purpose: -1 }],
    ['blocks', { blocks: 0 }],
  ])('rejects a bad %s with an MdlmError naming the op and attribute', (name, bad) => {
    const call = () => philox.validate!({ ...attrs, ...bad });
    expect(call).toThrow(MdlmError);
    expect(call).toThrow(new RegExp(`philox: attribute '${name}'`));
  });

  it('rejects an output of the wrong shape', async () => {
    const cpu = new CpuBackend();
    const out = cpu.alloc([attrs.blocks, 3], 'u32');
    expect(() => cpu.run(philox, { out }, attrs)).toThrow(/philox: argument 'out' expected shape \[517, 4\], got \[517, 3\]/);
  });
});
