/**
 * The CPU backend: the ops' float64 references over f32 (or narrower) storage. It is the oracle
 * the other backends are held to, and a usable trainer for tiny models.
 */
import { type Backend, BufferPool, PooledBackend, type PooledHandle, type Recording, TensorStore, checkUpload, rerun } from '../backend.js';
import { decodeFloats, encodeFloats } from '../../convert.js';
import { fail } from '../../errors.js';
import { type OpDef, type RefArgs, refArrayFor, resolveArgDtype, validateCall, writtenSpans } from '../../ops/op.js';
import { DTYPE_BYTES, DTYPES, type DType, type HostArray, Tensor, isFloat } from '../../tensor.js';

export class CpuBackend extends PooledBackend<ArrayBuffer> implements Backend {
  readonly name = 'cpu' as const;
  /** Work runs as it is enqueued, so whenAbove reads its count there and then. */
  readonly skipsConditional = 'always' as const;
  readonly dtypes: ReadonlySet<DType> = new Set(DTYPES);
  /** The reference computes in float64 whatever the storage. */
  readonly floatDtypes: ReadonlySet<DType> = new Set(DTYPES.filter(isFloat));
  readonly description: string = 'TypeScript reference (f32 storage, f64 accumulation)';
  protected readonly store = new TensorStore<ArrayBuffer>('cpu', new BufferPool((n) => new ArrayBuffer(n), () => {}));

  upload(t: Tensor, data: HostArray): void {
    checkUpload(t, data);
    const s = storage(t, this.store.handleOf(t));
    if (t.dtype === 'f32' || t.dtype === 'i32' || t.dtype === 'u32') s.set(data);
    else s.set(encodeFloats(t.dtype, data));
  }

  async download(t: Tensor): Promise<HostArray> {
    return this.read(t);
  }

  zero(t: Tensor): void {
    storage(t, this.store.handleOf(t)).fill(0);
  }

  supports(): boolean {
    return true;
  }

  protected override conditional(count: Tensor, threshold: number, fn: () => void): void {
    if ((this.read(count) as Int32Array)[0]! > threshold) fn();
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
    const rows = op.rowLayout?.(attrs) ?? {};
    for (const a of op.args) {
      if (a.role === 'in') continue;
      const t = args[a.name]!;
      const r = ref[a.name]!;
      const s = storage(t, this.store.handleOf(t));
      const put = (from: number, to: number) => {
        const part = r.subarray(from, to);
        if (t.dtype === 'f32' || t.dtype === 'i32' || t.dtype === 'u32') s.set(part, from);
        else s.set(encodeFloats(t.dtype, part), from);
      };
      for (const [from, to] of writtenSpans(rows[a.name], r.length)) put(from, to);
    }
  }

  async sync(): Promise<void> {}

  record(fn: () => void): Recording {
    return rerun(fn);
  }

  destroy(): void {
    this.store.destroyAll();
  }

  private read(t: Tensor): HostArray {
    const s = storage(t, this.store.handleOf(t));
    if (s instanceof Float32Array || s instanceof Int32Array || s instanceof Uint32Array) return s.slice();
    return decodeFloats(t.dtype as 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2', s);
  }

}

function storage(t: Tensor, h: PooledHandle<ArrayBuffer>): Float32Array | Int32Array | Uint32Array | Uint16Array | Uint8Array {
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
