/**
 * GPT-2 BPE, offline, from js-tiktoken's bundled ranks. EOS is <|endoftext|> (50256); [MASK] is
 * added as 50257, so vocabSize is 50258. (The model preset pads its embedding to 50304; that
 * padding is the model's business, not the tokenizer's.)
 */
import { Tiktoken } from 'js-tiktoken/lite';
import gpt2Ranks from 'js-tiktoken/ranks/gpt2';
import type { Tokenizer } from './tokenizer_core.js';
import { descriptorJson, DESCRIPTOR_FILE } from './tokenizer_core.js';

export const GPT2_EOS = 50256;
export const GPT2_MASK = 50257;

export class Gpt2Tokenizer implements Tokenizer {
  readonly name = 'gpt2';
  readonly vocabSize = 50258;
  readonly eosId = GPT2_EOS;
  readonly maskId = GPT2_MASK;
  readonly padId = undefined;
  private readonly enc: Tiktoken;

  constructor() {
    this.enc = new Tiktoken(gpt2Ranks, { '[MASK]': GPT2_MASK });
  }

  /** Special-token strings in the text (e.g. a literal "<|endoftext|>") are encoded as plain text. */
  encode(text: string): number[] {
    return this.enc.encode(text, [], []);
  }

  decode(ids: ArrayLike<number>): string {
    return this.enc.decode(Array.from(ids));
  }

  files(): Record<string, string> {
    return {
      [DESCRIPTOR_FILE]: descriptorJson({
        mdlm_tokenizer: 'gpt2',
        vocab_size: this.vocabSize,
        eos_token_id: this.eosId,
        mask_token_id: this.maskId,
        eos_token: '<|endoftext|>',
        mask_token: '[MASK]',
      }),
    };
  }
}

let cached: Gpt2Tokenizer | undefined;
/** The ranks take ~0.1 s to parse; one instance is shared. */
export function createGpt2Tokenizer(): Gpt2Tokenizer {
  cached ??= new Gpt2Tokenizer();
  return cached;
}
