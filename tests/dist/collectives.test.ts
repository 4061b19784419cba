/**
 * The store and the host collectives between real processes: 3 ranks over the compiled dist/ rendezvous
 * on a free port, every collective gives every rank the sums of the ranks' arrays taken in rank order
 * in f32, bit for bit; a config that differs on one rank stops every rank, naming the field; a rank
 * that never arrives, hangs or dies makes the others fail within the timeout, naming it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { shardRange } from '../../src/dist/host_collectives.js';
import { buildWorker, runRanks, type RankExit } from '../support/dist_spawn.js';
import { digest, rankInput, type WorkerReport } from '../support/dist_worker.js';

const W = 3;
let worker: string;
let remove = (): void => {};

beforeAll(() => {
  ({ path: worker, remove } = buildWorker());
});
afterAll(() => remove());

/** The ranks' inputs combined element-wise in rank order, each step rounded to f32. */
function expected(length: number, op: (a: number, b: number) => number): Float32Array {
  const out = rankInput(0, length);
  for (let r = 1; r < W; r++) {
    const x = rankInput(r, length);
    for (let i = 0; i < length; i++) out[i] = Math.fround(op(out[i]!, x[i]!));
  }
  return out;
}

function reports(exits: readonly RankExit[]): WorkerReport[] {
  for (const e of exits) expect(e.code, `rank ${e.rank}: ${e.stderr}`).toBe(0);
  return exits.map((e) => JSON.parse(e.stdout.split('\n').find((l) => l.startsWith('{'))!) as WorkerReport);
}

function check(length: number, got: readonly WorkerReport[]): void {
  const sum = expected(length, (a, b) => a + b);
  const max = expected(length, Math.max);
  const gathered = new Float32Array(length * W);
  for (let r = 0; r < W; r++) gathered.set(rankInput(r, length), r * length);
  expect(got).toEqual(
    got.map((_, rank) => {
      const { start, end } = shardRange(length, W, rank);
      return { count: (W * (W + 1)) / 2, sum: digest(sum), max: digest(max), broadcast: digest(rankInput(1, length)), gathered: digest(gathered), shard: digest(sum.subarray(start, end)) };
    }),
  );
  // The order of the sum shows in its bits: the reverse rank order gives other bytes.
  const reversed = rankInput(W - 1, length);
  for (let r = W - 2; r >= 0; r--) {
    const x = rankInput(r, length);
    for (let i = 0; i < length; i++) reversed[i] = Math.fround(reversed[i]! + x[i]!);
  }
  expect(digest(reversed)).not.toBe(digest(sum));
}

const base = { worldSize: W, timeoutMs: 10_000, length: 1000, chunkElements: 1 << 22, odd: 2 };

describe('host collectives between 3 processes', () => {
  it('all-reduce, broadcast, all-gather and reduce-scatter give every rank the rank-order f32 results, bit for bit; add() counts over the ranks', async () => {
    // 1001 elements in chunks of 300: four messages a call, the last one short, shards of 334, 334 and 333.
    const length = 1001;
    check(length, reports(await runRanks(worker, { ...base, scenario: 'collectives', length, chunkElements: 300 }, [0, 1, 2])));
  });

  it('moves arrays larger than one 16 MiB message', async () => {
    const length = (4 << 20) + 12_345;
    check(length, reports(await runRanks(worker, { ...base, scenario: 'collectives', length }, [0, 1, 2])));
  });

  it('stops every rank when one runs a different config, naming the field on that rank and the rank on the others', async () => {
    const exits = await runRanks(worker, { ...base, scenario: 'config' }, [0, 1, 2]);
    expect(exits.map((e) => e.code)).toEqual([1, 1, 1]);
    expect(exits[2]!.stderr).toContain("rank 2: the config differs from rank 0's (rank 2 differ): train.batchSize 8 on rank 0, 16 here");
    expect(exits[0]!.stderr).toContain("rank 0: rank 2 run a config different from rank 0's; every rank refuses to start");
    expect(exits[1]!.stderr).toContain('rank 1: rank 2 run a config');
  });

  it('times out the rendezvous naming the rank that never arrives', async () => {
    const exits = await runRanks(worker, { ...base, scenario: 'collectives', timeoutMs: 800 }, [0, 1]);
    for (const e of exits) {
      expect(e.code).toBe(1);
      expect(e.stderr).toMatch(new RegExp(`^rank ${e.rank}, store tcp://127\\.0\\.0\\.1:\\d+, in barrier "mdlm/rendezvous": timed out after 800 ms in barrier "mdlm/rendezvous": rank 2 did not arrive`));
    }
  });

  it('times out a wait for a rank that hangs, naming the rank and the data', async () => {
    // The rendezvous has long enough for three processes started on a busy machine.
    const exits = await runRanks(worker, { ...base, scenario: 'hang', timeoutMs: 800, rendezvousMs: 30_000 }, [0, 1, 2]);
    const timedOut = 'timed out after 800 ms: no rank set "mdlm/c0/0"';
    for (const e of exits.slice(0, 2)) {
      expect(e.code).toBe(1);
      expect(e.stderr).toMatch(new RegExp(`^rank ${e.rank}, store tcp://\\S+, broadcast #0 from rank 2 \\(4 elements\\), chunk 0: waiting for rank 2's data: `));
    }
    expect(exits[0]!.stderr).toContain(`waiting for rank 2's data: ${timedOut}`);
    // Rank 1's own wait times out, unless rank 0's came first: rank 0 then leaves with its reason,
    // which fails rank 1's wait with it.
    expect(exits[1]!.stderr.includes(`waiting for rank 2's data: ${timedOut}`) || exits[1]!.stderr.includes(`rank 0 (the store's host) failed: rank 0, store`) && exits[1]!.stderr.includes(timedOut)).toBe(true);
  });

  it('fails the others at once when a rank dies, naming it', async () => {
    const t0 = Date.now();
    const exits = await runRanks(worker, { ...base, scenario: 'die', timeoutMs: 30_000 }, [0, 1, 2]);
    expect(exits[2]!.code).toBe(3);
    for (const e of exits.slice(0, 2)) {
      expect(e.code).toBe(1);
      expect(e.stderr).toMatch(/rank 2 \(\S+\) disconnected without closing the store \(it exited or crashed\)/);
    }
    // Well inside the 30 s timeout: the store sees the connection drop.
    expect(Date.now() - t0).toBeLessThan(15_000);
  });

  it('fails the others at once with the reason of a rank that fails, naming it', async () => {
    for (const odd of [2, 0]) {
      const exits = await runRanks(worker, { ...base, scenario: 'fail', timeoutMs: 30_000, odd }, [0, 1, 2]);
      expect(exits.map((e) => e.code)).toEqual([1, 1, 1]);
      const who = odd === 0 ? "rank 0 \\(the store's host\\)" : 'rank 2 \\(\\S+\\)';
      for (const e of exits.filter((x) => x.rank !== odd)) expect(e.stderr).toMatch(new RegExp(`^rank ${e.rank}, store \\S+, allReduce #0 .*: ${who} failed: out of disk space \\(the test says so\\)`));
    }
  });
});

describe('shardRange', () => {
  it('splits contiguously in rank order, the first length % world ranks one longer', () => {
    expect([0, 1, 2].map((r) => shardRange(1001, 3, r))).toEqual([{ start: 0, end: 334 }, { start: 334, end: 668 }, { start: 668, end: 1001 }]);
    expect([0, 1, 2, 3].map((r) => shardRange(2, 4, r))).toEqual([{ start: 0, end: 1 }, { start: 1, end: 2 }, { start: 2, end: 2 }, { start: 2, end: 2 }]);
  });
});
