/**
 * Where a training step's time goes, op by op: a Backend that forwards everything to another and,
 * while `timing` is on, waits for each op to finish and charges the wall time to the op and its
 * argument shapes. Waiting after every op costs a launch and a synchronisation each (tens of µs
 * on CUDA), so the total exceeds an unprofiled step; the shares are what it is for. It needs a
 * backend that can wait synchronously (cpu, cuda); recordings are re-run op by op, so CUDA graphs
 * never hide the ops from it.
 */
import { type Backend, type KernelSettings, type PoolStats, type Recording, rerun } from '../backend/backend.js';
import { fail } from '../errors.js';
import type { OpDef } from '../ops/op.js';
import { type DType, type HostArray, type Shape, type Tensor, shapeStr } from '../tensor.js';

export interface OpTime {
  readonly op: string;
  /** The shapes of the op's arguments, in declaration order. */
  readonly shapes: string;
  readonly calls: number;
  readonly ms: number;
}

export class ProfiledBackend implements Backend {
  /** Time each op while on; a plain pass-through while off. */
  timing = false;
  private readonly times = new Map<string, { op: string; shapes: string; calls: number; ms: number }>();

  constructor(private readonly inner: Backend, private readonly waitNow: () => void) {}

  /** Wrap a backend that can wait synchronously: the CPU (always done) or CUDA (stream sync). */
  static of(inner: Backend): ProfiledBackend {
    const syncNow = (inner as { syncNow?: () => void }).syncNow;
    if (inner.name === 'cpu') return new ProfiledBackend(inner, () => {});
    if (syncNow) return new ProfiledBackend(inner, () => syncNow.call(inner));
    return fail('BAD_ARGUMENT', `profiling needs a backend that can wait for each op synchronously (cpu, cuda); ${inner.name} cannot`);
  }

  get name() {
    return this.inner.name;
  }
  get skipsConditional() {
    return this.inner.skipsConditional;
  }
  get dtypes(): ReadonlySet<DType> {
    return this.inner.dtypes;
  }
  get floatDtypes(): ReadonlySet<DType> {
    return this.inner.floatDtypes;
  }
  get description(): string {
    return this.inner.description;
  }
  get memoryBytes(): number | undefined {
    return this.inner.memoryBytes;
  }

  alloc(shape: Shape, dtype: DType): Tensor {
    return this.inner.alloc(shape, dtype);
  }
  view(base: Tensor, offset: number, shape: Shape): Tensor {
    return this.inner.view(base, offset, shape);
  }
  free(t: Tensor): void {
    this.inner.free(t);
  }
  upload(t: Tensor, data: HostArray): void {
    this.inner.upload(t, data);
  }
  download(t: Tensor): Promise<HostArray> {
    return this.inner.download(t);
  }
  zero(t: Tensor): void {
    this.inner.zero(t);
  }
  supports(opName: string): boolean {
    return this.inner.supports(opName);
  }
  sync(): Promise<void> {
    return this.inner.sync();
  }
  poolStats(): PoolStats {
    return this.inner.poolStats();
  }
  configureKernels(settings: KernelSettings): void {
    this.inner.configureKernels?.(settings);
  }
  destroy(): void {
    this.inner.destroy();
  }

  record(fn: () => void): Recording {
    return this.timing ? rerun(fn) : this.inner.record(fn);
  }

  whenAbove(count: Tensor, threshold: number, fn: () => void): void {
    this.inner.whenAbove(count, threshold, fn);
  }

  run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void {
    if (!this.timing) return this.inner.run(op, args, attrs);
    this.waitNow();
    const t0 = performance.now();
    this.inner.run(op, args, attrs);
    this.waitNow();
    const ms = performance.now() - t0;
    const shapes = op.args.map((a) => shapeStr(args[a.name]?.shape ?? [])).join(' ');
    const key = `${op.name} ${shapes}`;
    const entry = this.times.get(key) ?? { op: op.name, shapes, calls: 0, ms: 0 };
    entry.calls++;
    entry.ms += ms;
    this.times.set(key, entry);
  }

  /** Times so far, largest first; `reset` clears them. */
  report(): OpTime[] {
    return [...this.times.values()].sort((a, b) => b.ms - a.ms).map((e) => ({ ...e }));
  }

  reset(): void {
    this.times.clear();
  }
}
