/** The timing rules of src/harness/timing.ts, on a scripted clock. */
import { describe, expect, it } from 'vitest';
import { medianCallMs, warmUp } from '../src/harness/timing.js';

/** A clock that each call advances by the next of `costs` (ms), cycling. */
function scripted(costs: number[]) {
  let t = 0;
  let i = 0;
  return {
    now: () => t,
    call: () => {
      t += costs[i++ % costs.length]!;
    },
    calls: () => i,
  };
}

describe('timing', () => {
  it('takes the median window, not the mean or the first', async () => {
    // windows of 2 calls: 10 ms a call, then 1, then 4 (the first window is the slow, cold one)
    const c = scripted([10, 10, 1, 1, 4, 4]);
    expect(await medianCallMs(c.call, async () => {}, 2, 3, c.now)).toBe(4);
    expect(c.calls()).toBe(6);
  });

  it('warms up for the time asked and at least two calls', async () => {
    const slow = scripted([30]);
    await warmUp(slow.call, async () => {}, 0.05, 1, slow.now);
    expect(slow.calls()).toBe(2); // 60 ms ≥ 50 ms after two calls
    const fast = scripted([1]);
    await warmUp(fast.call, async () => {}, 0.05, 4, fast.now);
    expect(fast.calls()).toBe(52); // 13 rounds of 4 calls: the first round past 50 ms
    const once = scripted([500]);
    await warmUp(once.call, async () => {}, 0, 1, once.now);
    expect(once.calls()).toBe(2);
  });

  it('rejects empty windows', async () => {
    await expect(medianCallMs(() => {}, async () => {}, 0)).rejects.toThrow(/reps \(0\) and windows \(3\) must be at least 1/);
  });
});
