/**
 * Walks the op registry: every op case on the CPU backend and on WebGPU against the float64
 * reference, and every backward op against finite differences.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { checkGradient, checkParity, freshSeed } from '../src/harness/parity.js';
import { OPS } from '../src/ops/index.js';
import { hasWebGpu, webgpuBackend } from './support/webgpu.js';

const cpu = new CpuBackend();

afterAll(async () => {
  (await webgpuBackend())?.destroy();
});

for (const op of OPS) {
  describe(op.name, () => {
    for (const c of op.cases('test')) {
      it(`${c.label}: cpu matches reference`, async () => {
        const r = await checkParity(cpu, op, c, { seed: freshSeed() });
        expect(r.error).toBeUndefined();
        expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
      });
      for (const dtype of ['bf16', 'f16'] as const) {
        if (!op.floatDtypes?.includes(dtype)) continue;
        // Storage rounding alone (the CPU reference rounds its outputs to the dtype) must fit the dtype's tolerance.
        it(`${c.label}: cpu matches reference in ${dtype}`, async () => {
          const r = await checkParity(cpu, op, c, { seed: freshSeed(), dtype });
          expect(r.error).toBeUndefined();
          expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
        });
      }
      it.skipIf(!hasWebGpu)(`${c.label}: webgpu matches reference`, async () => {
        const gpu = (await webgpuBackend())!;
        const r = await checkParity(gpu, op, c, { seed: freshSeed() });
        expect(r.error).toBeUndefined();
        expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
      });
      if (op.gradient) {
        it(`${c.label}: backward matches finite differences`, () => {
          const r = checkGradient(op, c, freshSeed());
          expect(r.relErr, JSON.stringify(r)).toBeLessThanOrEqual(r.tol);
        });
      }
    }
  });
}
