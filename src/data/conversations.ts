/**
 * Rows of whole conversations, for supervised fine-tuning on chat data (a source with a loss
 * mask). The conversations are the source's documents (its documentStarts, else EOS-terminated
 * runs), in source order; one longer than the row keeps its first seqLen tokens. A row holds one
 * conversation, or with `pack` as many consecutive ones as fit (next fit, fixed once for all
 * epochs: the loader shuffles whole rows). Each conversation is an attention document of its own
 * (segment ids count them within the row, positions restart at 0), whose last token has no target.
 *
 * The rest of a row is padding: with `padding` 'none', a document of its own that no loss reads
 * (EOS ids, no targets, out of the mask); with 'eos', EOS tokens that continue the row's last
 * conversation (same document, positions going on, each the target of the one before) and are in
 * the loss mask, so the model learns that a reply ends and what follows its end (LLaDA's SFT pads
 * the response with EOS this way).
 */
import type { SFT_PADDING } from '../config/schema.js';
import { fail } from '../errors.js';
import type { TokenSource } from './source.js';

/** How conversations fill rows (the config's sft section). */
export interface ConversationRows {
  /** Several whole conversations a row (true) or one (false). */
  readonly pack: boolean;
  /** What fills a row after its last conversation. */
  readonly padding: (typeof SFT_PADDING)[number];
}

/** The rows of one batch: tokens, next-token targets, documents, positions, and the loss mask. */
export interface ConversationBatch {
  readonly tokens: Int32Array;
  readonly targets: Int32Array;
  readonly segIds: Int32Array;
  readonly positions: Int32Array;
  /** 1 where the token is in the loss (the assistant's, and 'eos' padding), else 0. */
  readonly lossMask: Uint8Array;
  /** Each row's first token's offset in the source. */
  readonly starts: Float64Array;
}

/** The fixed assignment of a source's conversations to rows of seqLen tokens. */
export class ConversationPlan {
  /** Number of rows. */
  readonly rows: number;
  /** Conversations longer than a row, cut to its length. */
  readonly truncated: number;
  private readonly starts: Float64Array;
  private readonly lengths: Int32Array;
  /** Row r holds conversations [first[r], first[r + 1]). */
  private readonly first: Int32Array;

  constructor(readonly source: TokenSource, readonly seqLen: number, readonly layout: ConversationRows) {
    if (!source.lossMask) {
      fail('BAD_ARGUMENT', `${source.path} holds no loss mask: it is not chat data. Prepare conversations with "mdlm data prepare --format chat", or train on it as token data (data.format tokens)`);
    }
    if (layout.padding !== 'eos' && layout.padding !== 'none') fail('BAD_ARGUMENT', `sft.padding must be "eos" or "none", got ${String(layout.padding)}`);
    const docStarts = source.documentStarts ?? eosDocumentStarts(source);
    const n = docStarts.length;
    this.starts = Float64Array.from(docStarts);
    this.lengths = new Int32Array(n);
    let truncated = 0;
    for (let i = 0; i < n; i++) {
      const len = (i + 1 < n ? docStarts[i + 1]! : source.length) - docStarts[i]!;
      if (len > seqLen) truncated++;
      this.lengths[i] = Math.min(len, seqLen);
    }
    this.truncated = truncated;
    const first: number[] = [0];
    let fill = 0;
    for (let i = 0; i < n; i++) {
      if (layout.pack ? fill + this.lengths[i]! > seqLen : i > 0) {
        first.push(i);
        fill = 0;
      }
      fill += this.lengths[i]!;
    }
    if (n > 0) first.push(n);
    this.first = Int32Array.from(first);
    this.rows = this.first.length - 1;
  }

  /** Fill rows `rows` (plan row indices) of a batch. */
  fill(rows: ArrayLike<number>): ConversationBatch {
    const T = this.seqLen;
    const B = rows.length;
    const out: ConversationBatch = {
      tokens: new Int32Array(B * T), targets: new Int32Array(B * T), segIds: new Int32Array(B * T), positions: new Int32Array(B * T),
      lossMask: new Uint8Array(B * T), starts: new Float64Array(B),
    };
    const eos = this.source.eosId ?? 0;
    const buf = new Int32Array(T);
    const mask = new Uint8Array(T);
    for (let b = 0; b < B; b++) {
      const r = rows[b]!;
      if (!(r >= 0 && r < this.rows)) throw new RangeError(`conversation row ${r} outside [0, ${this.rows})`);
      const o = b * T;
      let at = 0;
      let seg = 0;
      out.starts[b] = this.starts[this.first[r]!]!;
      for (let c = this.first[r]!; c < this.first[r + 1]!; c++, seg++) {
        const len = this.lengths[c]!;
        this.source.read(this.starts[c]!, len, buf);
        this.source.lossMask!.read(this.starts[c]!, len, mask);
        for (let j = 0; j < len; j++) {
          out.tokens[o + at + j] = buf[j]!;
          out.targets[o + at + j] = j + 1 < len ? buf[j + 1]! : -1;
          out.segIds[o + at + j] = seg;
          out.positions[o + at + j] = j;
          out.lossMask[o + at + j] = mask[j]!;
        }
        at += len;
      }
      if (at === T) continue;
      const eosPad = this.layout.padding === 'eos';
      // 'eos' padding continues the last conversation's document; 'none' is a document of its own.
      const padSeg = eosPad ? seg - 1 : seg;
      let pos = eosPad ? out.positions[o + at - 1]! + 1 : 0;
      if (eosPad) out.targets[o + at - 1] = eos;
      for (let j = at; j < T; j++) {
        out.tokens[o + j] = eos;
        out.targets[o + j] = eosPad && j + 1 < T ? eos : -1;
        out.segIds[o + j] = padSeg;
        out.positions[o + j] = pos++;
        out.lossMask[o + j] = eosPad ? 1 : 0;
      }
    }
    return out;
  }
}

/** Document starts of an EOS-terminated source (a document begins after each EOS). */
function eosDocumentStarts(source: TokenSource): Float64Array {
  const eos = source.eosId;
  if (eos === undefined) fail('BAD_ARGUMENT', `${source.path}: conversations need document boundaries, but the source has neither a document index nor an EOS id`);
  const starts: number[] = [0];
  const chunk = 1 << 16;
  const buf = new Int32Array(chunk);
  for (let base = 0; base < source.length; base += chunk) {
    const n = Math.min(chunk, source.length - base);
    source.read(base, n, buf);
    for (let i = 0; i < n; i++) if (buf[i] === eos && base + i + 1 < source.length) starts.push(base + i + 1);
  }
  return Float64Array.from(starts);
}
