/** A process's place in a job from torchrun's or SLURM's environment, and the errors that name the variable at fault. */
import { describe, expect, it } from 'vitest';
import { formatWorld } from '../../src/cli/probe.js';
import { distEnv, expandNodelist, expandTasksPerNode } from '../../src/dist/env.js';

describe('distEnv', () => {
  it('is rank 0 of 1 on loopback without a launcher', () => {
    expect(distEnv({})).toEqual({ launcher: 'single', rank: 0, worldSize: 1, localRank: 0, localWorldSize: 1, masterAddr: '127.0.0.1', masterPort: 29500 });
  });

  it("reads torchrun's variables", () => {
    const env = { RANK: '5', WORLD_SIZE: '8', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '4', MASTER_ADDR: 'node-a', MASTER_PORT: '1234' };
    expect(distEnv(env)).toEqual({ launcher: 'torchrun', rank: 5, worldSize: 8, localRank: 1, localWorldSize: 4, masterAddr: 'node-a', masterPort: 1234 });
    // Without LOCAL_*, one host; without MASTER_PORT, 29500.
    expect(distEnv({ RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: 'h' })).toMatchObject({ localRank: 1, localWorldSize: 2, masterPort: 29500 });
  });

  it("reads SLURM's, the master the first host of the node list, and lets torchrun's win under srun", () => {
    const slurm = { SLURM_PROCID: '6', SLURM_NTASKS: '8', SLURM_LOCALID: '2', SLURM_TASKS_PER_NODE: '4(x2)', SLURM_JOB_NODELIST: 'gpu[01-04,07],cpu3' };
    expect(distEnv(slurm)).toEqual({ launcher: 'slurm', rank: 6, worldSize: 8, localRank: 2, localWorldSize: 4, masterAddr: 'gpu01', masterPort: 29500 });
    expect(distEnv({ ...slurm, SLURM_NTASKS_PER_NODE: '3', SLURM_LOCALID: '0', MASTER_ADDR: '10.0.0.9', MASTER_PORT: '4000' })).toMatchObject({ localWorldSize: 3, masterAddr: '10.0.0.9', masterPort: 4000 });
    // Uneven nodes: SLURM_NODEID picks this node's count.
    expect(distEnv({ ...slurm, SLURM_PROCID: '4', SLURM_NTASKS: '5', SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '2(x2),1', SLURM_NODEID: '2' })).toMatchObject({ localWorldSize: 1 });
    // The step's node list is preferred to the job's.
    expect(distEnv({ ...slurm, SLURM_STEP_NODELIST: 'gpu[03-04]' }).masterAddr).toBe('gpu03');
    expect(distEnv({ ...slurm, RANK: '0', WORLD_SIZE: '1' }).launcher).toBe('torchrun');
  });

  it('names the variable at fault', () => {
    const bad = (env: Record<string, string>): string => {
      try {
        distEnv(env);
      } catch (e) {
        expect((e as { code?: string }).code).toBe('BAD_CONFIG');
        return (e as Error).message;
      }
      return 'no error';
    };
    expect(bad({ RANK: '2', WORLD_SIZE: '2', MASTER_ADDR: 'h' })).toBe('RANK=2 is not below WORLD_SIZE=2');
    expect(bad({ RANK: '1', WORLD_SIZE: '2' })).toBe('MASTER_ADDR is not set and the world has 2 processes: set it to the host of rank 0');
    expect(bad({ RANK: '1' })).toBe('WORLD_SIZE is not set (set with RANK in the torchrun convention)');
    expect(bad({ RANK: 'one', WORLD_SIZE: '2' })).toBe('RANK="one" is not an integer >= 0');
    expect(bad({ RANK: '0', WORLD_SIZE: '0' })).toBe('WORLD_SIZE="0" is not an integer >= 1');
    expect(bad({ RANK: '0', WORLD_SIZE: '2', MASTER_ADDR: 'h', MASTER_PORT: '70000' })).toBe('MASTER_PORT=70000 is not a TCP port (1 to 65535)');
    expect(bad({ RANK: '0', WORLD_SIZE: '4', LOCAL_RANK: '2', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: 'h' })).toBe('LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2');
    expect(bad({ SLURM_PROCID: '3', SLURM_NTASKS: '3', SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '3', SLURM_JOB_NODELIST: 'n1' })).toBe('SLURM_PROCID=3 is not below SLURM_NTASKS=3');
    expect(bad({ SLURM_PROCID: '0', SLURM_NTASKS: '2', SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '1', SLURM_JOB_NODELIST: 'n[1' })).toBe(`SLURM node list "n[1": '[' without ']'`);
    expect(bad({ SLURM_PROCID: '0', SLURM_NTASKS: '3', SLURM_LOCALID: '0', SLURM_TASKS_PER_NODE: '2,1', SLURM_JOB_NODELIST: 'n[1-2]' })).toBe(
      'SLURM_TASKS_PER_NODE="2,1" differs between nodes and SLURM_NODEID is not set',
    );
  });
});

describe('SLURM lists', () => {
  it('expands compressed node lists: ranges with their padding, lists in brackets, several groups in a name', () => {
    expect(expandNodelist('gpu[01-04,07],cpu3')).toEqual(['gpu01', 'gpu02', 'gpu03', 'gpu04', 'gpu07', 'cpu3']);
    expect(expandNodelist('node7')).toEqual(['node7']);
    expect(expandNodelist('a,b[9-11]')).toEqual(['a', 'b9', 'b10', 'b11']);
    expect(expandNodelist('r[1-2]n[08-09]')).toEqual(['r1n08', 'r1n09', 'r2n08', 'r2n09']);
    expect(expandNodelist('x-[001,010]-ib')).toEqual(['x-001-ib', 'x-010-ib']);
    expect(() => expandNodelist('g[3-1]')).toThrow('the range 3-1 runs backwards');
    expect(() => expandNodelist('g[a]')).toThrow('"a" is not a number or a range');
  });

  it('expands SLURM_TASKS_PER_NODE', () => {
    expect(expandTasksPerNode('2(x3),1')).toEqual([2, 2, 2, 1]);
    expect(expandTasksPerNode('4')).toEqual([4]);
    expect(() => expandTasksPerNode('2(3)')).toThrow('"2(3)" is not "N" or "N(xM)"');
  });
});

describe("mdlm probe's world line", () => {
  it('names the rank, world size, launcher and store, or what is wrong with the variables', () => {
    expect(formatWorld({})).toBe('world   one process (no RANK and WORLD_SIZE, no SLURM task)');
    expect(formatWorld({ RANK: '1', WORLD_SIZE: '4', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '2', MASTER_ADDR: 'n0' })).toBe("world   rank 1 of 4 (torchrun; local rank 1 of 2), rank 0's store at n0:29500");
    expect(formatWorld({ RANK: '4', WORLD_SIZE: '4', MASTER_ADDR: 'n0' })).toBe('world   RANK=4 is not below WORLD_SIZE=4');
  });
});
