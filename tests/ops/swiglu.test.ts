import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { swiglu, swigluBackward } from '../../src/ops/swiglu.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

// silu(1) = 1 / (1 + e^-1), silu(-1) = -e^-1 / (1 + e^-1)
const SILU_1 = 0.7310585786300049;
const SILU_M1 = -0.2689414213699951;

describe('swiglu reference', () => {
  it('is silu(gate) * up at known points', () => {
    const gate = Float64Array.from([0, 1, -1, 50, -50, 2]);
    const up = Float64Array.from([3, 2, 2, 1, 1, -0.5]);
    const { out } = runReference(swiglu, { gate, up }, { rows: 2, hidden: 3 }, 'f32');
    expect(out![0]).toBe(0);
    expect(out![1]).toBeCloseTo(2 * SILU_1, 14);
    expect(out![2]).toBeCloseTo(2 * SILU_M1, 14);
    expect(out![3]).toBeCloseTo(50, 12); // silu(x) -> x for large x
    expect(Math.abs(out![4]!)).toBeLessThan(1e-19); // and -> 0 for very negative x
    expect(out![5]).toBeCloseTo(-0.5 * 1.7615941559557646, 14);
  });

  it('backward at 0: silu\'(0) = 1/2 and silu(0) = 0', () => {
    const args = { dout: Float64Array.from([2]), gate: Float64Array.from([0]), up: Float64Array.from([3]) };
    const { dgate, dup } = runReference(swigluBackward, args, { rows: 1, hidden: 1 }, 'f32');
    expect(dgate![0]).toBeCloseTo(2 * 3 * 0.5, 14);
    expect(dup![0]).toBe(0);
  });

  it('rejects bad attributes and shapes naming the op and argument', () => {
    const cpu = new CpuBackend();
    expect(() => swiglu.validate!({ rows: 0, hidden: 4 })).toThrow(/swiglu: attribute 'rows'/);
    const gate = cpu.alloc([2, 5], 'f32');
    const up = cpu.alloc([2, 4], 'f32');
    const out = cpu.alloc([2, 5], 'f32');
    const run = () => cpu.run(swiglu, { gate, up, out }, { rows: 2, hidden: 5 });
    expect(run).toThrow(MdlmError);
    expect(run).toThrow(/swiglu: argument 'up' expected shape \[2, 5\], got \[2, 4\]/);
  });
});

describe.skipIf(!hasWebGpu)('swiglu on webgpu', () => {
  it('stays finite and exact for large |gate| (safe sigmoid)', async () => {
    const gpu = (await webgpuBackend())!;
    const gate = [-1e4, -100, -50, -10, 0, 10, 50, 100, 1e4, -1e30, 1e30]; // 11: vec4s and a tail
    const up = gate.map((_, i) => (i % 2 === 0 ? 1.5 : -0.5));
    const dout = gate.map((_, i) => 1 + i / 10);
    const attrs = { rows: 1, hidden: gate.length };
    const f = await runOp(gpu, swiglu, attrs, { gate, up });
    const b = await runOp(gpu, swigluBackward, attrs, { dout, gate, up });
    const f32 = (v: number[]) => Float64Array.from(Float32Array.from(v)); // what the GPU holds
    const want = runReference(swigluBackward, { dout: f32(dout), gate: f32(gate), up: f32(up) }, attrs, 'f32');
    const wantOut = runReference(swiglu, { gate: f32(gate), up: f32(up) }, attrs, 'f32');
    for (let i = 0; i < gate.length; i++) {
      for (const [got, ref] of [[f.out!, wantOut.out!], [b.dgate!, want.dgate!], [b.dup!, want.dup!]] as const) {
        expect(Number.isFinite(got[i]), `element ${i} (gate ${gate[i]})`).toBe(true);
        expect(Math.abs(got[i]! - ref[i]!)).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(ref[i]!)));
      }
    }
  });
});
