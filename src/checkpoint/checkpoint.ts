/**
 * Checkpoints: Hugging Face layout plus training state, written atomically.
 *
 *   <out>/step-0001000/
 *     config.json              HF config (Llama / Qwen2 / Qwen3) + `mdlm` section (objective, [MASK] id, resolved config)
 *     model.safetensors        parameters under HF names
 *     optimizer.safetensors    optimizer state (whatever tensors the optimizer gives)
 *     trainer_state.json       step, RNG state, data cursor, ... (the object given)
 *     <tokenizer files>
 *     complete                 written last: JSON manifest {step, files: {name: bytes}}
 *   <out>/latest               "step-0001000\n", replaced atomically after each save
 *
 * Everything is written into `<out>/.tmp-step-0001000-<pid>/`, each file fsynced, the directory
 * fsynced, then renamed to `step-0001000` and the parent fsynced. A crash leaves at most a
 * `.tmp-*` directory, which latestCheckpoint() never returns; a step directory without a valid
 * `complete` manifest counts only if every file verifies. `latest` is what readers follow
 * (latestCheckpoint: resume, sample, eval, --init-from); the highest complete step only stands in
 * where `latest` is absent or names a missing or damaged checkpoint. A failed write is an
 * IO_ERROR naming the file (src/runtime/files.ts) and leaves the checkpoints before it as they were.
 */
import {
  closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync,
} from 'node:fs';
import { join } from 'node:path';
import { fail } from '../errors.js';
import { type FileAction, asFileError, makeDir } from '../runtime/files.js';
import type { ModelConfig, TrainConfig } from '../config/schema.js';
import { fromHfTensors, hfConfigFromModel, modelFromHfConfig, toHfTensors, type MdlmSection, type TorchDType } from './hf.js';
import { openSafetensors, openTensors, readSafetensors, writeSafetensors, type LoadedTensor, type TensorMap, type TensorToWrite } from './safetensors.js';

export const CONFIG_FILE = 'config.json';
export const MODEL_FILE = 'model.safetensors';
export const OPTIMIZER_FILE = 'optimizer.safetensors';
export const TRAINER_STATE_FILE = 'trainer_state.json';
export const COMPLETE_FILE = 'complete';
export const LATEST_FILE = 'latest';
const RESERVED = new Set([CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, TRAINER_STATE_FILE, COMPLETE_FILE, 'model.safetensors.index.json']);
const STEP_DIR = /^step-(\d+)$/;

export interface TrainerState {
  step: number;
  [key: string]: unknown;
}

export interface CheckpointData {
  config: TrainConfig;
  /** Model parameters by mdlm name (see src/checkpoint/hf.ts), float32. */
  tensors: Record<string, Float32Array>;
  /** Optimizer state: flat Float32Arrays (stored as F32 [n]) or full safetensors entries. */
  optimizer?: Record<string, Float32Array | TensorToWrite>;
  trainerState: TrainerState;
  /** File name → contents, copied into the checkpoint (tokenizer.json, vocab files, ...). */
  tokenizerFiles?: Record<string, string | Uint8Array>;
}

export interface SaveOptions {
  /** Keep only the newest K complete checkpoints after saving (0 or undefined: keep all). */
  keepLast?: number;
  /** Storage dtype of model.safetensors (default F32, so a resume is bit-exact). */
  modelDtype?: 'F32' | 'BF16' | 'F16';
  bosTokenId?: number | null;
  eosTokenId?: number | null;
}

export interface Manifest {
  step: number;
  files: Record<string, number>;
  tokenizerFiles: string[];
}

export function stepDirName(step: number): string {
  return `step-${String(step).padStart(7, '0')}`;
}

// ---------------------------------------------------------------------------------------------
// Durable file writes.

function writeFileDurable(path: string, data: string | Uint8Array): void {
  const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
  const fd = openSync(path, 'w');
  try {
    let off = 0;
    while (off < bytes.length) off += writeSync(fd, bytes, off, bytes.length - off);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** fsync a directory so renames and new entries in it are durable (a no-op where unsupported). */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, 'r');
    fsyncSync(fd);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== 'EISDIR' && code !== 'EPERM' && code !== 'EINVAL' && code !== 'EBADF') throw e;
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Delete a directory of `parent`, renamed to `.deleting-<tag>-<pid>` first so that a half-deleted one never looks like a checkpoint. */
export function removeDir(dir: string, parent: string, tag: string): void {
  const doomed = join(parent, `.deleting-${tag}-${process.pid}`);
  rmSync(doomed, { recursive: true, force: true });
  renameSync(dir, doomed);
  rmSync(doomed, { recursive: true, force: true });
}

// ---------------------------------------------------------------------------------------------
// Save.

function checkFileName(name: string): void {
  if (!name || name.includes('/') || name.includes('\\') || name === '.' || name === '..' || name.startsWith('.tmp') || RESERVED.has(name)) {
    fail('BAD_ARGUMENT', `saveCheckpoint: tokenizer file name '${name}' must be a plain file name other than ${[...RESERVED].join(', ')}`);
  }
}

/** Save a checkpoint under `outDir/step-XXXXXXX`; returns that directory. */
export function saveCheckpoint(outDir: string, data: CheckpointData, opts: SaveOptions = {}): string {
  const step = data.trainerState?.step;
  if (!Number.isSafeInteger(step) || step < 0) fail('BAD_ARGUMENT', `saveCheckpoint: trainerState.step must be a non-negative integer, got ${JSON.stringify(step)}`);
  const tokFiles = Object.entries(data.tokenizerFiles ?? {});
  for (const [name] of tokFiles) checkFileName(name);
  // Build everything that can fail on bad input before touching the disk.
  const modelDtype = opts.modelDtype ?? 'F32';
  const torchDtype: TorchDType = modelDtype === 'F32' ? 'float32' : modelDtype === 'BF16' ? 'bfloat16' : 'float16';
  const hfTensors = toHfTensors(data.config.model, data.tensors, modelDtype);
  const hfConfig = hfConfigFromModel(data.config.model, { trainConfig: data.config, torchDtype, bosTokenId: opts.bosTokenId ?? null, eosTokenId: opts.eosTokenId ?? null });
  const optimizer: TensorMap = {};
  for (const [k, v] of Object.entries(data.optimizer ?? {})) optimizer[k] = v instanceof Float32Array ? { dtype: 'F32', shape: [v.length], data: v } : v;
  const trainerStateJson = JSON.stringify(data.trainerState, null, 2) + '\n';

  makeDir(outDir, '--out');
  const name = stepDirName(step);
  const tmp = join(outDir, `.tmp-${name}-${process.pid}`);
  const final = join(outDir, name);
  // What is being done, for the error: one line naming the file.
  let at: FileAction = { path: tmp, action: 'create the checkpoint directory', flag: '--out' };
  const to = (path: string, action = 'write the checkpoint file'): void => {
    at = { path, action, flag: '--out' };
  };
  try {
    rmSync(tmp, { recursive: true, force: true });
    mkdirSync(tmp);
    to(join(tmp, CONFIG_FILE));
    writeFileDurable(at.path, JSON.stringify(hfConfig, null, 2) + '\n');
    to(join(tmp, MODEL_FILE));
    writeSafetensors(at.path, hfTensors, { metadata: { format: 'pt', producer: 'mdlm', step: String(step) } });
    to(join(tmp, OPTIMIZER_FILE));
    writeSafetensors(at.path, optimizer, { metadata: { producer: 'mdlm', step: String(step) } });
    to(join(tmp, TRAINER_STATE_FILE));
    writeFileDurable(at.path, trainerStateJson);
    for (const [f, contents] of tokFiles) {
      to(join(tmp, f));
      writeFileDurable(at.path, contents);
    }
    const files: Record<string, number> = {};
    for (const f of [CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, TRAINER_STATE_FILE, ...tokFiles.map(([f]) => f)]) files[f] = statSync(join(tmp, f)).size;
    const manifest: Manifest = { step, files, tokenizerFiles: tokFiles.map(([f]) => f) };
    to(join(tmp, COMPLETE_FILE));
    writeFileDurable(at.path, JSON.stringify(manifest, null, 2) + '\n');
    fsyncDir(tmp);
    to(final, 'replace the checkpoint');
    if (existsSync(final)) removeDir(final, outDir, name); // re-saving a step (e.g. after a resume)
    renameSync(tmp, final);
    fsyncDir(outDir);
    to(join(outDir, LATEST_FILE), 'point latest at the new checkpoint');
    const latestTmp = join(outDir, `.tmp-${LATEST_FILE}-${process.pid}`);
    writeFileDurable(latestTmp, `${name}\n`);
    renameSync(latestTmp, join(outDir, LATEST_FILE));
    fsyncDir(outDir);
  } catch (e) {
    // Best effort: the directory may not take even a removal (read-only); the next run's start removes what is left.
    try {
      rmSync(tmp, { recursive: true, force: true });
    } catch {
      /* left for the next run */
    }
    throw asFileError(e, at);
  }
  if (opts.keepLast !== undefined && opts.keepLast > 0) {
    try {
      pruneCheckpoints(outDir, opts.keepLast, final);
    } catch (e) {
      throw asFileError(e, { path: outDir, action: `remove the checkpoints older than the newest ${opts.keepLast} (train.keepCheckpoints) in`, flag: '--out' });
    }
  }
  return final;
}

/** Delete all but the newest `keep` complete checkpoints (never `protect`). */
export function pruneCheckpoints(outDir: string, keep: number, protect?: string): string[] {
  const all = listCheckpoints(outDir).filter((c) => c.complete);
  const removed: string[] = [];
  for (const c of all.slice(keep)) {
    if (protect !== undefined && c.dir === protect) continue;
    removeDir(c.dir, outDir, c.name);
    removed.push(c.dir);
  }
  if (removed.length) fsyncDir(outDir);
  return removed;
}

// ---------------------------------------------------------------------------------------------
// Find and verify.

export interface CheckpointEntry {
  name: string;
  dir: string;
  step: number;
  complete: boolean;
  /** Why it is not complete. */
  problem?: string;
}

/**
 * Whether a step directory is a whole checkpoint: its `complete` manifest matches the files on
 * disk, or (no manifest) every file parses and the safetensors headers agree with file sizes.
 */
export function verifyCheckpoint(dir: string): { complete: boolean; problem?: string } {
  const p = (f: string) => join(dir, f);
  try {
    if (existsSync(p(COMPLETE_FILE))) {
      const m = JSON.parse(readFileSync(p(COMPLETE_FILE), 'utf8')) as Manifest;
      if (typeof m !== 'object' || m === null || typeof m.files !== 'object') return { complete: false, problem: 'the complete manifest is malformed' };
      for (const [f, size] of Object.entries(m.files)) {
        if (!existsSync(p(f))) return { complete: false, problem: `${f} is missing` };
        const got = statSync(p(f)).size;
        if (got !== size) return { complete: false, problem: `${f} is ${got} bytes, the manifest says ${size}` };
      }
      return { complete: true };
    }
    for (const f of [CONFIG_FILE, TRAINER_STATE_FILE]) {
      if (!existsSync(p(f))) return { complete: false, problem: `${f} is missing` };
      JSON.parse(readFileSync(p(f), 'utf8'));
    }
    openTensors(dir).close();
    if (existsSync(p(OPTIMIZER_FILE))) openSafetensors(p(OPTIMIZER_FILE)).close();
    return { complete: true };
  } catch (e) {
    return { complete: false, problem: (e as Error).message };
  }
}

/** Step directories of `outDir`, newest first, with their completeness. Temp dirs are skipped. */
export function listCheckpoints(outDir: string): CheckpointEntry[] {
  if (!existsSync(outDir)) return [];
  const out: CheckpointEntry[] = [];
  for (const e of readdirSync(outDir, { withFileTypes: true })) {
    const m = STEP_DIR.exec(e.name);
    if (!m || !e.isDirectory()) continue;
    const dir = join(outDir, e.name);
    const v = verifyCheckpoint(dir);
    const entry: CheckpointEntry = { name: e.name, dir, step: Number(m[1]), complete: v.complete };
    if (v.problem !== undefined) entry.problem = v.problem;
    out.push(entry);
  }
  return out.sort((a, b) => b.step - a.step);
}

/** The step directory `<outDir>/latest` names, when it names one (whatever its state). */
export function latestPointer(outDir: string): string | undefined {
  let name: string;
  try {
    name = readFileSync(join(outDir, LATEST_FILE), 'utf8').trim();
  } catch {
    return undefined;
  }
  return STEP_DIR.test(name) ? name : undefined;
}

/**
 * The checkpoint to continue from or to load: the one `<outDir>/latest` names when it is
 * complete, else the highest complete step; null when there is none. `passedOver` says why
 * `latest` was not followed, where it exists but names a missing or damaged checkpoint.
 */
export function latestCheckpoint(outDir: string): { dir: string; step: number; passedOver?: string } | null {
  const name = latestPointer(outDir);
  const list = listCheckpoints(outDir);
  const named = name === undefined ? undefined : list.find((c) => c.name === name);
  if (named?.complete) return { dir: named.dir, step: named.step };
  const c = list.find((x) => x.complete);
  if (!c) return null;
  if (name === undefined) return { dir: c.dir, step: c.step };
  return { dir: c.dir, step: c.step, passedOver: named ? `latest names ${name}, which is damaged (${named.problem})` : `latest names ${name}, which does not exist` };
}

/** What `outDir`'s step directories are, for messages: `step-0000020 (damaged: …), step-0000010`. */
export function describeCheckpoints(list: readonly CheckpointEntry[]): string {
  return list.map((c) => (c.complete ? c.name : `${c.name} (damaged: ${c.problem})`)).join(', ');
}

// ---------------------------------------------------------------------------------------------
// Load.

/** A model read from a directory: config.json and the safetensors weights. */
export interface LoadedModel {
  dir: string;
  model: ModelConfig;
  hfConfig: Record<string, unknown>;
  /** config.json's mdlm section, when an mdlm run wrote it. */
  mdlm: MdlmSection | undefined;
  /** The resolved config saved with the run (the mdlm section's), when present. */
  config: TrainConfig | undefined;
  bosTokenId: number | null;
  eosTokenId: number | null;
  /** Parameters by mdlm name, float32 (bf16/f16 files are decoded). */
  tensors: Record<string, Float32Array>;
}

export interface LoadedCheckpoint extends LoadedModel {
  step: number;
  optimizer: Record<string, LoadedTensor>;
  trainerState: TrainerState;
  /** Paths of the tokenizer files saved with the checkpoint. */
  tokenizerFiles: string[];
}

export interface LoadOptions {
  /** The model the caller is about to fill: every field must agree with the checkpoint's. */
  model?: ModelConfig;
  /** Read optimizer.safetensors (default true). */
  optimizer?: boolean;
}

function readJson(path: string, what: string): unknown {
  if (!existsSync(path)) fail('BAD_FILE', `checkpoint file ${path} is missing (${what}); the checkpoint is incomplete`);
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    return fail('BAD_FILE', `${path} is not valid JSON (${(e as Error).message}); the checkpoint is corrupt`);
  }
}

/**
 * The directory a model path names: itself when it holds config.json (an mdlm checkpoint or a
 * Hugging Face model), else the newest complete checkpoint of the run directory it is.
 */
export function resolveModelDir(path: string): string {
  if (!existsSync(path)) fail('NOT_FOUND', `model directory '${path}' does not exist; pass a checkpoint directory (…/step-0001000), a run's --out directory or a Hugging Face model directory`);
  if (existsSync(join(path, CONFIG_FILE))) return path;
  const latest = latestCheckpoint(path);
  if (latest) return latest.dir;
  const broken = listCheckpoints(path)[0];
  return fail(
    broken ? 'BAD_FILE' : 'NOT_FOUND',
    broken
      ? `'${path}' holds no complete checkpoint: the newest, ${broken.name}, is damaged (${broken.problem})`
      : `'${path}' has no ${CONFIG_FILE} and no step-* checkpoint; pass a checkpoint directory, a run's --out directory or a Hugging Face model directory`,
  );
}

/** config.json and the weights of a checkpoint or Hugging Face model directory (no training state needed). */
export function loadModel(dir: string, opts: Pick<LoadOptions, 'model'> = {}): LoadedModel {
  if (!existsSync(dir)) fail('NOT_FOUND', `checkpoint directory '${dir}' does not exist`);
  if (existsSync(join(dir, COMPLETE_FILE))) {
    const v = verifyCheckpoint(dir);
    if (!v.complete) fail('BAD_FILE', `checkpoint ${dir} is incomplete or damaged: ${v.problem}`);
  }
  const hfConfig = readJson(join(dir, CONFIG_FILE), 'the model config') as Record<string, unknown>;
  const hf = modelFromHfConfig(hfConfig, join(dir, CONFIG_FILE));
  if (opts.model) {
    const diff = (Object.keys(opts.model) as (keyof ModelConfig)[]).filter((k) => opts.model![k] !== hf.model[k]);
    if (diff.length) {
      fail('BAD_CONFIG', `checkpoint ${dir} was trained with a different model: ${diff.map((k) => `model.${k} is ${String(hf.model[k])} there, ${String(opts.model![k])} here`).join('; ')}. Use the checkpoint's settings or start a new run (another out directory)`);
    }
  }
  const src = openTensors(dir);
  let tensors: Record<string, Float32Array>;
  try {
    tensors = fromHfTensors(hf.model, src, src.files.length === 1 ? src.files[0]! : join(dir, 'model.safetensors.index.json'));
  } finally {
    src.close();
  }
  return { dir, model: hf.model, hfConfig, mdlm: hf.mdlm, config: hf.mdlm?.config, bosTokenId: hf.bosTokenId, eosTokenId: hf.eosTokenId, tensors };
}

export function loadCheckpoint(dir: string, opts: LoadOptions = {}): LoadedCheckpoint {
  const loaded = loadModel(dir, opts);
  const trainerState = readJson(join(dir, TRAINER_STATE_FILE), 'the trainer state') as TrainerState;
  if (typeof trainerState !== 'object' || trainerState === null || !Number.isSafeInteger(trainerState.step)) {
    fail('BAD_FILE', `${join(dir, TRAINER_STATE_FILE)} must be an object with an integer "step"`);
  }
  const m = STEP_DIR.exec(dir.split(/[\\/]/).filter(Boolean).pop() ?? '');
  if (m && Number(m[1]) !== trainerState.step) {
    fail('BAD_FILE', `${join(dir, TRAINER_STATE_FILE)} says step ${trainerState.step} but the directory is ${m[0]}; the checkpoint was mixed up`);
  }
  let optimizer: Record<string, LoadedTensor> = {};
  if (opts.optimizer ?? true) {
    const p = join(dir, OPTIMIZER_FILE);
    if (existsSync(p)) optimizer = readSafetensors(p).tensors;
  }
  let tokenizerFiles: string[] = [];
  if (existsSync(join(dir, COMPLETE_FILE))) {
    const man = JSON.parse(readFileSync(join(dir, COMPLETE_FILE), 'utf8')) as Manifest;
    tokenizerFiles = (man.tokenizerFiles ?? []).map((f) => join(dir, f));
  } else {
    tokenizerFiles = readdirSync(dir).filter((f) => !RESERVED.has(f) && /^(tokenizer|vocab|merges|special_tokens)/.test(f)).map((f) => join(dir, f));
  }
  return { ...loaded, step: trainerState.step, optimizer, trainerState, tokenizerFiles };
}

