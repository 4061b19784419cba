/** Token embedding: a gather forward, a deterministic scatter-add backward. */
import type { Backend } from '../backend/backend.js';
import { embedding, embeddingBackward } from '../ops/embedding.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParamStore } from './params.js';

export class Embedding {
  readonly table: Param;

  constructor(store: ParamStore, name: string, readonly vocab: number, readonly dim: number, std: number) {
    this.table = store.declare(name, [vocab, dim], { kind: 'normal', std }, true);
  }

  forward(b: Backend, ids: Tensor, out: Tensor, tokens: number): void {
    b.run(embedding, { ids, table: this.table.compute, out }, { tokens, vocab: this.vocab, dim: this.dim });
  }

  /** The table's f32 gradient += (or = : ParamStore.accumulates) the scatter-add of dout, in one kernel whatever dout's dtype. */
  backward(b: Backend, ids: Tensor, dout: Tensor, tokens: number): void {
    const attrs = { tokens, vocab: this.vocab, dim: this.dim, accumulate: this.table.store.accumulates(this.table), outF32: true };
    b.run(embeddingBackward, { ids, dout, dtable: this.table.grad }, attrs);
  }
}
