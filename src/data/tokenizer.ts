/**
 * Tokenizers: one interface, three kinds (byte-level, GPT-2 BPE, any Hugging Face tokenizer.json).
 *
 * `loadTokenizer(spec)` takes `byte`, `gpt2`, a path to a `tokenizer.json`, or a directory that
 * holds a `tokenizer.json` and/or a `tokenizer_config.json` (what `files()` writes: standard
 * Hugging Face files, whose `mdlm_tokenizer` key names mdlm's built-in byte and gpt2 tokenizers),
 * and the chat template of a `chat_template.jinja` beside them (as newer transformers save it)
 * where the config has none.
 * The per-kind modules (byte.ts, gpt2.ts, hf.ts), tokenizer_core.ts, tokenizer_json.ts and
 * tokenizer_files.ts are browser-safe; only this loader touches the file system.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fail } from '../errors.js';

export * from './tokenizer_core.js';
export * from './tokenizer_files.js';
import { HF_TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, type Tokenizer } from './tokenizer_core.js';
import { tokenizerFromParts } from './tokenizer_files.js';

/** Whether a directory holds a tokenizer that `loadTokenizer(dir)` loads. */
export function hasTokenizer(dir: string): boolean {
  return existsSync(join(dir, HF_TOKENIZER_FILE)) || existsSync(join(dir, TOKENIZER_CONFIG_FILE));
}

/** Load a tokenizer from `byte`, `gpt2`, a tokenizer.json path, or a directory containing one. */
export async function loadTokenizer(spec: string): Promise<Tokenizer> {
  if (typeof spec !== 'string' || spec.length === 0) {
    fail('BAD_ARGUMENT', `tokenizer spec is empty: pass "byte", "gpt2", or a path to a tokenizer.json (or a directory containing one)`);
  }
  if (spec === 'byte') return (await import('./byte.js')).ByteTokenizer.create();
  if (spec === 'gpt2') return (await import('./gpt2.js')).createGpt2Tokenizer();
  if (!existsSync(spec)) {
    fail('NOT_FOUND', `tokenizer "${spec}" is neither "byte", "gpt2" nor an existing path; pass one of those, or the path to a tokenizer.json / a checkpoint directory containing one`);
  }
  if (statSync(spec).isDirectory()) {
    const config = join(spec, TOKENIZER_CONFIG_FILE);
    const json = join(spec, HF_TOKENIZER_FILE);
    if (!existsSync(config) && !existsSync(json)) {
      fail('NOT_FOUND', `directory ${spec} holds no tokenizer: expected ${HF_TOKENIZER_FILE} (written by a checkpoint, "mdlm data prepare" or Hugging Face)`);
    }
    const parsed = existsSync(config) ? (readJson(config) as Record<string, unknown>) : undefined;
    const templateFile = join(spec, CHAT_TEMPLATE_FILE);
    const withTemplate = parsed && parsed.chat_template === undefined && existsSync(templateFile) ? { ...parsed, chat_template: readFileSync(templateFile, 'utf8') } : parsed;
    return tokenizerFromParts(withTemplate, () => (existsSync(json) ? readJson(json) : undefined), spec);
  }
  // A tokenizer.json named directly runs as given (through @huggingface/tokenizers), with the
  // tokenizer_config.json beside it for its special tokens.
  const sibling = join(spec, '..', TOKENIZER_CONFIG_FILE);
  return loadHfFile(spec, existsSync(sibling) ? sibling : undefined);
}

/** The chat template file transformers writes beside tokenizer_config.json. */
export const CHAT_TEMPLATE_FILE = 'chat_template.jinja';

async function loadHfFile(path: string, configPath: string | undefined): Promise<Tokenizer> {
  const json = readJson(path);
  const config = configPath ? readJson(configPath) : {};
  const { HfTokenizer } = await import('./hf.js');
  return HfTokenizer.fromJson(json, { name: `hf:${path}`, source: path, config: config as Record<string, unknown> });
}

function readJson(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    fail('NOT_FOUND', `cannot read ${path}: ${(e as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    fail('BAD_FILE', `${path} is not valid JSON (${(e as Error).message}); re-download or re-export the tokenizer`);
  }
}
