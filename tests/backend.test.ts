/** Backend contracts: validation errors, dtype support, pooling, shader errors, device loss. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { defineKernel, grid1d } from '../src/backend/webgpu/kernel.js';
import { WEBGPU_KERNELS } from '../src/backend/webgpu/kernels/index.js';
import { compileShader } from '../src/backend/webgpu/shaders.js';
import { type WebGpuAdapterDescription, WebGpuBackend } from '../src/backend/webgpu/webgpu.js';
import { swiglu } from '../src/ops/swiglu.js';
import { type BackendProbe, chooseAutoBackend, createBackend, isSoftwareAdapter, loadShaderFile, nodeGpu, probeCuda, probeWebGpu } from '../src/runtime/backends.js';
import { parseDawnFlags, readKnobs } from '../src/runtime/knobs.js';
import { contracts, expectMdlmError } from './support/contracts.js';
import { hasWebGpu, webgpuBackend } from './support/webgpu.js';

contracts('cpu', async () => new CpuBackend(), true);

describe('MDLM_DAWN_FLAGS', () => {
  it('splits on whitespace into dawn.node flags, none when unset or blank', () => {
    expect(parseDawnFlags(' enable-dawn-features=disable_robustness,skip_validation\n backend=vulkan ')).toEqual([
      'enable-dawn-features=disable_robustness,skip_validation',
      'backend=vulkan',
    ]);
    expect(parseDawnFlags(undefined)).toEqual([]);
    expect(parseDawnFlags('  ')).toEqual([]);
    expect(readKnobs({ MDLM_DAWN_FLAGS: 'backend=vulkan' }).dawnFlags).toEqual(['backend=vulkan']);
    expect(readKnobs({}).dawnFlags).toEqual([]);
  });
});
contracts('webgpu', webgpuBackend, hasWebGpu);

describe('--backend auto', () => {
  const adapter = (vendor: string, architecture: string, device: string, description: string) => ({ vendor, architecture, device, description, features: [], keyFeatures: {}, limits: {} });
  const lavapipe = adapter('mesa', 'software', 'llvmpipe-llvm-15-0-6-256-bits-', 'llvmpipe: Mesa 25.0.7 (LLVM 15.0.6)');
  const fake = (cuda: boolean, webgpu?: ReturnType<typeof adapter>) => {
    const asked: string[] = [];
    const probe = (name: 'cuda' | 'webgpu'): BackendProbe => {
      asked.push(name);
      if (name === 'cuda') return cuda ? { name, available: true } : { name, available: false, reason: 'no CUDA device' };
      return webgpu ? { name, available: true, detail: webgpu } : { name, available: false, reason: 'no adapter' };
    };
    return { probe, asked };
  };

  it('prefers the CPU over a software WebGPU adapter, saying why', async () => {
    const f = fake(false, lavapipe);
    const choice = await chooseAutoBackend(f.probe);
    expect(choice.name).toBe('cpu');
    expect(choice.note).toMatch(/^backend auto: cpu, not the WebGPU adapter "llvmpipe: Mesa.*": it is a software renderer, slower than the CPU backend \(--backend webgpu uses it anyway\)$/);
    // A software adapter by vendor or name alone counts too.
    expect((await chooseAutoBackend(fake(false, adapter('mesa', '', 'llvmpipe', '')).probe)).name).toBe('cpu');
    expect((await chooseAutoBackend(fake(false, adapter('google', 'swiftshader', 'SwiftShader Device (Subzero)', '')).probe)).name).toBe('cpu');
  });

  it('a real GPU adapter still wins over the CPU, and CUDA over both, probed in that order', async () => {
    const nvidia = adapter('nvidia', 'hopper', 'NVIDIA H100 80GB HBM3', 'NVIDIA: 560.35');
    const amdOnMesa = adapter('amd', 'rdna-3', 'AMD Radeon RX 7900 XTX (RADV NAVI31)', 'radv Mesa 24.2');
    expect(isSoftwareAdapter(nvidia)).toBe(false);
    expect(isSoftwareAdapter(amdOnMesa)).toBe(false);
    expect(await chooseAutoBackend(fake(false, nvidia).probe)).toEqual({ name: 'webgpu' });
    expect(await chooseAutoBackend(fake(false, amdOnMesa).probe)).toEqual({ name: 'webgpu' });
    const withCuda = fake(true, nvidia);
    expect(await chooseAutoBackend(withCuda.probe)).toEqual({ name: 'cuda' });
    expect(withCuda.asked).toEqual(['cuda']);
    const none = fake(false);
    expect(await chooseAutoBackend(none.probe)).toEqual({ name: 'cpu' });
    expect(none.asked).toEqual(['cuda', 'webgpu']);
  });

  it.skipIf(!hasWebGpu || probeCuda().available)('createBackend logs the note for this machine\'s adapter when it passes it over', async () => {
    const probe = await probeWebGpu();
    const software = isSoftwareAdapter(probe.detail as WebGpuAdapterDescription);
    const lines: string[] = [];
    const backend = await createBackend('auto', (line) => lines.push(line));
    try {
      expect(backend.name).toBe(software ? 'cpu' : 'webgpu');
      expect(lines).toHaveLength(software ? 1 : 0);
      if (software) expect(lines[0]).toMatch(/^backend auto: cpu, not the WebGPU adapter/);
    } finally {
      backend.destroy();
    }
  });
});

describe('webgpu specifics', () => {
  it.skipIf(!hasWebGpu)('rejects bf16 tensors for its f32 kernels, saying where bf16 runs', async () => {
    const b = (await webgpuBackend())!;
    const x = b.alloc([1, 4], 'bf16');
    const out = b.alloc([1, 4], 'bf16');
    await expectMdlmError(() => b.run(swiglu, { gate: x, up: x, out }, { rows: 1, hidden: 4 }), 'UNSUPPORTED_DTYPE', 'swiglu', 'bf16', 'cuda');
    [x, out].forEach((t) => b.free(t));
  });

  it.skipIf(!hasWebGpu)('names the shader file and line of a WGSL compile error, through imports', async () => {
    const b = (await webgpuBackend())! as WebGpuBackend;
    const files: Record<string, string> = {
      'lib/helpers': 'fn helper(x: f32) -> f32 {\n  return x * 2.0;\n}',
      broken: '//!import lib/helpers\n@compute @workgroup_size(1)\nfn main() {\n  let y: f32 = helper(1.0) + undefined_name;\n}',
      brokenlib: '//!import lib/bad\n@compute @workgroup_size(1) fn main() {}',
      'lib/bad': 'fn bad() -> f32 {\n  return nope;\n}',
    };
    const load = (n: string): string => files[n] ?? '';
    await expectMdlmError(compileShader(b.device, 'broken', load), 'WGSL_COMPILE', 'shaders/broken.wgsl:4', 'undefined_name');
    await expectMdlmError(compileShader(b.device, 'brokenlib', load), 'WGSL_COMPILE', 'shaders/lib/bad.wgsl:2');
  });

  it.skipIf(!hasWebGpu)('rejects bindings that do not match the shader reflection', async () => {
    const { gpu } = await nodeGpu();
    const wrongName = defineKernel({
      op: swiglu,
      shaders: ['swiglu'],
      run(k, { gate, up, out }, { rows, hidden }) {
        const n = rows * hidden;
        k.dispatch({ shader: 'swiglu', entry: 'swiglu', bindings: { params: { n }, gate4: gate!, upp4: up!, out4: out! }, workgroups: grid1d(n / 4, 256) });
      },
    });
    const backend = await WebGpuBackend.create({ gpu: gpu!, loadShader: loadShaderFile, kernels: [wrongName] });
    try {
      const a = backend.alloc([1, 4], 'f32');
      const out = backend.alloc([1, 4], 'f32');
      await expectMdlmError(() => backend.run(swiglu, { gate: a, up: a, out }, { rows: 1, hidden: 4 }), 'SHADER_BINDING', 'shaders/swiglu.wgsl:swiglu', "binding 'up4'");
      const badUniform = defineKernel({
        op: swiglu,
        shaders: ['swiglu'],
        run(k, args, { rows, hidden }) {
          k.dispatch({ shader: 'swiglu', entry: 'swiglu', bindings: { params: { n: rows * hidden, m: 1 }, gate4: args.gate!, up4: args.up!, out4: args.out! }, workgroups: [1] });
        },
      });
      const b2 = await WebGpuBackend.create({ gpu: gpu!, loadShader: loadShaderFile, kernels: [badUniform] });
      const a2 = b2.alloc([1, 4], 'f32');
      const o2 = b2.alloc([1, 4], 'f32');
      await expectMdlmError(() => b2.run(swiglu, { gate: a2, up: a2, out: o2 }, { rows: 1, hidden: 4 }), 'SHADER_BINDING', "no field 'm'");
      b2.destroy();
    } finally {
      backend.destroy();
    }
  });

  it.skipIf(!hasWebGpu)('reports a lost device as such', async () => {
    const { gpu } = await nodeGpu();
    const b = await WebGpuBackend.create({ gpu: gpu!, loadShader: loadShaderFile, kernels: WEBGPU_KERNELS });
    b.device.destroy();
    await new Promise((r) => setTimeout(r, 50));
    await expectMdlmError(() => b.alloc([4], 'f32'), 'WEBGPU_DEVICE_LOST', 'device lost');
  });
});
