import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { openRunData } from '../../src/train/data.js';

const words = ['the', 'cat', 'sat', 'on', 'a', 'mat', 'and', 'dog', 'ran'];
const text = (seed: number) => Array.from({ length: 40 }, (_, d) => Array.from({ length: 60 }, (_, i) => words[(d * 7 + i * seed) % words.length]).join(' ') + '.').join('\n\n');

describe('openRunData', () => {
  it('reuses <out>/data only for the data path, tokenizer, split fraction and seed it was prepared with', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'mdlm-run-data-'));
    writeFileSync(join(dir, 'a.txt'), text(3));
    writeFileSync(join(dir, 'b.txt'), text(5));
    const out = join(dir, 'run');
    const config = (extra: Record<string, string>) => resolveConfig({ preset: 'nano', overrides: { out, backend: 'cpu', 'data.path': join(dir, 'a.txt'), ...extra } });
    const first = await openRunData(config({}), () => {});
    const again = await openRunData(config({}), () => {});
    expect(first.train.length).toBeGreaterThan(0);
    expect(again.train.length).toBe(first.train.length);
    await expect(openRunData(config({ 'data.path': join(dir, 'b.txt') }), () => {})).rejects.toThrow(/prepared for other data settings \(data\.path .*a\.txt there, .*b\.txt now\); use another --out, or delete/);
    await expect(openRunData(config({ 'data.valFraction': '0.2' }), () => {})).rejects.toThrow(/data\.valFraction 0\.01 there, 0\.2 now/);
    await expect(openRunData(config({ 'train.seed': '7' }), () => {})).rejects.toThrow(/train\.seed \d+ there, 7 now/);
  });
});
