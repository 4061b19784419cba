/** Byte-level tokenizer: ids 0..255 are UTF-8 bytes, then EOS (256), MASK (257), PAD (258). */
import type { SpecialTokenText, Tokenizer } from './tokenizer_core.js';
import { BUILTIN_TOKENIZERS, HF_TOKENIZER_FILE, TOKENIZER_CONFIG_FILE, tokenizerConfigJson } from './tokenizer_core.js';
import { BYTE_CHARS, byteLevelTokenizerJson } from './tokenizer_json.js';

export const BYTE_EOS = BUILTIN_TOKENIZERS.byte.eosId;
export const BYTE_MASK = BUILTIN_TOKENIZERS.byte.maskId!;
export const BYTE_PAD = 258;
const SPECIAL_TEXT: Record<number, string> = { [BYTE_EOS]: '<|endoftext|>', [BYTE_MASK]: '[MASK]', [BYTE_PAD]: '<pad>' };

export class ByteTokenizer implements Tokenizer {
  readonly name = 'byte';
  readonly vocabSize = BUILTIN_TOKENIZERS.byte.vocabSize;
  readonly eosId = BYTE_EOS;
  readonly maskId = BYTE_MASK;
  readonly padId = BYTE_PAD;
  readonly specialTokens: Readonly<SpecialTokenText> = { eos_token: SPECIAL_TEXT[BYTE_EOS]!, mask_token: SPECIAL_TEXT[BYTE_MASK]!, pad_token: SPECIAL_TEXT[BYTE_PAD]! };
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder('utf-8', { fatal: false });

  private constructor(readonly chatTemplate?: string) {}

  static create(): ByteTokenizer {
    return new ByteTokenizer();
  }

  withChatTemplate(template: string): ByteTokenizer {
    return new ByteTokenizer(template);
  }

  encode(text: string): number[] {
    return Array.from(this.enc.encode(text));
  }

  /** Bytes decode as UTF-8 (invalid sequences become U+FFFD); specials render as their names. */
  decode(ids: ArrayLike<number>): string {
    let out = '';
    let run: number[] = [];
    const flush = () => {
      if (run.length) out += this.dec.decode(Uint8Array.from(run));
      run = [];
    };
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (id >= 0 && id < 256) run.push(id);
      else {
        flush();
        out += SPECIAL_TEXT[id] ?? `<|unk:${id}|>`;
      }
    }
    flush();
    return out;
  }

  /** It has its [MASK] (257) already. */
  withMaskToken(): ByteTokenizer {
    return this;
  }

  /** A byte-level BPE without merges whose vocabulary maps each byte's character to the byte: the same ids as here. */
  files(): Record<string, string> {
    const vocab = Object.fromEntries(BYTE_CHARS.map((c, b) => [c, b]));
    const special = [BYTE_EOS, BYTE_MASK, BYTE_PAD].map((id) => ({ id, content: SPECIAL_TEXT[id]! }));
    return {
      [HF_TOKENIZER_FILE]: byteLevelTokenizerJson(vocab, [], special),
      [TOKENIZER_CONFIG_FILE]: tokenizerConfigJson({ eos: SPECIAL_TEXT[BYTE_EOS]!, mask: SPECIAL_TEXT[BYTE_MASK]!, pad: SPECIAL_TEXT[BYTE_PAD]! }, 'byte', this.chatTemplate),
    };
  }
}
