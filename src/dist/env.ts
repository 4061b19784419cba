/**
 * This process's place in a multi-process job, read from the environment the launcher sets:
 * torchrun's convention (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
 * else SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
 * SLURM_TASKS_PER_NODE, the first host of the step's or job's node list), else one process alone.
 * torchrun's variables win when both are present (torchrun started under srun).
 */
import { fail } from '../errors.js';

export type DistLauncher = 'torchrun' | 'slurm' | 'single';

export interface DistEnv {
  /** Which convention the values came from. */
  readonly launcher: DistLauncher;
  readonly rank: number;
  readonly worldSize: number;
  /** The rank among the processes on this host (the GPU it takes). */
  readonly localRank: number;
  readonly localWorldSize: number;
  /** Where rank 0 hosts the store. */
  readonly masterAddr: string;
  readonly masterPort: number;
}

/** MASTER_PORT when the environment names none (torchrun's default). */
export const DEFAULT_MASTER_PORT = 29500;

export type Environment = Readonly<Record<string, string | undefined>>;

function present(env: Environment, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v.trim() === '' ? undefined : v.trim();
}

function integer(env: Environment, name: string, min: number): number | undefined {
  const v = present(env, name);
  if (v === undefined) return undefined;
  if (!/^\d+$/.test(v) || Number(v) < min || !Number.isSafeInteger(Number(v))) fail('BAD_CONFIG', `${name}=${JSON.stringify(v)} is not an integer >= ${min}`);
  return Number(v);
}

function required(env: Environment, name: string, min: number, why: string): number {
  const v = integer(env, name, min);
  if (v === undefined) fail('BAD_CONFIG', `${name} is not set (${why})`);
  return v;
}

function port(env: Environment): number {
  const p = integer(env, 'MASTER_PORT', 1) ?? DEFAULT_MASTER_PORT;
  if (p > 65535) fail('BAD_CONFIG', `MASTER_PORT=${p} is not a TCP port (1 to 65535)`);
  return p;
}

/**
 * Every host a SLURM node list names, in order: "gpu[01-04,07],cpu3" is gpu01, gpu02, gpu03,
 * gpu04, gpu07, cpu3. Ranges keep the zero padding of their first bound; several bracket groups in
 * one name ("r[1-2]n[1-2]") expand left to right (r1n1, r1n2, r2n1, r2n2).
 */
export function expandNodelist(list: string): string[] {
  const items: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i <= list.length; i++) {
    const c = list[i];
    if (c === '[') depth++;
    else if (c === ']') depth--;
    if (depth < 0) fail('BAD_CONFIG', `SLURM node list ${JSON.stringify(list)}: ']' without '['`);
    if (i === list.length || (c === ',' && depth === 0)) {
      if (depth !== 0) fail('BAD_CONFIG', `SLURM node list ${JSON.stringify(list)}: '[' without ']'`);
      const item = list.slice(start, i).trim();
      if (item !== '') items.push(item);
      start = i + 1;
    }
  }
  return items.flatMap((item) => expandName(item, list));
}

function expandName(name: string, list: string): string[] {
  const open = name.indexOf('[');
  if (open < 0) return [name];
  const close = name.indexOf(']', open);
  const head = name.slice(0, open);
  const tails = expandName(name.slice(close + 1), list);
  const out: string[] = [];
  for (const part of name.slice(open + 1, close).split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part.trim());
    if (!m) fail('BAD_CONFIG', `SLURM node list ${JSON.stringify(list)}: ${JSON.stringify(part)} is not a number or a range`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) fail('BAD_CONFIG', `SLURM node list ${JSON.stringify(list)}: the range ${part} runs backwards`);
    for (let n = lo; n <= hi; n++) for (const tail of tails) out.push(`${head}${String(n).padStart(m[1]!.length, '0')}${tail}`);
  }
  return out;
}

/** SLURM_TASKS_PER_NODE's compressed form, "2(x3),1", as one count per node: [2, 2, 2, 1]. */
export function expandTasksPerNode(value: string): number[] {
  const out: number[] = [];
  for (const part of value.split(',')) {
    const m = /^\s*(\d+)(?:\(x(\d+)\))?\s*$/.exec(part);
    if (!m) fail('BAD_CONFIG', `SLURM_TASKS_PER_NODE=${JSON.stringify(value)}: ${JSON.stringify(part)} is not "N" or "N(xM)"`);
    for (let i = 0; i < Number(m[2] ?? 1); i++) out.push(Number(m[1]));
  }
  return out;
}

function fromTorchrun(env: Environment): DistEnv {
  const why = 'set with RANK in the torchrun convention';
  const rank = required(env, 'RANK', 0, why);
  const worldSize = required(env, 'WORLD_SIZE', 1, why);
  // Without LOCAL_*, the job is taken to run on one host.
  const localRank = integer(env, 'LOCAL_RANK', 0) ?? rank;
  const localWorldSize = integer(env, 'LOCAL_WORLD_SIZE', 1) ?? worldSize;
  return checked({ launcher: 'torchrun', rank, worldSize, localRank, localWorldSize, masterAddr: master(env, worldSize, undefined), masterPort: port(env) }, {
    rank: 'RANK', worldSize: 'WORLD_SIZE', localRank: 'LOCAL_RANK', localWorldSize: 'LOCAL_WORLD_SIZE',
  });
}

function fromSlurm(env: Environment): DistEnv {
  const why = 'set with SLURM_PROCID by srun';
  const rank = required(env, 'SLURM_PROCID', 0, why);
  const worldSize = required(env, 'SLURM_NTASKS', 1, why);
  const localRank = required(env, 'SLURM_LOCALID', 0, why);
  let localWorldSize = integer(env, 'SLURM_NTASKS_PER_NODE', 1);
  let localName = 'SLURM_NTASKS_PER_NODE';
  const perNode = present(env, 'SLURM_TASKS_PER_NODE');
  if (localWorldSize === undefined && perNode !== undefined) {
    const counts = expandTasksPerNode(perNode);
    const node = integer(env, 'SLURM_NODEID', 0);
    localName = 'SLURM_TASKS_PER_NODE';
    if (node !== undefined) {
      if (node >= counts.length) fail('BAD_CONFIG', `SLURM_NODEID=${node} but SLURM_TASKS_PER_NODE=${JSON.stringify(perNode)} lists ${counts.length} nodes`);
      localWorldSize = counts[node]!;
    } else if (counts.every((c) => c === counts[0])) {
      localWorldSize = counts[0]!;
    } else {
      fail('BAD_CONFIG', `SLURM_TASKS_PER_NODE=${JSON.stringify(perNode)} differs between nodes and SLURM_NODEID is not set`);
    }
  }
  if (localWorldSize === undefined) fail('BAD_CONFIG', 'neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set (srun sets SLURM_TASKS_PER_NODE)');
  const nodelistName = ['SLURM_STEP_NODELIST', 'SLURM_JOB_NODELIST', 'SLURM_NODELIST'].find((n) => present(env, n) !== undefined);
  const first = nodelistName === undefined ? undefined : expandNodelist(present(env, nodelistName)!)[0];
  return checked({ launcher: 'slurm', rank, worldSize, localRank, localWorldSize, masterAddr: master(env, worldSize, first), masterPort: port(env) }, {
    rank: 'SLURM_PROCID', worldSize: 'SLURM_NTASKS', localRank: 'SLURM_LOCALID', localWorldSize: localName,
  });
}

/** MASTER_ADDR, else the launcher's first host; loopback for one process. */
function master(env: Environment, worldSize: number, firstHost: string | undefined): string {
  const addr = present(env, 'MASTER_ADDR') ?? firstHost;
  if (addr !== undefined) return addr;
  if (worldSize > 1) fail('BAD_CONFIG', `MASTER_ADDR is not set and the world has ${worldSize} processes: set it to the host of rank 0`);
  return '127.0.0.1';
}

function checked(d: DistEnv, names: Readonly<Record<'rank' | 'worldSize' | 'localRank' | 'localWorldSize', string>>): DistEnv {
  if (d.rank >= d.worldSize) fail('BAD_CONFIG', `${names.rank}=${d.rank} is not below ${names.worldSize}=${d.worldSize}`);
  if (d.localRank >= d.localWorldSize) fail('BAD_CONFIG', `${names.localRank}=${d.localRank} is not below ${names.localWorldSize}=${d.localWorldSize}`);
  if (d.localWorldSize > d.worldSize) fail('BAD_CONFIG', `${names.localWorldSize}=${d.localWorldSize} exceeds ${names.worldSize}=${d.worldSize}`);
  return d;
}

/** The job this process belongs to, from `env` (the process's environment by default). */
export function distEnv(env: Environment = process.env): DistEnv {
  if (present(env, 'RANK') !== undefined || present(env, 'WORLD_SIZE') !== undefined) return fromTorchrun(env);
  if (present(env, 'SLURM_PROCID') !== undefined) return fromSlurm(env);
  return { launcher: 'single', rank: 0, worldSize: 1, localRank: 0, localWorldSize: 1, masterAddr: '127.0.0.1', masterPort: port(env) };
}
