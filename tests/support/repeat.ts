/** Determinism checks: the same op on the same input, run twice on WebGPU. */
import type { OpDef } from '../../src/ops/op.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { webgpuBackend } from './webgpu.js';

/** Run an op with args { x, out } twice on WebGPU over the same random x; both outputs. */
export async function runTwiceOnWebGpu(op: OpDef<unknown>, attrs: unknown, shape: number[], outLen: number): Promise<[number[], number[]]> {
  const gpu = (await webgpuBackend())!;
  const rng = new PhiloxStream(7, RngPurpose.harness);
  const x = gpu.alloc(shape, 'f32');
  gpu.upload(x, new Float32Array(x.size).map(() => rng.normal()));
  const results: number[][] = [];
  for (let r = 0; r < 2; r++) {
    const out = gpu.alloc([outLen], 'f32');
    gpu.run(op, { x, out }, attrs);
    results.push([...(await gpu.download(out))]);
    gpu.free(out);
  }
  gpu.free(x);
  return [results[0]!, results[1]!];
}
