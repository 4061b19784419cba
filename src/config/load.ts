/**
 * Resolving a config: preset, then (for --init-from) the checkpoint's model, then a YAML/JSON
 * file, then dotted flag overrides (`--model.dModel 256`), validated by the schema with the data's
 * tokenizer. Every mistake is an MdlmError('BAD_CONFIG') naming the field path, the value given,
 * where it came from and what is allowed.
 */
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import * as YAML from 'yaml';
import type * as z from 'zod';
import { fail } from '../errors.js';
import { PRESETS, PRESET_NAMES, type Preset } from './presets.js';
import { type ModelConfig, ModelSchema, ObjectiveSchema, RawConfigSchema, TrainConfigSchema, type TrainConfig, trainConfigSchema } from './schema.js';
import { type TokenizerShape, builtinTokenizer, paddedVocabSize, vocabMultiple, vocabularyNeeds } from './vocab.js';

export interface ResolveOptions {
  preset?: string;
  file?: string;
  /** Dotted path → string value, as typed on the command line. A leading `--` is allowed. */
  overrides?: Record<string, string>;
  /**
   * The data's tokenizer as loaded: model.vocabSize and objective.maskTokenId follow it unless
   * set. Default: the built-in tokenizer data.tokenizer names (byte, gpt2).
   */
  tokenizer?: TokenizerShape;
  /** The checkpoint `--init-from` names: its model replaces the preset's (see InitModel). */
  initFrom?: InitModel;
  /** Told how the vocabulary was derived (one line each). */
  log?: (line: string) => void;
}

/**
 * What an `--init-from` checkpoint decides. Its model (from config.json) replaces the preset's,
 * seqLen apart (the preset's training windows, at most the checkpoint's context); a file or flag
 * that sets a model field to another value is an error naming both, except seqLen, initStd and a
 * larger vocabSize (rows are added). Its tokenizer, where it has one, is data.tokenizer's default; a diffusion
 * checkpoint's [MASK] is objective.maskTokenId's. When masked diffusion needs a [MASK] the
 * tokenizer lacks and the embedding has no row for, model.vocabSize grows to hold it, padded.
 */
export interface InitModel {
  readonly model: ModelConfig;
  /** Where the model comes from, for messages: the checkpoint's config.json. */
  readonly source: string;
  /** The checkpoint directory as a data.tokenizer spec, when it holds a tokenizer. */
  readonly tokenizer?: string;
  /** The [MASK] id of a masked-diffusion checkpoint. */
  readonly maskTokenId?: number;
}

export type FieldType = 'number' | 'integer' | 'boolean' | 'string' | 'enum';

export interface ConfigField {
  /** Dotted path, e.g. `model.dModel`. */
  path: string;
  type: FieldType;
  /** Allowed values of an enum field. */
  values?: readonly string[];
  /** Default value; undefined for optional fields (their description says what happens then). */
  default: unknown;
  optional: boolean;
  description: string;
  /** Inclusive bounds, where the schema has them. */
  min?: number;
  max?: number;
  /** Whether min / max themselves are allowed (false for `.positive()`, `.lt()`). */
  minInclusive?: boolean;
  maxInclusive?: boolean;
}

// ---------------------------------------------------------------------------------------------
// Schema introspection (zod 4 internals: def.type, def.innerType, def.in, shape, options).

type AnySchema = z.ZodType;
interface Def {
  type: string;
  innerType?: AnySchema;
  in?: AnySchema;
  defaultValue?: unknown;
  shape?: Record<string, AnySchema>;
  entries?: Record<string, string>;
  checks?: { _zod: { def: { check: string; value?: number; inclusive?: boolean; format?: string } } }[];
}
const defOf = (s: AnySchema): Def => (s as unknown as { def: Def }).def;

interface Unwrapped {
  base: AnySchema;
  optional: boolean;
  default: unknown;
  description: string;
}

function unwrap(s: AnySchema): Unwrapped {
  let optional = false;
  let dflt: unknown;
  let description = s.description ?? '';
  for (;;) {
    const d = defOf(s);
    if (d.type === 'optional') optional = true;
    else if (d.type === 'default' || d.type === 'prefault') dflt ??= d.defaultValue;
    else if (d.type !== 'pipe') break;
    s = (d.type === 'pipe' ? d.in : d.innerType)!;
    description ||= s.description ?? '';
  }
  return { base: s, optional, default: dflt, description };
}

function objectShape(s: AnySchema): Record<string, AnySchema> | undefined {
  const d = defOf(unwrap(s).base);
  return d.type === 'object' ? (d.shape as Record<string, AnySchema>) : undefined;
}

function leafInfo(path: string, s: AnySchema): ConfigField {
  const u = unwrap(s);
  const d = defOf(u.base);
  let type: FieldType;
  let values: string[] | undefined;
  let min: number | undefined;
  let max: number | undefined;
  let minInc = true;
  let maxInc = true;
  if (d.type === 'number') {
    type = 'number';
    for (const c of d.checks ?? []) {
      const cd = c._zod.def;
      if (cd.check === 'number_format' && cd.format === 'safeint') type = 'integer';
      if (cd.check === 'greater_than' && cd.value !== undefined) [min, minInc] = [cd.value, cd.inclusive ?? true];
      if (cd.check === 'less_than' && cd.value !== undefined) [max, maxInc] = [cd.value, cd.inclusive ?? true];
    }
  } else if (d.type === 'boolean') type = 'boolean';
  else if (d.type === 'enum') {
    type = 'enum';
    values = Object.values(d.entries ?? {});
  } else if (d.type === 'string') type = 'string';
  else throw new Error(`configFields: unsupported schema type '${d.type}' at ${path}`);
  const f: ConfigField = { path, type, default: u.default, optional: u.optional, description: u.description };
  if (values) f.values = values;
  if (min !== undefined) [f.min, f.minInclusive] = [min, minInc];
  if (max !== undefined) [f.max, f.maxInclusive] = [max, maxInc];
  return f;
}

function walk(s: AnySchema, prefix: string, out: ConfigField[]): void {
  const shape = objectShape(s);
  if (!shape) {
    out.push(leafInfo(prefix, s));
    return;
  }
  for (const [k, v] of Object.entries(shape)) walk(v, prefix ? `${prefix}.${k}` : k, out);
}

let fieldsCache: ConfigField[] | undefined;

/** Every leaf of the config as a dotted path with its type, default and description. */
export function configFields(): ConfigField[] {
  if (!fieldsCache) {
    fieldsCache = [];
    walk(RawConfigSchema, '', fieldsCache);
  }
  return fieldsCache.map((f) => ({ ...f }));
}

function fieldMap(): Map<string, ConfigField> {
  return new Map(configFields().map((f) => [f.path, f]));
}

// ---------------------------------------------------------------------------------------------
// Suggestions.

function editDistance(a: string, b: string): number {
  a = a.toLowerCase();
  b = b.toLowerCase();
  const row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return row[b.length]!;
}

/** ` (did you mean "x"?)` for the closest candidate within a small edit distance, else ''. */
export function didYouMean(word: string, candidates: Iterable<string>): string {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = editDistance(word, c);
    if (d < bestD) {
      bestD = d;
      best = c;
    }
  }
  const limit = Math.max(2, Math.floor(word.length / 3));
  return best !== undefined && bestD <= limit ? ` (did you mean "${best}"?)` : '';
}

// ---------------------------------------------------------------------------------------------
// Merging and overrides.

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function deepMerge(base: Obj, over: Obj): Obj {
  const out: Obj = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = isObj(v) && isObj(out[k]) ? deepMerge(out[k] as Obj, v) : v;
  return out;
}

function clone<T>(v: T): T {
  return JSON.parse(JSON.stringify(v)) as T;
}

/** Origins of values, for error messages: dotted path → 'preset tiny' | 'file x.yaml' | '--a.b'. */
type Origins = Map<string, string>;

function recordOrigins(v: unknown, prefix: string, origin: string, out: Origins): void {
  if (isObj(v)) {
    for (const [k, x] of Object.entries(v)) recordOrigins(x, prefix ? `${prefix}.${k}` : k, origin, out);
  } else out.set(prefix, origin);
}

function coerce(raw: string, f: ConfigField): unknown {
  const s = raw.trim();
  switch (f.type) {
    case 'number':
    case 'integer': {
      const n = s === '' ? NaN : Number(s.replace(/_/g, ''));
      return Number.isFinite(n) ? n : raw; // leave the string: the schema reports it
    }
    case 'boolean': {
      const l = s.toLowerCase();
      if (['true', '1', 'yes', 'on', ''].includes(l)) return true; // `--model.qkNorm` alone means true
      if (['false', '0', 'no', 'off'].includes(l)) return false;
      return raw;
    }
    default:
      return raw;
  }
}

function applyOverrides(cfg: Obj, overrides: Record<string, string>, origins: Origins): Obj {
  const fields = fieldMap();
  for (const [key, value] of Object.entries(overrides)) {
    const path = key.replace(/^--?/, '');
    const f = fields.get(path);
    if (!f) {
      const section = path.split('.')[0]!;
      const hint = didYouMean(path, fields.keys());
      const known = fields.has(section) || [...fields.keys()].some((p) => p.startsWith(`${section}.`))
        ? `; the fields of '${section}' are ${[...fields.keys()].filter((p) => p.startsWith(`${section}.`)).join(', ')}`
        : `; run 'mdlm train --help' for the list of fields`;
      fail('BAD_CONFIG', `unknown config field '--${path}'${hint}${hint ? '' : known}`);
    }
    const parts = path.split('.');
    let o = cfg;
    for (const p of parts.slice(0, -1)) {
      if (!isObj(o[p])) o[p] = {};
      o = o[p] as Obj;
    }
    o[parts[parts.length - 1]!] = coerce(value, f);
    origins.set(path, `--${path}`);
  }
  return cfg;
}

// ---------------------------------------------------------------------------------------------
// Issue formatting.

function getAt(v: unknown, path: readonly PropertyKey[]): unknown {
  for (const p of path) {
    if (!isObj(v)) return undefined;
    v = v[p as string];
  }
  return v;
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v);
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (Array.isArray(v)) return `a list ${JSON.stringify(v).slice(0, 60)}`;
  if (typeof v === 'object') return 'an object';
  return String(v);
}

function allowedFor(path: string): string {
  const f = fieldMap().get(path);
  if (!f) return '';
  let range = '';
  if (f.min !== undefined && f.max !== undefined) range = ` in ${f.minInclusive ? '[' : '('}${f.min}, ${f.max}${f.maxInclusive ? ']' : ')'}`;
  else if (f.min !== undefined) range = ` ${f.minInclusive ? '>=' : '>'} ${f.min}`;
  else if (f.max !== undefined) range = ` ${f.maxInclusive ? '<=' : '<'} ${f.max}`;
  switch (f.type) {
    case 'enum': return `one of ${f.values!.join(', ')}`;
    case 'integer': return `an integer${range}`;
    case 'number': return `a number${range}`;
    case 'boolean': return 'true or false';
    case 'string': return 'a non-empty string';
  }
}

interface IssueLike {
  code: string;
  path: PropertyKey[];
  message: string;
  keys?: string[];
  expected?: string;
  values?: unknown[];
  minimum?: number | bigint;
  maximum?: number | bigint;
  inclusive?: boolean;
}

function formatIssue(issue: IssueLike, input: Obj, origins: Origins): string {
  const path = issue.path.map(String).join('.');
  const value = getAt(input, issue.path);
  const from = origins.get(path);
  const src = from ? ` (from ${from})` : '';
  const where = path || 'config';
  switch (issue.code) {
    case 'unrecognized_keys': {
      const shape = path ? objectShape(fieldSchemaAt(issue.path.map(String))!) : objectShape(RawConfigSchema);
      const known = Object.keys(shape ?? {});
      return (issue.keys ?? []).map((k) => {
        const full = path ? `${path}.${k}` : k;
        const o = origins.get(full) ?? [...origins.entries()].find(([p]) => p.startsWith(`${full}.`))?.[1];
        return `${full}: unknown key${o ? ` (from ${o})` : ''}${didYouMean(k, known)}; ${where === 'config' ? 'the sections are' : `'${where}' has`} ${known.join(', ')}`;
      }).join('\n');
    }
    case 'invalid_type':
    case 'invalid_value': {
      let allowed = allowedFor(path);
      if (issue.code === 'invalid_value' && issue.values) allowed = `one of ${issue.values.map(String).join(', ')}`;
      if (!allowed && issue.expected) allowed = issue.expected === 'object' ? 'a section (mapping of keys to values)' : issue.expected;
      const hint = issue.code === 'invalid_value' && typeof value === 'string' && issue.values ? didYouMean(value, issue.values.map(String)) : '';
      return `${where}: got ${show(value)}${src}, expected ${allowed}${hint}`;
    }
    case 'too_small':
    case 'too_big': {
      const bound = issue.code === 'too_small' ? issue.minimum : issue.maximum;
      const op = issue.code === 'too_small' ? (issue.inclusive ? '>=' : '>') : (issue.inclusive ? '<=' : '<');
      const what = typeof value === 'string' ? 'a non-empty string' : allowedFor(path) || `a value ${op} ${String(bound)}`;
      return `${where}: got ${show(value)}${src}, expected ${what}`;
    }
    case 'custom':
      return issue.message.startsWith(where) ? `${issue.message}${src}` : `${where}: ${issue.message}${src}`;
    default:
      return `${where}: ${issue.message} (got ${show(value)}${src})`;
  }
}

function fieldSchemaAt(path: string[]): AnySchema | undefined {
  let s: AnySchema = RawConfigSchema;
  for (const p of path) {
    const shape = objectShape(s);
    if (!shape || !shape[p]) return undefined;
    s = shape[p]!;
  }
  return s;
}

/** Validate an already-merged config object (with the data's tokenizer, where known); throws BAD_CONFIG with every problem listed. */
export function parseConfig(input: unknown, origins: Origins = new Map(), context = 'invalid config', tokenizer?: TokenizerShape): TrainConfig {
  const r = (tokenizer ? trainConfigSchema(tokenizer) : TrainConfigSchema).safeParse(input);
  if (r.success) return r.data;
  const lines = r.error.issues.map((i) => formatIssue(i as unknown as IssueLike, isObj(input) ? input : {}, origins));
  return fail('BAD_CONFIG', `${context}:\n  ${lines.join('\n  ')}`);
}

// ---------------------------------------------------------------------------------------------
// Files.

export function readConfigFile(file: string): Obj {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') fail('NOT_FOUND', `config file '${file}' does not exist; check the path given to --config`);
    return fail('BAD_CONFIG', `cannot read config file '${file}': ${(e as Error).message}`);
  }
  const ext = extname(file).toLowerCase();
  let data: unknown;
  if (ext === '.json') {
    try {
      data = JSON.parse(text);
    } catch (e) {
      fail('BAD_CONFIG', `config file '${file}' is not valid JSON: ${(e as Error).message}`);
    }
  } else if (ext === '.yaml' || ext === '.yml') {
    const doc = YAML.parseDocument(text, { prettyErrors: true, uniqueKeys: true });
    if (doc.errors.length > 0) {
      fail('BAD_CONFIG', `config file '${file}' is not valid YAML: ${doc.errors[0]!.message}`);
    }
    data = doc.toJS();
  } else {
    return fail('BAD_CONFIG', `config file '${file}' must end in .yaml, .yml or .json (got '${ext || 'no extension'}')`);
  }
  if (data === null || data === undefined) return {};
  if (!isObj(data)) fail('BAD_CONFIG', `config file '${file}' must hold a mapping of sections (model, objective, data, train, backend, out), not ${show(data)}`);
  return data;
}

/**
 * `--train.steps 10` on its own should just work: a warmup that comes from the schema default or
 * a preset (not one the user wrote in a file or flag) is capped at train.steps. An explicit
 * conflict stays an error.
 */
function capImplicitWarmup(cfg: Obj, origins: Origins): void {
  const o = origins.get('train.warmupSteps');
  if (o !== undefined && !o.startsWith('preset ')) return;
  const train = isObj(cfg.train) ? cfg.train : undefined;
  const steps = train?.steps;
  if (typeof steps !== 'number' || !Number.isInteger(steps) || steps < 1) return;
  const warm = typeof train!.warmupSteps === 'number' ? train!.warmupSteps : (TrainConfigSchema.parse({}).train.warmupSteps);
  if (warm > steps) train!.warmupSteps = steps;
}

/** Preset, then the --init-from checkpoint's model, then file, then dotted overrides, unvalidated; with where each value came from. */
export function mergeConfig(opts: ResolveOptions = {}): { cfg: Obj; origins: Origins } {
  const origins: Origins = new Map();
  let cfg: Obj = {};
  if (opts.preset !== undefined) {
    const p = (PRESETS as Record<string, Preset>)[opts.preset];
    if (!p) fail('BAD_CONFIG', `unknown preset '${opts.preset}'${didYouMean(opts.preset, PRESET_NAMES)}; presets are ${PRESET_NAMES.join(', ')}`);
    cfg = clone(p as Obj);
    recordOrigins(cfg, '', `preset ${opts.preset}`, origins);
  }
  if (opts.initFrom) takeInitModel(cfg, origins, opts.initFrom);
  if (opts.file !== undefined) {
    const f = readConfigFile(opts.file);
    recordOrigins(f, '', `file ${opts.file}`, origins);
    cfg = deepMerge(cfg, f);
  }
  cfg = applyOverrides(cfg, opts.overrides ?? {}, origins);
  return { cfg, origins };
}

/** Preset, then the --init-from checkpoint's model, then file, then dotted overrides; validated with the data's tokenizer. */
export function resolveConfig(opts: ResolveOptions = {}): TrainConfig {
  const { cfg, origins } = mergeConfig(opts);
  if (opts.initFrom) checkInitModel(cfg, origins, opts.initFrom, opts);
  capImplicitWarmup(cfg, origins);
  const src = [opts.preset && `preset '${opts.preset}'`, opts.initFrom && `--init-from ${opts.initFrom.source}`, opts.file && `file '${opts.file}'`, Object.keys(opts.overrides ?? {}).length > 0 && 'flags'].filter(Boolean).join(' + ');
  const config = parseConfig(cfg, origins, `invalid config${src ? ` (${src})` : ''}`, opts.tokenizer);
  const tok = opts.tokenizer ?? builtinTokenizer(config.data.tokenizer);
  if (opts.log && tok && !origins.has('model.vocabSize')) {
    const needs = vocabularyNeeds(tok, config.objective.kind, config.objective.maskTokenId);
    const mask = needs.maskAdded ? ` and the [MASK] masked diffusion adds as id ${needs.maskId}` : '';
    opts.log(`vocabulary: model.vocabSize ${config.model.vocabSize}, the ${tok.name} tokenizer's ${tok.vocabSize} ids${mask} rounded up to a multiple of ${vocabMultiple(needs.ids)} (set model.vocabSize to choose)`);
  }
  return config;
}

const isSetBy = (origin: string | undefined, init: InitModel): boolean => origin !== undefined && origin !== init.source && !origin.startsWith('preset ');

/** The checkpoint's model in place of the preset's, seqLen apart; its tokenizer as data.tokenizer's default. */
function takeInitModel(cfg: Obj, origins: Origins, init: InitModel): void {
  const preset = isObj(cfg.model) ? cfg.model : {};
  const seqLen = Math.min(typeof preset.seqLen === 'number' ? preset.seqLen : ModelSchema.parse({}).seqLen, init.model.seqLen);
  for (const key of [...origins.keys()]) if (key.startsWith('model.')) origins.delete(key);
  cfg.model = { ...init.model, seqLen };
  recordOrigins(init.model, 'model', init.source, origins);
  origins.set('model.seqLen', `the preset, at most ${init.source}'s context`);
  if (init.tokenizer !== undefined) {
    cfg.data = { ...(isObj(cfg.data) ? cfg.data : {}), tokenizer: init.tokenizer };
    origins.set('data.tokenizer', init.source);
  }
}

/**
 * A file or flag may not contradict the --init-from checkpoint's model (a larger vocabSize
 * excepted); a diffusion checkpoint's [MASK] is the default; the vocabulary grows where masked
 * diffusion needs a [MASK] row the checkpoint lacks.
 */
function checkInitModel(cfg: Obj, origins: Origins, init: InitModel, opts: ResolveOptions): void {
  const model = cfg.model as Obj;
  const problems: string[] = [];
  for (const key of Object.keys(init.model) as (keyof ModelConfig)[]) {
    const origin = origins.get(`model.${key}`);
    // seqLen is the run's training window; initStd initialises nothing the checkpoint gives.
    if (key === 'seqLen' || key === 'initStd' || !isSetBy(origin, init)) continue;
    const value = model[key];
    if (key === 'vocabSize' && typeof value === 'number' && value >= init.model.vocabSize) continue;
    if (value !== init.model[key]) problems.push(`model.${key} is ${show(value)} (from ${origin}) but ${String(init.model[key])} in ${init.source}`);
  }
  if (problems.length) fail('BAD_CONFIG', `--init-from takes the model from the checkpoint: ${problems.join('; ')}; drop ${problems.length > 1 ? 'those settings' : 'that setting'} or choose another checkpoint`);
  const objective = isObj(cfg.objective) ? cfg.objective : {};
  const kind = objective.kind ?? ObjectiveSchema.parse({}).kind;
  if (kind === 'mdlm' && init.maskTokenId !== undefined && objective.maskTokenId === undefined) {
    cfg.objective = { ...objective, maskTokenId: init.maskTokenId };
    origins.set('objective.maskTokenId', init.source);
  }
  const data = isObj(cfg.data) ? cfg.data : {};
  const tok = opts.tokenizer ?? builtinTokenizer(typeof data.tokenizer === 'string' ? data.tokenizer : 'byte');
  if (!tok || isSetBy(origins.get('model.vocabSize'), init) || (kind !== 'ar' && kind !== 'mdlm')) return;
  const mask = (cfg.objective as Obj | undefined)?.maskTokenId;
  const needs = vocabularyNeeds(tok, kind, typeof mask === 'number' ? mask : undefined);
  const rows = init.model.vocabSize;
  // Only the [MASK] missing: grow the embedding for it. A tokenizer larger than the model is the wrong one (the schema says so).
  if (needs.ids > rows && tok.vocabSize <= rows) {
    model.vocabSize = paddedVocabSize(needs.ids);
    origins.set('model.vocabSize', `${init.source} grown for the [MASK]`);
  }
}
