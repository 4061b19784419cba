/** Byte-level tokenizer: ids 0..255 are UTF-8 bytes, then EOS (256), MASK (257), PAD (258). */
import type { Tokenizer } from './tokenizer_core.js';
import { descriptorJson, DESCRIPTOR_FILE } from './tokenizer_core.js';

export const BYTE_EOS = 256;
export const BYTE_MASK = 257;
export const BYTE_PAD = 258;
const SPECIAL_TEXT: Record<number, string> = { [BYTE_EOS]: '<|endoftext|>', [BYTE_MASK]: '[MASK]', [BYTE_PAD]: '<pad>' };

export class ByteTokenizer implements Tokenizer {
  readonly name = 'byte';
  readonly vocabSize = 259;
  readonly eosId = BYTE_EOS;
  readonly maskId = BYTE_MASK;
  readonly padId = BYTE_PAD;
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder('utf-8', { fatal: false });

  static create(): ByteTokenizer {
    return new ByteTokenizer();
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

  files(): Record<string, string> {
    return {
      [DESCRIPTOR_FILE]: descriptorJson({
        mdlm_tokenizer: 'byte',
        vocab_size: this.vocabSize,
        eos_token_id: this.eosId,
        mask_token_id: this.maskId,
        pad_token_id: this.padId,
        eos_token: SPECIAL_TEXT[BYTE_EOS]!,
        mask_token: SPECIAL_TEXT[BYTE_MASK]!,
        pad_token: SPECIAL_TEXT[BYTE_PAD]!,
      }),
    };
  }
}
