/**
 * The CUDA backend: device memory from the native addon (cuda/addon/) through the shared
 * BufferPool, views as a pointer plus a byte offset, narrow floats encoded and decoded on the host
 * (src/convert.ts), and ops run by the addon's kernels (cuda/<op>.cu) after validateCall. The
 * addon is loaded at the Node edge (src/runtime/backends.ts) and handed in, so this file, like the
 * rest of the core, imports no Node built-ins.
 */
import { type Backend, BufferPool, type KernelSettings, PooledBackend, type Recording, TensorStore, checkUpload } from '../backend.js';
import { decodeFloats, encodeFloats } from '../../convert.js';
import { type ErrorCode, MdlmError, fail } from '../../errors.js';
import { type OpDef, validateCall } from '../../ops/op.js';
import { DTYPES, DTYPE_BYTES, type DType, type HostArray, type Shape, Tensor } from '../../tensor.js';

/** What the addon's probe() reports. Device fields are present when `available`. */
export interface CudaProbeInfo {
  readonly available: boolean;
  readonly reason?: string;
  readonly device?: string;
  readonly deviceIndex?: number;
  readonly devices?: number;
  /** Compute capability, e.g. "9.0". */
  readonly sm?: string;
  readonly memoryBytes?: number;
  readonly multiprocessors?: number;
  readonly bf16?: boolean;
  /** FP8 tensor cores (sm 8.9 and newer). */
  readonly fp8?: boolean;
  readonly driver: string;
  readonly runtime: string;
  readonly cublasLt: string;
  /** The machine's cuDNN and NCCL versions (dlopened; mdlm does not use them yet), or "none (…)". */
  readonly cudnn: string;
  readonly nccl: string;
  /** Ops with a registered kernel. */
  readonly ops: readonly string[];
}

/** One argument of a kernel call: name, device pointer (already offset), dtype code (index in DTYPES), element count. */
export type CudaArg = readonly [name: string, ptr: bigint, dtype: number, numel: number];

/** The addon's kernel settings (cuda/op.h's KernelSettings): one set for the process at a time. */
export interface CudaKernelSettings extends KernelSettings {
  /**
   * On a Hopper (sm_90) GPU, its own kernels: wgmma attention and the GEMMs with fused rope and
   * SwiGLU epilogues. false runs the kernels Ampere and Ada run (mma.sync attention, cuBLASLt then
   * the element-wise op), so that a Hopper GPU can test them. Elsewhere it changes nothing.
   */
  readonly hopperKernels: boolean;
}

/** Options of a CudaBackend: its kernel settings (the defaults: Hopper's kernels, 8 GEMM candidates timed). */
export type CudaBackendOptions = Partial<CudaKernelSettings>;

export const DEFAULT_CUDA_SETTINGS: CudaKernelSettings = { hopperKernels: true, gemmAutotune: 8 };

/** The most cuBLASLt candidates a GEMM shape may time (kMostGemmCandidates in cuda/op.h). */
export const MOST_GEMM_CANDIDATES = 64;

/** The native module cuda/build/Release/mdlm_cuda.node. */
export interface CudaAddon {
  probe(): CudaProbeInfo;
  /** Run on visible GPU `index` modulo their count (before the first allocation); returns the GPU chosen. */
  useDevice(index: number): number;
  /** The kernel settings of every call from here on. */
  configure(settings: CudaKernelSettings): void;
  malloc(bytes: number): bigint;
  free(ptr: bigint): void;
  /** Enqueued after earlier work; the bytes are staged before it returns. */
  upload(ptr: bigint, bytes: ArrayBufferView): void;
  /** Start capturing the stream's work into a CUDA graph (settles the scratch arena first). */
  captureBegin(): void;
  /** End the capture and instantiate the graph; returns its id. */
  captureEnd(): number;
  /** End a capture that failed part way, discarding what was captured. */
  captureAbort(): void;
  /** Until conditionalEnd, a captured graph runs the work only when the i32 at `count` exceeds `threshold` (a conditional node); uncaptured, it runs. */
  conditionalBegin(count: bigint, threshold: number): void;
  conditionalEnd(): void;
  graphLaunch(id: number): void;
  graphDestroy(id: number): void;
  /** cudaMemsetAsync to 0 on the stream, after earlier work. */
  memset(ptr: bigint, bytes: number): void;
  /** Waits for earlier work, then copies. */
  download(ptr: bigint, bytes: number): ArrayBuffer;
  run(op: string, args: readonly CudaArg[], nums: Readonly<Record<string, number>>, strs: Readonly<Record<string, string>>): void;
  sync(): void;
}

/** Codes the addon and the kernels raise (OpError in cuda/op.h); anything else stays an internal Error. */
const ADDON_CODES: ReadonlySet<string> = new Set<ErrorCode>([
  'BAD_ARGUMENT', 'BAD_SHAPE', 'BAD_DTYPE', 'UNSUPPORTED_DTYPE', 'UNSUPPORTED_OP', 'OUT_OF_MEMORY',
]);

/** Runs an addon call, turning a kernel's user-facing error into an MdlmError. */
function native<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    const code = (e as { mdlmCode?: unknown }).mdlmCode;
    if (e instanceof Error && typeof code === 'string' && ADDON_CODES.has(code)) throw new MdlmError(code as ErrorCode, e.message);
    throw e;
  }
}

/** f's result as a promise; its error as a rejection. */
function settle<T>(f: () => T): Promise<T> {
  try {
    return Promise.resolve(f());
  } catch (e) {
    return Promise.reject(e);
  }
}

const NARROW = new Set<DType>(['f16', 'bf16', 'fp8e4m3', 'fp8e5m2']);

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

function checkSettings(s: CudaKernelSettings): CudaKernelSettings {
  if (!Number.isInteger(s.gemmAutotune) || s.gemmAutotune < 0 || s.gemmAutotune > MOST_GEMM_CANDIDATES) {
    fail('BAD_ARGUMENT', `cuda: gemmAutotune is ${s.gemmAutotune}; expected an integer from 0 to ${MOST_GEMM_CANDIDATES}`);
  }
  return { hopperKernels: s.hopperKernels, gemmAutotune: s.gemmAutotune };
}

/**
 * The backend whose settings each addon holds. The addon is one per process and its settings
 * global, so a backend whose settings are not the addon's passes them before its next run.
 */
const configuredBy = new WeakMap<CudaAddon, CudaBackend>();

export class CudaBackend extends PooledBackend<bigint> implements Backend {
  readonly name = 'cuda' as const;
  readonly skipsConditional = 'recorded' as const;
  readonly dtypes: ReadonlySet<DType> = new Set(DTYPES);
  /** Kernels compute 'float' args stored in f32 or bf16 (f32 math either way). */
  readonly floatDtypes: ReadonlySet<DType> = new Set<DType>(['f32', 'bf16']);
  readonly description: string;
  readonly info: CudaProbeInfo;
  readonly memoryBytes?: number;
  readonly fp8Unavailable?: string;

  protected readonly store: TensorStore<bigint>;
  private readonly ops: ReadonlySet<string>;
  /** Inside `record`: only ops and zeroes may be enqueued. */
  private recording = false;
  private settings: CudaKernelSettings;

  constructor(private readonly addon: CudaAddon, options: CudaBackendOptions = {}) {
    super();
    this.settings = checkSettings({ ...DEFAULT_CUDA_SETTINGS, ...options });
    const info = addon.probe();
    if (!info.available) fail('BACKEND_UNAVAILABLE', `cuda: ${info.reason ?? 'no CUDA device'}`);
    this.info = info;
    if (info.memoryBytes !== undefined) this.memoryBytes = info.memoryBytes;
    if (!info.fp8) this.fp8Unavailable = `${info.device} is sm ${info.sm}; FP8 tensor cores need sm 8.9 or newer (Ada, Hopper, Blackwell)`;
    this.ops = new Set(info.ops);
    this.description = `${info.device} (sm ${info.sm}, ${gib(info.memoryBytes ?? 0)}, ${info.multiprocessors} SMs; CUDA ${info.runtime}, driver ${info.driver}, cuBLASLt ${info.cublasLt})`;
    this.store = new TensorStore('cuda', new BufferPool((bytes) => native(() => addon.malloc(bytes)), (ptr) => addon.free(ptr)));
  }

  /** What a graph cannot hold (host copies, waits) or must not see change under it (memory). */
  private notRecording(what: string): void {
    if (this.recording) fail('BAD_ARGUMENT', `cuda.${what} while recording a CUDA graph: a recording may only enqueue ops and zero tensors`);
  }

  // --- memory ---

  override alloc(shape: Shape, dtype: DType): Tensor {
    this.notRecording('alloc');
    return super.alloc(shape, dtype);
  }

  override free(t: Tensor): void {
    this.notRecording('free');
    super.free(t);
  }

  upload(t: Tensor, data: HostArray): void {
    this.notRecording('upload');
    checkUpload(t, data);
    const bytes = NARROW.has(t.dtype) ? encodeFloats(t.dtype as 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2', data) : data;
    native(() => this.addon.upload(this.pointer(t), bytes));
  }

  /** Raw storage bytes, as the device holds them (bf16 or fp8 words from a checkpoint, bit-level tests). */
  uploadBytes(t: Tensor, bytes: Uint8Array): void {
    this.notRecording('uploadBytes');
    if (bytes.byteLength !== t.byteSize) fail('BAD_SHAPE', `uploadBytes: ${t} holds ${t.byteSize} bytes, got ${bytes.byteLength}`);
    native(() => this.addon.upload(this.pointer(t), bytes));
  }

  zero(t: Tensor): void {
    native(() => this.addon.memset(this.pointer(t), t.byteSize));
  }

  // The recording check runs before the promise: a recording function cannot await, so a rejected
  // promise would go unnoticed.
  download(t: Tensor): Promise<HostArray> {
    this.notRecording('download');
    return this.decode(t);
  }

  private async decode(t: Tensor): Promise<HostArray> {
    const raw = await this.downloadBytes(t);
    switch (t.dtype) {
      case 'f32': return new Float32Array(raw.buffer, raw.byteOffset, t.size);
      case 'i32': return new Int32Array(raw.buffer, raw.byteOffset, t.size);
      case 'u32': return new Uint32Array(raw.buffer, raw.byteOffset, t.size);
      case 'f16':
      case 'bf16': return decodeFloats(t.dtype, new Uint16Array(raw.buffer, raw.byteOffset, t.size));
      default: return decodeFloats(t.dtype, raw);
    }
  }

  /** The tensor's storage bytes as the device holds them. */
  downloadBytes(t: Tensor): Promise<Uint8Array> {
    this.notRecording('download');
    return settle(() => new Uint8Array(native(() => this.addon.download(this.pointer(t), t.byteSize))));
  }

  // --- kernel settings ---

  /** This backend's kernel settings. */
  get kernelSettings(): CudaKernelSettings {
    return this.settings;
  }

  configureKernels(settings: KernelSettings): void {
    this.settings = checkSettings({ ...this.settings, gemmAutotune: settings.gemmAutotune });
    if (configuredBy.get(this.addon) === this) configuredBy.delete(this.addon);
  }

  /** Hands the addon this backend's settings unless it holds them already: a map lookup a run. */
  private configureAddon(): void {
    if (configuredBy.get(this.addon) === this) return;
    native(() => this.addon.configure(this.settings));
    configuredBy.set(this.addon, this);
  }

  // --- ops ---

  supports(opName: string): boolean {
    return this.ops.has(opName);
  }

  run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void {
    if (!this.ops.has(op.name)) fail('UNSUPPORTED_OP', `cuda: no kernel for op '${op.name}' (the addon has ${[...this.ops].join(', ')})`);
    const floatDtype = validateCall(op, args, attrs);
    if (!this.floatDtypes.has(floatDtype)) fail('UNSUPPORTED_DTYPE', `${op.name}: cuda kernels take f32 or bf16 tensors, got ${floatDtype}`);
    const list: CudaArg[] = [];
    for (const a of op.args) {
      const t = args[a.name]!;
      if (t.backend !== this.name) fail('BAD_ARGUMENT', `${op.name}: argument '${a.name}' lives on ${t.backend}, not cuda`);
      list.push([a.name, this.pointer(t), DTYPES.indexOf(t.dtype), t.size]);
    }
    const nums: Record<string, number> = {};
    const strs: Record<string, string> = {};
    for (const [k, v] of Object.entries(attrs as object)) {
      if (typeof v === 'number') nums[k] = v;
      else if (typeof v === 'boolean') nums[k] = v ? 1 : 0;
      else if (typeof v === 'string') strs[k] = v;
      else if (v !== undefined) throw new Error(`${op.name}: attribute '${k}' is a ${typeof v}; CUDA kernels take numbers, booleans and strings`);
    }
    this.configureAddon();
    native(() => this.addon.run(op.name, list, nums, strs));
  }

  sync(): Promise<void> {
    this.notRecording('sync');
    return settle(() => this.syncNow());
  }

  /** Wait for the stream here and now (the addon's wait is blocking; `sync` wraps it in a promise). */
  syncNow(): void {
    this.notRecording('sync');
    native(() => this.addon.sync());
  }

  record(fn: () => void): Recording {
    this.notRecording('record');
    native(() => this.addon.captureBegin());
    this.recording = true;
    let id: number;
    try {
      fn();
    } catch (e) {
      this.recording = false;
      native(() => this.addon.captureAbort());
      throw e;
    }
    this.recording = false;
    id = native(() => this.addon.captureEnd());
    let live = true;
    return {
      native: true,
      replay: () => {
        if (!live) fail('BAD_ARGUMENT', 'replay of a destroyed CUDA graph');
        this.notRecording('replay');
        native(() => this.addon.graphLaunch(id));
      },
      destroy: () => {
        if (live) native(() => this.addon.graphDestroy(id));
        live = false;
      },
    };
  }

  protected override conditional(count: Tensor, threshold: number, fn: () => void): void {
    if (!this.recording) return fn();
    native(() => this.addon.conditionalBegin(this.pointer(count), threshold));
    try {
      fn();
    } catch (e) {
      // The body's capture is likely invalid now: end it quietly and report what went wrong first.
      try {
        this.addon.conditionalEnd();
      } catch {}
      throw e;
    }
    native(() => this.addon.conditionalEnd());
  }

  destroy(): void {
    this.store.destroyAll();
  }

  private pointer(t: Tensor): bigint {
    return this.store.handleOf(t).buffer + BigInt(t.offset * DTYPE_BYTES[t.dtype]);
  }
}
