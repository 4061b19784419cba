/**
 * Activation memory, allocated once at setup for the largest shapes a model will see and reused
 * every step: the steady-state training loop allocates nothing.
 */
import type { Backend } from '../backend/backend.js';
import type { DType, FloatDType, Shape, Tensor } from '../tensor.js';

export class Arena {
  private readonly tensors: Tensor[] = [];
  private bytes = 0;

  /** `floatDtype`: the activations' dtype, what `alloc` gives unless told otherwise. */
  constructor(readonly backend: Backend, readonly floatDtype: FloatDType = 'f32') {}

  alloc(shape: Shape, dtype: DType = this.floatDtype): Tensor {
    const t = this.backend.alloc(shape, dtype);
    this.tensors.push(t);
    this.bytes += t.byteSize;
    return t;
  }

  get totalBytes(): number {
    return this.bytes;
  }

  destroy(): void {
    for (const t of this.tensors.splice(0)) this.backend.free(t);
    this.bytes = 0;
  }
}
