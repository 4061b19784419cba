/**
 * The tokenizer interface and the descriptor format, free of Node built-ins (browser-safe).
 * `tokenizerFromFiles` rebuilds a tokenizer from the files `Tokenizer.files()` wrote — in a
 * browser too (e.g. from a fetched checkpoint). The Node loader is `loadTokenizer` in tokenizer.ts.
 */
import { fail } from '../errors.js';

export interface Tokenizer {
  /** 'byte', 'gpt2', or 'hf:<path>' — what `loadTokenizer` was given, resolved. */
  readonly name: string;
  /** True vocabulary size including the special tokens mdlm added; models may pad beyond it. */
  readonly vocabSize: number;
  readonly eosId: number;
  readonly maskId: number;
  readonly padId?: number;
  encode(text: string): number[];
  decode(ids: ArrayLike<number>): string;
  /** Files to write into a checkpoint (or data) directory so `loadTokenizer(dir)` reloads this tokenizer. */
  files(): Record<string, string | Uint8Array>;
}

/** The descriptor that byte / gpt2 tokenizers write as `tokenizer_config.json`. */
export interface MdlmTokenizerDescriptor {
  mdlm_tokenizer: 'byte' | 'gpt2';
  vocab_size: number;
  eos_token_id: number;
  mask_token_id: number;
  pad_token_id?: number;
  eos_token: string;
  mask_token: string;
  pad_token?: string;
}

export const DESCRIPTOR_FILE = 'tokenizer_config.json';
export const HF_TOKENIZER_FILE = 'tokenizer.json';

export function descriptorJson(d: MdlmTokenizerDescriptor): string {
  return JSON.stringify(d, null, 2) + '\n';
}

/**
 * A tokenizer from checkpoint files (name → contents), as `files()` returns them: the mdlm
 * descriptor for byte / gpt2, or an HF tokenizer.json (+ optional tokenizer_config.json).
 */
export async function tokenizerFromFiles(files: Record<string, string | Uint8Array>, source = 'checkpoint'): Promise<Tokenizer> {
  const text = (name: string): string | undefined => {
    const v = files[name];
    return v === undefined ? undefined : typeof v === 'string' ? v : new TextDecoder().decode(v);
  };
  const parse = (name: string): unknown => {
    try {
      return JSON.parse(text(name)!);
    } catch (e) {
      fail('BAD_FILE', `${source}/${name} is not valid JSON (${(e as Error).message})`);
    }
  };
  const config = text(DESCRIPTOR_FILE) !== undefined ? (parse(DESCRIPTOR_FILE) as Record<string, unknown>) : undefined;
  if (config && (config.mdlm_tokenizer === 'byte' || config.mdlm_tokenizer === 'gpt2')) {
    return config.mdlm_tokenizer === 'byte' ? (await import('./byte.js')).ByteTokenizer.create() : (await import('./gpt2.js')).createGpt2Tokenizer();
  }
  if (text(HF_TOKENIZER_FILE) !== undefined) {
    const { HfTokenizer } = await import('./hf.js');
    return HfTokenizer.fromJson(parse(HF_TOKENIZER_FILE), { name: `hf:${source}`, source: `${source}/${HF_TOKENIZER_FILE}`, config: config ?? {} });
  }
  fail('NOT_FOUND', `${source} holds no tokenizer: expected ${HF_TOKENIZER_FILE} or an mdlm ${DESCRIPTOR_FILE}`);
}
