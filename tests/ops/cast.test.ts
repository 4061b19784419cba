/** cast: the reference by hand, fp8 casts on the CPU backend, attribute/dtype errors. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { bitsF32 } from '../../src/convert.js';
import { type CastAttrs, cast } from '../../src/ops/cast.js';
import type { DType } from '../../src/tensor.js';
import { hasWebGpu, webgpuBackend } from '../support/webgpu.js';

const cpu = new CpuBackend();

async function castOn(backend: CpuBackend, values: readonly number[], from: DType, to: DType): Promise<number[]> {
  const n = values.length;
  const x = backend.alloc([n], from);
  const out = backend.alloc([n], to);
  backend.upload(x, Float32Array.from(values));
  backend.run(cast, { x, out }, { n, from, to } as CastAttrs);
  const got = [...(await backend.download(out))];
  backend.free(x);
  backend.free(out);
  return got;
}

describe('cast', () => {
  it('reference rounds to nearest even into the target dtype', () => {
    const tie = bitsF32(0x3f818000); // 1 + 3·2^-8, halfway between two bf16 values
    const out = new Float64Array(4);
    cast.reference({ x: Float64Array.of(1, tie, 65519, 70000), out }, { n: 4, from: 'f32', to: 'bf16' });
    expect([...out]).toEqual([1, 1 + 2 ** -6, 65536, 70144]);
    cast.reference({ x: Float64Array.of(1, tie, 65519, 70000), out }, { n: 4, from: 'f32', to: 'f16' });
    expect([...out]).toEqual([1, 1 + 2 ** -7 + 2 ** -8, 65504, Infinity]);
  });
  it('casts to and from fp8 on the CPU backend (odd length)', async () => {
    expect(await castOn(cpu, [1, -2.5, 500, 1e-3, 0.3], 'f32', 'fp8e4m3')).toEqual([1, -2.5, 448, 2 ** -9, 0.3125]);
    expect(await castOn(cpu, [1, -2.5, 1e5], 'bf16', 'fp8e5m2')).toEqual([1, -2.5, Infinity]);
    expect(await castOn(cpu, [448, -0.5, 3], 'fp8e4m3', 'f16')).toEqual([448, -0.5, 3]);
  });
  it('names the attribute for an unknown dtype', () => {
    expect(() => cast.validate!({ n: 2, from: 'f32', to: 'f64' } as unknown as CastAttrs)).toThrow(/cast: attribute 'to' is "f64"; expected one of f32, f16, bf16, fp8e4m3, fp8e5m2/);
    expect(() => cast.validate!({ n: 0, from: 'f32', to: 'f16' })).toThrow(/cast: attribute 'n'/);
  });
  it('names the argument whose dtype is wrong', () => {
    const x = cpu.alloc([2], 'f32');
    const out = cpu.alloc([2], 'f32');
    expect(() => cpu.run(cast, { x, out }, { n: 2, from: 'f32', to: 'bf16' })).toThrow(/cast: argument 'out' must be bf16, got f32/);
  });
});

it.skipIf(!hasWebGpu)('webgpu keeps the element sharing the last packed word of an odd-length output', async () => {
  const gpu = (await webgpuBackend())!;
  const base = gpu.alloc([8], 'bf16');
  gpu.upload(base, Float32Array.from([9, 9, 9, 9, 9, 9, 9, 9]));
  const x = gpu.alloc([3], 'f32');
  gpu.upload(x, Float32Array.of(1, -2.5, 3));
  gpu.run(cast, { x, out: gpu.view(base, 0, [3]) }, { n: 3, from: 'f32', to: 'bf16' });
  expect([...(await gpu.download(base))]).toEqual([1, -2.5, 3, 9, 9, 9, 9, 9]);
  gpu.free(x);
  gpu.free(base);
});
