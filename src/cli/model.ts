/** What `mdlm sample` and `mdlm eval` share: open a model directory, its tokenizer, a model on a backend. */
import type { Backend } from '../backend/backend.js';
import { type LoadedModel, loadModel, resolveModelDir } from '../checkpoint/checkpoint.js';
import type { ModelConfig } from '../config/schema.js';
import { HF_TOKENIZER_FILE, type Tokenizer, hasTokenizer, loadTokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';

export interface OpenedModel {
  readonly loaded: LoadedModel;
  /** The objective the model runs under: the caller's, else the checkpoint's (ar for a plain Hugging Face model). */
  readonly objective: 'ar' | 'mdlm';
  /** The [MASK] id of masked diffusion: config.json's, else the tokenizer's, else the last id. */
  readonly maskId: number;
  /** `--tokenizer`'s, else the one saved in the directory; undefined when there is neither. */
  readonly tokenizer: Tokenizer | undefined;
}

/**
 * A checkpoint, a run's out directory (its newest complete checkpoint) or a Hugging Face model
 * directory, with its tokenizer. The tokenizer gets a [MASK] only where masked diffusion needs one
 * and neither it nor config.json has one, so a model whose vocabulary is exactly its tokenizer's
 * runs under `ar` with that tokenizer as it is.
 */
export async function openModel(path: string, tokenizerSpec: string | undefined, objective?: 'ar' | 'mdlm'): Promise<OpenedModel> {
  const dir = resolveModelDir(path);
  const loaded = loadModel(dir);
  const kind = objective ?? loaded.mdlm?.objective ?? 'ar';
  const spec = tokenizerSpec ?? (hasTokenizer(dir) ? dir : undefined);
  const own = spec === undefined ? undefined : await loadTokenizer(spec);
  const configMask = loaded.mdlm?.objective === 'mdlm' ? loaded.mdlm.mask_token_id : null;
  const tokenizer = kind === 'mdlm' && configMask === null && own?.maskId === undefined ? own?.withMaskToken() : own;
  if (tokenizer && tokenizer.vocabSize > loaded.model.vocabSize) {
    const withMask = tokenizer !== own ? ` (with the [MASK] that masked diffusion needs, as id ${tokenizer.maskId})` : '';
    fail('BAD_CONFIG', `the ${tokenizer.name} tokenizer has ${tokenizer.vocabSize} ids${withMask} but the model in ${dir} only ${loaded.model.vocabSize}; pass the model's own tokenizer with --tokenizer${withMask ? ', or use --objective ar' : ''}`);
  }
  return { loaded, objective: kind, maskId: configMask ?? tokenizer?.maskId ?? loaded.model.vocabSize - 1, tokenizer };
}

export function requireTokenizer(m: OpenedModel, why: string): Tokenizer {
  return m.tokenizer ?? fail('NOT_FOUND', `${m.loaded.dir} holds no tokenizer (${HF_TOKENIZER_FILE}), which ${why} needs; pass --tokenizer byte|gpt2|PATH`);
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
