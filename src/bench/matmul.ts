/**
 * `mdlm bench matmul`: mdlm's WebGPU matmul kernel against TensorFlow.js's WebGPU backend on the
 * same adapter in the same process. Both sides multiply the same random matrices, run warm-up
 * calls for a fixed time (a GPU coming from idle needs a while to reach its clocks), then the median
 * of 3 windows of `reps` calls, each ended by one wait for the GPU queue (no read-back inside the
 * timing; src/harness/timing.ts), and their results are compared once. TensorFlow.js is a dev dependency, loaded only here.
 */
import type { Backend } from '../backend/backend.js';
import { fail } from '../errors.js';
import { relativeError } from '../harness/parity.js';
import { medianCallMs, warmUp } from '../harness/timing.js';
import { type MatmulAttrs, matmul, matmulAttrs } from '../ops/matmul.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { createBackend } from '../runtime/backends.js';
import { KNOBS } from '../runtime/knobs.js';
import { numel } from '../tensor.js';

export interface MatmulBenchOptions {
  readonly shapes: readonly MatmulAttrs[];
  readonly reps: number;
  /** Warm-up seconds per side and shape before timing (the GPU clocks up from idle meanwhile). */
  readonly warmupSeconds?: number;
  readonly seed?: number;
  /** Skip TensorFlow.js (mdlm figures only). */
  readonly mdlmOnly?: boolean;
  /** Called with each record as it is measured. */
  readonly onRecord?: (r: MatmulBenchRecord) => void;
}

export interface MatmulBenchRecord {
  readonly shape: string;
  readonly attrs: MatmulAttrs;
  readonly reps: number;
  readonly mdlmMs: number;
  readonly mdlmTflops: number;
  readonly tfjsMs?: number;
  readonly tfjsTflops?: number;
  /** mdlm / tfjs throughput */
  readonly ratio?: number;
  /** ‖mdlm − tfjs‖ / ‖tfjs‖ on the first call's output */
  readonly relDiff?: number;
  readonly adapter: string;
}

/** The square sizes given (batch 1, no transposes), or the op's bench cases. */
export function matmulBenchShapes(sizes?: readonly number[]): MatmulAttrs[] {
  if (!sizes) return matmul.cases('bench').map((c) => c.attrs);
  return sizes.map((s) => matmulAttrs(1, s, s, s));
}

export function describeShape({ batch, m, n, k, transA, transB, accumulate }: MatmulAttrs): string {
  const op = `${accumulate ? 'out += ' : ''}${transA ? 'aᵀ' : 'a'}·${transB ? 'bᵀ' : 'b'}`;
  return `${batch > 1 ? `${batch}x ` : ''}${m}x${n}x${k} ${op}`;
}

function randomF32(rng: PhiloxStream, n: number): Float32Array {
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.normal();
  return out;
}

type Tf = typeof import('@tensorflow/tfjs-core');
type TfWebGpuBackend = import('@tensorflow/tfjs-backend-webgpu').WebGPUBackend;

/** TensorFlow.js on its WebGPU backend, through Dawn (the `webgpu` package) in Node. */
async function startTfjs(): Promise<{ tf: Tf; backend: TfWebGpuBackend }> {
  let tf: Tf;
  try {
    tf = await import('@tensorflow/tfjs-core');
    const { create, globals } = (await import('webgpu')) as { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
    Object.assign(globalThis, globals);
    Object.defineProperty(globalThis, 'navigator', { value: { gpu: create([...KNOBS.dawnFlags]) }, configurable: true, writable: true });
    await import('@tensorflow/tfjs-backend-webgpu');
  } catch (e) {
    return fail('NOT_FOUND', `bench matmul: TensorFlow.js could not be loaded (${(e as Error).message}); it is a dev dependency: run npm install in a checkout, or pass --mdlm-only`);
  }
  if (!(await tf.setBackend('webgpu'))) fail('BACKEND_UNAVAILABLE', 'bench matmul: TensorFlow.js could not start its webgpu backend');
  await tf.ready();
  return { tf, backend: tf.backend() as TfWebGpuBackend };
}

/** Submit what TensorFlow.js has recorded (as its own reads do) and wait for the GPU. */
async function tfjsIdle(backend: TfWebGpuBackend): Promise<void> {
  backend.ensureCommandEncoderReady();
  backend.endComputePassEncoder();
  backend.submitQueue();
  await backend.device.queue.onSubmittedWorkDone();
}

async function timeMdlm(gpu: Backend, attrs: MatmulAttrs, a: Float32Array, b: Float32Array, warmup: number, reps: number) {
  const shapes = matmul.shapes(attrs);
  const ta = gpu.alloc(shapes.a!, 'f32');
  const tb = gpu.alloc(shapes.b!, 'f32');
  const tout = gpu.alloc(shapes.out!, 'f32');
  try {
    gpu.upload(ta, a);
    gpu.upload(tb, b);
    const args = { a: ta, b: tb, out: tout };
    const call = () => gpu.run(matmul, args, attrs);
    const idle = () => gpu.sync();
    await warmUp(call, idle, warmup, 4);
    const out = (await gpu.download(tout)) as Float32Array;
    return { ms: await medianCallMs(call, idle, reps), out };
  } finally {
    for (const t of [ta, tb, tout]) gpu.free(t);
  }
}

async function timeTfjs(tfjs: { tf: Tf; backend: TfWebGpuBackend }, attrs: MatmulAttrs, a: Float32Array, b: Float32Array, warmup: number, reps: number) {
  const { tf, backend } = tfjs;
  const shapes = matmul.shapes(attrs);
  const ta = tf.tensor3d(a, shapes.a as [number, number, number]);
  const tb = tf.tensor3d(b, shapes.b as [number, number, number]);
  const call = () => tf.matMul(ta, tb, attrs.transA, attrs.transB);
  try {
    const first = call();
    const out = (await first.data()) as Float32Array;
    first.dispose();
    // disposing only drops the handle; the queued work still runs before the queue drains
    const run = () => call().dispose();
    const idle = () => tfjsIdle(backend);
    await warmUp(run, idle, warmup, 4);
    return { ms: await medianCallMs(run, idle, reps), out };
  } finally {
    ta.dispose();
    tb.dispose();
  }
}

export async function benchMatmul(opts: MatmulBenchOptions): Promise<MatmulBenchRecord[]> {
  if (!Number.isInteger(opts.reps) || opts.reps <= 0) fail('BAD_ARGUMENT', `bench matmul: --reps must be a positive integer, got ${opts.reps}`);
  const warmup = opts.warmupSeconds ?? 0.5;
  const gpu = await createBackend('webgpu');
  const tfjs = opts.mdlmOnly ? null : await startTfjs();
  const records: MatmulBenchRecord[] = [];
  try {
    for (const attrs of opts.shapes) {
      matmul.validate!(attrs);
      const rng = new PhiloxStream(opts.seed ?? 1, RngPurpose.harness);
      const shapes = matmul.shapes(attrs);
      const a = randomF32(rng, numel(shapes.a!));
      const b = randomF32(rng, numel(shapes.b!));
      const flops = matmul.flops!(attrs);
      const tflops = (ms: number) => flops / (ms * 1e-3) / 1e12;
      const mine = await timeMdlm(gpu, attrs, a, b, warmup, opts.reps);
      let rec: MatmulBenchRecord = {
        shape: describeShape(attrs), attrs, reps: opts.reps, mdlmMs: mine.ms, mdlmTflops: tflops(mine.ms), adapter: gpu.description,
      };
      if (tfjs) {
        const theirs = await timeTfjs(tfjs, attrs, a, b, warmup, opts.reps);
        rec = {
          ...rec,
          tfjsMs: theirs.ms,
          tfjsTflops: tflops(theirs.ms),
          ratio: theirs.ms / mine.ms,
          relDiff: relativeError(mine.out, theirs.out, false),
        };
      }
      opts.onRecord?.(rec);
      records.push(rec);
    }
  } finally {
    gpu.destroy();
  }
  return records;
}

export function formatMatmulTable(records: readonly MatmulBenchRecord[]): string {
  const head = ['shape', 'mdlm ms', 'mdlm TFLOP/s', 'tfjs ms', 'tfjs TFLOP/s', 'mdlm/tfjs', 'rel diff'];
  const f = (x: number | undefined, d: number) => (x === undefined ? '-' : x.toFixed(d));
  const rows = records.map((r) => [
    r.shape, f(r.mdlmMs, 3), f(r.mdlmTflops, 3), f(r.tfjsMs, 3), f(r.tfjsTflops, 3), f(r.ratio, 2), r.relDiff === undefined ? '-' : r.relDiff.toExponential(1),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}
