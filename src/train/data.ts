/**
 * Where a run's tokens come from: a prepared dataset directory (meta.json + train/val shards), a
 * shard or Megatron dataset, raw text/jsonl (prepared into <out>/data first, as chat data under
 * data.format chat), or — with no path — the built-in Brown corpus, prepared once into <out>/data
 * and reused.
 */
import { existsSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { TrainConfig } from '../config/schema.js';
import { checkDataFormat, isMegatronDataset, isPreparedDataset, loadTokenizer, openPreparedData, openTokenSource, prepareData } from '../data/index.js';
import type { TokenSource } from '../data/source.js';
import type { Tokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';

export interface RunData {
  readonly train: TokenSource;
  readonly val: TokenSource | undefined;
  readonly tokenizer: Tokenizer;
  readonly description: string;
}

export async function openRunData(cfg: TrainConfig, log: (msg: string) => void): Promise<RunData> {
  const path = cfg.data.path;
  if (path && isPreparedDataset(path)) {
    const d = await openPreparedData(path);
    checkDataFormat(d.meta, cfg.data.format, path);
    return { train: d.train, val: d.val, tokenizer: d.tokenizer, description: path };
  }
  if (path && (isMegatronDataset(path) || /\.bin$/.test(path))) {
    const tokenizer = await loadTokenizer(cfg.data.tokenizer);
    return { train: openTokenSource(path), val: undefined, tokenizer, description: path };
  }
  const dir = join(cfg.out, 'data');
  if (!isPreparedDataset(dir)) {
    const what = path ?? 'the built-in Brown corpus';
    if (path && !existsSync(path)) {
      fail('NOT_FOUND', `data.path ${path} does not exist; give a prepared dataset directory, a text or JSON Lines file or folder, a token shard or a Megatron .bin/.idx prefix`);
    }
    log(`preparing ${what} with the ${cfg.data.tokenizer} tokenizer into ${dir}`);
    await prepareData({ ...(path ? { input: path } : {}), format: cfg.data.format, tokenizer: cfg.data.tokenizer, out: dir, valFraction: cfg.data.valFraction, seed: cfg.train.seed });
  }
  const d = await openPreparedData(dir);
  // <out>/data is reused only for the data, tokenizer and split this run asks for.
  const wanted = { source: path ? resolve(path) : 'brown', tokenizer: cfg.data.tokenizer, valFraction: cfg.data.valFraction, seed: cfg.train.seed, format: cfg.data.format };
  const prepared = {
    source: d.meta.source.input === 'brown' ? 'brown' : resolve(d.meta.source.input), tokenizer: d.meta.tokenizer.spec, valFraction: d.meta.split.valFraction, seed: d.meta.split.seed,
    format: d.meta.chat ? 'chat' : 'tokens',
  };
  const differ = (Object.keys(wanted) as (keyof typeof wanted)[]).filter((k) => wanted[k] !== prepared[k]);
  if (differ.length > 0) {
    const name = { source: 'data.path', tokenizer: 'data.tokenizer', valFraction: 'data.valFraction', seed: 'train.seed', format: 'data.format' };
    const what = differ.map((k) => `${name[k]} ${String(prepared[k])} there, ${String(wanted[k])} now`).join('; ');
    fail('BAD_CONFIG', `${dir} was prepared for other data settings (${what}); use another --out, or delete ${dir} to prepare it again`);
  }
  const desc = path ? `${path} (prepared in ${dir})` : `Brown corpus (prepared in ${dir})`;
  if (path && statSync(path).isFile()) log(`using ${desc}`);
  return { train: d.train, val: d.val, tokenizer: d.tokenizer, description: desc };
}
