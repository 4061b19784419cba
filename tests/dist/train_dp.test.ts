/**
 * Data-parallel training between real processes: `mdlm train` (bin/mdlm.js over the compiled dist/:
 * build it first) on the CPU backend, a tiny model on the Brown corpus. Ranks started by
 * `--nproc-per-node` or by the test in torchrun's environment; one process is the reference.
 */
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, launchWorkers } from '../../src/cli/launch.js';
import { startCli, rankEnv } from '../support/dist_spawn.js';
import { relative, runMetrics, runOk, tinyTrainArgs } from '../support/dist_train.js';
import { tinyRunRoot } from '../support/train.js';
import { hasWebGpu } from '../support/webgpu.js';

let root: string;
let dataDir: string;
let remove = (): void => {};

beforeAll(async () => {
  ({ root, dataDir, remove } = await tinyRunRoot('mdlm-dp-'));
});
afterAll(() => remove());

const args = (out: string, extra: Record<string, string | number>): string[] => tinyTrainArgs(root, dataDir, out, extra);

const run = runOk;
const { metrics, losses, gradNorms, valLoss } = runMetrics(() => root);


/**
 * W ranks of train.batchSize B see what one process of B·W sees: the same windows (the loader),
 * the same noise (drawn by global row) and the gradient of the same mean loss. Not bit for bit:
 * one process sums a weight's gradient over all rows at once (f64 on the CPU, rounded to f32
 * once), W ranks each round their partial sum to f32 before the all-reduce adds them, and the
 * reported loss is the mean of the ranks' f32 losses, not one f32 sum. Those roundings stay near
 * f32's 6e-8: the losses within 1e-6 relative at every step of 20 (a rank with other rows or other
 * noise is off by far more from the first step). The gradient norms within 1e-4: where the ranks'
 * partial sums of a component cancel, their roundings weigh more in the result; a gradient summed
 * without its 1/worldSize has a norm W times larger.
 */
function expectSameRun(reference: string, ranks: string): void {
  const rel = relative(losses(reference), losses(ranks));
  expect(Math.max(...rel), `relative loss differences per step: ${rel.map((r) => r.toExponential(1)).join(' ')}`).toBeLessThan(1e-6);
  const norms = relative(gradNorms(reference), gradNorms(ranks));
  expect(Math.max(...norms), `relative gradient norm differences per step: ${norms.map((r) => r.toExponential(1)).join(' ')}`).toBeLessThan(1e-4);
  expect(Math.abs(valLoss(ranks) - valLoss(reference)) / valLoss(reference)).toBeLessThan(1e-6);
}

describe('data-parallel mdlm train on the CPU', () => {
  it('2 and 4 ranks (with gradient accumulation) give the losses of one process with the same global batch; rank 0 alone writes the metrics', async () => {
    await run(args('one-b8', { 'train.batchSize': 8, 'train.gradAccum': 2 }));
    const two = await run([...args('two-b4', { 'train.batchSize': 4, 'train.gradAccum': 2 }), '--nproc-per-node', '2']);
    await run([...args('four-b2', { 'train.batchSize': 2, 'train.gradAccum': 2 }), '--nproc-per-node', '4']);
    expectSameRun('one-b8', 'two-b4');
    expectSameRun('one-b8', 'four-b2');
    // One row a step and the final evaluation: no rank but 0 wrote any.
    expect(metrics('two-b4').map((r) => r.step)).toEqual([...Array.from({ length: 20 }, (_, i) => i + 1), 20]);
    expect(two.stderr).toContain('objective: mdlm; batch 4 × 32 × accum 2 × 2 ranks');
    expect(two.stderr.match(/^step 20\/20 /gm)).toHaveLength(1);
  });

  it('the same for the AR objective', async () => {
    await run(args('ar-one-b8', { objective: 'ar', 'train.batchSize': 8 }));
    await run([...args('ar-two-b4', { objective: 'ar', 'train.batchSize': 4 }), '--nproc-per-node', '2']);
    expectSameRun('ar-one-b8', 'ar-two-b4');
  });

  it.runIf(hasWebGpu)('the same on WebGPU, whose gradients go through the host to be summed', async () => {
    await run(args('gpu-one-b4', { backend: 'webgpu', steps: 5, 'train.batchSize': 4 }));
    await run([...args('gpu-two-b2', { backend: 'webgpu', steps: 5, 'train.batchSize': 2 }), '--nproc-per-node', '2']);
    expectSameRun('gpu-one-b4', 'gpu-two-b2');
  });

  it('ranks started with different configs refuse to start, naming the field', async () => {
    const port = await freePort();
    const exits = await Promise.all([0, 1].map((r) => startCli(args('differ', { 'train.lr': r === 1 ? 0.02 : 0.01 }), rankEnv(r, 2, port)).exit));
    expect(exits.map((e) => e.code)).toEqual([1, 1]);
    expect(exits[1]!.stderr).toContain("rank 1: the config differs from rank 0's (rank 1 differ): train.lr 0.01 on rank 0, 0.02 here");
    expect(exits[0]!.stderr).toContain("rank 0: rank 1 run a config different from rank 0's; every rank refuses to start");
  });

  it('killing one of 3 ranks mid-run makes the others exit non-zero within 60 s, naming it', async () => {
    const port = await freePort();
    const argv = args('killed', { steps: 100_000, 'train.batchSize': 2 });
    let killedAt = 0;
    const ranks = [0, 1, 2].map((r) => startCli(argv, rankEnv(r, 3, port)));
    // Rank 0 logs every step: once the job has trained a few, rank 1 goes, in whatever it was doing.
    await new Promise<void>((resolve) => {
      const poll = setInterval(() => {
        if (/^step 3\//m.test(ranks[0]!.stderr())) {
          clearInterval(poll);
          killedAt = Date.now();
          ranks[1]!.kill('SIGKILL');
          resolve();
        }
      }, 20);
    });
    const [zero, one, two] = await Promise.all(ranks.map((p) => p.exit));
    expect(one!.signal).toBe('SIGKILL');
    for (const e of [zero!, two!]) {
      expect(e.code, e.stderr).toBe(1);
      expect(e.endedAt - killedAt).toBeLessThan(60_000);
    }
    expect(zero!.stderr).toMatch(/mdlm: IO_ERROR: rank 0, store tcp:\/\/127\.0\.0\.1:\d+, \w+ #\d+ .*: rank 1 \(\S+\) disconnected without closing the store \(it exited or crashed\)/);
    expect(two!.stderr).toMatch(/mdlm: IO_ERROR: rank 2, .*: rank 1 \(\S+\) disconnected without closing the store/);
  });

  it('Ctrl-C to the launcher stops both ranks at one step with one checkpoint; --resume continues with the losses of an uninterrupted run, on 2 ranks or on 1 with the same global batch', async () => {
    const two = (out: string): string[] => [...args(out, { 'train.batchSize': 2 }), '--nproc-per-node', '2'];
    await run(two('whole'));
    const stopped = await startCli(two('stopped'), {}, (all, p) => {
      if (/^step 3\//m.test(all) && !all.includes('passing it on')) p.kill('SIGINT');
    }).exit;
    expect(stopped.code, stopped.stderr).toBe(130);
    expect(stopped.stderr).toContain('SIGINT: passing it on to 2 workers');
    const at = Number(/stopped by SIGINT at step (\d+)/.exec(stopped.stderr)![1]);
    expect(at).toBeLessThan(20);
    expect(readdirSync(join(root, 'stopped')).filter((f) => f.startsWith('step-'))).toEqual([`step-${String(at).padStart(7, '0')}`]);
    cpSync(join(root, 'stopped'), join(root, 'stopped-1'), { recursive: true });

    await run([...two('stopped'), '--resume']);
    expect(losses('stopped')).toEqual(losses('whole'));

    // One rank of batch 4 from the checkpoint of 2 ranks of 2: the run goes on as it would have.
    await run([...args('stopped-1', { 'train.batchSize': 4 }), '--resume']);
    const rel = relative(losses('whole'), losses('stopped-1'));
    expect(rel.slice(0, at).every((r) => r === 0)).toBe(true);
    expect(Math.max(...rel)).toBeLessThan(1e-6);
  });
});

describe('mdlm train --nproc-per-node: the launcher', () => {
  it("starts N workers in torchrun's environment on a free port, and takes them all down when one fails, naming it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mdlm-launch-'));
    try {
      const script = join(dir, 'worker.mjs');
      // Each worker writes what it was given; rank 1 then fails, the others wait to be stopped.
      writeFileSync(script, [
        "import { writeFileSync } from 'node:fs';",
        'const e = process.env;',
        `writeFileSync(${JSON.stringify(dir)} + '/rank-' + e.RANK + '.json', JSON.stringify({ rank: e.RANK, world: e.WORLD_SIZE, local: e.LOCAL_RANK, localWorld: e.LOCAL_WORLD_SIZE, addr: e.MASTER_ADDR, port: e.MASTER_PORT, args: process.argv.slice(2), ipc: typeof process.send }));`,
        "if (e.RANK === '1') setTimeout(() => process.exit(3), 300); else setInterval(() => {}, 1000);",
      ].join('\n'));
      const lines: string[] = [];
      const t0 = Date.now();
      const code = await launchWorkers({ nproc: 3, script, args: ['train', '--steps', '5'], log: (l) => lines.push(l), graceMs: 5000 });
      expect(code).toBe(1);
      expect(Date.now() - t0).toBeLessThan(5000);
      expect(lines).toContain('mdlm: rank 1 failed (exit code 3); stopping the other ranks');
      expect(lines).toContain('mdlm: the job of 3 workers stopped: rank 1 failed (exit code 3)');
      const seen = [0, 1, 2].map((r) => JSON.parse(readFileSync(join(dir, `rank-${r}.json`), 'utf8')) as Record<string, unknown>);
      const port = seen[0]!.port;
      expect(Number(port)).toBeGreaterThan(0);
      expect(seen).toEqual([0, 1, 2].map((r) => ({ rank: String(r), world: '3', local: String(r), localWorld: '3', addr: '127.0.0.1', port, args: ['train', '--steps', '5'], ipc: 'function' })));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
