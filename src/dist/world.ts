/**
 * Joining the job this process belongs to (Node): the environment's place in it (env.ts), the
 * store on rank 0 (store.ts) with the config check, and the host collectives over it. A process
 * alone joins nothing: its group is SOLO, which costs nothing.
 */
import { type Collectives, SOLO } from './collectives.js';
import { type DistEnv, distEnv } from './env.js';
import { HostGroup } from './host_collectives.js';
import { Store } from './store.js';

/** How long a wait for the other ranks lasts by default (a collective, a barrier, rank 0's checkpoint): PyTorch's default. */
export const DEFAULT_DIST_TIMEOUT_S = 1800;

export interface World {
  readonly env: DistEnv;
  readonly group: Collectives;
  /** The job's store (undefined alone): what the collectives do not carry (long waits, rank 0's decisions). */
  readonly store: Store | undefined;
  /** Leaves the job with the others (every rank calls it after a run that ended well). */
  close(): Promise<void>;
  /** Leaves at once, without goodbye: the other ranks' waits fail, naming this rank and `reason` (its failure). */
  destroy(reason?: string): void;
}

export interface JoinOptions {
  /** The config every rank must share (checkSameConfig: a rank that differs stops them all, naming the fields). */
  readonly config: unknown;
  /** How long a wait for the other ranks lasts. */
  readonly timeoutMs: number;
  /** The job (default: from the process's environment). */
  readonly env?: DistEnv;
}

/** Joins the job: the rendezvous at rank 0's store, then the config check; alone, SOLO at once. */
export async function joinWorld(o: JoinOptions): Promise<World> {
  const env = o.env ?? distEnv();
  if (env.worldSize === 1) return { env, group: SOLO, store: undefined, close: async () => {}, destroy: () => {} };
  const store = await Store.connect({ addr: env.masterAddr, port: env.masterPort, rank: env.rank, worldSize: env.worldSize, timeoutMs: o.timeoutMs });
  try {
    await store.checkSameConfig(o.config);
  } catch (e) {
    store.destroy();
    throw e;
  }
  return { env, group: new HostGroup(store), store, close: () => store.close(), destroy: (reason) => store.destroy(reason) };
}
