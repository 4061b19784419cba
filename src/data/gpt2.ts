/**
 * GPT-2 BPE, offline, from js-tiktoken's bundled ranks: 50257 ids, EOS <|endoftext|> (50256).
 * It has no [MASK]; `withMaskToken()` adds one as 50257 (vocabSize 50258), which masked diffusion
 * needs and autoregressive models do not. (The model pads its embedding beyond either; that
 * padding is the model's business, not the tokenizer's.)
 */
import { Tiktoken } from 'js-tiktoken/lite';
import gpt2Ranks from 'js-tiktoken/ranks/gpt2';
import type { SpecialTokenText, Tokenizer } from './tokenizer_core.js';
import { BUILTIN_TOKENIZERS, HF_TOKENIZER_FILE, MASK_TOKEN, TOKENIZER_CONFIG_FILE, tokenizerConfigJson } from './tokenizer_core.js';
import { byteLevelString, byteLevelTokenizerJson } from './tokenizer_json.js';

export const GPT2_EOS = BUILTIN_TOKENIZERS.gpt2.eosId;
export const GPT2_MASK = BUILTIN_TOKENIZERS.gpt2.vocabSize;
const EOS_TEXT = '<|endoftext|>';

export class Gpt2Tokenizer implements Tokenizer {
  readonly name = 'gpt2';
  readonly vocabSize: number;
  readonly eosId = GPT2_EOS;
  readonly maskId?: number;
  readonly padId = undefined;
  readonly specialTokens: Readonly<SpecialTokenText>;
  private readonly enc: Tiktoken;

  /** `enc`: another instance's ranks with the same special tokens (parsing them takes ~0.1 s). */
  constructor(withMask: boolean, readonly chatTemplate?: string, enc?: Tiktoken) {
    this.enc = enc ?? new Tiktoken(gpt2Ranks, withMask ? { [MASK_TOKEN]: GPT2_MASK } : {});
    this.vocabSize = BUILTIN_TOKENIZERS.gpt2.vocabSize + (withMask ? 1 : 0);
    if (withMask) this.maskId = GPT2_MASK;
    this.specialTokens = { eos_token: EOS_TEXT, bos_token: EOS_TEXT, ...(withMask ? { mask_token: MASK_TOKEN } : {}) };
  }

  /** Special-token strings in the text (e.g. a literal "<|endoftext|>") are encoded as plain text. */
  encode(text: string): number[] {
    return this.enc.encode(text, [], []);
  }

  decode(ids: ArrayLike<number>): string {
    return this.enc.decode(Array.from(ids));
  }

  withMaskToken(): Gpt2Tokenizer {
    if (this.maskId !== undefined) return this;
    const masked = createGpt2Tokenizer(true);
    return this.chatTemplate === undefined ? masked : masked.withChatTemplate(this.chatTemplate);
  }

  withChatTemplate(template: string): Gpt2Tokenizer {
    return new Gpt2Tokenizer(this.maskId !== undefined, template, this.enc);
  }

  /** GPT-2's own tokenizer.json (byte-level BPE, the merges rebuilt from the ranks), [MASK] added where this has it. */
  files(): Record<string, string> {
    const special = [{ id: GPT2_EOS, content: EOS_TEXT }];
    if (this.maskId !== undefined) special.push({ id: this.maskId, content: MASK_TOKEN });
    const { vocab, merges } = gpt2Bpe();
    return {
      [HF_TOKENIZER_FILE]: byteLevelTokenizerJson(vocab, merges, special),
      [TOKENIZER_CONFIG_FILE]: tokenizerConfigJson({ eos: EOS_TEXT, bos: EOS_TEXT, ...(this.maskId !== undefined ? { mask: MASK_TOKEN } : {}) }, 'gpt2', this.chatTemplate),
    };
  }
}

let bpe: { vocab: Record<string, number>; merges: string[] } | undefined;

/**
 * GPT-2's byte-level vocabulary and merges from js-tiktoken's ranks. A token of rank r is the
 * merge of the two parts that BPE over the ranks below r leaves of its bytes; the merges are listed
 * in rank order, the priority both BPEs merge by, so they split text the same.
 */
function gpt2Bpe(): { vocab: Record<string, number>; merges: string[] } {
  if (bpe) return bpe;
  const tokens: string[] = []; // byte-level string by rank
  for (const line of gpt2Ranks.bpe_ranks.split('\n')) {
    if (!line) continue;
    const [, offset, ...b64] = line.split(' ');
    b64.forEach((t, i) => {
      const bin = atob(t);
      const bytes = Array.from(bin, (ch) => ch.charCodeAt(0));
      tokens[Number(offset) + i] = byteLevelString(bytes);
    });
  }
  const rank = new Map(tokens.map((t, r) => [t, r]));
  const merges: string[] = [];
  for (let r = 0; r < tokens.length; r++) {
    const parts = [...tokens[r]!];
    if (parts.length < 2) continue;
    for (;;) {
      let best = -1;
      let bestRank = r;
      for (let i = 0; i + 1 < parts.length; i++) {
        const pr = rank.get(parts[i]! + parts[i + 1]!);
        if (pr !== undefined && pr < bestRank) [best, bestRank] = [i, pr];
      }
      if (best < 0) break;
      parts.splice(best, 2, parts[best]! + parts[best + 1]!);
    }
    if (parts.length !== 2) throw new Error(`gpt2 ranks: token ${r} is not the merge of two lower-ranked tokens`);
    merges.push(`${parts[0]} ${parts[1]}`);
  }
  // GPT-2's own tokenizer.json lists <|endoftext|> in the vocabulary as well as among the added tokens.
  bpe = { vocab: { ...Object.fromEntries(tokens.map((t, r) => [t, r])), [EOS_TEXT]: GPT2_EOS }, merges };
  return bpe;
}

const cached: Partial<Record<'bare' | 'mask', Gpt2Tokenizer>> = {};
/** The ranks take ~0.1 s to parse; one instance of each variant is shared. */
export function createGpt2Tokenizer(withMask = false): Gpt2Tokenizer {
  const key = withMask ? 'mask' : 'bare';
  return (cached[key] ??= new Gpt2Tokenizer(withMask));
}
