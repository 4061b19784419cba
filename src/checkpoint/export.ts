/**
 * Export a model (mdlm parameters and config) as a Hugging Face directory: config.json and the
 * weights, Llama / Qwen naming (hf) or LLaDA's (llada, masked diffusion only: its config with the
 * mask token id), in one model.safetensors or, above a size limit, in shards
 * model-0000k-of-0000n.safetensors listed by model.safetensors.index.json (transformers' layout:
 * `weight_map` tensor → file, `metadata.total_size` the bytes of all tensors). Shards are filled
 * in parameter order, a tensor larger than the limit alone in its own.
 */
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { type ModelConfig, type ObjectiveConfig, ObjectiveSchema, type TrainConfig } from '../config/schema.js';
import { fail } from '../errors.js';
import { type MdlmSection, type TensorNaming, type TorchDType, hfConfigFromModel, toHfTensors } from './hf.js';
import { lladaConfigFromModel } from './llada.js';
import { type TensorMap, type WritableDType, writeSafetensors } from './safetensors.js';

export const SHARD_INDEX_FILE = 'model.safetensors.index.json';

export interface ExportSource {
  readonly model: ModelConfig;
  /** Parameters by mdlm name. */
  readonly tensors: Record<string, Float32Array>;
  readonly objective: 'ar' | 'mdlm';
  /** The [MASK] id (mdlm). */
  readonly maskId: number;
  /** The run's resolved config, kept in config.json's mdlm section where known. */
  readonly config?: TrainConfig | undefined;
  readonly bosTokenId: number | null;
  readonly eosTokenId: number | null;
}

export interface ExportOptions {
  readonly naming: TensorNaming;
  readonly dtype: Exclude<WritableDType, 'I32'>;
  /** Largest shard in bytes; a model larger than this is written in shards. */
  readonly maxShardBytes: number;
}

const BYTES: Readonly<Record<Exclude<WritableDType, 'I32'>, number>> = { F32: 4, BF16: 2, F16: 2 };
const TORCH_DTYPE: Readonly<Record<Exclude<WritableDType, 'I32'>, TorchDType>> = { F32: 'float32', BF16: 'bfloat16', F16: 'float16' };

/** Write the model into `outDir` (created; it must hold no model already); returns the files written. */
export function exportModel(src: ExportSource, outDir: string, opts: ExportOptions): string[] {
  if (!(opts.maxShardBytes > 0)) fail('BAD_ARGUMENT', `the shard size limit must be positive, got ${opts.maxShardBytes}`);
  if (opts.naming === 'llada' && src.objective !== 'mdlm') fail('BAD_ARGUMENT', 'a LLaDA checkpoint is a masked-diffusion model; this model runs as ar (export it as hf)');
  const torchDtype = TORCH_DTYPE[opts.dtype];
  const objective = src.config?.objective.kind === src.objective ? src.config.objective : undefined;
  const hf = hfConfigFromModel(src.model, {
    ...(src.config && objective ? { trainConfig: src.config } : { objective: ObjectiveSchema.parse({ kind: src.objective, maskTokenId: src.maskId }) as ObjectiveConfig }),
    torchDtype, bosTokenId: src.bosTokenId, eosTokenId: src.eosTokenId,
  });
  // The mask id the model runs with (the run's config may leave it to the tokenizer).
  (hf.mdlm as MdlmSection).mask_token_id = src.objective === 'mdlm' ? src.maskId : null;
  const config = opts.naming === 'llada'
    ? lladaConfigFromModel(src.model, { maskTokenId: src.maskId, torchDtype, bosTokenId: src.bosTokenId, eosTokenId: src.eosTokenId, mdlm: hf.mdlm })
    : hf;
  const tensors = toHfTensors(src.model, src.tensors, opts.dtype, opts.naming);
  const shards = shardTensors(tensors, opts.dtype, opts.maxShardBytes);

  if (existsSync(outDir) && readdirSync(outDir).some((f) => f === 'config.json' || f.endsWith('.safetensors') || f === SHARD_INDEX_FILE)) {
    fail('BAD_ARGUMENT', `${outDir} already holds a model (config.json or safetensors); export into a new directory`);
  }
  mkdirSync(outDir, { recursive: true });
  const files: string[] = [];
  const metadata = { format: 'pt', producer: 'mdlm' };
  if (shards.length === 1) {
    writeSafetensors(join(outDir, 'model.safetensors'), tensors, { metadata });
    files.push('model.safetensors');
  } else {
    const weightMap: Record<string, string> = {};
    let totalSize = 0;
    shards.forEach((names, k) => {
      const file = `model-${String(k + 1).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.safetensors`;
      const part: TensorMap = {};
      for (const n of names) {
        part[n] = tensors[n]!;
        weightMap[n] = file;
        totalSize += tensorBytes(tensors, n, opts.dtype);
      }
      writeSafetensors(join(outDir, file), part, { metadata });
      files.push(file);
    });
    writeFileSync(join(outDir, SHARD_INDEX_FILE), JSON.stringify({ metadata: { total_size: totalSize }, weight_map: weightMap }, null, 2) + '\n');
    files.push(SHARD_INDEX_FILE);
  }
  writeFileSync(join(outDir, 'config.json'), JSON.stringify(config, null, 2) + '\n');
  files.push('config.json');
  return files;
}

function tensorBytes(tensors: TensorMap, name: string, dtype: Exclude<WritableDType, 'I32'>): number {
  return tensors[name]!.shape.reduce((a, b) => a * b, 1) * BYTES[dtype];
}

/** The tensors' names grouped into shards of at most `limit` bytes each, in order (one group: no sharding). */
export function shardTensors(tensors: TensorMap, dtype: Exclude<WritableDType, 'I32'>, limit: number): string[][] {
  const shards: string[][] = [];
  let current: string[] = [];
  let size = 0;
  for (const name of Object.keys(tensors)) {
    const bytes = tensorBytes(tensors, name, dtype);
    if (current.length > 0 && size + bytes > limit) {
      shards.push(current);
      current = [];
      size = 0;
    }
    current.push(name);
    size += bytes;
  }
  if (current.length > 0) shards.push(current);
  return shards;
}
