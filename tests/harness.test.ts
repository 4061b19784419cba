/** The parity harness itself: timing-only runs of backward ops get their saved inputs from the backend's forward. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { checkParity, runReference, uploadBackwardFromForward } from '../src/harness/parity.js';
import { attention, attentionBackward } from '../src/ops/attention.js';
import { crossEntropyBackward } from '../src/ops/cross_entropy.js';
import { rmsnormBackward } from '../src/ops/rmsnorm.js';
import { swiglu } from '../src/ops/swiglu.js';
import type { RefArgs } from '../src/ops/op.js';
import { PhiloxStream, RngPurpose } from '../src/rng/philox.js';
import type { Tensor } from '../src/tensor.js';

const cpu = new CpuBackend();

describe('timing-only backward inputs', () => {
  it("attention_backward reads the forward's out and lse, computed on the backend from the same q, k, v", async () => {
    const c = attentionBackward.cases('test').find((x) => x.label.startsWith('documents causal'))!;
    const tensors: Record<string, Tensor> = {};
    expect(uploadBackwardFromForward(cpu, attentionBackward, c.attrs, 'f32', new PhiloxStream(7, RngPurpose.harness), tensors)).toBe(true);
    const fwdInputs = attention.sample(new PhiloxStream(7, RngPurpose.harness), c.attrs);
    const want = runReference(attention, fwdInputs, c.attrs, 'f32');
    const host: RefArgs = {};
    for (const name of ['q', 'segIds', 'out', 'lse']) host[name] = (await cpu.download(tensors[name]!)) as RefArgs[string];
    expect(Array.from(host.q!)).toEqual(Array.from(Float32Array.from(fwdInputs.q!)));
    expect(Array.from(host.segIds!)).toEqual(Array.from(fwdInputs.segIds!));
    for (const name of ['out', 'lse']) {
      const got = host[name]!;
      const ref = want[name]!;
      for (let i = 0; i < ref.length; i++) expect(got[i]).toBeCloseTo(ref[i]!, 5);
    }
    // outputs are allocated at their shapes (not filled: this is for timing), cotangents random and not all zero
    const shapes = attentionBackward.shapes(c.attrs);
    for (const name of ['dq', 'dk', 'dv']) expect(tensors[name]!.shape).toEqual(shapes[name]);
    expect(Array.from((await cpu.download(tensors.dout!)) as Float32Array).some((v) => v !== 0)).toBe(true);
    // positions (no forward source) sampled as rope's are: packed documents' token positions
    const positions = Array.from((await cpu.download(tensors.positions!)) as Int32Array);
    expect(positions.every((p) => Number.isInteger(p) && p >= 0) && positions.some((p) => p > 0)).toBe(true);
    for (const t of Object.values(tensors)) cpu.free(t);
  });

  it('covers backward ops whose non-differentiable inputs share the forward names (cross entropy targets, rmsnorm dresidual)', () => {
    for (const op of [crossEntropyBackward, rmsnormBackward]) {
      const tensors: Record<string, Tensor> = {};
      const c = op.cases('test')[0]!;
      expect(uploadBackwardFromForward(cpu, op as never, c.attrs, 'f32', new PhiloxStream(1, RngPurpose.harness), tensors), op.name).toBe(true);
      expect(Object.keys(tensors).sort()).toEqual(op.args.map((a) => a.name).sort());
      for (const t of Object.values(tensors)) cpu.free(t);
    }
  });

  it('declines ops without a gradient link, and checkParity then samples as usual', async () => {
    const c = swiglu.cases('test')[0]!;
    expect(uploadBackwardFromForward(cpu, swiglu, c.attrs, 'f32', new PhiloxStream(1, RngPurpose.harness), {})).toBe(false);
    const r = await checkParity(cpu, swiglu, c, { seed: 1, skipReference: true, timeReps: 1 });
    expect(r.check).toBe('unchecked');
    expect(r.error).toBeUndefined();
    expect(r.ms).toBeGreaterThanOrEqual(0);
  });

  it('a timing-only backward record runs the op and leaves no tensor behind', async () => {
    const c = attentionBackward.cases('test')[0]!;
    const before = cpu.poolStats().liveBytes;
    const r = await checkParity(cpu, attentionBackward, c, { seed: 3, skipReference: true, timeReps: 1 });
    expect(r.error).toBeUndefined();
    expect(r.check).toBe('unchecked');
    expect(cpu.poolStats().liveBytes).toBe(before);
  });
});
