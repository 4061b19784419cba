import { describe, expect, test } from 'vitest';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import { argmax, checkFilterOptions, filteredDistribution, sampleFromLogits } from '../../src/sampling/filter.js';
import { mdlmError } from './helpers.js';

const rng = (seed = 1) => new PhiloxStream(seed, RngPurpose.sampling);
const row = Float32Array.from([0.1, 2.0, -1.0, 1.5, 2.0, 0.0]);

describe('filter', () => {
  test('greedy is argmax, ties to the lowest id, NaN never wins', () => {
    expect(argmax(row)).toBe(1);
    expect(argmax([NaN, -Infinity, -5])).toBe(2);
    expect(sampleFromLogits(row, { temperature: 0, topK: 0, topP: 1 }, rng())).toBe(1);
  });

  test('top-k = 1 is greedy at any temperature', () => {
    const r = rng(3);
    for (let i = 0; i < 50; i++) expect(sampleFromLogits(row, { temperature: 5, topK: 1, topP: 1 }, r)).toBe(1);
  });

  test('temperature → 0 is greedy', () => {
    const r = rng(4);
    const rowNoTie = Float32Array.from([0.1, 2.0, -1.0, 1.99, 1.5]);
    for (let i = 0; i < 50; i++) expect(sampleFromLogits(rowNoTie, { temperature: 1e-4, topK: 0, topP: 1 }, r)).toBe(1);
  });

  test('softmax is stable for huge logits', () => {
    const d = filteredDistribution([1e30, 1e30 - 1e24, -1e30], { temperature: 1, topK: 0, topP: 1 });
    for (const p of d.probs) expect(Number.isFinite(p)).toBe(true);
    expect(d.probs[0]).toBeCloseTo(1, 10);
  });

  test('top-p keeps the nucleus: shortest prefix reaching p, at least one token', () => {
    // probs ∝ [0.5, 0.3, 0.15, 0.05]
    const lg = Float32Array.from([0.5, 0.3, 0.15, 0.05].map(Math.log));
    const ids = (topP: number) => filteredDistribution(lg, { temperature: 1, topK: 0, topP }).ids;
    expect(ids(0.5)).toEqual([0]);
    expect(ids(0.1)).toEqual([0]);
    expect(ids(0.7)).toEqual([0, 1]);
    expect(ids(0.81)).toEqual([0, 1, 2]);
    expect(ids(1)).toHaveLength(4);
    const d = filteredDistribution(lg, { temperature: 1, topK: 0, topP: 0.7 });
    expect(d.probs[0]).toBeCloseTo(0.625, 6);
    expect(d.probs[1]).toBeCloseTo(0.375, 6);
  });

  test('top-p statistically: tokens outside the nucleus never appear, inside ones do in proportion', () => {
    const lg = Float32Array.from([0.05, 0.5, 0.15, 0.3].map(Math.log));
    const r = rng(7);
    const counts = [0, 0, 0, 0];
    const n = 4000;
    for (let i = 0; i < n; i++) counts[sampleFromLogits(lg, { temperature: 1, topK: 0, topP: 0.75 }, r)]!++;
    expect(counts[0]).toBe(0);
    expect(counts[2]).toBe(0);
    expect(counts[1]! / n).toBeGreaterThan(0.58); // expected 0.625
    expect(counts[1]! / n).toBeLessThan(0.67);
    expect(counts[1]! + counts[3]!).toBe(n);
  });

  test('top-k keeps the k best, ties by lower id', () => {
    expect(filteredDistribution(row, { temperature: 1, topK: 3, topP: 1 }).ids).toEqual([1, 4, 3]);
    expect(filteredDistribution(row, { temperature: 1, topK: 2, topP: 1 }).ids).toEqual([1, 4]);
    const r = rng(9);
    for (let i = 0; i < 200; i++) expect([1, 4, 3]).toContain(sampleFromLogits(row, { temperature: 2, topK: 3, topP: 1 }, r));
  });

  test('sampling matches softmax at temperature 1', () => {
    const lg = Float32Array.from([0, Math.log(3)]);
    const r = rng(11);
    let ones = 0;
    const n = 4000;
    for (let i = 0; i < n; i++) ones += sampleFromLogits(lg, { temperature: 1, topK: 0, topP: 1 }, r);
    expect(ones / n).toBeGreaterThan(0.72);
    expect(ones / n).toBeLessThan(0.78);
  });

  test('bad options name the option', async () => {
    expect(await mdlmError(() => checkFilterOptions({ temperature: -0.1, topK: 0, topP: 1 }))).toMatch(/temperature is -0\.1/);
    expect(await mdlmError(() => checkFilterOptions({ temperature: 1, topK: 0, topP: 0 }))).toMatch(/topP is 0.*\(0, 1\]/);
    expect(await mdlmError(() => checkFilterOptions({ temperature: 1, topK: 0, topP: 1.5 }))).toMatch(/topP is 1\.5/);
    expect(await mdlmError(() => checkFilterOptions({ temperature: 1, topK: 1.5, topP: 1 }))).toMatch(/topK is 1\.5/);
  });
});
