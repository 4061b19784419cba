/** What the loader reads from: a token shard or a Megatron indexed dataset. */
export interface TokenSource {
  /** File the tokens come from, for error messages. */
  readonly path: string;
  /** Number of tokens. */
  readonly length: number;
  /** Vocabulary size the tokens were checked against (undefined: unchecked). */
  readonly vocabSize: number | undefined;
  /** The document separator, when documents are EOS-terminated. */
  readonly eosId: number | undefined;
  /**
   * Token offsets at which documents start, ascending, first 0 (for sources that know their
   * documents without an EOS, e.g. Megatron). Undefined: documents are found through `eosId`.
   */
  readonly documentStarts: Float64Array | undefined;
  /** Copy tokens [start, start + count) into `out` (allocated when absent). */
  read(start: number, count: number, out?: Int32Array): Int32Array;
  close(): void;
}
