/**
 * A stand-in for the native CUDA addon: "device" memory in host buffers addressed by BigInt
 * pointers, and kernels that are the ops' float64 references over the stored dtypes. It lets
 * machines without a GPU (CI) run src/backend/cuda/cuda.ts itself: pointer and view arithmetic,
 * dtype codes, attribute marshalling, narrow-float encoding, raw bytes, error translation.
 */
import { type CudaAddon, type CudaArg, type CudaKernelSettings, type CudaProbeInfo, DEFAULT_CUDA_SETTINGS } from '../../src/backend/cuda/cuda.js';
import { decodeFloats, encodeFloats } from '../../src/convert.js';
import { OPS, findOp } from '../../src/ops/index.js';
import { type RefArgs, writtenSpans } from '../../src/ops/op.js';
import { DTYPES, DTYPE_BYTES, type DType } from '../../src/tensor.js';

/** Allocations past this fail as out of memory, as cudaMalloc would. */
const MEMORY = 2 ** 30;

function addonError(code: string, message: string): Error {
  return Object.assign(new Error(message), { mdlmCode: code });
}

/**
 * The simulated addon, how many conditional bodies its graph launches have skipped, and the kernel
 * settings each run was enqueued with (configure's, as the addon hands them to the launchers).
 */
export function simulatedCudaAddon(): CudaAddon & { readonly skippedBodies: () => number; readonly runSettings: () => readonly CudaKernelSettings[] } {
  const blocks = new Map<bigint, Uint8Array>();
  let next = 1n << 20n;
  let used = 0;
  // A "graph" is the list of device calls made while capturing, run again on launch.
  let capture: (() => void)[] | null = null;
  /** The main capture's list while a conditional body is captured into `capture`. */
  let outer: (() => void)[] | null = null;
  let skipped = 0;
  let settings: CudaKernelSettings = DEFAULT_CUDA_SETTINGS;
  const runSettings: CudaKernelSettings[] = [];
  const graphs = new Map<number, (() => void)[]>();
  let nextGraph = 1;
  /** Device work: recorded while capturing, else done now. */
  const enqueue = (work: () => void): void => {
    if (capture) capture.push(work);
    else work();
  };
  const host = (what: string): void => {
    if (capture) throw new Error(`simulated cuda: ${what} while capturing (cudaErrorStreamCaptureUnsupported)`);
  };

  /** The bytes [ptr, ptr + bytes) of one allocation. */
  function at(ptr: bigint, bytes: number): Uint8Array {
    for (const [base, block] of blocks) {
      const offset = Number(ptr - base);
      if (ptr >= base && offset + bytes <= block.byteLength) return block.subarray(offset, offset + bytes);
    }
    throw new Error(`simulated cuda: [${ptr}, +${bytes}) is not inside an allocation`);
  }

  function read(dtype: DType, bytes: Uint8Array): Float64Array | Int32Array | Uint32Array {
    const copy = bytes.slice().buffer;
    switch (dtype) {
      case 'i32': return new Int32Array(copy);
      case 'u32': return new Uint32Array(copy);
      case 'f32': return Float64Array.from(new Float32Array(copy));
      case 'f16':
      case 'bf16': return Float64Array.from(decodeFloats(dtype, new Uint16Array(copy)));
      default: return Float64Array.from(decodeFloats(dtype, new Uint8Array(copy)));
    }
  }

  function write(dtype: DType, values: ArrayLike<number>, into: Uint8Array): void {
    const encoded = dtype === 'i32' ? Int32Array.from(values) : dtype === 'u32' ? Uint32Array.from(values) : dtype === 'f32' ? Float32Array.from(values) : encodeFloats(dtype, values);
    into.set(new Uint8Array(encoded.buffer, encoded.byteOffset, encoded.byteLength));
  }

  const info: CudaProbeInfo = {
    available: true, device: 'simulated device', sm: '9.0', memoryBytes: MEMORY, multiprocessors: 1, bf16: true, fp8: true,
    driver: 'simulated', runtime: 'simulated', cublasLt: 'simulated', cudnn: 'none (simulated)', nccl: 'none (simulated)', ops: OPS.map((o) => o.name),
  };

  return {
    skippedBodies: () => skipped,
    runSettings: () => runSettings,
    probe: () => info,
    useDevice: () => 0, // one simulated GPU: every index is it
    configure(s) {
      if (!Number.isInteger(s.gemmAutotune) || s.gemmAutotune < 0 || s.gemmAutotune > 64) throw addonError('BAD_ARGUMENT', `configure: gemmAutotune is ${s.gemmAutotune}`);
      settings = { ...s };
    },
    malloc(bytes) {
      if (used + bytes > MEMORY) throw addonError('OUT_OF_MEMORY', `cuda: cannot allocate ${bytes} bytes (${MEMORY - used} free of ${MEMORY})`);
      const ptr = next;
      next += BigInt(Math.ceil(bytes / 256) * 256 + 256);
      blocks.set(ptr, new Uint8Array(bytes));
      used += bytes;
      return ptr;
    },
    free(ptr) {
      const block = blocks.get(ptr);
      if (!block) throw new Error(`simulated cuda: free of ${ptr}, which is not an allocation`);
      used -= block.byteLength;
      blocks.delete(ptr);
    },
    upload(ptr, view) {
      host('upload');
      at(ptr, view.byteLength).set(new Uint8Array(view.buffer, view.byteOffset, view.byteLength));
    },
    memset(ptr, bytes) {
      const target = at(ptr, bytes);
      enqueue(() => target.fill(0));
    },
    conditionalBegin(countPtr, threshold) {
      if (outer) throw new Error('simulated cuda: conditional regions do not nest');
      if (!capture) return;
      const count = at(countPtr, 4);
      const body: (() => void)[] = [];
      capture.push(() => {
        if (new Int32Array(count.slice().buffer)[0]! > threshold) for (const work of body) work();
        else skipped++;
      });
      outer = capture;
      capture = body;
    },
    conditionalEnd() {
      if (!outer) return;
      capture = outer;
      outer = null;
    },
    captureBegin() {
      if (capture) throw new Error('simulated cuda: captureBegin during a capture');
      capture = [];
    },
    captureEnd() {
      if (!capture) throw new Error('simulated cuda: captureEnd without a capture');
      if (outer) throw new Error('simulated cuda: captureEnd inside a conditional region');
      graphs.set(nextGraph, capture);
      capture = null;
      return nextGraph++;
    },
    captureAbort() {
      capture = null;
      outer = null;
    },
    graphLaunch(id) {
      host('graphLaunch');
      const g = graphs.get(id);
      if (!g) throw new Error(`simulated cuda: no graph ${id}`);
      for (const work of g) work();
    },
    graphDestroy(id) {
      if (!graphs.delete(id)) throw new Error(`simulated cuda: no graph ${id}`);
    },
    download(ptr, bytes) {
      host('download');
      return at(ptr, bytes).slice().buffer;
    },
    run(name: string, args: readonly CudaArg[], nums, strs) {
      const op = findOp(name);
      if (!op) throw addonError('UNSUPPORTED_OP', `cuda: no kernel for op '${name}'`);
      runSettings.push(settings);
      const attrs = { ...nums, ...strs };
      const views = new Map<string, [DType, Uint8Array]>();
      for (const [arg, ptr, code, numel] of args) {
        const dtype = DTYPES[code]!;
        views.set(arg, [dtype, at(ptr, numel * DTYPE_BYTES[dtype])]);
      }
      enqueue(() => {
        const ref: RefArgs = {};
        for (const [arg, [dtype, bytes]] of views) ref[arg] = read(dtype, bytes);
        op.reference(ref, attrs);
        const rows = op.rowLayout?.(attrs) ?? {};
        for (const a of op.args) {
          if (a.role === 'in') continue;
          const [dtype, bytes] = views.get(a.name)!;
          const size = DTYPE_BYTES[dtype];
          const r = ref[a.name]!;
          for (const [from, to] of writtenSpans(rows[a.name], r.length)) write(dtype, r.subarray(from, to), bytes.subarray(from * size, to * size));
        }
      });
    },
    sync() {
      host('sync');
    },
  };
}
