/**
 * An op is declared once, as data plus a CPU reference: its arguments with roles and dtypes, the
 * shape every argument must have for given attributes, a float64 reference implementation,
 * random test cases and tolerances. Backends implement kernels for ops by name; the parity
 * harness walks the registry of these declarations.
 */
import { fail } from '../errors.js';
import { type DType, type Shape, type Tensor, sameShape, shapeStr } from '../tensor.js';
import { normals } from '../rng/normals.js';
import type { PhiloxStream } from '../rng/philox.js';

/** in: read only; out: written (poisoned before a parity run); inout: read and updated in place. */
export type ArgRole = 'in' | 'out' | 'inout';

/** 'float' means the op's compute float dtype (f32 on CPU/WebGPU, bf16 on CUDA). */
export type ArgDType = DType | 'float';

export interface ArgSpec {
  readonly name: string;
  readonly role: ArgRole;
  readonly dtype: ArgDType;
}

/** A strided span's rows: `width` elements each, `stride` apart. */
export interface RowLayout {
  readonly stride: number;
  readonly width: number;
}

/** Host arrays the reference reads and writes: floats in float64, integers as they are. */
export type RefArray = Float64Array | Int32Array | Uint32Array;
export type RefArgs = Record<string, RefArray>;

export interface OpCase<A> {
  /** Short label for reports, e.g. "causal gqa 4/2". */
  readonly label: string;
  readonly attrs: A;
}

/** How a backward op is checked against central finite differences of its forward op. */
export interface GradientCheck<A, F> {
  readonly forward: OpDef<F>;
  forwardAttrs(attrs: A): F;
  /** forward input name -> backward arg holding the same values */
  readonly inputs: Readonly<Record<string, string>>;
  /** forward output name -> backward input holding its cotangent dY */
  readonly cotangents: Readonly<Record<string, string>>;
  /** backward output name -> forward input it is the gradient of */
  readonly grads: Readonly<Record<string, string>>;
  /** backward output -> backward input added to it as is (fused residual gradients) */
  readonly passthrough?: Readonly<Record<string, string>>;
  /** The backward attributes the finite-difference check runs with (default: the case's). */
  checkAttrs?(attrs: A): A;
  /**
   * Backward inputs that neither the forward nor the cotangents give (attention_backward's
   * positions), sampled on their own: what a timing-only run at bench size uploads for them.
   */
  sampleRest?(rng: PhiloxStream, attrs: A): RefArgs;
}

export interface OpDef<A = Record<string, never>> {
  readonly name: string;
  readonly summary: string;
  readonly args: readonly ArgSpec[];
  /** Float dtypes this op accepts for its 'float' args (default: f32 only). */
  readonly floatDtypes?: readonly DType[];
  /** Checks attribute values (throw MdlmError('BAD_ARGUMENT') naming the op and attribute). */
  validate?(attrs: A): void;
  /** The shape each argument must have. */
  shapes(attrs: A): Record<string, Shape>;
  /**
   * Concrete dtype of an arg whose dtype depends on attributes (cast's x and out; matmul's out when
   * it is f32 under bf16 inputs); undefined leaves the declared dtype.
   */
  argDtype?(arg: string, attrs: A): DType | undefined;
  /** The float64 reference: reads 'in'/'inout' args, writes 'out'/'inout' args (preallocated). */
  reference(args: RefArgs, attrs: A): void;
  /** Parity cases; 'bench' cases are the sizes timed by `mdlm bench kernels`. */
  cases(scale: 'test' | 'bench'): readonly OpCase<A>[];
  /** Fresh random values for every 'in' and 'inout' arg (never all zeros). */
  sample(rng: PhiloxStream, attrs: A): RefArgs;
  /**
   * output -> input it may overwrite: the call may pass the very same view for both (every kernel
   * reads each element before writing it, or copies first). Any other overlap is an error.
   */
  readonly inPlace?: Readonly<Record<string, string>>;
  /**
   * The args that are strided spans of rows (stridedRows) for these attributes: rows `width`
   * elements wide, `stride` apart. An output's gaps between its rows are left alone: the CPU
   * backend writes its rows only, and the parity harness checks that the poison survives there
   * (the reference sees NaN). Outputs whose rows interleave in one buffer (a fused q/k/v
   * gradient's parts) do not overlap.
   */
  rowLayout?(attrs: A): Readonly<Record<string, RowLayout>>;
  /** Relative-error tolerance per float dtype of the outputs (integer outputs must match exactly). */
  readonly tolerance: Partial<Record<DType, number>>;
  /** Floating-point operations of one call, for TFLOP/s in benchmarks. */
  flops?(attrs: A): number;
  readonly gradient?: GradientCheck<A, never> | GradientCheck<A, unknown>;
}

/**
 * bf16 tolerance of an op whose outputs are computed in f32 and rounded once to bf16. Inputs are
 * rounded to bf16 before the reference runs, so storage adds only that rounding: within 2^-8
 * (≈ 3.9e-3, 8 significant bits) of each value, ~1.5e-3 RMS; f32 math adds ≪ 1e-4.
 */
export const BF16_ROUNDED_OUTPUT = 4e-3;

/**
 * f16 tolerance of an op whose outputs are computed in f32 or wider and rounded once to f16
 * (the CPU backend): within 2^-11 (≈ 4.9e-4, 11 significant bits) of each normal value.
 */
export const F16_ROUNDED_OUTPUT = 5e-4;

/** Declare an op with its attribute type inferred; the identity, for typing. */
export function defineOp<A>(def: OpDef<A>): OpDef<A> {
  return def;
}

/** Declare the gradient-check link from a backward op to its forward op. */
export function gradientOf<A, F>(check: GradientCheck<A, F>): GradientCheck<A, F> {
  return check;
}

export function resolveArgDtype<A>(op: OpDef<A>, arg: ArgSpec, attrs: A, floatDtype: DType): DType {
  if (op.argDtype) {
    const d = op.argDtype(arg.name, attrs);
    if (d) return d;
  }
  return arg.dtype === 'float' ? floatDtype : arg.dtype;
}

/** Whether an arg takes the call's float dtype (declared 'float' and not fixed by argDtype). */
function followsCallDtype<A>(op: OpDef<A>, arg: ArgSpec, attrs: A): boolean {
  return arg.dtype === 'float' && !op.argDtype?.(arg.name, attrs);
}

/** The float dtype of a call: the dtype of its 'float' tensors, which must all agree. */
export function callFloatDtype<A>(op: OpDef<A>, tensors: Readonly<Record<string, Tensor>>, attrs: A): DType {
  let found: DType | undefined;
  for (const a of op.args) {
    if (!followsCallDtype(op, a, attrs)) continue;
    const t = tensors[a.name];
    if (!t) continue;
    if (found && t.dtype !== found) {
      fail('BAD_DTYPE', `${op.name}: argument '${a.name}' is ${t.dtype} but other float arguments are ${found}`);
    }
    found = t.dtype;
  }
  return found ?? 'f32';
}

/**
 * Validate a call: every argument present, no stray ones, dtypes and shapes as declared, no
 * output aliasing another argument. Errors name the op, the argument, expected and given.
 */
export function validateCall<A>(op: OpDef<A>, tensors: Readonly<Record<string, Tensor>>, attrs: A): DType {
  op.validate?.(attrs);
  const names = new Set(op.args.map((a) => a.name));
  for (const k of Object.keys(tensors)) {
    if (!names.has(k)) fail('BAD_ARGUMENT', `${op.name}: unknown argument '${k}'; it takes ${[...names].join(', ')}`);
  }
  const floatDtype = callFloatDtype(op, tensors, attrs);
  const allowed = op.floatDtypes ?? ['f32'];
  const expected = op.shapes(attrs);
  for (const a of op.args) {
    const t = tensors[a.name];
    if (!t) fail('BAD_ARGUMENT', `${op.name}: missing argument '${a.name}'`);
    const want = resolveArgDtype(op, a, attrs, floatDtype);
    if (followsCallDtype(op, a, attrs) && !allowed.includes(t.dtype)) {
      fail('BAD_DTYPE', `${op.name}: argument '${a.name}' is ${t.dtype}; this op takes ${allowed.join(' or ')}`);
    }
    if (t.dtype !== want) fail('BAD_DTYPE', `${op.name}: argument '${a.name}' must be ${want}, got ${t.dtype}`);
    const shape = expected[a.name];
    if (!shape) throw new Error(`${op.name}: shapes() gives no shape for '${a.name}'`);
    if (!sameShape(shape, t.shape)) {
      fail('BAD_SHAPE', `${op.name}: argument '${a.name}' expected shape ${shapeStr(shape)}, got ${shapeStr(t.shape)}`);
    }
  }
  const rows = op.rowLayout?.(attrs) ?? {};
  for (const a of op.args) {
    if (a.role === 'in') continue;
    const t = tensors[a.name]!;
    for (const b of op.args) {
      if (b === a) continue;
      const u = tensors[b.name]!;
      if (op.inPlace?.[a.name] === b.name && sameView(t, u)) continue;
      if (u.handle === t.handle && overlaps(t, u, rows[a.name], rows[b.name])) {
        fail('BAD_ARGUMENT', `${op.name}: output '${a.name}' overlaps argument '${b.name}'; give it its own buffer`);
      }
    }
  }
  return floatDtype;
}

/** The same storage, offset, size and dtype: one tensor under two names. */
export function sameView(a: Tensor, b: Tensor): boolean {
  return a.handle === b.handle && a.offset === b.offset && a.size === b.size && a.dtype === b.dtype;
}

/** Whether two views of one buffer share an element; strided spans of one stride may interleave. */
function overlaps(a: Tensor, b: Tensor, ra?: RowLayout, rb?: RowLayout): boolean {
  if (!(a.offset < b.offset + b.size && b.offset < a.offset + a.size)) return false;
  if (!ra || !rb || ra.stride !== rb.stride) return true;
  // b's first column in the frame of a's rows: apart when it starts after a's row and ends
  // before a's next one
  const d = (((b.offset - a.offset) % ra.stride) + ra.stride) % ra.stride;
  return !(d >= ra.width && d + rb.width <= ra.stride);
}

/** Whether an arg is a strided span with gaps between its rows. */
export function hasGaps(layout: RowLayout | undefined): boolean {
  return layout !== undefined && layout.stride > layout.width;
}

/**
 * The [from, to) element spans an output of `length` elements writes: its rows alone when it is
 * strided with gaps (the gaps may be other outputs' rows), else all of it. The CPU backend and
 * the simulated CUDA device write back what the reference computed over these.
 */
export function writtenSpans(layout: RowLayout | undefined, length: number): [number, number][] {
  if (!hasGaps(layout)) return [[0, length]];
  const spans: [number, number][] = [];
  for (let o = 0; o < length; o += layout!.stride) spans.push([o, o + layout!.width]);
  return spans;
}

/**
 * The shape of `rows` rows of `width` elements, `stride` apart, as one flat span (a strided
 * operand: the last row ends where its own elements do).
 */
export function stridedRows(rows: number, stride: number, width: number): number[] {
  return [(rows - 1) * stride + width];
}

export function refArrayFor(dtype: DType, n: number): RefArray {
  if (dtype === 'i32') return new Int32Array(n);
  if (dtype === 'u32') return new Uint32Array(n);
  return new Float64Array(n);
}

// Helpers for op declarations' random inputs.

/** n normals × scale, as n calls of rng.normal() (filled as ../rng/normals.ts's default filler does). */
export function randn(rng: PhiloxStream, n: number, scale = 1): Float64Array {
  return normals(rng, n, scale);
}

export function randu(rng: PhiloxStream, n: number, lo: number, hi: number): Float64Array {
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * rng.uniform();
  return out;
}

export function randint(rng: PhiloxStream, n: number, lo: number, hi: number): Int32Array {
  const out = new Int32Array(n);
  for (let i = 0; i < n; i++) out[i] = lo + rng.int(hi - lo);
  return out;
}

export function badAttr(op: string, attr: string, value: unknown, want: string): never {
  return fail('BAD_ARGUMENT', `${op}: attribute '${attr}' is ${JSON.stringify(value)}; ${want}`);
}

/** Require boolean attributes. */
export function requireFlags<A>(op: string, attrs: A, keys: readonly (keyof A & string)[]): void {
  for (const k of keys) if (typeof attrs[k] !== 'boolean') badAttr(op, k, attrs[k], 'expected true or false');
}

/** Require attributes to be integers in [0, 2^32). */
export function requireU32<A>(op: string, attrs: A, keys: readonly (keyof A & string)[]): void {
  for (const k of keys) {
    const v = attrs[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffffffff) badAttr(op, k, v, 'expected an integer in [0, 2^32)');
  }
}

/** Require a seed that seedKey accepts. */
export function requireSeed(op: string, seed: unknown): void {
  if (typeof seed !== 'number' || !Number.isSafeInteger(seed) || seed < 0) badAttr(op, 'seed', seed, 'expected a non-negative integer up to 2^53');
}

/** Require positive integer attributes. */
export function requireDims<A>(op: string, attrs: A, keys: readonly (keyof A & string)[]): void {
  for (const k of keys) {
    const v = attrs[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) badAttr(op, k, v, 'expected a positive integer');
  }
}
