/** Data: tokenizers, the Brown corpus, token shards, Megatron datasets, preparation, batching. */
export * from './tokenizer.js';
export { ByteTokenizer, BYTE_EOS, BYTE_MASK, BYTE_PAD } from './byte.js';
export { HfTokenizer } from './hf.js';
export { brownDocuments, brownText, detokenize } from './brown.js';
export { type TokenSource, ArrayTokenSource } from './source.js';
export * from './shard.js';
export * from './megatron.js';
export * from './prepare.js';
export * from './split.js';
export * from './text.js';
export * from './loader.js';
export * from './dataset.js';
export * from './chat.js';
export * from './conversations.js';

import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { isMegatronDataset, openMegatron, type MegatronOptions } from './megatron.js';
import { openShard } from './shard.js';
import type { TokenSource } from './source.js';

/** Open an mdlm shard (`.bin` with MDLMTOK header) or a Megatron `.bin`/`.idx` pair (by prefix or either file). */
export function openTokenSource(path: string, megatron: MegatronOptions = {}): TokenSource {
  if (isMegatronDataset(path)) return openMegatron(path, megatron);
  if (existsSync(path) && statSync(path).isDirectory() && existsSync(join(path, 'train.bin'))) return openShard(join(path, 'train.bin'));
  return openShard(path);
}
