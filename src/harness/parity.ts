/**
 * The parity harness: runs an op case on a backend with fresh random inputs and poisoned outputs
 * and compares against the float64 CPU reference; checks backward ops against central finite
 * differences of their forward op in float64. Drives the tests and `mdlm bench kernels`.
 */
import type { Backend, BackendName } from '../backend/backend.js';
import { roundTo } from '../convert.js';
import { type OpCase, type OpDef, type RefArgs, type RefArray, hasGaps, refArrayFor, resolveArgDtype } from '../ops/op.js';
import { normals } from '../rng/normals.js';
import { PhiloxStream, RngPurpose } from '../rng/philox.js';
import { type DType, type HostArray, type Tensor, isFloat, shapeStr } from '../tensor.js';
import { medianCallMs, warmUp } from './timing.js';

export interface ParityRecord {
  readonly op: string;
  readonly case: string;
  readonly backend: string;
  readonly check: 'reference' | 'finite-difference' | 'unchecked';
  readonly shape: string;
  readonly dtype: DType;
  readonly relErr: number;
  /** Which output had the largest error. */
  readonly worst: string;
  readonly tol: number;
  readonly pass: boolean;
  /** Mean milliseconds per call (when timed). */
  readonly ms?: number;
  readonly tflops?: number;
  readonly seed: number;
  readonly error?: string;
}

export interface ParityOptions {
  readonly seed: number;
  readonly dtype?: DType;
  /** Time the backend: the median of 3 windows of this many calls, after WARMUP_SECONDS of warm-up calls (src/harness/timing.ts). */
  readonly timeReps?: number;
  /** Skip the reference (timing only, for shapes whose float64 reference takes minutes). */
  readonly skipReference?: boolean;
}

/** Warm-up before timing an op: enough for a GPU's clocks to ramp up, short beside a CPU op's calls. */
const WARMUP_SECONDS = 0.05;

/** The float dtype each backend trains in, and so is checked in by default. */
export const PREFERRED_FLOAT: Readonly<Record<BackendName, DType>> = { cpu: 'f32', webgpu: 'f32', cuda: 'bf16' };

/**
 * The float dtypes to check an op in on a backend: those requested (default: the backend's
 * preferred one) that both the op and the backend's kernels take, or else the first they both
 * take. Ops without 'float' arguments have fixed dtypes and run once (reported as f32).
 */
export function parityDtypes<A>(op: OpDef<A>, backend: Backend, requested?: readonly DType[]): DType[] {
  if (!op.args.some((a) => a.dtype === 'float')) return ['f32'];
  const allowed = (op.floatDtypes ?? ['f32']).filter((d) => backend.floatDtypes.has(d));
  const picked = (requested ?? [PREFERRED_FLOAT[backend.name]]).filter((d) => allowed.includes(d));
  return picked.length > 0 ? picked : allowed.slice(0, 1);
}

/** Float tolerance used for finite-difference checks (float64 both sides). */
export const FD_TOLERANCE = 1e-5;
const POISON_INT = 0x7eadbeef;

export function caseShape<A>(op: OpDef<A>, attrs: A): string {
  const shapes = op.shapes(attrs);
  return op.args.filter((a) => a.role === 'in').map((a) => `${a.name}${shapeStr(shapes[a.name]!)}`).join(' ');
}

function roundInputs<A>(op: OpDef<A>, args: RefArgs, attrs: A, dtype: DType): RefArgs {
  const out: RefArgs = {};
  for (const a of op.args) {
    const v = args[a.name];
    if (!v) continue;
    const d = resolveArgDtype(op, a, attrs, dtype);
    if (v instanceof Float64Array) {
      const r = new Float64Array(v.length);
      for (let i = 0; i < v.length; i++) r[i] = roundTo(d, v[i]!);
      out[a.name] = r;
    } else {
      out[a.name] = v.slice();
    }
  }
  return out;
}

/** The reference on a case: inputs as sampled, outputs preallocated, run in float64. */
export function runReference<A>(op: OpDef<A>, inputs: RefArgs, attrs: A, dtype: DType): RefArgs {
  const shapes = op.shapes(attrs);
  const rows = op.rowLayout?.(attrs) ?? {};
  const args: RefArgs = {};
  for (const a of op.args) {
    const n = shapes[a.name]!.reduce((x, y) => x * y, 1);
    if (a.role === 'out') {
      const out = refArrayFor(resolveArgDtype(op, a, attrs, dtype), n);
      // what the op leaves alone stays poisoned (NaN), as on the backend under test
      if (out instanceof Float64Array && hasGaps(rows[a.name])) out.fill(NaN);
      args[a.name] = out;
    }
    else {
      const v = inputs[a.name];
      if (!v) throw new Error(`${op.name}: sample() gave no values for '${a.name}'`);
      if (v.length !== n) throw new Error(`${op.name}: sample() gave ${v.length} values for '${a.name}', shape needs ${n}`);
      args[a.name] = v.slice();
    }
  }
  op.reference(args, attrs);
  return args;
}

export function relativeError(got: ArrayLike<number>, want: ArrayLike<number>, integer: boolean): number {
  if (integer) {
    let bad = 0;
    for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) bad++;
    return want.length === 0 ? 0 : bad / want.length;
  }
  let num = 0;
  let den = 0;
  for (let i = 0; i < want.length; i++) {
    const g = got[i]!;
    const w = want[i]!;
    // A reference NaN is an element the op must leave alone (rowLayout's gaps): the poison stays.
    if (Number.isNaN(w)) {
      if (!Number.isNaN(g)) return Infinity;
      continue;
    }
    if (!Number.isFinite(g) && g !== w) return Infinity;
    num += (g - w) * (g - w);
    den += w * w;
  }
  return den === 0 ? Math.sqrt(num) : Math.sqrt(num / den);
}

function toHost(v: RefArray, dtype: DType): HostArray {
  if (dtype === 'i32') return v instanceof Int32Array ? v : Int32Array.from(v);
  if (dtype === 'u32') return v instanceof Uint32Array ? v : Uint32Array.from(v);
  return Float32Array.from(v);
}

function poison(dtype: DType, n: number): HostArray {
  if (dtype === 'i32') return new Int32Array(n).fill(POISON_INT);
  if (dtype === 'u32') return new Uint32Array(n).fill(POISON_INT);
  return new Float32Array(n).fill(NaN);
}

/**
 * Allocate and fill the tensors of one call: sampled inputs, and outputs poisoned for a check (a
 * timing-only run leaves them as allocated: at bench sizes, filling and uploading hundreds of
 * millions of NaNs took longer than the timing).
 */
function uploadCall<A>(backend: Backend, op: OpDef<A>, attrs: A, dtype: DType, inputs: RefArgs, into: Record<string, Tensor>, checked = true): void {
  const shapes = op.shapes(attrs);
  for (const a of op.args) {
    const d = resolveArgDtype(op, a, attrs, dtype);
    const t = backend.alloc(shapes[a.name]!, d);
    into[a.name] = t;
    if (a.role !== 'out') backend.upload(t, toHost(inputs[a.name]!, d));
    else if (checked) backend.upload(t, poison(d, t.size));
  }
}


/**
 * A backward op's tensors for a timing-only run, made on the backend under test: its forward op's
 * inputs sampled, the forward run there for what backward reads of its outputs (out, lse, rstd…),
 * cotangents and pass-through gradients random. Sampling a backward op builds those saved outputs
 * with the float64 reference, which takes minutes at bench sizes (attention at T = 2048). Fills
 * `into` and returns true, or returns false (touching nothing) when an input has no such source.
 */
export function uploadBackwardFromForward<A>(backend: Backend, op: OpDef<A>, attrs: A, dtype: DType, rng: PhiloxStream, into: Record<string, Tensor>): boolean {
  const g = op.gradient;
  if (!g || !backend.supports(g.forward.name)) return false;
  const forward = g.forward as OpDef<unknown>;
  const fattrs = g.forwardAttrs(attrs);
  const forwardArgs = new Map(forward.args.map((a) => [a.name, a]));
  // backward input -> the forward argument holding its value (declared links, else the same name)
  const source = new Map<string, string>(Object.entries(g.inputs).map(([f, b]) => [b, f]));
  for (const a of op.args) if (!source.has(a.name) && forwardArgs.has(a.name)) source.set(a.name, a.name);
  const random = new Set([...Object.values(g.cotangents), ...Object.values(g.passthrough ?? {})]);
  const forwardInputs = forward.sample(rng, fattrs);
  const rest = g.sampleRest?.(rng, attrs) ?? {};
  for (const a of op.args) {
    // Pure inputs need a forward source, random values or a sample of their own; inout args start random.
    if (a.role === 'in' && !source.has(a.name) && !(a.name in rest) && !(random.has(a.name) && isFloat(resolveArgDtype(op, a, attrs, dtype)))) return false;
  }
  const fwd: Record<string, Tensor> = {};
  try {
    uploadCall(backend, forward, fattrs, dtype, forwardInputs, fwd, false);
    backend.run(forward, fwd, fattrs);
    const shapes = op.shapes(attrs);
    for (const a of op.args) {
      const from = source.get(a.name);
      if (a.role !== 'out' && from !== undefined) {
        into[a.name] = fwd[from]!;
        delete fwd[from];
        continue;
      }
      const d = resolveArgDtype(op, a, attrs, dtype);
      const t = backend.alloc(shapes[a.name]!, d);
      into[a.name] = t;
      const own = rest[a.name];
      if (own) backend.upload(t, toHost(own, d));
      else if (a.role !== 'out') backend.upload(t, Float32Array.from(normals(rng, t.size)));
    }
  } finally {
    for (const t of Object.values(fwd)) backend.free(t);
  }
  return true;
}

/** One op case on one backend against the reference (or only timed, with `skipReference`). */
export async function checkParity<A>(backend: Backend, op: OpDef<A>, c: OpCase<A>, opts: ParityOptions): Promise<ParityRecord> {
  const dtype = opts.dtype ?? 'f32';
  const rng = new PhiloxStream(opts.seed, RngPurpose.harness);
  const base = { op: op.name, case: c.label, backend: backend.name, check: 'reference' as const, shape: caseShape(op, c.attrs), dtype, seed: opts.seed };
  const tensors: Record<string, Tensor> = {};
  const tol = op.tolerance[dtype] ?? op.tolerance.f32 ?? 1e-5;
  let want: RefArgs | null = null;
  try {
    if (!opts.skipReference || !uploadBackwardFromForward(backend, op, c.attrs, dtype, rng, tensors)) {
      // Timing alone needs no inputs rounded to the dtype first (the upload rounds them) and no
      // poisoned outputs.
      const sampled = op.sample(rng, c.attrs);
      const inputs = opts.skipReference ? sampled : roundInputs(op, sampled, c.attrs, dtype);
      if (!opts.skipReference) want = runReference(op, inputs, c.attrs, dtype);
      uploadCall(backend, op, c.attrs, dtype, inputs, tensors, !opts.skipReference);
    }
    backend.run(op, tensors, c.attrs);
    let relErr = want ? 0 : NaN;
    let worst = '';
    for (const a of op.args) {
      if (a.role === 'in' || !want) continue;
      const d = resolveArgDtype(op, a, c.attrs, dtype);
      const got = await backend.download(tensors[a.name]!);
      const e = relativeError(got, want[a.name]!, !isFloat(d));
      if (e > relErr || worst === '') {
        relErr = Math.max(relErr, e);
        worst = a.name;
      }
    }
    let ms: number | undefined;
    let tflops: number | undefined;
    if (opts.timeReps && opts.timeReps > 0) {
      const call = () => backend.run(op, tensors, c.attrs);
      const idle = () => backend.sync();
      await warmUp(call, idle, WARMUP_SECONDS);
      ms = await medianCallMs(call, idle, opts.timeReps);
      const f = op.flops?.(c.attrs);
      if (f) tflops = f / (ms * 1e-3) / 1e12;
    }
    return { ...base, ...(want ? {} : { check: 'unchecked' as const }), relErr, worst, tol, pass: want ? relErr <= tol : true, ...(ms !== undefined ? { ms } : {}), ...(tflops !== undefined ? { tflops } : {}) };
  } catch (e) {
    return { ...base, relErr: Infinity, worst: '', tol, pass: false, error: (e as Error).message };
  } finally {
    for (const t of Object.values(tensors)) backend.free(t);
  }
}

function lossOf<F>(forward: OpDef<F>, inputs: RefArgs, attrs: F, cot: Readonly<Record<string, Float64Array>>): number {
  const out = runReference(forward, inputs, attrs, 'f32');
  let l = 0;
  for (const [name, dy] of Object.entries(cot)) {
    const y = out[name]!;
    for (let i = 0; i < dy.length; i++) l += y[i]! * dy[i]!;
  }
  return l;
}

/**
 * A backward op's reference against central finite differences of L(x) = Σ_o ⟨F(x)_o, dY_o⟩,
 * in float64, at `probes` random coordinates of each gradient.
 */
export function checkGradient<A>(op: OpDef<A>, c: OpCase<A>, seed: number, probes = 24): ParityRecord {
  const g = op.gradient;
  if (!g) throw new Error(`${op.name} has no gradient check`);
  const rng = new PhiloxStream(seed, RngPurpose.harness, 1);
  const attrs = (g.checkAttrs as ((a: A) => A) | undefined)?.(c.attrs) ?? c.attrs;
  const sampled = op.sample(rng, attrs);
  const bwd = runReference(op, sampled, attrs, 'f32');
  const fattrs = g.forwardAttrs(attrs);
  const forward = g.forward as OpDef<unknown>;
  const finputs: RefArgs = {};
  for (const [fname, bname] of Object.entries(g.inputs)) finputs[fname] = sampled[bname]!.slice();
  const cot: Record<string, Float64Array> = {};
  for (const [fout, bname] of Object.entries(g.cotangents)) cot[fout] = sampled[bname] as Float64Array;
  let relErr = 0;
  let worst = '';
  for (const [gname, fname] of Object.entries(g.grads)) {
    const x = finputs[fname] as Float64Array;
    const analytic = bwd[gname]!;
    const pass = g.passthrough?.[gname];
    const fd: number[] = [];
    const an: number[] = [];
    const count = Math.min(probes, x.length);
    for (let p = 0; p < count; p++) {
      const i = count === x.length ? p : rng.int(x.length);
      const x0 = x[i]!;
      const h = 1e-5 * Math.max(1, Math.abs(x0));
      x[i] = x0 + h;
      const lp = lossOf(forward, finputs, fattrs, cot);
      x[i] = x0 - h;
      const lm = lossOf(forward, finputs, fattrs, cot);
      x[i] = x0;
      fd.push((lp - lm) / (2 * h));
      an.push(analytic[i]! - (pass ? sampled[pass]![i]! : 0));
    }
    const e = relativeError(an, fd, false);
    if (e > relErr || worst === '') {
      relErr = Math.max(relErr, e);
      worst = gname;
    }
  }
  return {
    op: op.name, case: c.label, backend: 'cpu-f64', check: 'finite-difference', shape: caseShape(op, c.attrs), dtype: 'f32',
    relErr, worst, tol: FD_TOLERANCE, pass: relErr <= FD_TOLERANCE, seed,
  };
}

/** A fresh seed per run (inputs are never the same twice); printed in every record to reproduce. */
export function freshSeed(): number {
  return Math.floor(Math.random() * 2 ** 40);
}
