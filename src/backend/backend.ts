import { fail } from '../errors.js';
import type { OpDef } from '../ops/op.js';
import { DTYPE_BYTES, type DType, type HostArray, type Shape, Tensor, checkShape, numel, shapeStr } from '../tensor.js';

export const BACKEND_NAMES = ['cpu', 'webgpu', 'cuda'] as const;
export type BackendName = (typeof BACKEND_NAMES)[number];

export interface PoolStats {
  /** Device buffers created since the backend started. */
  readonly created: number;
  /** Allocations served from the free lists. */
  readonly reused: number;
  readonly liveBytes: number;
  readonly pooledBytes: number;
}

/** Settings of a backend's kernels that a run chooses (Backend.configureKernels). */
export interface KernelSettings {
  /**
   * cuBLASLt algorithms timed on each GEMM shape's first call, the fastest kept (0: the
   * heuristic's first choice, the same in every process; at most 64).
   */
  readonly gemmAutotune: number;
}

/**
 * A compute backend. Work is enqueued by `run` and happens in order; `download` and `sync` wait
 * for it. Tensors come from a pool: `free` returns storage for reuse, so a steady-state loop
 * allocates nothing.
 */
export interface Backend {
  readonly name: BackendName;
  /** Storage dtypes this backend can allocate. */
  readonly dtypes: ReadonlySet<DType>;
  /** Dtypes its kernels take for ops' 'float' arguments (where the op allows them too). */
  readonly floatDtypes: ReadonlySet<DType>;
  /** A short description of the device, for logs and reports. */
  readonly description: string;
  /** The device's memory in bytes, where the backend knows it (CUDA). */
  readonly memoryBytes?: number;
  /** Why this device cannot run FP8 GEMMs (a GPU without FP8 tensor cores); undefined where it can. */
  readonly fp8Unavailable?: string;
  alloc(shape: Shape, dtype: DType): Tensor;
  /** A view of `count` elements from `offset` (elements) of `base`'s storage, shaped `shape`. */
  view(base: Tensor, offset: number, shape: Shape): Tensor;
  free(t: Tensor): void;
  /** Float tensors take Float32Array (converted to the storage dtype), integer ones Int32/Uint32Array. */
  upload(t: Tensor, data: HostArray): void;
  download(t: Tensor): Promise<HostArray>;
  /** Set every element to 0 (all bits clear), in order with the work enqueued before it: no host data moves. */
  zero(t: Tensor): void;
  /** Whether this backend has a kernel for the op. */
  supports(opName: string): boolean;
  /** Validate the call against the op's declaration and enqueue it. */
  run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void;
  /** Wait for all enqueued work; rethrows device errors raised meanwhile. */
  sync(): Promise<void>;
  /**
   * Record the ops `fn` enqueues (and zeroes) for replay; nothing runs until `replay`. On CUDA this
   * is a CUDA graph: one launch replays hundreds of kernels with their arguments, so the tensors
   * must outlive the recording and `fn` may not upload, download, sync, allocate or free. Other
   * backends replay by calling `fn` again.
   */
  record(fn: () => void): Recording;
  /**
   * Enqueue `fn`'s ops, needed only when the i32 `count[0]` exceeds `threshold` by the time the
   * device gets there. Where the backend can decide on the device (`skipsConditional`) they are
   * skipped when not needed: CUDA inside a recording (a conditional graph node), WebGPU always
   * (indirect dispatches), the CPU always (it runs work as it is enqueued); elsewhere they run,
   * so `fn`'s work must leave the results the same either way (e.g. blocks of rows past the last
   * row that counts).
   */
  whenAbove(count: Tensor, threshold: number, fn: () => void): void;
  /** Where whenAbove skips work: 'always', only inside a recording ('recorded'), or 'never'. */
  readonly skipsConditional: 'always' | 'recorded' | 'never';
  poolStats(): PoolStats;
  /** Applies a run's kernel settings to the calls enqueued from here on; backends without such settings do not define it. */
  configureKernels?(settings: KernelSettings): void;
  destroy(): void;
}

/** Work recorded by `Backend.record`. */
export interface Recording {
  /** Enqueue the recorded work again. */
  replay(): void;
  /** Release it; a replay afterwards is an error. */
  destroy(): void;
  /** Whether replay skips the host work (a device graph) rather than calling the function again. */
  readonly native: boolean;
}

/** A Recording that replays by calling `fn` (backends without device graphs). */
export function rerun(fn: () => void): Recording {
  let live = true;
  return {
    native: false,
    replay: () => {
      if (!live) fail('BAD_ARGUMENT', 'replay of a destroyed recording');
      fn();
    },
    destroy: () => {
      live = false;
    },
  };
}

/** Round a byte size up to the pool's bucket granularity. */
export function poolBucket(bytes: number): number {
  return Math.max(256, Math.ceil(bytes / 256) * 256);
}

/**
 * Free lists keyed by bucket size: shared by every backend's allocator so that reuse and
 * accounting behave the same everywhere.
 */
export class BufferPool<B> {
  private readonly free = new Map<number, B[]>();
  private created = 0;
  private reused = 0;
  private liveBytes = 0;
  private pooledBytes = 0;

  constructor(private readonly make: (bytes: number) => B, private readonly destroyBuffer: (b: B) => void) {}

  take(bytes: number): { buffer: B; bytes: number } {
    const size = poolBucket(bytes);
    const list = this.free.get(size);
    const hit = list?.pop();
    if (hit !== undefined) {
      this.reused++;
      this.liveBytes += size;
      this.pooledBytes -= size;
      return { buffer: hit, bytes: size };
    }
    const buffer = this.make(size); // may throw (out of memory): account only what was made
    this.created++;
    this.liveBytes += size;
    return { buffer, bytes: size };
  }

  give(buffer: B, bytes: number): void {
    const list = this.free.get(bytes) ?? [];
    list.push(buffer);
    this.free.set(bytes, list);
    this.liveBytes -= bytes;
    this.pooledBytes += bytes;
  }

  stats(): PoolStats {
    return { created: this.created, reused: this.reused, liveBytes: this.liveBytes, pooledBytes: this.pooledBytes };
  }

  destroyAll(): void {
    for (const list of this.free.values()) for (const b of list) this.destroyBuffer(b);
    this.free.clear();
    this.pooledBytes = 0;
  }
}

/** The pooled buffer behind a tensor; its views share it. */
export interface PooledHandle<B> {
  readonly buffer: B;
  readonly bytes: number;
}

/**
 * The tensor bookkeeping every backend shares: tensors over pooled buffers, bounds-checked views,
 * `free` of whole tensors only and only once, and handle lookup that refuses another backend's
 * tensors.
 */
export class TensorStore<B> {
  private readonly live = new Set<PooledHandle<B>>();

  constructor(private readonly backend: BackendName, readonly pool: BufferPool<B>) {}

  alloc(shape: Shape, dtype: DType): Tensor {
    checkShape(shape, `${this.backend}.alloc`);
    const handle: PooledHandle<B> = this.pool.take(numel(shape) * DTYPE_BYTES[dtype]);
    this.live.add(handle);
    return new Tensor(this.backend, shape, dtype, handle);
  }

  /** A view of `shape` from element `offset` of `base`'s storage. */
  view(base: Tensor, offset: number, shape: Shape): Tensor {
    checkShape(shape, `${this.backend}.view`);
    const start = base.offset + offset;
    if (!Number.isInteger(offset) || offset < 0 || (start + numel(shape)) * DTYPE_BYTES[base.dtype] > this.handleOf(base).bytes) {
      fail('BAD_SHAPE', `${this.backend}.view: ${shapeStr(shape)} at offset ${offset} does not fit in ${base}`);
    }
    return new Tensor(this.backend, shape, base.dtype, base.handle, start);
  }

  free(t: Tensor): void {
    const h = this.handleOf(t);
    if (t.offset !== 0 || !this.live.has(h)) fail('BAD_ARGUMENT', `${this.backend}.free: ${t} is a view or already freed`);
    this.live.delete(h);
    this.pool.give(h.buffer, h.bytes);
  }

  handleOf(t: Tensor): PooledHandle<B> {
    if (t.backend !== this.backend) fail('BAD_ARGUMENT', `${t} is not a ${this.backend} tensor`);
    return t.handle as PooledHandle<B>;
  }

  /** Return every live buffer to the pool and destroy them all (backend teardown). */
  destroyAll(): void {
    for (const h of this.live) this.pool.give(h.buffer, h.bytes);
    this.live.clear();
    this.pool.destroyAll();
  }
}

/** The memory half of a Backend that every backend does the same way, over its TensorStore. */
export abstract class PooledBackend<B> {
  protected abstract readonly store: TensorStore<B>;

  alloc(shape: Shape, dtype: DType): Tensor {
    return this.store.alloc(shape, dtype);
  }

  view(base: Tensor, offset: number, shape: Shape): Tensor {
    return this.store.view(base, offset, shape);
  }

  free(t: Tensor): void {
    this.store.free(t);
  }

  poolStats(): PoolStats {
    return this.store.pool.stats();
  }

  private inConditional = false;

  whenAbove(count: Tensor, threshold: number, fn: () => void): void {
    checkCount(count, threshold);
    if (this.inConditional) fail('BAD_ARGUMENT', 'whenAbove: conditional regions do not nest');
    this.inConditional = true;
    try {
      this.conditional(count, threshold, fn);
    } finally {
      this.inConditional = false;
    }
  }

  /** Enqueue fn's ops under whenAbove's condition; by default they simply run. */
  protected conditional(_count: Tensor, _threshold: number, fn: () => void): void {
    fn();
  }
}

/** whenAbove's count is one i32 and its threshold an i32. */
function checkCount(count: Tensor, threshold: number): void {
  if (count.dtype !== 'i32' || count.size !== 1) fail('BAD_ARGUMENT', `whenAbove: the count must be one i32, got ${count}`);
  if (!Number.isInteger(threshold) || Math.abs(threshold) > 0x7fffffff) fail('BAD_ARGUMENT', `whenAbove: threshold ${threshold} is not an i32`);
}

/** An upload's host array must match the tensor's kind and length. */
export function checkUpload(t: Tensor, data: HostArray): void {
  const want = t.dtype === 'i32' ? Int32Array : t.dtype === 'u32' ? Uint32Array : Float32Array;
  if (!(data instanceof want)) fail('BAD_DTYPE', `upload: ${t} takes a ${want.name}, got ${data.constructor.name}`);
  if (data.length !== t.size) fail('BAD_SHAPE', `upload: ${t} holds ${t.size} elements, got ${data.length}`);
}
