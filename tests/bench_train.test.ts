/** `mdlm bench train`: the report's figures and the plumbing to the PyTorch peer (a stand-in here). */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { paramCount } from '../src/config/model-size.js';
import type { Backend } from '../src/backend/backend.js';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { ProfiledBackend } from '../src/bench/profile.js';
import { benchTrain, peersFitBeside } from '../src/bench/train.js';
import { resolveConfig } from '../src/config/load.js';

// In-process benchTrain gets a CPU backend that says it has deviceMemory bytes, as CUDA's does.
const deviceMemory = vi.hoisted(() => ({ bytes: 0 }));
vi.mock('../src/runtime/backends.js', async (original) => ({
  ...(await original<typeof import('../src/runtime/backends.js')>()),
  createBackend: async () => Object.defineProperty(new CpuBackend(), 'memoryBytes', { value: deviceMemory.bytes }),
}));

const dir = mkdtempSync(join(tmpdir(), 'mdlm-bench-train-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SMALL = ['bench', 'train', '--preset', 'tiny', '--backend', 'cpu', '--batch', '2', '--seq-len', '32', '--steps', '2', '--warmup', '1'];

function run(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, ['bin/mdlm.js', ...args], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, ...env } });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

/** A stand-in for python3: records its arguments, prints the peer's JSON line (or fails). */
function fakePython(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\necho "$@" > ${path}.args\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

describe('mdlm bench train', () => {
  it('reports tokens/s, ms/step, MFU against the given peak and the pool memory, for the preset at the given shapes', () => {
    const r = run([...SMALL, '--peak-tflops', '2', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const rep = JSON.parse(r.stdout) as Record<string, unknown> & { setup: Record<string, number>; tokens_per_s: number; ms_step: number; mfu: number; peak_mem_gib: number; loss: number };
    const cfg = resolveConfig({ preset: 'tiny', overrides: { 'model.seqLen': '32' } });
    expect(rep.setup).toMatchObject({ batch: 2, seq_len: 32, params: paramCount(cfg.model), peak_tflops: 2 });
    expect(rep.tokens_per_s).toBeCloseTo((2 * 32) / (rep.ms_step / 1000), 6);
    expect(rep.mfu).toBeCloseTo((rep.tokens_per_s * rep.setup.flops_per_token!) / 2e12, 12);
    expect(rep.peak_mem_gib).toBeGreaterThan(0);
    // Random tokens: the weighted mdlm loss of an untrained model sits near ln(vocab) = ln(264) ≈ 5.6.
    expect(rep.loss).toBeGreaterThan(4.5);
    expect(rep.loss).toBeLessThan(7);
    expect(rep.peers).toEqual({});
    expect(r.stderr).toContain('bench train: tiny mdlm, batch 2 × 32');
  });

  it('--profile breaks a step down by op and argument shapes: every op of the step, shares summing to 1', () => {
    const r = run([...SMALL, '--profile', '2', '--json']);
    expect(r.code, r.stderr).toBe(0);
    const rows = (JSON.parse(r.stdout) as { profile: { op: string; calls_per_step: number; ms_per_step: number; share: number }[] }).profile;
    const ops = new Set(rows.map((x) => x.op));
    for (const op of ['matmul', 'attention', 'attention_backward', 'embedding_backward', 'rmsnorm_backward', 'cross_entropy_fused', 'diffusion_mask', 'grad_norm', 'adamw']) {
      expect(ops.has(op), op).toBe(true);
    }
    expect(rows.reduce((a, x) => a + x.share, 0)).toBeCloseTo(1, 9);
    expect(rows.every((x, i) => i === 0 || x.ms_per_step <= rows[i - 1]!.ms_per_step)).toBe(true);
    // tiny: 4 layers, each with one attention forward per step.
    expect(rows.filter((x) => x.op === 'attention').reduce((a, x) => a + x.calls_per_step, 0)).toBe(4);
  });

  it('runs the PyTorch peer on the same model and shapes and prints the speedup', () => {
    const python = fakePython('peer-ok', `echo '{"tokens_per_s": 10, "mfu": null, "ms_step": 6400, "peak_mem_gib": 1.5, "impl": "torch fake eager", "device": "cpu", "precision": "bf16", "steps": 2, "loss": 5.5}'`);
    const r = run([...SMALL, '--objective', 'ar', '--peer', 'eager', '--json'], { PYTHON: python });
    expect(r.code, r.stderr).toBe(0);
    const rep = JSON.parse(r.stdout) as { tokens_per_s: number; setup: { flops_per_token: number }; peers: Record<string, { tokens_per_s: number }>; speedup: Record<string, number> };
    expect(rep.peers.eager!.tokens_per_s).toBe(10);
    expect(rep.speedup.eager).toBeCloseTo(rep.tokens_per_s / 10, 12);
    const args = readFileSync(`${python}.args`, 'utf8');
    expect(args).toContain('bench/peers/train_torch.py --mode eager --objective ar --batch 2 --seq-len 32 --vocab 264 --d-model 128 --layers 4 --heads 4 --kv-heads 4 --ffn 512');
    expect(args).toContain(`--flops-per-token ${rep.setup.flops_per_token}`);
    expect(args).toContain('--tie-embeddings');
  });

  it('--rounds alternates mdlm windows with peer runs and reports medians, each round kept', () => {
    // The peer's three runs report 10, 30 and 20 tokens/s.
    const counter = join(dir, 'peer-rounds.n');
    const python = fakePython('peer-rounds', [
      `n=$(cat ${counter} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > ${counter}`,
      'case $n in 1) t=10;; 2) t=30;; *) t=20;; esac',
      `echo "{\\"tokens_per_s\\": $t, \\"mfu\\": null, \\"ms_step\\": 1, \\"peak_mem_gib\\": 1, \\"impl\\": \\"torch fake eager\\", \\"device\\": \\"cpu\\", \\"precision\\": \\"bf16\\", \\"steps\\": 2, \\"loss\\": 5.5}"`,
    ].join('\n'));
    const r = run([...SMALL, '--objective', 'ar', '--peer', 'eager', '--rounds', '3', '--json'], { PYTHON: python });
    expect(r.code, r.stderr).toBe(0);
    const rep = JSON.parse(r.stdout) as {
      tokens_per_s: number; peers: Record<string, { tokens_per_s: number }>; speedup: Record<string, number>;
      rounds: { mdlm_tokens_per_s: number; peers: Record<string, number>; speedup: Record<string, number> }[];
    };
    expect(rep.rounds.map((x) => x.peers.eager)).toEqual([10, 30, 20]);
    for (const x of rep.rounds) expect(x.speedup.eager).toBeCloseTo(x.mdlm_tokens_per_s / x.peers.eager!, 12);
    const mid = (xs: number[]) => [...xs].sort((a, b) => a - b)[1]!;
    expect(rep.peers.eager!.tokens_per_s).toBe(20);
    expect(rep.speedup.eager).toBeCloseTo(mid(rep.rounds.map((x) => x.speedup.eager!)), 12);
    expect(rep.tokens_per_s).toBeCloseTo(mid(rep.rounds.map((x) => x.mdlm_tokens_per_s)), 6);
    // Alternating: each peer run follows an mdlm window.
    const order = r.stderr.split('\n').filter((l) => /^(mdlm round|PyTorch eager: \d+ warmup)/.test(l)).map((l) => (l.startsWith('mdlm') ? 'm' : 'p'));
    expect(order.join('')).toBe('mpmpmp');
  });

  it('runs the peers after mdlm where the device cannot hold both at once', async () => {
    const GiB = 2 ** 30;
    // A peer holds about as much as mdlm: a 47.65 GiB run and its peer fit a 139.8 GiB device (H200), not a 79.2 GiB one (H100).
    expect(peersFitBeside(47.65 * GiB, 139.8 * GiB)).toBe(true);
    expect(peersFitBeside(47.65 * GiB, 79.2 * GiB)).toBe(false);
    expect(peersFitBeside(8.59 * GiB, 79.2 * GiB)).toBe(true);
    expect(peersFitBeside(47.65 * GiB, undefined)).toBe(true);

    const python = fakePython('peer-memory', `echo '{"tokens_per_s": 10, "mfu": null, "ms_step": 1, "peak_mem_gib": 1, "impl": "torch fake eager", "device": "cpu", "precision": "bf16", "steps": 2, "loss": 5.5}'`);
    const order = async (bytes: number) => {
      deviceMemory.bytes = bytes;
      const lines: string[] = [];
      const rep = await benchTrain(
        { preset: 'tiny', objective: 'ar', backend: 'cpu', batch: 2, seqLen: 32, steps: 1, warmup: 0, precision: 'f32', rounds: 2, python, log: (l) => lines.push(l) },
        ['eager'],
      );
      expect(rep.rounds!.map((x) => x.peers.eager)).toEqual([10, 10]);
      return { order: lines.filter((l) => /^(mdlm round|PyTorch eager: \d+ warmup)/.test(l)).map((l) => (l.startsWith('mdlm') ? 'm' : 'p')).join(''), lines };
    };
    expect((await order(2 ** 40)).order).toBe('mpmp');
    const small = await order(GiB);
    expect(small.order).toBe('mmpp');
    expect(small.lines.join('\n')).toMatch(/the device's 1\.00 GiB cannot hold mdlm's [\d.]+ MiB and a peer's \(about as much\) at once: the peers run after mdlm has freed its memory/);
  });

  it('fails with the exit code and the last lines of a peer that fails, or names a missing interpreter', () => {
    const python = fakePython('peer-bad', `echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 3`);
    const r = run([...SMALL, '--peer', 'compile'], { PYTHON: python });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('the PyTorch peer (compile) failed with exit code 3');
    expect(r.stderr).toContain("No module named 'torch'");
    const missing = run([...SMALL, '--peer', 'eager'], { PYTHON: join(dir, 'no-such-python') });
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toMatch(/could not run .*no-such-python for the PyTorch peer/);
  });

  it('rejects unknown peer modes and objectives', () => {
    expect(run([...SMALL, '--peer', 'jit']).stderr).toContain('--peer: expected one of eager, compile, got "jit"');
    expect(run([...SMALL, '--objective', 'gpt']).stderr).toContain('--objective: expected one of ar, mdlm, got "gpt"');
  });
});

describe('ProfiledBackend', () => {
  it('needs a backend that can wait synchronously', () => {
    const webgpuLike = { name: 'webgpu' } as unknown as Backend;
    expect(() => ProfiledBackend.of(webgpuLike)).toThrow(/profiling needs a backend that can wait for each op synchronously \(cpu, cuda\); webgpu cannot/);
  });
});
