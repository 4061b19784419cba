/**
 * Incremental (KV-cached) decoding of one sequence with an autoregressive LlamaModel: each token
 * runs every layer on one row and attends to the keys and values cached for the earlier ones, so
 * generating n tokens costs n one-row passes instead of n full-context passes. The caches hold the
 * model's context length (model.cfg.seqLen); positions are 0, 1, ... from the last reset.
 */
import { fail } from '../errors.js';
import type { KvCache } from '../nn/attention.js';
import { DTYPE_BYTES, type Tensor } from '../tensor.js';
import type { LlamaModel } from './llama.js';

export class Decoder {
  readonly maxLen: number;
  private length = 0;
  private readonly caches: KvCache[];
  private readonly id: Tensor;
  private readonly positions: Tensor;
  private readonly x: Tensor;
  private readonly normed: Tensor;
  private readonly rstd: Tensor;
  private readonly logits: Tensor;

  constructor(readonly model: LlamaModel) {
    const b = model.backend;
    const m = model.cfg;
    const D = m.dModel / m.nHeads;
    this.maxLen = m.seqLen;
    // Each cached position starts on a 256-byte boundary: WebGPU binds storage for writing there only.
    const bytes = DTYPE_BYTES[model.dtype];
    const stride = (Math.ceil((m.nKvHeads * D * bytes) / 256) * 256) / bytes;
    this.caches = model.blocks.map(() => ({ k: b.alloc([1, m.seqLen, stride], model.dtype), v: b.alloc([1, m.seqLen, stride], model.dtype), stride }));
    this.id = b.alloc([1], 'i32');
    this.positions = b.alloc([1, 1], 'i32');
    this.x = b.alloc([1, m.dModel], model.dtype);
    this.normed = b.alloc([1, m.dModel], model.dtype);
    this.rstd = b.alloc([1], 'f32');
    this.logits = b.alloc([1, m.vocabSize], model.dtype);
  }

  /** Tokens fed since the last reset (the next token's position). */
  get position(): number {
    return this.length;
  }

  /** Start a new sequence (the caches' old contents are never read again). */
  reset(): void {
    this.length = 0;
  }

  /** Feed the next token; returns the logits [vocab] that predict the one after it. */
  async next(token: number): Promise<Float32Array> {
    const model = this.model;
    const b = model.backend;
    if (this.length >= this.maxLen) fail('BAD_ARGUMENT', `decoder: the cache holds ${this.maxLen} positions (the model's context); reset() to start over`);
    if (!Number.isInteger(token) || token < 0 || token >= model.cfg.vocabSize) fail('BAD_ARGUMENT', `decoder: token ${token} is not an id below ${model.cfg.vocabSize}`);
    const pos = this.length;
    b.upload(this.id, Int32Array.of(token));
    b.upload(this.positions, Int32Array.of(pos));
    model.embed.forward(b, this.id, this.x, 1);
    model.blocks.forEach((blk, i) => blk.decode(b, this.x, this.x, this.caches[i]!, pos, this.positions));
    model.finalNorm.forward(b, this.x, this.normed, this.rstd, 1);
    model.head.forward(b, this.normed, this.logits, 1);
    this.length++;
    return (await b.download(this.logits)) as Float32Array;
  }

  destroy(): void {
    const b = this.model.backend;
    for (const c of this.caches) [c.k, c.v].forEach((t) => b.free(t));
    [this.id, this.positions, this.x, this.normed, this.rstd, this.logits].forEach((t) => b.free(t));
  }
}
