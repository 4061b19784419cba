/**
 * Tokenizers: one interface, three kinds (byte-level, GPT-2 BPE, any Hugging Face tokenizer.json).
 *
 * `loadTokenizer(spec)` takes `byte`, `gpt2`, a path to a `tokenizer.json`, or a directory that holds
 * either a `tokenizer.json` or the small mdlm descriptor (`tokenizer_config.json` with an
 * `mdlm_tokenizer` key) that `files()` of the byte and gpt2 tokenizers writes. The per-kind modules
 * (byte.ts, gpt2.ts, hf.ts), tokenizer_core.ts and tokenizer_files.ts are browser-safe; only this loader
 * touches the file system.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fail } from '../errors.js';

export * from './tokenizer_core.js';
export * from './tokenizer_files.js';
import { DESCRIPTOR_FILE, HF_TOKENIZER_FILE, type MdlmTokenizerDescriptor, type Tokenizer } from './tokenizer_core.js';

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
    const desc = join(spec, DESCRIPTOR_FILE);
    const hfPath = join(spec, HF_TOKENIZER_FILE);
    if (existsSync(desc)) {
      const parsed = readJson(desc) as Partial<MdlmTokenizerDescriptor>;
      if (parsed.mdlm_tokenizer === 'byte' || parsed.mdlm_tokenizer === 'gpt2') {
        const tok = await loadTokenizer(parsed.mdlm_tokenizer);
        checkDescriptor(desc, parsed, tok);
        return tok;
      }
      if (parsed.mdlm_tokenizer !== undefined) {
        fail('BAD_FILE', `${desc}: unknown mdlm_tokenizer "${String(parsed.mdlm_tokenizer)}" (expected "byte" or "gpt2")`);
      }
    }
    if (existsSync(hfPath)) return loadHfFile(hfPath, existsSync(desc) ? desc : undefined);
    fail('NOT_FOUND', `directory ${spec} holds no tokenizer: expected ${HF_TOKENIZER_FILE} or an mdlm ${DESCRIPTOR_FILE} (written by a checkpoint or "mdlm data prepare")`);
  }
  const sibling = join(spec, '..', DESCRIPTOR_FILE);
  return loadHfFile(spec, existsSync(sibling) ? sibling : undefined);
}

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

function checkDescriptor(path: string, d: Partial<MdlmTokenizerDescriptor>, tok: Tokenizer): void {
  const pairs: [string, number | undefined, number | undefined][] = [
    ['vocab_size', d.vocab_size, tok.vocabSize],
    ['eos_token_id', d.eos_token_id, tok.eosId],
    ['mask_token_id', d.mask_token_id, tok.maskId],
  ];
  for (const [key, got, want] of pairs) {
    if (got !== undefined && got !== want) {
      fail('BAD_FILE', `${path}: ${key} is ${got} but the built-in ${tok.name} tokenizer has ${want}; the descriptor was written by an incompatible mdlm version or edited by hand`);
    }
  }
}
