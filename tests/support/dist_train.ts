/**
 * What the multi-process training tests share: the `mdlm train` argument list of a tiny model on
 * the CPU backend, a CLI run that must succeed, and a run's metrics.jsonl.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { type CliExit, startCli } from './dist_spawn.js';

/** `mdlm train` of a 0.03M-parameter model (a step takes milliseconds, so process start-up dominates) into root/out. */
export function tinyTrainArgs(root: string, dataDir: string, out: string, extra: Record<string, string | number>): string[] {
  const fields: Record<string, string | number> = {
    preset: 'nano', backend: 'cpu', 'data.path': dataDir, steps: 20,
    'model.dModel': 32, 'model.nLayers': 2, 'model.nHeads': 2, 'model.ffnHidden': 64, 'model.seqLen': 32,
    'train.warmupSteps': 5, 'train.evalEvery': 0, 'train.saveEvery': 0, 'train.evalBatches': 2, 'train.logEvery': 1,
    ...extra,
    out: join(root, out),
  };
  return ['train', ...Object.entries(fields).flatMap(([k, v]) => [`--${k}`, String(v)])];
}

/** Runs the CLI and expects it to exit 0 (its stderr is the failure message otherwise). */
export async function runOk(argv: readonly string[], env: Record<string, string> = {}): Promise<CliExit> {
  const e = await startCli(argv, env).exit;
  expect(e.code, e.stderr).toBe(0);
  return e;
}

export interface MetricsRow {
  step: number;
  loss?: number;
  grad_norm?: number;
  val_loss?: number;
}

/** Readers of the metrics.jsonl of the runs under root() (a getter: tests set their root in beforeAll), by run name. */
export function runMetrics(root: () => string) {
  const metrics = (out: string): MetricsRow[] =>
    readFileSync(join(root(), out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as MetricsRow);
  return {
    metrics,
    losses: (out: string): number[] => metrics(out).filter((r) => r.loss !== undefined).map((r) => r.loss!),
    gradNorms: (out: string): number[] => metrics(out).filter((r) => r.grad_norm !== undefined).map((r) => r.grad_norm!),
    valLoss: (out: string): number => metrics(out).find((r) => r.val_loss !== undefined)!.val_loss!,
  };
}

/** Per step |a − b| / a. */
export function relative(a: readonly number[], b: readonly number[]): number[] {
  expect(b.length).toBe(a.length);
  return a.map((x, i) => Math.abs(b[i]! - x) / x);
}
