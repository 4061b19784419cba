/** Logits for a batch of token rows: returns [rows·seqLen·vocab] floats (row-major). */
export type LogitsFn = (tokens: Int32Array, rows: number, seqLen: number) => Promise<Float32Array>;

/** Logits one token at a time over a cache of the earlier ones (KV-cached decoding of one sequence). */
export interface IncrementalLogits {
  /** Tokens the cache can hold. */
  readonly maxLen: number;
  /** Tokens fed since the last reset. */
  readonly position: number;
  reset(): void;
  /** Feed the next token; returns [vocab] logits for the token after it. */
  next(token: number): Promise<Float32Array>;
}
