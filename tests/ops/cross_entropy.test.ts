import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { type CrossEntropyAttrs, crossEntropy, crossEntropyBackward, crossEntropyFused } from '../../src/ops/cross_entropy.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { expectCrossEntropyInPlace } from '../support/in_place.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

type Inputs = {
  logits: number[];
  targets: number[];
  weights: number[];
  dloss?: number[];
};

/**
 * Forward then backward reference on f32-rounded inputs (what a GPU holds); with `f32Lse` the
 * backward gets the lse rounded to f32 too, as a GPU forward hands it on.
 */
function reference(attrs: CrossEntropyAttrs, { logits, targets, weights, dloss }: Inputs, f32Lse = false) {
  const inputs = {
    logits: Float64Array.from(Float32Array.from(logits)),
    targets: Int32Array.from(targets),
    weights: Float64Array.from(Float32Array.from(weights)),
  };
  const { loss, lse } = runReference(crossEntropy, inputs, attrs, 'f32');
  const d = Float64Array.from(dloss ?? targets.map(() => 1));
  const savedLse = f32Lse ? Float64Array.from(Float32Array.from(lse!)) : lse!;
  const { dlogits } = runReference(crossEntropyBackward, { ...inputs, lse: savedLse, dloss: d }, attrs, 'f32');
  return { loss: loss!, lse: lse!, dlogits: dlogits! };
}

describe('cross_entropy reference', () => {
  it('is log(V) on uniform logits, times the weight', () => {
    const vocab = 257;
    const r = reference({ rows: 2, vocab }, { logits: new Array(2 * vocab).fill(0.25), targets: [3, 256], weights: [1, 0.5] });
    expect(r.loss[0]).toBeCloseTo(Math.log(vocab), 12);
    expect(r.loss[1]).toBeCloseTo(0.5 * Math.log(vocab), 12);
    expect(r.lse[0]).toBeCloseTo(0.25 + Math.log(vocab), 12);
  });

  it('matches a hand computation on logits [2, 0, -1], target 0', () => {
    // lse = log(e^2 + 1 + e^-1) = 2.16984601955628..., p0 = e^2 / (e^2 + 1 + e^-1) = 0.84379473448...
    const r = reference({ rows: 1, vocab: 3 }, { logits: [2, 0, -1], targets: [0], weights: [2], dloss: [0.5] });
    expect(r.lse[0]).toBeCloseTo(2.1698460195562856, 12);
    expect(r.loss[0]).toBeCloseTo(2 * 0.16984601955628564, 12);
    const p0 = 0.8437947344813395;
    const p1 = Math.exp(-2.1698460195562856);
    expect(r.dlogits[0]).toBeCloseTo(0.5 * 2 * (p0 - 1), 12);
    expect(r.dlogits[1]).toBeCloseTo(0.5 * 2 * p1, 12);
    expect(r.dlogits[2]).toBeCloseTo(1 - p0 - p1, 12);
  });

  it('gives ignored rows and zero-weight rows zero loss and zero gradient; other gradient rows sum to 0', () => {
    const rows = 6;
    const vocab = 101;
    const rng = new PhiloxStream(5, RngPurpose.harness);
    const logits = Array.from({ length: rows * vocab }, () => 2 * rng.normal());
    const targets = [7, -1, 100, -100, 0, 50];
    const weights = [1.5, 1, 0.3, 2, 0, 1];
    const dloss = [1, 1, -2, 1, 1, 0.25];
    const r = reference({ rows, vocab }, { logits, targets, weights, dloss });
    for (let row = 0; row < rows; row++) {
      const g = (r.dlogits as Float64Array).subarray(row * vocab, (row + 1) * vocab);
      const sum = g.reduce((a, b) => a + b, 0);
      if (targets[row]! < 0 || weights[row] === 0) {
        expect(r.loss[row]).toBe(0);
        expect(g.every((v) => v === 0), `row ${row}`).toBe(true);
      } else {
        expect(r.loss[row]).toBeGreaterThan(0);
        expect(Math.abs(sum)).toBeLessThan(1e-12);
        expect(Math.sign(g[targets[row]!]!)).toBe(-Math.sign(dloss[row]!)); // target logit pushed up
      }
    }
    expect(r.lse[1]).toBeGreaterThan(Math.max(...logits.slice(vocab, 2 * vocab))); // lse is still computed
  });

  it('throws on a target >= vocab naming the op, the argument, the row and the value', () => {
    const attrs = { rows: 3, vocab: 10 };
    const args = { logits: new Float64Array(30).fill(1), targets: Int32Array.from([1, -1, 10]), weights: new Float64Array(3).fill(1) };
    expect(() => runReference(crossEntropy, args, attrs, 'f32')).toThrow(MdlmError);
    expect(() => runReference(crossEntropy, args, attrs, 'f32')).toThrow(/cross_entropy: argument 'targets' row 2 is 10, not below vocab 10/);
    const bwd = { ...args, lse: new Float64Array(3), dloss: new Float64Array(3).fill(1) };
    expect(() => runReference(crossEntropyBackward, bwd, attrs, 'f32')).toThrow(/cross_entropy_backward: argument 'targets' row 2 is 10/);
  });

  it('rejects bad attributes, shapes and dtypes naming the op and argument', () => {
    const cpu = new CpuBackend();
    expect(() => crossEntropy.validate!({ rows: 4, vocab: 0 })).toThrow(/cross_entropy: attribute 'vocab'/);
    const attrs = { rows: 4, vocab: 9 };
    const args = {
      logits: cpu.alloc([4, 10], 'f32'), targets: cpu.alloc([4], 'i32'), weights: cpu.alloc([4], 'f32'),
      loss: cpu.alloc([4], 'f32'), lse: cpu.alloc([4], 'f32'),
    };
    expect(() => cpu.run(crossEntropy, args, attrs)).toThrow(/cross_entropy: argument 'logits' expected shape \[4, 9\], got \[4, 10\]/);
    const floatTargets = { ...args, logits: cpu.alloc([4, 9], 'f32'), targets: cpu.alloc([4], 'f32') };
    expect(() => cpu.run(crossEntropy, floatTargets, attrs)).toThrow(/cross_entropy: argument 'targets' must be i32, got f32/);
    const bwd = {
      logits: cpu.alloc([4, 9], 'f32'), targets: cpu.alloc([4], 'i32'), weights: cpu.alloc([4], 'f32'), lse: cpu.alloc([4], 'f32'),
      dloss: cpu.alloc([3], 'f32'), dlogits: cpu.alloc([4, 9], 'f32'),
    };
    expect(() => cpu.run(crossEntropyBackward, bwd, attrs)).toThrow(/cross_entropy_backward: argument 'dloss' expected shape \[4\], got \[3\]/);
  });
});

describe.skipIf(!hasWebGpu)('cross_entropy on webgpu', () => {
  async function gpuRun(attrs: CrossEntropyAttrs, inputs: Inputs) {
    const gpu = (await webgpuBackend())!;
    const f = await runOp(gpu, crossEntropy, attrs, inputs);
    const dloss = inputs.dloss ?? inputs.targets.map(() => 1);
    const b = await runOp(gpu, crossEntropyBackward, attrs, { ...inputs, lse: f.lse!, dloss });
    return { loss: f.loss!, lse: f.lse!, dlogits: b.dlogits! };
  }

  function expectClose(got: ArrayLike<number>, want: ArrayLike<number>, tol: number, what: string) {
    for (let i = 0; i < want.length; i++) {
      expect(Number.isFinite(got[i]), `${what}[${i}] = ${got[i]}`).toBe(true);
      expect(Math.abs(got[i]! - want[i]!), `${what}[${i}]`).toBeLessThanOrEqual(tol * Math.max(1, Math.abs(want[i]!)));
    }
  }

  it('treats targets >= vocab as ignored, reading nothing out of bounds', async () => {
    const rows = 5;
    const vocab = 37;
    const rng = new PhiloxStream(9, RngPurpose.harness);
    const logits = Array.from({ length: rows * vocab }, () => rng.normal());
    const targets = [vocab, 2 ** 31 - 1, 4, vocab + 1000, 36];
    const weights = [1, 1, 0.7, 1, 1.2];
    const got = await gpuRun({ rows, vocab }, { logits, targets, weights });
    // The same as the reference with those rows ignored.
    const want = reference({ rows, vocab }, { logits, targets: targets.map((t) => (t >= vocab ? -1 : t)), weights }, true);
    expectClose(got.loss, want.loss, 1e-6, 'loss');
    expectClose(got.lse, want.lse, 1e-6, 'lse');
    expectClose(got.dlogits, want.dlogits, 1e-6, 'dlogits');
    expect([got.loss[0], got.loss[1], got.loss[3]]).toEqual([0, 0, 0]);
  });

  it('is stable for logits of magnitude 1e4 and rows of fewer than 4 logits', async () => {
    const attrs = { rows: 1, vocab: 3 }; // 3 logits in all: the vec4 body is empty
    const inputs = { logits: [1e4, -1e4, 9990], targets: [2], weights: [1], dloss: [1] };
    const got = await gpuRun(attrs, inputs);
    const want = reference(attrs, inputs, true);
    expectClose(got.lse, want.lse, 1e-7, 'lse');
    expectClose(got.loss, want.loss, 1e-5, 'loss'); // 10 + log(1 + e^-10)
    expectClose(got.dlogits, want.dlogits, 1e-5, 'dlogits');
  });

  // The target dominates: s = Σ exp(x − max) is 1.0086 and 1.0024, log s small, and the target's
  // gradient expm1(x − lse) is all of log s. In f32 through s itself (ulp(1)), through WGSL's log
  // (only absolutely accurate near 1) and through a rounded lse, they come out 2e-5 to 3e-5 off
  // (found by parity's random seeds on lavapipe).
  it('keeps the loss and the fused gradient of a dominant target to 1e-5 relative in f32', async () => {
    const gpu = (await webgpuBackend())!;
    const attrs = { rows: 1, vocab: 3 };
    for (const logits of [[-1.868669900328875, 4.349202384091893, -0.6644635998912767], [-2.259501130349006, 4.066103681569299, -3.3436549288866693]]) {
      const inputs = { logits, targets: [1], weights: [1], dloss: [1] };
      const got = await runOp(gpu, crossEntropyFused, attrs, inputs);
      const want = reference(attrs, inputs);
      const rel = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);
      expect(rel(got.loss![0]!, want.loss[0]!), `loss, logits ${logits}`).toBeLessThanOrEqual(1e-5);
      for (let j = 0; j < 3; j++) expect(rel(got.dlogits![j]!, want.dlogits[j]!), `dlogits[${j}], logits ${logits}`).toBeLessThanOrEqual(1e-5);
    }
  });

  it('handles a long row with its maximum in the unaligned tail', async () => {
    const vocab = 50257;
    const rows = 2;
    const logits = Array.from({ length: rows * vocab }, (_, i) => Math.sin(i) * 3);
    logits[2 * vocab - 1] = 40; // last logit of row 1, in its scalar tail
    const inputs = { logits, targets: [123, vocab - 1], weights: [1, 1] };
    const got = await gpuRun({ rows, vocab }, inputs);
    const want = reference({ rows, vocab }, inputs, true);
    expectClose(got.lse, want.lse, 1e-6, 'lse');
    expectClose(got.loss, want.loss, 1e-5, 'loss');
  });
});

describe('cross_entropy_backward in place', () => {
  it('cpu: dlogits may be the logits tensor, with the out-of-place result', async () => {
    await expectCrossEntropyInPlace(new CpuBackend(), 'f32');
    await expectCrossEntropyInPlace(new CpuBackend(), 'bf16');
  });

  it.skipIf(!hasWebGpu)('webgpu: the same (the kernel copies the logits first: writable bindings may not alias)', async () => {
    await expectCrossEntropyInPlace((await webgpuBackend())!, 'f32');
  });
});
