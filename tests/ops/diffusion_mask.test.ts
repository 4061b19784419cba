import { afterAll, describe, expect, it } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { type DiffusionMaskAttrs, diffusionMask } from '../../src/ops/diffusion_mask.js';
import type { HostArray } from '../../src/tensor.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();
const MASK = 999;

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

interface Inputs {
  tokens: Int32Array;
  maskProb: Float32Array;
  lossWeight: Float32Array;
}

function attrsFor(batch: number, seqLen: number, over: Partial<DiffusionMaskAttrs> = {}): DiffusionMaskAttrs {
  return { batch, seqLen, rowOffset: 0, totalRows: batch, seed: 42, step: 3, rank: 0, maskId: MASK, empirical: false, ...over };
}

/** Tokens 0..seqLen-1 per row with `pad(b, i)` positions set to -1. */
function inputs(batch: number, seqLen: number, maskProb: number[], pad: (b: number, i: number) => boolean): Inputs {
  const tokens = new Int32Array(batch * seqLen);
  for (let b = 0; b < batch; b++) for (let i = 0; i < seqLen; i++) tokens[b * seqLen + i] = pad(b, i) ? -1 : (i * 7 + b) % 500;
  return { tokens, maskProb: Float32Array.from(maskProb), lossWeight: Float32Array.from(maskProb, (_, b) => 1 + b) };
}

const run = (backend: Backend, attrs: DiffusionMaskAttrs, x: Inputs) => runOp(backend, diffusionMask, attrs, { ...x });

/** Every output consistent with the mask: noised, weights, padding untouched. */
function checkConsistent(attrs: DiffusionMaskAttrs, x: Inputs, out: Record<string, HostArray>): void {
  const { noised, mask, weights } = out;
  for (let k = 0; k < x.tokens.length; k++) {
    const b = Math.floor(k / attrs.seqLen);
    const m = mask![k]!;
    if (x.tokens[k]! < 0) expect(m, `padding at ${k} masked`).toBe(0);
    expect(noised![k]).toBe(m === 1 ? MASK : x.tokens[k]);
    expect(weights![k]).toBe(m === 1 ? x.lossWeight[b] : 0);
  }
}

function maskedPerRow(attrs: DiffusionMaskAttrs, mask: HostArray): number[] {
  const counts = new Array<number>(attrs.batch).fill(0);
  mask.forEach((m, k) => (counts[Math.floor(k / attrs.seqLen)]! += m));
  return counts;
}

const backends: [string, () => Promise<Backend>][] = [['cpu', async () => cpu]];
if (hasWebGpu) backends.push(['webgpu', async () => (await webgpuBackend())!]);

describe.each(backends)('diffusion_mask on %s', (_, get) => {
  it('empirical: masked tokens weigh w · real / masked of their row (padding is neither; the fallback counts as one)', async () => {
    const attrs = attrsFor(3, 600, { empirical: true });
    // Row 0 all masked, row 1 none (the fallback masks one), row 2 about 30%; a third of each row padding.
    const x = inputs(3, 600, [1, 0, 0.3], (_, i) => i % 3 === 2);
    const out = await run(await get(), attrs, x);
    const masked = maskedPerRow(attrs, out.mask!);
    expect(masked.slice(0, 2)).toEqual([400, 1]);
    for (let k = 0; k < x.tokens.length; k++) {
      const b = Math.floor(k / 600);
      const want = out.mask![k] ? Math.fround(x.lossWeight[b]! * Math.fround(400 / masked[b]!)) : 0;
      expect(Math.abs(out.weights![k]! - want)).toBeLessThanOrEqual(want * 3e-7);
    }
    // The same masks as the ELBO weighting.
    expect(out.mask).toEqual((await run(await get(), { ...attrs, empirical: false }, x)).mask);
  });

  it('masks about maskProb of the tokens of each row', async () => {
    const probs = [0.1, 0.5, 0.9, 0.3];
    const attrs = attrsFor(4, 4096);
    const x = inputs(4, 4096, probs, () => false);
    const out = await run(await get(), attrs, x);
    checkConsistent(attrs, x, out);
    // 6 standard deviations of a Binomial(4096, p) fraction is at most 0.047.
    maskedPerRow(attrs, out.mask!).forEach((n, b) => expect(Math.abs(n / 4096 - probs[b]!)).toBeLessThan(0.047));
  });

  it('maskProb 0 masks exactly one non-padding token per row; all-padding rows stay unmasked', async () => {
    const attrs = attrsFor(5, 301);
    // Row 1 is all padding, row 3 has a single real token, the others scattered padding.
    const x = inputs(5, 301, [0, 0, 0, 0, 0], (b, i) => b === 1 || (b === 3 ? i !== 150 : (i + b) % 5 === 0));
    const out = await run(await get(), attrs, x);
    checkConsistent(attrs, x, out);
    expect(maskedPerRow(attrs, out.mask!)).toEqual([1, 0, 1, 1, 1]);
    expect(out.mask![3 * 301 + 150]).toBe(1);
  });

  it('maskProb 1 masks every non-padding token', async () => {
    const attrs = attrsFor(2, 100);
    const x = inputs(2, 100, [1, 1], (b, i) => i >= 90 - b * 40);
    const out = await run(await get(), attrs, x);
    checkConsistent(attrs, x, out);
    expect(maskedPerRow(attrs, out.mask!)).toEqual([90, 50]);
  });

  it('a different step or seed gives a different mask; the same ones the same mask', async () => {
    const attrs = attrsFor(2, 512);
    const x = inputs(2, 512, [0.5, 0.5], () => false);
    const backend = await get();
    const base = (await run(backend, attrs, x)).mask!;
    expect((await run(backend, attrs, x)).mask).toEqual(base);
    expect((await run(backend, { ...attrs, step: 4 }, x)).mask).not.toEqual(base);
    expect((await run(backend, { ...attrs, seed: 43 }, x)).mask).not.toEqual(base);
    expect((await run(backend, { ...attrs, rank: 1 }, x)).mask).not.toEqual(base);
  });

  it('rows of a global batch masked apart (data-parallel ranks) get the masks of the whole batch masked at once', async () => {
    // Rows 1 and 3 draw no mask (maskProb 0): the fallback's draw is keyed by the global row too.
    const probs = [0.3, 0, 0.7, 0, 0.5, 0.2];
    const whole = attrsFor(6, 200, { empirical: true });
    const x = inputs(6, 200, probs, (b, i) => (i + b) % 9 === 0);
    const backend = await get();
    const want = await run(backend, whole, x);
    for (const [first, rows] of [[0, 2], [2, 2], [4, 2], [1, 3]] as const) {
      const part = { tokens: x.tokens.slice(first * 200, (first + rows) * 200), maskProb: x.maskProb.slice(first, first + rows), lossWeight: x.lossWeight.slice(first, first + rows) };
      const got = await run(backend, attrsFor(rows, 200, { rowOffset: first, totalRows: 6, empirical: true }), part);
      for (const k of ['noised', 'mask', 'weights'] as const) expect(got[k], `${k} of rows ${first}..${first + rows - 1}`).toEqual(want[k]!.slice(first * 200, (first + rows) * 200));
    }
    // Keyed by the row's place in the batch: the same rows as a batch of their own draw other masks.
    const alone = await run(backend, attrsFor(2, 200, { empirical: true }), { tokens: x.tokens.slice(400, 800), maskProb: x.maskProb.slice(2, 4), lossWeight: x.lossWeight.slice(2, 4) });
    expect(alone.mask).not.toEqual(want.mask!.slice(400, 800));
  });
});

describe('diffusion_mask across backends', () => {
  it.skipIf(!hasWebGpu)('the same seed gives the same outputs on CPU and WebGPU, bit for bit', async () => {
    const gpu = (await webgpuBackend())!;
    const attrs = attrsFor(6, 777, { seed: 2 ** 50 + 1, step: 123456 });
    const x = inputs(6, 777, [0.05, 0.6, 0, 0.95, 0.001, 0.3], (b, i) => i > 700 - 50 * b || i % 11 === b);
    const want = await run(cpu, attrs, x);
    const got = await run(gpu, attrs, x);
    expect(got.mask).toEqual(want.mask);
    expect(got.noised).toEqual(want.noised);
    expect(got.weights).toEqual(want.weights);
  });
});

describe('diffusion_mask errors', () => {
  it('rejects tokens of the wrong shape, naming the op, argument and shapes', () => {
    const attrs = attrsFor(2, 8);
    const tensors = Object.fromEntries(
      diffusionMask.args.map((a) => [a.name, cpu.alloc(a.name === 'tokens' ? [2, 9] : diffusionMask.shapes(attrs)[a.name]!, a.dtype === 'float' ? 'f32' : a.dtype)]),
    );
    expect(() => cpu.run(diffusionMask, tensors, attrs)).toThrow(/diffusion_mask: argument 'tokens' expected shape \[2, 8\], got \[2, 9\]/);
  });

  it.each([
    ['maskId', { maskId: -1 }],
    ['seed', { seed: -3 }],
    ['step', { step: 0.5 }],
    ['seqLen', { seqLen: 0 }],
    ['totalRows', { batch: 2 ** 16, seqLen: 2 ** 16, totalRows: 2 ** 16 }],
    ['totalRows', { rowOffset: 1 }],
    ['rowOffset', { rowOffset: -1 }],
  ])('rejects a bad %s', (name, bad) => {
    const call = () => diffusionMask.validate!({ ...attrsFor(2, 8), ...bad });
    expect(call).toThrow(MdlmError);
    expect(call).toThrow(new RegExp(`diffusion_mask: attribute '${name}'`));
  });

  it('the reference rejects a maskProb outside [0, 1]', async () => {
    const x = inputs(2, 8, [0.5, 1.5], () => false);
    await expect(run(cpu, attrsFor(2, 8), x)).rejects.toThrow(/diffusion_mask: maskProb\[1\] is 1.5/);
  });
});
