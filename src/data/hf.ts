/**
 * Any Hugging Face `tokenizer.json`, through @huggingface/tokenizers (pure JS, offline: it is
 * given the parsed JSON, never a hub id). mdlm needs an EOS id: it is looked up among the
 * tokenizer's tokens (`tokenizer_config.json`'s eos_token first, then the usual spellings) and,
 * when absent, appended as a special added token after the highest existing id. A [MASK] is looked
 * up the same way but added only by `withMaskToken()`, for masked diffusion. The tokenizer.json
 * and tokenizer_config.json that `files()` returns include those additions, so a reload (by mdlm or
 * transformers) gives the same ids.
 */
import { Tokenizer as HfCore } from '@huggingface/tokenizers';
import { fail } from '../errors.js';
import type { SpecialTokenText, Tokenizer } from './tokenizer_core.js';
import { HF_TOKENIZER_FILE, MASK_TOKEN, TOKENIZER_CONFIG_FILE } from './tokenizer_core.js';

const MASK_CANDIDATES = ['<|mask|>', '[MASK]', '<mask>', '<|MASK|>'];
const EOS_CANDIDATES = ['<|endoftext|>', '</s>', '<|end_of_text|>', '<|eos|>', '<eos>', '[EOS]', '<|im_end|>', '[SEP]'];
const PAD_CANDIDATES = ['<pad>', '[PAD]', '<|pad|>', '<|padding|>'];
const UNK_CANDIDATES = ['<unk>', '[UNK]', '<|unk|>'];

interface AddedTokenJson {
  id: number;
  content: string;
  single_word: boolean;
  lstrip: boolean;
  rstrip: boolean;
  normalized: boolean;
  special: boolean;
}

export interface HfOptions {
  name?: string;
  /** Where it came from, for error messages. */
  source?: string;
  /** A parsed tokenizer_config.json (HF), if one sits next to the tokenizer.json. */
  config?: Record<string, unknown>;
  /** Add a [MASK] when the tokenizer has none (see withMaskToken). */
  withMask?: boolean;
  /** Tokens mdlm added before (kept in `added`). */
  added?: readonly string[];
}

function maxIdOf(vocab: Map<string, number>): number {
  let maxId = -1;
  for (const id of vocab.values()) if (id > maxId) maxId = id;
  return maxId;
}

function tokenContent(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

export class HfTokenizer implements Tokenizer {
  readonly name: string;
  readonly vocabSize: number;
  readonly eosId: number;
  readonly maskId?: number;
  readonly padId?: number;
  readonly unkId?: number;
  /** Tokens mdlm appended because the tokenizer lacked them. */
  readonly added: string[];
  readonly chatTemplate?: string;
  readonly specialTokens: Readonly<SpecialTokenText>;
  private readonly core: HfCore;
  private readonly json: Record<string, unknown>;
  private readonly config: Record<string, unknown>;

  private readonly opts: HfOptions;

  private constructor(core: HfCore, json: Record<string, unknown>, config: Record<string, unknown>, opts: HfOptions, ids: { vocabSize: number; eos: number; mask?: number; pad?: number; unk?: number }, added: string[]) {
    this.core = core;
    this.json = json;
    this.config = config;
    this.opts = opts;
    this.name = opts.name ?? 'hf';
    this.vocabSize = ids.vocabSize;
    this.eosId = ids.eos;
    if (ids.mask !== undefined) this.maskId = ids.mask;
    if (ids.pad !== undefined) this.padId = ids.pad;
    if (ids.unk !== undefined) this.unkId = ids.unk;
    this.added = added;
    const template = chatTemplateOf(config.chat_template, opts.source ?? 'tokenizer_config.json');
    if (template !== undefined) this.chatTemplate = template;
    const special: SpecialTokenText = {};
    for (const key of ['bos_token', 'eos_token', 'unk_token', 'pad_token', 'mask_token'] as const) {
      const text = tokenContent(config[key]);
      if (text !== undefined) special[key] = text;
    }
    this.specialTokens = special;
  }

  static fromJson(input: unknown, opts: HfOptions = {}): HfTokenizer {
    const source = opts.source ?? 'tokenizer.json';
    if (!input || typeof input !== 'object' || Array.isArray(input) || !('model' in input)) {
      fail('BAD_FILE', `${source} is not a Hugging Face tokenizer.json (no "model" section); export one with tokenizer.save("tokenizer.json") or pass "byte" / "gpt2"`);
    }
    const config = { ...(opts.config ?? {}) };
    const json = structuredClone(input) as Record<string, unknown>;
    if (!Array.isArray(json.added_tokens)) json.added_tokens = [];
    let core = build(json, config, source);
    let vocab = core.get_vocab(true);
    const find = (preferred: unknown, candidates: string[]): number | undefined => {
      const p = tokenContent(preferred);
      if (p !== undefined && vocab.has(p)) return vocab.get(p);
      for (const c of candidates) if (vocab.has(c)) return vocab.get(c);
      return undefined;
    };
    const added = [...(opts.added ?? [])];
    const ensure = (key: 'eos_token' | 'mask_token', candidates: string[], fallback: string): void => {
      if (find(config[key], candidates) !== undefined) return;
      const tok: AddedTokenJson = { id: maxIdOf(vocab) + 1, content: fallback, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
      (json.added_tokens as AddedTokenJson[]).push(tok);
      added.push(fallback);
      config[key] = fallback;
      core = build(json, config, source);
      vocab = core.get_vocab(true);
    };
    ensure('eos_token', EOS_CANDIDATES, '<|endoftext|>');
    if (opts.withMask) ensure('mask_token', MASK_CANDIDATES, MASK_TOKEN);
    const ids = {
      vocabSize: maxIdOf(vocab) + 1, eos: find(config.eos_token, EOS_CANDIDATES)!, mask: find(config.mask_token, MASK_CANDIDATES),
      pad: find(config.pad_token, PAD_CANDIDATES), unk: find(config.unk_token, UNK_CANDIDATES),
    };
    // The config names the special tokens found, so transformers' AutoTokenizer knows them too.
    const text = new Map([...vocab].map(([t, id]) => [id, t]));
    for (const [key, id] of [['eos_token', ids.eos], ['mask_token', ids.mask], ['pad_token', ids.pad], ['unk_token', ids.unk]] as const) {
      if (id !== undefined && tokenContent(config[key]) !== text.get(id)) config[key] = text.get(id);
    }
    return new HfTokenizer(core, json, config, opts, ids, added);
  }

  /** A copy with [MASK] appended as id vocabSize (this, when the tokenizer has a mask token). */
  withMaskToken(): HfTokenizer {
    if (this.maskId !== undefined) return this;
    return HfTokenizer.fromJson(this.json, { ...this.opts, config: this.config, added: this.added, withMask: true });
  }

  withChatTemplate(template: string): HfTokenizer {
    return HfTokenizer.fromJson(this.json, { ...this.opts, config: { ...this.config, chat_template: template }, added: this.added });
  }

  encode(text: string): number[] {
    const enc = this.core.encode(text, { add_special_tokens: false });
    const ids = enc.ids;
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === undefined || ids[i] === null) {
        if (this.unkId === undefined) {
          fail('BAD_ARGUMENT', `${this.name}: token "${enc.tokens[i]}" has no id and the tokenizer has no unknown token; use a tokenizer whose vocabulary covers the text (a byte-level BPE, or "byte")`);
        }
        ids[i] = this.unkId;
      }
    }
    return ids;
  }

  decode(ids: ArrayLike<number>): string {
    return this.core.decode(Array.from(ids), { skip_special_tokens: false });
  }

  /**
   * The tokenizer.json as given (with what mdlm added) and its tokenizer_config.json, which names
   * the special tokens and a tokenizer_class (PreTrainedTokenizerFast unless it had one).
   */
  files(): Record<string, string> {
    const config: Record<string, unknown> = { tokenizer_class: 'PreTrainedTokenizerFast', ...this.config };
    delete config.mdlm_tokenizer;
    return { [HF_TOKENIZER_FILE]: JSON.stringify(this.json), [TOKENIZER_CONFIG_FILE]: JSON.stringify(config, null, 2) + '\n' };
  }
}

/**
 * A tokenizer_config.json's chat_template: a string, or transformers' list of named templates
 * ({name, template}), of which the one named "default" is the chat template.
 */
function chatTemplateOf(value: unknown, source: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    const named = value.find((t: unknown) => t !== null && typeof t === 'object' && (t as { name?: unknown }).name === 'default') as { template?: unknown } | undefined;
    if (typeof named?.template === 'string') return named.template;
  }
  return fail('BAD_FILE', `${source}: chat_template is neither a string nor a list of named templates with one named "default"`);
}

function build(json: Record<string, unknown>, config: Record<string, unknown>, source: string): HfCore {
  try {
    return new HfCore(json, config);
  } catch (e) {
    fail('BAD_FILE', `${source}: @huggingface/tokenizers cannot load it (${(e as Error).message}); check that it is a complete tokenizer.json`);
  }
}
