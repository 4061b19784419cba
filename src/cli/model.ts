/** What `mdlm sample` and `mdlm eval` share: open a model directory, its tokenizer, a model on a backend. */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Backend } from '../backend/backend.js';
import { type LoadedModel, loadModel, resolveModelDir } from '../checkpoint/checkpoint.js';
import type { ModelConfig } from '../config/schema.js';
import { DESCRIPTOR_FILE, HF_TOKENIZER_FILE, type Tokenizer, loadTokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';

export interface OpenedModel {
  readonly loaded: LoadedModel;
  readonly objective: 'ar' | 'mdlm';
  /** The [MASK] id of an mdlm model (config.json's, else the last id). */
  readonly maskId: number;
  /** `--tokenizer`'s, else the one saved in the directory; undefined when there is neither. */
  readonly tokenizer: Tokenizer | undefined;
}

/** A checkpoint, a run's out directory (its newest complete checkpoint) or a Hugging Face model directory. */
export async function openModel(path: string, tokenizerSpec: string | undefined): Promise<OpenedModel> {
  const dir = resolveModelDir(path);
  const loaded = loadModel(dir);
  const hasTokenizer = existsSync(join(dir, DESCRIPTOR_FILE)) || existsSync(join(dir, HF_TOKENIZER_FILE));
  const spec = tokenizerSpec ?? (hasTokenizer ? dir : undefined);
  const tokenizer = spec === undefined ? undefined : await loadTokenizer(spec);
  if (tokenizer && tokenizer.vocabSize > loaded.model.vocabSize) {
    fail('BAD_CONFIG', `the ${tokenizer.name} tokenizer has ${tokenizer.vocabSize} ids but the model in ${dir} only ${loaded.model.vocabSize}; pass the model's own tokenizer with --tokenizer`);
  }
  return {
    loaded,
    objective: loaded.mdlm?.objective ?? 'ar',
    maskId: loaded.mdlm?.mask_token_id ?? loaded.model.vocabSize - 1,
    tokenizer,
  };
}

export function requireTokenizer(m: OpenedModel, why: string): Tokenizer {
  return m.tokenizer ?? fail('NOT_FOUND', `${m.loaded.dir} holds no tokenizer (${DESCRIPTOR_FILE} or ${HF_TOKENIZER_FILE}), which ${why} needs; pass --tokenizer byte|gpt2|PATH`);
}

/**
 * The model on `backend` with the loaded weights, for `batch` rows of `seqLen` tokens (at most the
 * model's context: RoPE positions beyond it were never trained).
 */
export function buildModel(backend: Backend, m: OpenedModel, batch: number, seqLen: number): LlamaModel {
  const max = m.loaded.model.seqLen;
  if (seqLen > max) throw new Error(`buildModel: seqLen ${seqLen} > the model's ${max}`);
  const cfg: ModelConfig = { ...m.loaded.model, seqLen };
  // No initial values: the loaded ones replace them all.
  const model = new LlamaModel(backend, cfg, batch, 0, { fill: null });
  model.loadParams(m.loaded.tensors, m.loaded.dir);
  return model;
}
