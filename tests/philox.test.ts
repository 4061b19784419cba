/**
 * Philox4x32-10 in TypeScript against the Random123 known answers, and the WGSL library
 * (shaders/lib/philox.wgsl, what diffusion_mask's shader draws from) against the TypeScript one
 * bit for bit, through a test-only op. cuda/philox.cuh is held to the same words in
 * tests/cuda_build.test.ts.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { defineKernel, grid1d } from '../src/backend/webgpu/kernel.js';
import { WebGpuBackend } from '../src/backend/webgpu/webgpu.js';
import { defineOp, requireDims, requireSeed, requireU32 } from '../src/ops/op.js';
import { philox4x32, seedKey, uniform01 } from '../src/rng/philox.js';
import { loadShaderFile, nodeGpu } from '../src/runtime/backends.js';
import { runOp } from './support/run_op.js';
import { hasWebGpu } from './support/webgpu.js';

const hex = (words: ArrayLike<number>) => Array.from(words, (w) => (w >>> 0).toString(16).padStart(8, '0')).join(' ');

describe('philox4x32 (TypeScript)', () => {
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

interface BlocksAttrs {
  readonly seed: number;
  readonly step: number;
  readonly rank: number;
  readonly purpose: number;
  readonly blocks: number;
}

/** Test-only op: block i of the table is philox4x32([i, step, rank, purpose], seedKey(seed)). */
const philoxBlocks = defineOp<BlocksAttrs>({
  name: 'philox_blocks',
  summary: 'a table of Philox4x32-10 blocks (test only)',
  args: [{ name: 'out', role: 'out', dtype: 'u32' }],
  validate(attrs) {
    requireDims('philox_blocks', attrs, ['blocks']);
    requireSeed('philox_blocks', attrs.seed);
    requireU32('philox_blocks', attrs, ['step', 'rank', 'purpose']);
  },
  shapes: ({ blocks }) => ({ out: [blocks, 4] }),
  reference({ out }, { seed, step, rank, purpose, blocks }) {
    const block = new Uint32Array(4);
    for (let i = 0; i < blocks; i++) out!.set(philox4x32([i, step, rank, purpose], seedKey(seed), block), 4 * i);
  },
  cases: () => [],
  sample: () => ({}),
  tolerance: {},
});

const SHADER = `//!import lib/philox
struct Params { blocks: u32, step: u32, rank: u32, purpose: u32, key_lo: u32, key_hi: u32 }

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> out: array<vec4u>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < params.blocks) {
    out[i] = philox4x32(vec4u(i, params.step, params.rank, params.purpose), vec2u(params.key_lo, params.key_hi));
  }
}
`;

const philoxBlocksKernel = defineKernel({
  op: philoxBlocks,
  shaders: ['philox_blocks'],
  run(k, { out }, { seed, step, rank, purpose, blocks }) {
    const [key_lo, key_hi] = seedKey(seed);
    k.dispatch({ shader: 'philox_blocks', entry: 'main', bindings: { params: { blocks, step, rank, purpose, key_lo, key_hi }, out: out! }, workgroups: grid1d(blocks, 256) });
  },
});

describe('philox library in WGSL', () => {
  const attrs: BlocksAttrs = { seed: 2 ** 45 + 99, step: 12, rank: 1, purpose: 3, blocks: 517 };
  let gpu: WebGpuBackend | undefined;
  afterAll(() => gpu?.destroy());

  it.skipIf(!hasWebGpu)('gives the TypeScript blocks bit for bit, and the zero-key known answer', async () => {
    const { gpu: dawn } = await nodeGpu();
    gpu = await WebGpuBackend.create({ gpu: dawn!, loadShader: (name) => (name === 'philox_blocks' ? SHADER : loadShaderFile(name)), kernels: [philoxBlocksKernel] });
    const want = (await runOp(new CpuBackend(), philoxBlocks, attrs, {})).out!;
    expect(hex(want.subarray(0, 4))).toBe(hex(philox4x32([0, 12, 1, 3], seedKey(attrs.seed))));
    expect((await runOp(gpu, philoxBlocks, attrs, {})).out).toEqual(want);
    const zero = await runOp(gpu, philoxBlocks, { seed: 0, step: 0, rank: 0, purpose: 0, blocks: 1 }, {});
    expect(hex(zero.out!)).toBe('6627e8d5 e169c58d bc57ac4c 9b00dbd8');
  });
});
