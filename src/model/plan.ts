/**
 * A backend that allocates nothing and runs nothing: a model and its optimizer built against it
 * (with no initial values: `fill: null`) lay out every tensor they would hold, so what a run holds
 * is read off the model's own allocations (a dry run), at any size, in microseconds.
 */
import { type Backend, type BackendName, BufferPool, PooledBackend, type Recording, TensorStore, checkUpload } from '../backend/backend.js';
import { fail } from '../errors.js';
import type { OpDef } from '../ops/op.js';
import { DTYPES, type DType, type HostArray, type Shape, type Tensor, isFloat } from '../tensor.js';

export class PlanBackend extends PooledBackend<object> implements Backend {
  readonly skipsConditional = 'never' as const;
  readonly dtypes: ReadonlySet<DType> = new Set(DTYPES);
  readonly floatDtypes: ReadonlySet<DType> = new Set(DTYPES.filter(isFloat));
  readonly description = 'allocation plan (no device)';
  protected readonly store: TensorStore<object>;
  private allocated = 0;

  /** `name`: the backend the plan stands for (what its tensors and messages name). */
  constructor(readonly name: BackendName = 'cpu') {
    super();
    this.store = new TensorStore<object>(name, new BufferPool(() => ({}), () => {}));
  }

  /** Bytes of every tensor allocated so far (shape × dtype, before the pool's rounding). */
  get allocatedBytes(): number {
    return this.allocated;
  }

  override alloc(shape: Shape, dtype: DType): Tensor {
    const t = super.alloc(shape, dtype);
    this.allocated += t.byteSize;
    return t;
  }

  upload(t: Tensor, data: HostArray): void {
    checkUpload(t, data);
  }

  zero(): void {}

  download(): Promise<HostArray> {
    return fail('BAD_ARGUMENT', 'an allocation plan holds no values to download');
  }

  supports(): boolean {
    return true;
  }

  run<A>(op: OpDef<A>): void {
    fail('BAD_ARGUMENT', `an allocation plan runs no ops (${op.name})`);
  }

  async sync(): Promise<void> {}

  record(): Recording {
    return fail('BAD_ARGUMENT', 'an allocation plan records no work');
  }

  destroy(): void {
    this.store.destroyAll();
  }
}
