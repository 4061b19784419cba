/**
 * Any Hugging Face `tokenizer.json`, through @huggingface/tokenizers (pure JS, offline: it is
 * given the parsed JSON, never a hub id). mdlm needs an EOS and a MASK id: they are looked up among
 * the tokenizer's tokens (`tokenizer_config.json`'s eos_token / mask_token first, then the usual
 * spellings) and, when absent, appended as special added tokens after the highest existing id. The
 * tokenizer.json that `files()` returns includes those additions, so a reload gives the same ids.
 */
import { Tokenizer as HfCore } from '@huggingface/tokenizers';
import { fail } from '../errors.js';
import type { Tokenizer } from './tokenizer_core.js';
import { HF_TOKENIZER_FILE } from './tokenizer_core.js';

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
  readonly maskId: number;
  readonly padId?: number;
  readonly unkId?: number;
  /** Tokens mdlm appended because the tokenizer lacked them. */
  readonly added: string[];
  private readonly core: HfCore;
  private readonly json: Record<string, unknown>;
  private readonly config: Record<string, unknown>;

  private constructor(core: HfCore, json: Record<string, unknown>, config: Record<string, unknown>, name: string, ids: { vocabSize: number; eos: number; mask: number; pad?: number; unk?: number }, added: string[]) {
    this.core = core;
    this.json = json;
    this.config = config;
    this.name = name;
    this.vocabSize = ids.vocabSize;
    this.eosId = ids.eos;
    this.maskId = ids.mask;
    if (ids.pad !== undefined) this.padId = ids.pad;
    if (ids.unk !== undefined) this.unkId = ids.unk;
    this.added = added;
  }

  static fromJson(input: unknown, opts: HfOptions = {}): HfTokenizer {
    const source = opts.source ?? 'tokenizer.json';
    if (!input || typeof input !== 'object' || Array.isArray(input) || !('model' in input)) {
      fail('BAD_FILE', `${source} is not a Hugging Face tokenizer.json (no "model" section); export one with tokenizer.save("tokenizer.json") or pass "byte" / "gpt2"`);
    }
    const config = opts.config && !('mdlm_tokenizer' in opts.config) ? opts.config : {};
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
    const added: string[] = [];
    const ensure = (preferred: unknown, candidates: string[], fallback: string): void => {
      if (find(preferred, candidates) !== undefined) return;
      let maxId = -1;
      for (const id of vocab.values()) if (id > maxId) maxId = id;
      const tok: AddedTokenJson = { id: maxId + 1, content: fallback, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true };
      (json.added_tokens as AddedTokenJson[]).push(tok);
      added.push(fallback);
      core = build(json, config, source);
      vocab = core.get_vocab(true);
    };
    ensure(config.eos_token, EOS_CANDIDATES, '<|endoftext|>');
    ensure(config.mask_token, MASK_CANDIDATES, '[MASK]');
    let maxId = -1;
    for (const id of vocab.values()) if (id > maxId) maxId = id;
    const pad = find(config.pad_token, PAD_CANDIDATES);
    const unk = find(config.unk_token, UNK_CANDIDATES);
    const ids = { vocabSize: maxId + 1, eos: find(config.eos_token, EOS_CANDIDATES)!, mask: find(config.mask_token, MASK_CANDIDATES)!, pad, unk };
    return new HfTokenizer(core, json, config, opts.name ?? 'hf', ids, added);
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

  files(): Record<string, string> {
    const out: Record<string, string> = { [HF_TOKENIZER_FILE]: JSON.stringify(this.json) };
    if (Object.keys(this.config).length) out['tokenizer_config.json'] = JSON.stringify(this.config, null, 2) + '\n';
    return out;
  }
}

function build(json: Record<string, unknown>, config: Record<string, unknown>, source: string): HfCore {
  try {
    return new HfCore(json, config);
  } catch (e) {
    fail('BAD_FILE', `${source}: @huggingface/tokenizers cannot load it (${(e as Error).message}); check that it is a complete tokenizer.json`);
  }
}
