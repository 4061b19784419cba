/**
 * Standard Hugging Face `tokenizer.json` files for byte-level BPE tokenizers (GPT-2's format):
 * a ByteLevel pre-tokenizer (GPT-2's split regex, each byte shown as a printable character), a
 * BPE model over those characters, a ByteLevel decoder. The byte tokenizer is such a file with
 * the 256 bytes as its vocabulary and no merges; GPT-2 is the same with its 50000 merges.
 * Browser-safe.
 */

/** GPT-2's `bytes_to_unicode`: the printable character that stands for each byte in a byte-level vocabulary. */
export const BYTE_CHARS: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out.push(String.fromCodePoint(printable(b) ? b : next++));
  return out;
})();

/** Bytes as one byte-level vocabulary entry. */
export function byteLevelString(bytes: ArrayLike<number>): string {
  let s = '';
  for (let i = 0; i < bytes.length; i++) s += BYTE_CHARS[bytes[i]!]!;
  return s;
}

export interface AddedToken {
  id: number;
  content: string;
}

/**
 * A byte-level BPE tokenizer.json: `vocab` maps byte-level strings to ids, `merges` are "a b"
 * pairs in priority order, `special` the added special tokens. Special tokens are matched in
 * text by transformers (unless `split_special_tokens`), where mdlm encodes their text as bytes.
 */
export function byteLevelTokenizerJson(vocab: Record<string, number>, merges: readonly string[], special: readonly AddedToken[]): string {
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  const json = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: special.map((t) => ({ id: t.id, content: t.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: byteLevel,
    decoder: byteLevel,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
  return JSON.stringify(json);
}
