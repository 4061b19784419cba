/** The CLI as a user runs it: bin/mdlm.js over the compiled dist/ (npm test builds it first). */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { attention } from '../src/ops/attention.js';
import { mdlm, mdlmWithEnv } from './support/cli.js';
import { hasWebGpu } from './support/webgpu.js';

describe('mdlm CLI', () => {
  it('probe --json lists every backend with availability and reasons', () => {
    const r = mdlm('probe', '--json');
    expect(r.code).toBe(0);
    const probes = JSON.parse(r.stdout) as { name: string; available: boolean; reason?: string; detail?: Record<string, unknown> }[];
    expect(probes.map((p) => p.name)).toEqual(['cpu', 'webgpu', 'cuda']);
    const cuda = probes.find((p) => p.name === 'cuda')!;
    if (!cuda.available) expect(cuda.reason).toMatch(/addon|driver|GPU/);
    const webgpu = probes.find((p) => p.name === 'webgpu')!;
    expect(webgpu.available).toBe(hasWebGpu);
    if (webgpu.available) {
      expect(webgpu.detail).toHaveProperty('limits.maxStorageBufferBindingSize');
      expect(webgpu.detail).toHaveProperty('keyFeatures');
    }
  });

  it('probe reports flags Dawn rejects in MDLM_DAWN_FLAGS as the reason WebGPU is unavailable', () => {
    const r = mdlmWithEnv({ MDLM_DAWN_FLAGS: 'backend=no-such-backend' }, 'probe', '--json');
    expect(r.code, r.stderr).toBe(0);
    const webgpu = (JSON.parse(r.stdout) as { name: string; available: boolean; reason?: string }[]).find((p) => p.name === 'webgpu')!;
    expect(webgpu.available).toBe(false);
    expect(webgpu.reason).toMatch(/no-such-backend/);
    expect(webgpu.reason).toContain("MDLM_DAWN_FLAGS='backend=no-such-backend'");
  });

  it('writes all of a long --json into a shell pipe (none of it lost at exit)', () => {
    // More than a pipe's 64 KiB of records, into a pipe read only after 6 s (longer than the command
    // takes here): a CLI that exits with writes still queued drops them.
    const cmd = `"${process.execPath}" bin/mdlm.js bench kernels --backend cpu --dtype f32,bf16 --no-gradients --reps 0 --json | (sleep 6; cat)`;
    const r = spawnSync('sh', ['-c', cmd], { encoding: 'utf8', timeout: 120_000, maxBuffer: 1 << 24 });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.length).toBeGreaterThan(65536);
    const records = JSON.parse(r.stdout) as { op: string; pass: boolean }[];
    expect(records.length).toBeGreaterThan(100);
    expect(records.every((rec) => rec.pass)).toBe(true);
  });

  it('bench kernels --json emits passing records for the chosen ops', () => {
    const backends = hasWebGpu ? 'cpu,webgpu' : 'cpu';
    const r = mdlm('bench', 'kernels', '--backend', backends, '--ops', 'swiglu', '--case', '1x3', '--json', '--reps', '1');
    expect(r.code, r.stderr).toBe(0);
    const records = JSON.parse(r.stdout) as { op: string; backend: string; relErr: number; tol: number; pass: boolean; ms: number; shape: string }[];
    expect(records.length).toBe(backends.split(',').length);
    for (const rec of records) {
      expect(rec).toMatchObject({ op: 'swiglu', pass: true });
      expect(rec.relErr).toBeLessThanOrEqual(rec.tol);
      expect(rec.ms).toBeGreaterThan(0);
      expect(rec.shape).toContain('[1, 3]');
    }
  });

  it('bench kernels --case runs only the cases whose label contains the text', () => {
    const labels = attention.cases('test').map((c) => c.label);
    const wanted = labels.filter((l) => l.includes('bidirectional'));
    expect(wanted.length).toBeGreaterThan(0);
    expect(wanted.length).toBeLessThan(labels.length);
    const r = mdlm('bench', 'kernels', '--backend', 'cpu', '--ops', 'attention', '--case', 'bidirectional', '--json', '--reps', '0', '--no-check');
    expect(r.code, r.stderr).toBe(0);
    const records = JSON.parse(r.stdout) as { case: string }[];
    expect(records.map((rec) => rec.case)).toEqual(wanted);
  });

  it('a --case that matches no case is a clear error listing the cases', () => {
    const r = mdlm('bench', 'kernels', '--backend', 'cpu', '--ops', 'attention', '--case', 'no such shape');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("no test case contains 'no such shape'");
    expect(r.stderr).toContain(`attention: ${attention.cases('test')[0]?.label}`);
  });

  it('an unknown op is a clear error with a non-zero exit', () => {
    const r = mdlm('bench', 'kernels', '--backend', 'cpu', '--ops', 'nosuchop');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("unknown op 'nosuchop'");
    expect(r.stderr).not.toContain('    at ');
  });

  it('asking for an unavailable backend says why and what to do', () => {
    const r = mdlm('bench', 'kernels', '--backend', 'cuda', '--ops', 'swiglu');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/BACKEND_UNAVAILABLE: backend cuda is unavailable: .*(addon|driver|GPU).*--backend/);
  });
});
