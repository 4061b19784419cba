/**
 * The model's vocabulary follows the data's tokenizer: what a tokenizer needs of the embedding
 * under an objective (its ids, plus the [MASK] masked diffusion adds as the next free id where the
 * tokenizer has none), and how that is padded into `model.vocabSize` when the user does not set it.
 */
import { BUILTIN_TOKENIZERS, type TokenizerShape } from '../data/tokenizer_core.js';

export type { TokenizerShape } from '../data/tokenizer_core.js';

/** The built-in tokenizer a `data.tokenizer` spec names, known without loading it; undefined for a path. */
export function builtinTokenizer(spec: string): TokenizerShape | undefined {
  return spec === 'byte' || spec === 'gpt2' ? BUILTIN_TOKENIZERS[spec] : undefined;
}

export interface VocabularyNeeds {
  /** Embedding rows the tokenizer needs at least. */
  readonly ids: number;
  /** The [MASK] id of masked diffusion (undefined under ar). */
  readonly maskId: number | undefined;
  /** Whether the [MASK] is one the tokenizer lacks, added as id tokenizer.vocabSize. */
  readonly maskAdded: boolean;
}

/** What `tok` needs under `objective`; `maskTokenId`: the [MASK] id the config sets, if it does. */
export function vocabularyNeeds(tok: TokenizerShape, objective: 'ar' | 'mdlm', maskTokenId?: number): VocabularyNeeds {
  if (objective === 'ar') return { ids: tok.vocabSize, maskId: undefined, maskAdded: false };
  const maskId = maskTokenId ?? tok.maskId ?? tok.vocabSize;
  return { ids: Math.max(tok.vocabSize, maskId + 1), maskId, maskAdded: maskId !== tok.maskId };
}

/** The multiple `paddedVocabSize` rounds to. */
export function vocabMultiple(ids: number): number {
  return ids <= 512 ? 8 : 64;
}

/**
 * `model.vocabSize` for a tokenizer that needs `ids` rows: rounded up to a multiple of 64, the
 * width the matmul kernels tile by (GPT-2's 50257 ids and [MASK] → 50304, nanoGPT's size); a
 * vocabulary of at most 512 ids to a multiple of 8, where 64 would pad by up to a quarter (the byte
 * tokenizer's 259 → 264, the size the byte-level presets always had).
 */
export function paddedVocabSize(ids: number): number {
  const m = vocabMultiple(ids);
  return Math.ceil(ids / m) * m;
}
