/**
 * One rank of the multi-process tests in tests/dist/: a real Node process over the compiled dist/
 * (tests/support/dist_spawn.ts transpiles this file and points its imports at dist/dist/). It reads
 * its part from the DIST_WORKER environment variable (JSON: WorkerSpec), prints "port N" once rank 0
 * hosts the store, then one JSON line (WorkerReport) on success, or the error's message on stderr and
 * exits 1.
 */
import { createHash } from 'node:crypto';
import { HostGroup } from '../../src/dist/host_collectives.js';
import { Store } from '../../src/dist/store.js';

export type Scenario =
  /** Every collective on rankInput() arrays, results reported. */
  | 'collectives'
  /** checkSameConfig with a config in which rank `odd` differs. */
  | 'config'
  /** Ranks other than `odd` wait in a broadcast from `odd`, which sleeps three timeouts instead. */
  | 'hang'
  /** Rank `odd` exits after joining; the others start an all-reduce. */
  | 'die'
  /** Rank `odd` throws after joining (and leaves with the error's message); the others start an all-reduce. */
  | 'fail';

export interface WorkerSpec {
  readonly scenario: Scenario;
  readonly rank: number;
  readonly worldSize: number;
  readonly port: number;
  readonly timeoutMs: number;
  /** The rendezvous's timeout (default timeoutMs). */
  readonly rendezvousMs?: number;
  readonly length: number;
  readonly chunkElements: number;
  readonly odd: number;
}

/** The store counter every rank added rank + 1 to, and digest() of each collective's result. */
export interface WorkerReport {
  readonly count: number;
  readonly sum: string;
  readonly max: string;
  readonly broadcast: string;
  readonly gathered: string;
  readonly shard: string;
}

/** Rank `rank`'s input: magnitudes over seven decades, so that the order of the sum shows in its bits. */
export function rankInput(rank: number, length: number): Float32Array {
  const x = new Float32Array(length);
  for (let i = 0; i < length; i++) x[i] = (rank + 1) * Math.sin(i * 0.37 + rank) * 10 ** ((i + rank) % 7 - 3);
  return x;
}

/** SHA-256 of the bytes of `a`: equal digests are equal results, bit for bit. */
export function digest(a: Float32Array): string {
  return createHash('sha256').update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)).digest('hex');
}

async function main(spec: WorkerSpec): Promise<void> {
  const store = await Store.connect({
    addr: '127.0.0.1', port: spec.port, rank: spec.rank, worldSize: spec.worldSize, timeoutMs: spec.timeoutMs, ...(spec.rendezvousMs ? { rendezvousTimeoutMs: spec.rendezvousMs } : {}),
    onListening: (port) => process.stdout.write(`port ${port}\n`),
  });
  try {
    await scenario(spec, store);
  } catch (e) {
    // Leaving with the reason, as mdlm train does: the others' waits fail with it.
    store.destroy(e instanceof Error ? e.message : String(e));
    throw e;
  }
  await store.close();
}

async function scenario(spec: WorkerSpec, store: Store): Promise<void> {
  const group = new HostGroup(store, spec.chunkElements);
  switch (spec.scenario) {
    case 'collectives': {
      const sum = rankInput(spec.rank, spec.length);
      await group.allReduce(sum, 'sum');
      const max = rankInput(spec.rank, spec.length);
      await group.allReduce(max, 'max');
      const broadcast = spec.rank === 1 ? rankInput(1, spec.length) : new Float32Array(spec.length);
      await group.broadcast(broadcast, 1);
      const gathered = await group.allGather(rankInput(spec.rank, spec.length));
      const shard = await group.reduceScatter(rankInput(spec.rank, spec.length), 'sum');
      await store.add('count', spec.rank + 1);
      await group.barrier();
      const count = await store.add('count', 0);
      const report: WorkerReport = { count, sum: digest(sum), max: digest(max), broadcast: digest(broadcast), gathered: digest(gathered), shard: digest(shard) };
      process.stdout.write(`${JSON.stringify(report)}\n`);
      break;
    }
    case 'config': {
      const config = { model: { dim: 64, layers: 2 }, train: { lr: 3e-4, batchSize: spec.rank === spec.odd ? 16 : 8 } };
      await store.checkSameConfig(config);
      break;
    }
    case 'hang': {
      if (spec.rank === spec.odd) await new Promise((resolve) => setTimeout(resolve, 3 * spec.timeoutMs));
      else await group.broadcast(new Float32Array(4), spec.odd);
      break;
    }
    case 'die':
    case 'fail': {
      if (spec.rank === spec.odd) {
        if (spec.scenario === 'die') process.exit(3);
        throw new Error('out of disk space (the test says so)');
      }
      await group.allReduce(new Float32Array(spec.length), 'sum');
      break;
    }
  }
}

// Run as a rank only when started as one: the tests import rankInput() from here too.
const given = process.env['DIST_WORKER'];
if (given !== undefined) main(JSON.parse(given) as WorkerSpec).then(
  () => process.stdout.write('', () => process.exit(0)),
  (e: unknown) => process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`, () => process.exit(1)),
);
