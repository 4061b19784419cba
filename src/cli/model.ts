/**
 * What `mdlm sample` and `mdlm eval` share: open a model directory (an mdlm checkpoint, a Hugging
 * Face Llama / Qwen directory or a LLaDA one, sharded or not), its tokenizer, a model on a backend;
 * and `mdlm model export`, which writes a model as a Hugging Face or LLaDA directory.
 */
import { copyFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import type { Backend } from '../backend/backend.js';
import { type LoadedModel, loadModel, resolveModelDir } from '../checkpoint/checkpoint.js';
import { exportModel } from '../checkpoint/export.js';
import type { ModelConfig } from '../config/schema.js';
import { HF_TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, type Tokenizer, hasTokenizer, loadTokenizer } from '../data/tokenizer.js';
import { fail } from '../errors.js';
import { LlamaModel } from '../model/llama.js';
import { choiceOption } from './options.js';

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

interface ExportFlags {
  model: string;
  out: string;
  format: 'hf' | 'llada';
  dtype: 'f32' | 'bf16' | 'f16';
  maxShardSize: number;
  objective?: 'ar' | 'mdlm';
  tokenizer?: string;
}

/** Tokenizer files copied beside an exported model when the source directory has them. */
const TOKENIZER_FILES = [HF_TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, 'special_tokens_map.json'];

export function modelCommand(): Command {
  const model = new Command('model').description('Convert model directories');
  model.addCommand(new Command('export')
    .description('Write a model as a Hugging Face (Llama / Qwen) or LLaDA directory: config.json and safetensors, sharded above --max-shard-size')
    .requiredOption('--model <dir>', "checkpoint directory, a run's --out directory, or a Hugging Face / LLaDA model directory")
    .requiredOption('--out <dir>', 'directory to write (new, or one without a model)')
    .option('--format <name>', 'hf: Llama / Qwen names and config (an mdlm model gets model_type mdlm); llada: LLaDA names and config with the mask token id (masked diffusion only)', choiceOption('--format', ['hf', 'llada'] as const), 'hf')
    .option('--dtype <type>', 'f32 | bf16 | f16', choiceOption('--dtype', ['f32', 'bf16', 'f16'] as const), 'f32')
    .option('--max-shard-size <size>', 'largest safetensors file, e.g. 5GB, 500MB or bytes; a larger model is written in shards with model.safetensors.index.json', sizeOption, 5e9)
    .option('--objective <kind>', "ar | mdlm (default: the checkpoint's)", choiceOption('--objective', ['ar', 'mdlm'] as const))
    .option('--tokenizer <spec>', 'tokenizer (byte | gpt2 | path) when the model directory has none (it gives the [MASK] id)')
    .action(async (o: ExportFlags) => {
      const m = await openModel(o.model, o.tokenizer, o.objective);
      const files = exportModel({
        model: m.loaded.model, tensors: m.loaded.tensors, objective: m.objective, maskId: m.maskId, config: m.loaded.config,
        bosTokenId: m.loaded.bosTokenId, eosTokenId: m.loaded.eosTokenId,
      }, o.out, { naming: o.format, dtype: o.dtype === 'f32' ? 'F32' : o.dtype === 'bf16' ? 'BF16' : 'F16', maxShardBytes: o.maxShardSize });
      for (const f of TOKENIZER_FILES) {
        if (existsSync(join(m.loaded.dir, f))) {
          copyFileSync(join(m.loaded.dir, f), join(o.out, f));
          files.push(f);
        }
      }
      console.log(`wrote ${o.out} (${o.format}, ${m.objective}${m.objective === 'mdlm' ? `, mask token ${m.maskId}` : ''}): ${files.join(', ')}`);
    }));
  return model;
}

/** A size in bytes: a number with an optional unit (KB, MB, GB: powers of 1000; KiB, MiB, GiB: of 1024). */
function sizeOption(v: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*$/i.exec(v);
  const units: Record<string, number> = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, kib: 2 ** 10, mib: 2 ** 20, gib: 2 ** 30 };
  const bytes = m ? Math.floor(Number(m[1]) * units[(m[2] ?? 'B').toLowerCase()]!) : NaN;
  if (!(bytes >= 1)) fail('BAD_ARGUMENT', `--max-shard-size: expected a size such as 5GB, 500MB or a byte count, got "${v}"`);
  return bytes;
}
