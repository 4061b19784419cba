/**
 * SIGINT and SIGTERM as a user (Ctrl-C) or a scheduler (timeout, SLURM, Kubernetes) sends them to
 * `mdlm train` (bin/mdlm.js over dist/, a real child process): the step finishes, one checkpoint
 * is saved, the exit code is 130 or 143, and --resume continues from that checkpoint. On every
 * backend this machine has: the CPU always, WebGPU and CUDA where available.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { latestCheckpoint, loadCheckpoint, stepDirName } from '../../src/checkpoint/checkpoint.js';
import { stopOnSignals } from '../../src/cli/train.js';
import { probeCuda } from '../../src/runtime/backends.js';
import { tinyRunRoot } from '../support/train.js';
import { hasWebGpu } from '../support/webgpu.js';

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-signals-'));
});
afterAll(() => remove());

/** A nano run long enough never to end by itself, logging every step, saving only when stopped. */
function trainArgs(backend: string, out: string, steps = 100_000): string[] {
  return [
    'bin/mdlm.js', 'train', '--preset', 'nano', '--backend', backend, '--data.path', dataDir, '--out', out, '--steps', String(steps),
    '--train.logEvery', '1', '--train.saveEvery', '0', '--train.evalEvery', '0', '--train.evalBatches', '1', '--train.warmupSteps', '2',
  ];
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

/** Start a run, send `signal` once the first step is logged, and wait for the process to end. */
function interrupt(args: string[], signal: NodeJS.Signals): Promise<Exit> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let sent = false;
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no exit within the time limit; stderr:\n${stderr}`));
    }, 240_000);
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      if (!sent && /^step 1\//m.test(stderr)) {
        sent = true;
        child.kill(signal);
      }
    });
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      resolve({ code, signal: sig, stderr });
    });
  });
}

function metricSteps(out: string): number[] {
  return readFileSync(join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number; loss?: number }).filter((r) => 'loss' in r).map((r) => r.step);
}

const backends = [
  { name: 'cpu', available: true },
  { name: 'webgpu', available: hasWebGpu },
  { name: 'cuda', available: probeCuda().available },
];

describe.each(backends)('mdlm train --backend $name', ({ name, available }) => {
  for (const [signal, exitCode] of [['SIGINT', 130], ['SIGTERM', 143]] as const) {
    it.runIf(available)(`${signal} saves one checkpoint and exits ${exitCode}; --resume continues from it`, async () => {
      const out = join(root, `${name}-${signal}`);
      const r = await interrupt(trainArgs(name, out), signal);
      expect(r.signal, r.stderr).toBeNull();
      expect(r.code, r.stderr).toBe(exitCode);
      expect(r.stderr).toContain(`${signal}: finishing this step and saving a checkpoint`);
      expect(r.stderr).not.toContain('    at ');
      const latest = latestCheckpoint(out)!;
      expect(latest.step).toBeGreaterThanOrEqual(1);
      expect(r.stderr).toContain(`stopped by ${signal} at step ${latest.step}; ${join(out, stepDirName(latest.step))} is saved: continue with --resume`);
      expect(readFileSync(join(out, 'latest'), 'utf8')).toBe(`${stepDirName(latest.step)}\n`);
      expect(loadCheckpoint(latest.dir).step).toBe(latest.step);
      expect(metricSteps(out)).toEqual(Array.from({ length: latest.step }, (_, i) => i + 1));

      const resumed = spawnSync(process.execPath, [...trainArgs(name, out, latest.step + 2), '--resume'], { encoding: 'utf8', timeout: 240_000 });
      expect(resumed.status, resumed.stderr).toBe(0);
      expect(resumed.stderr).toContain(`resumed from ${latest.dir} at step ${latest.step}`);
      expect(latestCheckpoint(out)!.step).toBe(latest.step + 2);
      expect(metricSteps(out)).toEqual(Array.from({ length: latest.step + 2 }, (_, i) => i + 1));
    }, 600_000);
  }
});

// The handlers go with the first signal: Node then takes a second SIGINT or SIGTERM the default
// way and the process ends at once, even in the middle of a step or a save.
it('the first signal aborts the run and removes the handlers, so that a second one quits at once', () => {
  const before = { SIGINT: process.listenerCount('SIGINT'), SIGTERM: process.listenerCount('SIGTERM') };
  const lines: string[] = [];
  const stop = stopOnSignals((l) => lines.push(l));
  expect(process.listenerCount('SIGINT')).toBe(before.SIGINT + 1);
  expect(process.listenerCount('SIGTERM')).toBe(before.SIGTERM + 1);
  process.emit('SIGTERM', 'SIGTERM');
  expect(stop.signal.aborted).toBe(true);
  expect(stop.signal.reason).toBe('SIGTERM');
  expect(lines).toEqual(['\nSIGTERM: finishing this step and saving a checkpoint (a second signal quits at once)']);
  expect(process.listenerCount('SIGINT')).toBe(before.SIGINT);
  expect(process.listenerCount('SIGTERM')).toBe(before.SIGTERM);
  stop.dispose();
});
