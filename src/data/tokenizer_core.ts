/**
 * The tokenizer interface and the names of the files tokenizers are saved as, free of Node
 * built-ins (browser-safe), and importing nothing: the per-kind modules (byte.ts, gpt2.ts, hf.ts)
 * import it, and what picks among them (tokenizer_files.ts, tokenizer.ts) imports those.
 */

export interface Tokenizer {
  /** 'byte', 'gpt2', or 'hf:<path>' — what `loadTokenizer` was given, resolved. */
  readonly name: string;
  /** The ids the tokenizer has, its special tokens included; models may pad beyond it. */
  readonly vocabSize: number;
  readonly eosId: number;
  /**
   * The [MASK] id, where the tokenizer has one: the byte tokenizer always, others once
   * `withMaskToken()` added it. Only masked diffusion uses it.
   */
  readonly maskId?: number;
  readonly padId?: number;
  encode(text: string): number[];
  decode(ids: ArrayLike<number>): string;
  /** This tokenizer with a [MASK] special token as id `vocabSize` (the next free id); itself when it has one. */
  withMaskToken(): Tokenizer;
  /** The chat template (Jinja) of its tokenizer_config.json, where it has one (src/data/chat.ts renders it). */
  readonly chatTemplate?: string;
  /** This tokenizer with `template` as its chat template, which files() saves in tokenizer_config.json. */
  withChatTemplate(template: string): Tokenizer;
  /** The text of its special tokens by their tokenizer_config.json keys, which chat templates read (`{{ eos_token }}`). */
  readonly specialTokens: Readonly<SpecialTokenText>;
  /**
   * Files to write into a checkpoint (or data) directory: a standard Hugging Face
   * `tokenizer.json` and `tokenizer_config.json` (tokenizer_class, the special tokens, the mask
   * token included), so that `loadTokenizer(dir)` and transformers' `AutoTokenizer` load it with
   * the same ids.
   */
  files(): Record<string, string | Uint8Array>;
}

/**
 * The sizes of the built-in tokenizers, known without loading them: the config derives the
 * model's vocabulary from these (src/config/vocab.ts). The byte tokenizer has its [MASK]; GPT-2
 * has none until masked diffusion adds one as id 50257.
 */
export const BUILTIN_TOKENIZERS: Readonly<Record<'byte' | 'gpt2', TokenizerShape & { readonly eosId: number }>> = {
  byte: { name: 'byte', vocabSize: 259, eosId: 256, maskId: 257 },
  gpt2: { name: 'gpt2', vocabSize: 50257, eosId: 50256 },
};

/** What the config needs to know of a tokenizer to size the model's vocabulary (a Tokenizer is one). */
export interface TokenizerShape {
  readonly name: string;
  readonly vocabSize: number;
  readonly maskId?: number;
}

export const TOKENIZER_CONFIG_FILE = 'tokenizer_config.json';
export const HF_TOKENIZER_FILE = 'tokenizer.json';
/** The mask token mdlm adds to a tokenizer that has none. */
export const MASK_TOKEN = '[MASK]';

/** Special tokens' text by tokenizer_config.json key. */
export type SpecialTokenText = Partial<Record<'bos_token' | 'eos_token' | 'unk_token' | 'pad_token' | 'mask_token', string>>;

/** The special tokens of a tokenizer_config.json, by their text. */
export interface SpecialTokens {
  eos: string;
  mask?: string;
  pad?: string;
  unk?: string;
  bos?: string;
}

/**
 * A standard tokenizer_config.json for a tokenizer.json: transformers' `AutoTokenizer` reads
 * `tokenizer_class`, the special tokens and the chat template from it. `builtin` names the mdlm
 * tokenizer that wrote it (`mdlm_tokenizer`), so mdlm reloads its own faster implementation with
 * the same ids.
 */
export function tokenizerConfigJson(special: SpecialTokens, builtin?: 'byte' | 'gpt2', chatTemplate?: string): string {
  const cfg: Record<string, unknown> = { tokenizer_class: 'PreTrainedTokenizerFast' };
  if (builtin) cfg.mdlm_tokenizer = builtin;
  cfg.eos_token = special.eos;
  if (special.bos !== undefined) cfg.bos_token = special.bos;
  if (special.mask !== undefined) cfg.mask_token = special.mask;
  if (special.pad !== undefined) cfg.pad_token = special.pad;
  if (special.unk !== undefined) cfg.unk_token = special.unk;
  cfg.clean_up_tokenization_spaces = false;
  if (chatTemplate !== undefined) cfg.chat_template = chatTemplate;
  return JSON.stringify(cfg, null, 2) + '\n';
}
