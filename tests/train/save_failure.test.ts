/**
 * Saves that fail on the filesystem (a disk that fills up: ENOSPC from an injected node:fs), in
 * saveCheckpoint and in the Trainer: one line naming the file and the fix, the checkpoints before
 * it intact, and the run going on to retry at the next save, then stopping.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { latestCheckpoint, loadCheckpoint, stepDirName } from '../../src/checkpoint/checkpoint.js';
import type { TrainConfig } from '../../src/config/schema.js';
import { MdlmError } from '../../src/errors.js';
import { openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';
import { tinyConfig as tinyIn, tinyRunRoot } from '../support/train.js';

/** Which paths fail: writes to a file whose path `failing` accepts end in ENOSPC, as on a full disk. */
const fault = vi.hoisted(() => ({ failing: undefined as ((path: string) => boolean) | undefined, failures: 0 }));

vi.mock('node:fs', async (importOriginal) => {
  const fs = await importOriginal<typeof import('node:fs')>();
  const paths = new Map<number, string>();
  const enospc = (syscall: string, path?: string): Error => {
    fault.failures++;
    return Object.assign(new Error(`ENOSPC: no space left on device, ${syscall}`), { code: 'ENOSPC', errno: -28, syscall, ...(path ? { path } : {}) });
  };
  const openSync = ((path: string, ...rest: unknown[]) => {
    const fd = (fs.openSync as (...a: unknown[]) => number)(path, ...rest);
    paths.set(fd, String(path));
    return fd;
  }) as typeof fs.openSync;
  // Node raises a failed write without a path: saveCheckpoint must name the file itself.
  const writeSync = ((fd: number, ...rest: unknown[]) => {
    const path = paths.get(fd);
    if (path !== undefined && fault.failing?.(path)) throw enospc('write');
    return (fs.writeSync as (...a: unknown[]) => number)(fd, ...rest);
  }) as typeof fs.writeSync;
  const appendFileSync = ((path: string, ...rest: unknown[]) => {
    if (fault.failing?.(String(path))) throw enospc('write');
    return (fs.appendFileSync as (...a: unknown[]) => void)(path, ...rest);
  }) as typeof fs.appendFileSync;
  const mocked = { ...fs, openSync, writeSync, appendFileSync };
  return { ...mocked, default: mocked };
});

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-savefail-'));
});
afterAll(() => remove());
afterEach(() => {
  fault.failing = undefined;
  fault.failures = 0;
});

function tinyConfig(name: string, overrides: Record<string, string> = {}): TrainConfig {
  return tinyIn(root, dataDir, name, { 'train.evalBatches': '1', 'train.keepCheckpoints': '0', ...overrides });
}

async function trainer(config: TrainConfig): Promise<{ t: Trainer; log: string[] }> {
  const data = await openRunData(config, () => {});
  const log: string[] = [];
  return { t: new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: (l) => log.push(l) }), log };
}

/** Saves of these steps fail at their largest file, the weights (config.json went through). */
const failSavesOf = (...steps: number[]) => (path: string): boolean => path.endsWith('model.safetensors') && steps.some((s) => path.includes(`.tmp-${stepDirName(s)}-`));

const savedSteps = (out: string): string[] => readdirSync(out).filter((f) => f.startsWith('step-')).sort();
const leftovers = (out: string): string[] => readdirSync(out).filter((f) => f.startsWith('.tmp') || f.startsWith('.deleting'));

async function rejection(p: Promise<unknown>): Promise<MdlmError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(MdlmError);
    expect((e as Error).message).not.toContain('\n');
    return e as MdlmError;
  }
  throw new Error('expected the run to fail');
}

describe('a disk that fills up', () => {
  it('saveCheckpoint: one line naming the file and the fix; the earlier checkpoint and latest untouched, nothing left over', async () => {
    const cfg = tinyConfig('direct', { 'train.steps': '2', 'train.saveEvery': '1' });
    const { t } = await trainer(cfg);
    fault.failing = failSavesOf(2);
    const e = await rejection(t.run());
    t.destroy();
    expect(e.code).toBe('IO_ERROR');
    expect(e.message).toMatch(new RegExp(`^cannot write the checkpoint file ${join(cfg.out, `.tmp-${stepDirName(2)}-${process.pid}`, 'model.safetensors')}: no space left on the device \\(ENOSPC\\); free space there \\(train\\.keepCheckpoints bounds how many checkpoints a run keeps\\) or pass another --out on another device\\. The run stopped at step 2 without saving it; ${join(cfg.out, stepDirName(1))} is the newest checkpoint \\(continue from it with --resume\\)$`));
    expect(savedSteps(cfg.out)).toEqual([stepDirName(1)]);
    expect(readFileSync(join(cfg.out, 'latest'), 'utf8')).toBe(`${stepDirName(1)}\n`);
    expect(leftovers(cfg.out)).toEqual([]);
    expect(loadCheckpoint(latestCheckpoint(cfg.out)!.dir).step).toBe(1);
  });

  it('a failed periodic save is reported and retried at the next one; the run finishes', async () => {
    const cfg = tinyConfig('retry', { 'train.steps': '6', 'train.saveEvery': '2' });
    const { t, log } = await trainer(cfg);
    fault.failing = failSavesOf(2);
    const result = await t.run();
    t.destroy();
    expect(fault.failures).toBe(1);
    expect(result.step).toBe(6);
    expect(log.filter((l) => l.startsWith('could not save'))).toEqual([
      expect.stringMatching(/^could not save step 2, training goes on and tries again at the next save: cannot write the checkpoint file .*model\.safetensors: no space left on the device \(ENOSPC\)/),
    ]);
    expect(savedSteps(cfg.out)).toEqual([stepDirName(4), stepDirName(6)]);
    expect(leftovers(cfg.out)).toEqual([]);
  });

  it('two failed saves in a row stop the run; the checkpoint before them stands', async () => {
    const cfg = tinyConfig('twice', { 'train.steps': '10', 'train.saveEvery': '2' });
    const { t } = await trainer(cfg);
    fault.failing = failSavesOf(4, 6);
    const e = await rejection(t.run());
    t.destroy();
    expect(e.message).toMatch(new RegExp(`The run stopped at step 6 without saving it; ${join(cfg.out, stepDirName(2))} is the newest checkpoint`));
    expect(savedSteps(cfg.out)).toEqual([stepDirName(2)]);
    expect(loadCheckpoint(join(cfg.out, stepDirName(2))).step).toBe(2);
    // The metrics stop at the step the run stopped at.
    expect(readFileSync(join(cfg.out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { step: number }).step).at(-1)).toBe(6);
  });

  it('a failed final save stops the run at once', async () => {
    const cfg = tinyConfig('final', { 'train.steps': '2' });
    const { t } = await trainer(cfg);
    fault.failing = failSavesOf(2);
    const e = await rejection(t.run());
    t.destroy();
    expect(e.message).toMatch(/The run stopped at step 2 without saving it; no checkpoint was saved$/);
    expect(savedSteps(cfg.out)).toEqual([]);
  });

  it('a metrics line that cannot be written stops the run with one line naming metrics.jsonl', async () => {
    const cfg = tinyConfig('metrics', { 'train.steps': '4' });
    const { t } = await trainer(cfg);
    fault.failing = (path) => path.endsWith('metrics.jsonl');
    const e = await rejection(t.run());
    t.destroy();
    expect(e.message).toBe(`cannot append to ${join(cfg.out, 'metrics.jsonl')}: no space left on the device (ENOSPC); free space there (train.keepCheckpoints bounds how many checkpoints a run keeps) or pass another --out on another device`);
  });
});
