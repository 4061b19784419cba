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
  /** Chat data: which tokens are in the loss (the assistant's). Undefined: every token is (pretraining data). */
  readonly lossMask: LossMaskReader | undefined;
  /** Copy tokens [start, start + count) into `out` (allocated when absent). */
  read(start: number, count: number, out?: Int32Array): Int32Array;
  close(): void;
}

/** The loss mask of chat data: 1 where a token is in the loss (the assistant's), else 0. */
export interface LossMaskReader {
  /** The mask of tokens [start, start + count), into `out` (allocated when absent). */
  read(start: number, count: number, out?: Uint8Array): Uint8Array;
}

/**
 * Tokens held in memory (text tokenised on the fly by `mdlm eval`, tests); documents EOS-terminated,
 * or starting at `documentStarts`; with a `mask`, chat data.
 */
export class ArrayTokenSource implements TokenSource {
  readonly lossMask: LossMaskReader | undefined;

  constructor(
    readonly path: string, private readonly tokens: Int32Array, readonly vocabSize: number, readonly eosId: number,
    mask?: Uint8Array, readonly documentStarts: Float64Array | undefined = undefined,
  ) {
    if (mask && mask.length !== tokens.length) throw new RangeError(`${path}: ${tokens.length} tokens but a loss mask of ${mask.length}`);
    this.lossMask = mask && {
      read: (start, count, out = new Uint8Array(count)) => {
        if (!(start >= 0 && count >= 0 && start + count <= mask.length)) throw new RangeError(`${path}: loss mask read [${start}, ${start + count}) outside [0, ${mask.length})`);
        out.set(mask.subarray(start, start + count));
        return out;
      },
    };
  }

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
