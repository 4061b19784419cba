/**
 * `mdlm train --init-from PATH`: PATH is an mdlm checkpoint, a run directory (its newest
 * checkpoint, found as `sample` and `eval` find it: resolveModelDir) or a Hugging Face Llama /
 * Qwen2 / Qwen3 model directory. Its config.json gives the run's model (InitModel, resolved by
 * src/config/load.ts); its weights initialise the run's, the embedding grown where masked
 * diffusion needs a [MASK] row the checkpoint lacks.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { InitModel } from '../config/load.js';
import type { ModelConfig } from '../config/schema.js';
import { hasTokenizer } from '../data/tokenizer.js';
import { TOKENIZER_CONFIG_FILE } from '../data/tokenizer_core.js';
import { fail } from '../errors.js';
import { CONFIG_FILE, loadModel, resolveModelDir } from './checkpoint.js';
import { type ModelFromHf, modelFromHfConfig } from './hf.js';

/** An --init-from checkpoint: where it is, and what its config.json decides for the run. */
export interface InitFrom extends InitModel {
  /** The checkpoint directory (a run directory resolved to its newest checkpoint). */
  readonly dir: string;
  readonly hf: ModelFromHf;
}

function readJson(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    return fail('NOT_FOUND', `--init-from: cannot read ${path} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}); the directory needs the ${CONFIG_FILE} that describes its model`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    return fail('BAD_FILE', `${path} is not valid JSON (${(e as Error).message})`);
  }
}

/**
 * The tokenizer a checkpoint directory holds, as a data.tokenizer spec: the built-in's name when
 * mdlm wrote it (byte, gpt2), else the directory.
 */
function tokenizerSpec(dir: string): string | undefined {
  if (!hasTokenizer(dir)) return undefined;
  try {
    const builtin = (JSON.parse(readFileSync(join(dir, TOKENIZER_CONFIG_FILE), 'utf8')) as Record<string, unknown>).mdlm_tokenizer;
    if (builtin === 'byte' || builtin === 'gpt2') return builtin;
  } catch {
    // No (readable) tokenizer_config.json: the tokenizer.json is the tokenizer.
  }
  return dir;
}

/** Find the checkpoint `path` names and read its config.json (the weights are read by initParams). */
export function openInitFrom(path: string): InitFrom {
  const dir = resolveModelDir(path);
  const source = join(dir, CONFIG_FILE);
  const hf = modelFromHfConfig(readJson(source), source);
  const tokenizer = tokenizerSpec(dir);
  const mask = hf.mdlm?.objective === 'mdlm' ? hf.mdlm.mask_token_id : null;
  return { dir, hf, model: hf.model, source, ...(tokenizer !== undefined ? { tokenizer } : {}), ...(mask !== null ? { maskTokenId: mask } : {}) };
}

/**
 * The checkpoint's weights for `model` (the run's: the checkpoint's but for seqLen and a vocabulary
 * grown for the [MASK]). Added embedding (and untied lm_head) rows are each the mean of the
 * checkpoint's rows, so a new token starts where the others average out; one log line says so.
 */
export function initParams(init: InitFrom, model: ModelConfig, log: (line: string) => void): Record<string, Float32Array> {
  const loaded = loadModel(init.dir);
  const from = loaded.model;
  const differ = (Object.keys(model) as (keyof ModelConfig)[]).filter((k) => k !== 'seqLen' && k !== 'vocabSize' && k !== 'initStd' && model[k] !== from[k]);
  if (differ.length || model.vocabSize < from.vocabSize) {
    const keys = model.vocabSize < from.vocabSize ? [...differ, 'vocabSize' as const] : differ;
    fail('BAD_CONFIG', `--init-from ${init.dir}: the run's model differs from the checkpoint's: ${keys.map((k) => `model.${k} ${String(model[k])} here, ${String(from[k])} there`).join('; ')}`);
  }
  const tensors = { ...loaded.tensors };
  if (model.vocabSize > from.vocabSize) {
    const d = from.dModel;
    const grow = (rows: Float32Array): Float32Array => {
      const out = new Float32Array(model.vocabSize * d);
      out.set(rows);
      const mean = new Float64Array(d);
      for (let r = 0; r < from.vocabSize; r++) for (let j = 0; j < d; j++) mean[j]! += rows[r * d + j]!;
      for (let r = from.vocabSize; r < model.vocabSize; r++) for (let j = 0; j < d; j++) out[r * d + j] = mean[j]! / from.vocabSize;
      return out;
    };
    tensors.embed = grow(tensors.embed!);
    if (tensors.lm_head) tensors.lm_head = grow(tensors.lm_head);
    const added = model.vocabSize - from.vocabSize;
    log(`vocabulary: model.vocabSize ${from.vocabSize} → ${model.vocabSize} for the [MASK] masked diffusion needs (padded): ${added} row${added > 1 ? 's' : ''} added to the embedding${tensors.lm_head ? ' and to lm_head' : ''}, each the mean of the checkpoint's ${from.vocabSize} rows`);
  }
  return tensors;
}
