/**
 * The tokenizer interface and the descriptor format, free of Node built-ins (browser-safe), and
 * importing nothing: the per-kind modules (byte.ts, gpt2.ts, hf.ts) import it, and what picks
 * among them (tokenizer_files.ts, tokenizer.ts) imports those.
 */

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
