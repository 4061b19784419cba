/** Token embedding: a gather forward, a deterministic scatter-add backward. */
import type { Backend } from '../backend/backend.js';
import { embedding, embeddingBackward } from '../ops/embedding.js';
import type { Tensor } from '../tensor.js';
import type { Param, ParamStore } from './params.js';
import type { Workspace } from './workspace.js';

export class Embedding {
  readonly table: Param;

  constructor(store: ParamStore, name: string, readonly vocab: number, readonly dim: number, std: number) {
    this.table = store.declare(name, [vocab, dim], { kind: 'normal', std }, true);
  }

  forward(b: Backend, ids: Tensor, out: Tensor, tokens: number): void {
    b.run(embedding, { ids, table: this.table.compute, out }, { tokens, vocab: this.vocab, dim: this.dim });
  }

  backward(b: Backend, ws: Workspace, ids: Tensor, dout: Tensor, tokens: number): void {
    const dtable = ws.weightScratch(b, [this.vocab, this.dim]);
    b.run(embeddingBackward, { ids, dout, dtable }, { tokens, vocab: this.vocab, dim: this.dim });
    ws.accumulateGrad(b, dtable, this.table);
  }
}
