import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { MdlmError } from '../../src/errors.js';
import { runReference } from '../../src/harness/parity.js';
import { gelu, geluBackward } from '../../src/ops/gelu.js';
import { runOp } from '../support/run_op.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

function ref(xs: readonly number[]) {
  const x = Float64Array.from(Float32Array.from(xs)); // what the GPU holds
  const attrs = { rows: 1, hidden: xs.length };
  const out = runReference(gelu, { x }, attrs, 'f32').out!;
  const dx = runReference(geluBackward, { dout: new Float64Array(xs.length).fill(1), x }, attrs, 'f32').dx!;
  return { out, dx };
}

describe('gelu reference (tanh approximation)', () => {
  it('has gelu(0) = 0, gelu(x) -> x for large x and -> 0 for very negative x', () => {
    const { out } = ref([0, 10, 30, -10, -30]);
    expect(out[0]).toBe(0);
    expect(out[1]).toBeCloseTo(10, 14);
    expect(out[2]).toBeCloseTo(30, 14);
    expect(Math.abs(out[3]!)).toBeLessThan(1e-14);
    expect(Math.abs(out[4]!)).toBeLessThan(1e-14);
  });

  it('is the tanh form, not erf: gelu(1) = 0.5 (1 + tanh(sqrt(2/pi) 1.044715))', () => {
    const { out } = ref([1, -1]);
    expect(out[0]).toBeCloseTo(0.8411919906082768, 14);
    expect(Math.abs(out[0]! - 0.8413447460685429)).toBeGreaterThan(1e-4); // exact erf GELU(1)
    expect(out[1]).toBeCloseTo(-0.15880800939172324, 14);
  });

  it('equals 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) written out', () => {
    const xs = Array.from({ length: 41 }, (_, i) => -5 + i / 4);
    const { out } = ref(xs);
    xs.forEach((x, i) => {
      const want = 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
      expect(Math.abs(out[i]! - want)).toBeLessThan(1e-14);
    });
  });

  it("has gelu'(0) = 1/2, gelu'(large) = 1, gelu'(-large) = 0", () => {
    const { dx } = ref([0, 20, -20]);
    expect(dx[0]).toBeCloseTo(0.5, 14);
    expect(dx[1]).toBeCloseTo(1, 14);
    expect(dx[2]).toBeCloseTo(0, 14);
  });

  it('rejects bad attributes and shapes naming the op and argument', () => {
    const cpu = new CpuBackend();
    expect(() => geluBackward.validate!({ rows: 3, hidden: 1.5 })).toThrow(/gelu_backward: attribute 'hidden'/);
    const x = cpu.alloc([3, 7], 'f32');
    const out = cpu.alloc([7, 3], 'f32');
    const run = () => cpu.run(gelu, { x, out }, { rows: 3, hidden: 7 });
    expect(run).toThrow(MdlmError);
    expect(run).toThrow(/gelu: argument 'out' expected shape \[3, 7\], got \[7, 3\]/);
  });
});

describe.skipIf(!hasWebGpu)('gelu on webgpu', () => {
  it('stays finite for large |x| (tanh argument clamped)', async () => {
    const gpu = (await webgpuBackend())!;
    const xs = [-1e30, -1e4, -100, -50, -10, -6, 0, 6, 10, 50, 100, 1e4, 1e30]; // 13: vec4s and a tail
    const attrs = { rows: 1, hidden: xs.length };
    const f = await runOp(gpu, gelu, attrs, { x: xs });
    const b = await runOp(gpu, geluBackward, attrs, { dout: xs.map(() => 1), x: xs });
    const want = ref(xs);
    for (let i = 0; i < xs.length; i++) {
      for (const [got, r] of [[f.out!, want.out], [b.dx!, want.dx]] as const) {
        expect(Number.isFinite(got[i]), `element ${i} (x ${xs[i]})`).toBe(true);
        expect(Math.abs(got[i]! - r[i]!)).toBeLessThanOrEqual(1e-6 * Math.max(1, Math.abs(r[i]!)));
      }
    }
  });
});
