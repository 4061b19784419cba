/**
 * The CPU backend: the ops' float64 references over f32 (or narrower) storage. It is the oracle
 * the other backends are held to, and a usable trainer for tiny models.
 */
import { type Backend, BufferPool, type PoolStats } from '../backend.js';
import { decodeFloats, encodeFloats } from '../../convert.js';
import { fail } from '../../errors.js';
import { type OpDef, type RefArgs, refArrayFor, resolveArgDtype, validateCall } from '../../ops/op.js';
import { DTYPE_BYTES, DTYPES, type DType, type HostArray, type Shape, Tensor, checkShape, isFloat, numel, shapeStr } from '../../tensor.js';

interface CpuHandle {
  readonly buffer: ArrayBuffer;
  readonly bytes: number;
}

export class CpuBackend implements Backend {
  readonly name = 'cpu' as const;
  readonly dtypes: ReadonlySet<DType> = new Set(DTYPES);
  /** The reference computes in float64 whatever the storage. */
  readonly floatDtypes: ReadonlySet<DType> = new Set(DTYPES.filter(isFloat));
  readonly description = 'TypeScript reference (f32 storage, f64 accumulation)';
  private readonly pool = new BufferPool<ArrayBuffer>((n) => new ArrayBuffer(n), () => {});
  private readonly live = new Set<CpuHandle>();

  alloc(shape: Shape, dtype: DType): Tensor {
    checkShape(shape, 'cpu.alloc');
    const { buffer, bytes } = this.pool.take(numel(shape) * DTYPE_BYTES[dtype]);
    const handle: CpuHandle = { buffer, bytes };
    this.live.add(handle);
    return new Tensor(this.name, shape, dtype, handle);
  }

  view(base: Tensor, offset: number, shape: Shape): Tensor {
    return makeView(this.name, base, offset, shape, this.handleOf(base).bytes);
  }

  free(t: Tensor): void {
    const h = this.handleOf(t);
    if (t.offset !== 0 || !this.live.has(h)) fail('BAD_ARGUMENT', `cpu.free: ${t} is a view or already freed`);
    this.live.delete(h);
    this.pool.give(h.buffer, h.bytes);
  }

  upload(t: Tensor, data: HostArray): void {
    checkUpload(t, data);
    const s = storage(t, this.handleOf(t));
    if (t.dtype === 'f32' || t.dtype === 'i32' || t.dtype === 'u32') s.set(data);
    else s.set(encodeFloats(t.dtype, data));
  }

  async download(t: Tensor): Promise<HostArray> {
    return this.read(t);
  }

  supports(): boolean {
    return true;
  }

  run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void {
    const floatDtype = validateCall(op, args, attrs);
    const ref: RefArgs = {};
    for (const a of op.args) {
      const t = args[a.name]!;
      if (t.backend !== this.name) fail('BAD_ARGUMENT', `${op.name}: argument '${a.name}' lives on ${t.backend}, not cpu`);
      const dtype = resolveArgDtype(op, a, attrs, floatDtype);
      if (a.role === 'out') {
        ref[a.name] = refArrayFor(dtype, t.size);
        continue;
      }
      const host = this.read(t);
      ref[a.name] = host instanceof Float32Array ? Float64Array.from(host) : host;
    }
    op.reference(ref, attrs);
    for (const a of op.args) {
      if (a.role === 'in') continue;
      const t = args[a.name]!;
      const r = ref[a.name]!;
      const s = storage(t, this.handleOf(t));
      if (t.dtype === 'f32' || t.dtype === 'i32' || t.dtype === 'u32') s.set(r);
      else s.set(encodeFloats(t.dtype, r));
    }
  }

  async sync(): Promise<void> {}

  poolStats(): PoolStats {
    return this.pool.stats();
  }

  destroy(): void {
    this.pool.destroyAll();
  }

  private read(t: Tensor): HostArray {
    const s = storage(t, this.handleOf(t));
    if (s instanceof Float32Array || s instanceof Int32Array || s instanceof Uint32Array) return s.slice();
    return decodeFloats(t.dtype as 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2', s);
  }

  private handleOf(t: Tensor): CpuHandle {
    if (t.backend !== this.name) fail('BAD_ARGUMENT', `${t} is not a cpu tensor`);
    return t.handle as CpuHandle;
  }
}

function storage(t: Tensor, h: CpuHandle): Float32Array | Int32Array | Uint32Array | Uint16Array | Uint8Array {
  const n = t.size;
  const byteOffset = t.offset * DTYPE_BYTES[t.dtype];
  switch (t.dtype) {
    case 'f32': return new Float32Array(h.buffer, byteOffset, n);
    case 'i32': return new Int32Array(h.buffer, byteOffset, n);
    case 'u32': return new Uint32Array(h.buffer, byteOffset, n);
    case 'f16':
    case 'bf16': return new Uint16Array(h.buffer, byteOffset, n);
    default: return new Uint8Array(h.buffer, byteOffset, n);
  }
}

/** Shared by backends: a view tensor over the same handle, bounds-checked. */
export function makeView(backend: string, base: Tensor, offset: number, shape: Shape, capacityBytes: number): Tensor {
  checkShape(shape, `${backend}.view`);
  const start = base.offset + offset;
  if (!Number.isInteger(offset) || offset < 0 || (start + numel(shape)) * DTYPE_BYTES[base.dtype] > capacityBytes) {
    fail('BAD_SHAPE', `${backend}.view: ${shapeStr(shape)} at offset ${offset} does not fit in ${base}`);
  }
  return new Tensor(backend, shape, base.dtype, base.handle, start);
}

/** Shared by backends: an upload's host array must match the tensor's kind and length. */
export function checkUpload(t: Tensor, data: HostArray): void {
  const want = t.dtype === 'i32' ? Int32Array : t.dtype === 'u32' ? Uint32Array : Float32Array;
  if (!(data instanceof want)) fail('BAD_DTYPE', `upload: ${t} takes a ${want.name}, got ${data.constructor.name}`);
  if (data.length !== t.size) fail('BAD_SHAPE', `upload: ${t} holds ${t.size} elements, got ${data.length}`);
}
