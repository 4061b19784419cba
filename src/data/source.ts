/** What the loader reads from: a token shard, a Megatron indexed dataset or tokens in memory. */
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

/** Tokens held in memory (text tokenised on the fly by `mdlm eval`, tests); documents EOS-terminated. */
export class ArrayTokenSource implements TokenSource {
  readonly documentStarts = undefined;

  constructor(readonly path: string, private readonly tokens: Int32Array, readonly vocabSize: number, readonly eosId: number) {}

  get length(): number {
    return this.tokens.length;
  }

  read(start: number, count: number, out: Int32Array = new Int32Array(count)): Int32Array {
    if (!(start >= 0 && count >= 0 && start + count <= this.tokens.length)) {
      throw new RangeError(`${this.path}: read [${start}, ${start + count}) outside [0, ${this.tokens.length})`);
    }
    out.set(this.tokens.subarray(start, start + count));
    return out;
  }

  close(): void {}
}
