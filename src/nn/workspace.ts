/**
 * Scratch buffers shared by every layer's backward pass (one weight-gradient buffer as large as
 * the largest weight, one activation buffer as large as the largest activation), allocated once.
 */
import type { Backend } from '../backend/backend.js';
import { type Shape, type Tensor, numel } from '../tensor.js';
import type { Arena } from './arena.js';

export class Workspace {
  private readonly weight: Tensor;
  private readonly act: Tensor;

  constructor(arena: Arena, maxWeight: number, maxAct: number) {
    this.weight = arena.alloc([maxWeight]);
    this.act = arena.alloc([maxAct]);
  }

  weightScratch(b: Backend, shape: Shape): Tensor {
    if (numel(shape) > this.weight.size) throw new Error(`Workspace: weight scratch ${numel(shape)} > ${this.weight.size}`);
    return b.view(this.weight, 0, shape);
  }

  actScratch(b: Backend, shape: Shape): Tensor {
    if (numel(shape) > this.act.size) throw new Error(`Workspace: activation scratch ${numel(shape)} > ${this.act.size}`);
    return b.view(this.act, 0, shape);
  }
}
