/** Open what `prepareData` wrote: meta.json, train/val shards and the tokenizer, checked against each other. */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DataFormat } from '../config/schema.js';
import { fail } from '../errors.js';
import { META_FILE, type DataMeta } from './prepare.js';
import { openShard, type OpenShardOptions, type TokenShard } from './shard.js';
import { loadTokenizer, type Tokenizer } from './tokenizer.js';

/**
 * A prepared dataset's format against the one a run asks for (data.format): chat data trains on
 * the assistant's tokens (data.format chat), token data on every token (data.format tokens).
 */
export function checkDataFormat(meta: DataMeta, format: DataFormat, dir: string): void {
  const has: DataFormat = meta.chat ? 'chat' : 'tokens';
  if (has === format) return;
  if (has === 'chat') {
    fail('BAD_CONFIG', `${dir} holds chat data (conversations with the assistant's tokens marked) but data.format is tokens; set --data.format chat to fine-tune on the assistant's tokens, or prepare the data without --format chat to train on every token`);
  }
  fail('BAD_CONFIG', `${dir} holds token data but data.format is chat; prepare the conversations with "mdlm data prepare --format chat" (JSON Lines of {"messages": [...]} or {"prompt", "response"} objects), or leave data.format at tokens`);
}

/** Whether `dir` is a dataset `mdlm data prepare` wrote (it holds meta.json). */
export function isPreparedDataset(dir: string): boolean {
  return existsSync(join(dir, META_FILE));
}

export interface PreparedData {
  dir: string;
  meta: DataMeta;
  train: TokenShard;
  val: TokenShard;
  tokenizer: Tokenizer;
}

export async function openPreparedData(dir: string, opts: OpenShardOptions = {}): Promise<PreparedData> {
  const metaPath = join(dir, META_FILE);
  if (!existsSync(metaPath)) {
    fail('NOT_FOUND', `${dir} has no ${META_FILE}: it is not a complete prepared dataset (an interrupted "mdlm data prepare" leaves none); run "mdlm data prepare --tokenizer byte|gpt2|PATH --out ${dir}" to prepare it again`);
  }
  let meta: DataMeta;
  try {
    meta = JSON.parse(readFileSync(metaPath, 'utf8')) as DataMeta;
  } catch (e) {
    fail('BAD_FILE', `${metaPath} is not valid JSON (${(e as Error).message}); re-run "mdlm data prepare"`);
  }
  if (meta.format !== 'mdlm-tokens' || meta.version !== 1) fail('BAD_FILE', `${metaPath}: format ${String(meta.format)} version ${String(meta.version)}, expected mdlm-tokens version 1`);
  const train = openShard(join(dir, meta.train.file), opts);
  const val = openShard(join(dir, meta.val.file), opts);
  const tokenizer = await loadTokenizer(dir);
  for (const [name, sh, m] of [['train', train, meta.train], ['val', val, meta.val]] as const) {
    if (sh.vocabSize !== tokenizer.vocabSize || sh.eosId !== tokenizer.eosId) {
      fail('BAD_FILE', `${sh.path}: vocab ${sh.vocabSize} / EOS ${sh.eosId} disagree with the tokenizer in ${dir} (vocab ${tokenizer.vocabSize}, EOS ${tokenizer.eosId}); re-run "mdlm data prepare"`);
    }
    if (sh.length !== m.tokens) fail('BAD_FILE', `${sh.path}: ${sh.length} tokens but ${META_FILE} says ${name} has ${m.tokens}; the directory mixes two runs — re-run "mdlm data prepare"`);
    if ((sh.lossMask !== undefined) !== (meta.chat !== undefined)) {
      fail('BAD_FILE', `${sh.path}: ${sh.lossMask ? 'holds a loss mask' : 'holds no loss mask'} but ${META_FILE} says the data is ${meta.chat ? 'chat data' : 'token data'}; the directory mixes two runs — re-run "mdlm data prepare"`);
    }
  }
  return { dir, meta, train, val, tokenizer };
}
