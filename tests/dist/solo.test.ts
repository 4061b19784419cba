/**
 * The collectives interface in one process: the world of one costs nothing (the trainer calls no
 * collective, so nothing is copied or downloaded), sums over ranks are exact f64 sums in rank order,
 * and the host all-reduce of a tensor goes through the host once.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { type Collectives, SOLO, allReduceOnHost, sumOverRanks } from '../../src/dist/collectives.js';
import { openRunData } from '../../src/train/data.js';
import { Trainer } from '../../src/train/trainer.js';
import { tinyConfig, tinyRunRoot } from '../support/train.js';

/** Rank `rank` of `world` ranks whose all-gather concatenates `others` (each rank's array) and whose other collectives are refused. */
function gatherOnly(rank: number, others: readonly Float32Array[]): Collectives {
  const refuse = async (): Promise<never> => {
    throw new Error('not this collective');
  };
  return {
    rank, worldSize: others.length, allReduce: refuse, allReduceTensor: refuse, broadcast: refuse, reduceScatter: refuse, barrier: refuse,
    allGather: async (mine) => {
      const all = new Float32Array(mine.length * others.length);
      others.forEach((o, r) => all.set(r === rank ? mine : o, r * mine.length));
      return all;
    },
  };
}

const f64Bytes = (values: readonly number[]): Float32Array => new Float32Array(Float64Array.from(values).buffer);

describe('SOLO, the world of one', () => {
  it('leaves data as it is and hands back the same array from an all-gather', async () => {
    const x = Float32Array.of(1, 2, 3);
    await SOLO.allReduce(x, 'sum');
    await SOLO.broadcast(x, 0);
    expect(await SOLO.allGather(x)).toBe(x);
    expect(Array.from(x)).toEqual([1, 2, 3]);
    expect(await sumOverRanks(SOLO, [0.1, 7])).toEqual([0.1, 7]);
  });
});

describe('sumOverRanks', () => {
  it('sums f64 values in rank order, exactly as f64 additions (nothing rounded to f32 on the way)', async () => {
    const values = [[0.1, 1e-17, 3], [0.2, 1, -3], [0.3, 2 ** -60, NaN]];
    const arrays = values.map(f64Bytes);
    for (let rank = 0; rank < 3; rank++) {
      const sums = await sumOverRanks(gatherOnly(rank, arrays), values[rank]!);
      expect(sums.slice(0, 2)).toEqual([0.1 + 0.2 + 0.3, 1e-17 + 1 + 2 ** -60]);
      expect(sums[2]).toBeNaN();
    }
  });
});

describe('allReduceOnHost', () => {
  it('downloads the tensor, reduces it over the ranks and uploads the result', async () => {
    const cpu = new CpuBackend();
    const t = cpu.alloc([3], 'f32');
    cpu.upload(t, Float32Array.of(1, 2, 3));
    const doubling: Collectives = { ...SOLO, worldSize: 2, allReduce: async (d) => d.forEach((v, i) => (d[i] = v * 2)) };
    await allReduceOnHost(doubling, cpu, t);
    expect(Array.from((await cpu.download(t)) as Float32Array)).toEqual([2, 4, 6]);
    await expect(allReduceOnHost(doubling, cpu, cpu.alloc([2], 'i32'))).rejects.toThrow(/the host transport reduces f32 tensors/);
  });
});

describe('the trainer alone', () => {
  let root: string;
  let dataDir: string;
  let remove = (): void => {};
  beforeAll(async () => {
    ({ root, dataDir, remove } = await tinyRunRoot('mdlm-solo-'));
  });
  afterAll(() => remove());

  it.each(['0', '1'])('calls no collective in a world of one: training, evaluation and checkpoints go as without one (train.zero %s)', async (zero) => {
    const config = tinyConfig(root, dataDir, `solo-${zero}`, { 'train.steps': '4', 'train.saveEvery': '2', 'train.evalEvery': '2', 'train.evalBatches': '1', 'train.zero': zero });
    const data = await openRunData(config, () => {});
    const refuse = async (): Promise<never> => {
      throw new Error('a collective in a world of one');
    };
    const alone: Collectives = { rank: 0, worldSize: 1, allReduce: refuse, allReduceTensor: refuse, broadcast: refuse, allGather: refuse, reduceScatter: refuse, barrier: refuse };
    const t = new Trainer({ config, backend: new CpuBackend(), train: data.train, val: data.val, tokenizer: data.tokenizer, resume: false, log: () => {}, group: alone });
    const result = await t.run();
    t.destroy();
    expect(result.step).toBe(4);
    expect(result.lastEval).toBeDefined();
    expect(result.checkpoint).toMatch(/step-0000004$/);
  });
});
