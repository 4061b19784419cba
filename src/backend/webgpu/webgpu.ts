/**
 * The WebGPU backend: pooled GPUBuffers, shaders compiled at start-up, pipelines cached per
 * (shader, entry, constants) with bind-group layouts built from reflection, dispatches batched in
 * one compute pass until a sync point, uniforms packed by reflected struct layout into a ring.
 */
import { type Backend, BufferPool, PooledBackend, type Recording, TensorStore, checkUpload, rerun } from '../backend.js';
import { decodeFloats, encodeFloats } from '../../convert.js';
import { MdlmError, fail } from '../../errors.js';
import { type OpDef, validateCall } from '../../ops/op.js';
import { DTYPE_BYTES, type DType, type HostArray, type Shape, Tensor, checkShape, numel } from '../../tensor.js';
import type { DispatchSpec, KernelContext, UniformValues, WebGpuKernelEntry } from './kernel.js';
import { type CompiledShader, type ReflectedBinding, type ReflectedEntry, type ShaderLoader, compileShader } from './shaders.js';

interface Pipeline {
  readonly pipeline: GPUComputePipeline;
  readonly layout: GPUBindGroupLayout;
  readonly entry: ReflectedEntry;
}

export interface WebGpuOptions {
  readonly gpu: GPU;
  readonly loadShader: ShaderLoader;
  readonly kernels: readonly WebGpuKernelEntry[];
  readonly powerPreference?: GPUPowerPreference;
}

export interface WebGpuAdapterDescription {
  readonly vendor: string;
  readonly architecture: string;
  readonly device: string;
  readonly description: string;
  readonly features: readonly string[];
  /** The features mdlm's kernels can use, present or not. */
  readonly keyFeatures: Readonly<Record<string, boolean>>;
  readonly limits: Readonly<Record<string, number>>;
}

const WANTED_FEATURES = ['shader-f16', 'subgroups', 'timestamp-query'] as const;
const KEY_LIMITS = [
  'maxBufferSize', 'maxStorageBufferBindingSize', 'maxComputeWorkgroupStorageSize', 'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX', 'maxComputeWorkgroupSizeY', 'maxComputeWorkgroupsPerDimension', 'maxStorageBuffersPerShaderStage',
  'minStorageBufferOffsetAlignment', 'minUniformBufferOffsetAlignment',
] as const;

/** Machinery shader of conditional dispatches (whenAbove), compiled beside the kernels' shaders. */
const INDIRECT_ARGS = 'indirect_args';
const UNIFORM_SLOT = 256;
const UNIFORM_RING_SLOTS = 1024;
/** Submit after this many dispatches even without a sync point, to keep the GPU fed. */
const MAX_BATCH = 256;

export function describeAdapter(adapter: GPUAdapter): WebGpuAdapterDescription {
  const info = adapter.info;
  const limits: Record<string, number> = {};
  for (const k of KEY_LIMITS) limits[k] = Number((adapter.limits as unknown as Record<string, number>)[k]);
  return {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    features: [...adapter.features].sort(),
    keyFeatures: Object.fromEntries(WANTED_FEATURES.map((f) => [f, adapter.features.has(f)])),
    limits,
  };
}

/**
 * gpu.requestAdapter, with the implementation's exceptions (e.g. Dawn's for a flag it rejects) as
 * a BACKEND_UNAVAILABLE error that says so; null when there is no adapter.
 */
export async function requestAdapter(gpu: GPU, powerPreference: GPUPowerPreference = 'high-performance'): Promise<GPUAdapter | null> {
  try {
    return await gpu.requestAdapter({ powerPreference });
  } catch (e) {
    return fail('BACKEND_UNAVAILABLE', `webgpu: could not request an adapter: ${(e as Error).message}`);
  }
}

export class WebGpuBackend extends PooledBackend<GPUBuffer> implements Backend {
  readonly name = 'webgpu' as const;
  readonly skipsConditional = 'always' as const;
  readonly dtypes: ReadonlySet<DType> = new Set<DType>(['f32', 'f16', 'bf16', 'fp8e4m3', 'fp8e5m2', 'i32', 'u32']);
  /**
   * The shaders compute in f32 over f32 storage (f16/bf16 storage is for casts and transfers,
   * fp8 for the FP8 ops' operands, src/ops/fp8.ts).
   */
  readonly floatDtypes: ReadonlySet<DType> = new Set<DType>(['f32']);
  readonly description: string;
  readonly adapter: WebGpuAdapterDescription;
  readonly features: ReadonlySet<string>;

  protected readonly store: TensorStore<GPUBuffer>;
  private readonly stagingPool: BufferPool<GPUBuffer>;
  private readonly kernels = new Map<string, WebGpuKernelEntry>();
  private readonly shaders = new Map<string, CompiledShader>();
  private readonly pipelines = new Map<string, Pipeline>();
  private encoder: GPUCommandEncoder | null = null;
  private pass: GPUComputePassEncoder | null = null;
  private batched = 0;
  private readonly uniformRing: GPUBuffer;
  private readonly uniformStage = new ArrayBuffer(UNIFORM_SLOT * UNIFORM_RING_SLOTS);
  private uniformUsed = 0;
  private lost: string | null = null;
  private readonly errors: string[] = [];
  /** Inside whenAbove: every dispatch is indirect, its counts written by indirect_args first. */
  private condition: { readonly count: Tensor; readonly threshold: number } | null = null;
  private indirectArgs: Tensor | null = null;

  static async create(opts: WebGpuOptions): Promise<WebGpuBackend> {
    const adapter = await requestAdapter(opts.gpu, opts.powerPreference);
    if (!adapter) fail('BACKEND_UNAVAILABLE', 'webgpu: no WebGPU adapter found (on Linux without a GPU install Mesa lavapipe; see README)');
    const requiredFeatures = WANTED_FEATURES.filter((f) => adapter.features.has(f));
    const requiredLimits: Record<string, number> = {};
    for (const k of KEY_LIMITS) {
      if (k.startsWith('max')) requiredLimits[k] = Number((adapter.limits as unknown as Record<string, number>)[k]);
    }
    const device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
    const backend = new WebGpuBackend(adapter, device, opts.kernels);
    await backend.compileAll(opts.loadShader);
    return backend;
  }

  private constructor(adapter: GPUAdapter, readonly device: GPUDevice, kernels: readonly WebGpuKernelEntry[]) {
    super();
    this.adapter = describeAdapter(adapter);
    this.features = new Set(device.features);
    const a = this.adapter;
    this.description = [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' ') || 'WebGPU adapter';
    for (const k of kernels) this.kernels.set(k.op.name, k);
    // INDIRECT: a conditional dispatch reads its workgroup counts from a pooled buffer (whenAbove).
    const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST | GPUBufferUsage.INDIRECT;
    this.store = new TensorStore('webgpu', new BufferPool((size) => device.createBuffer({ size, usage }), (b) => b.destroy()));
    this.stagingPool = new BufferPool(
      (size) => device.createBuffer({ size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST }),
      (b) => b.destroy(),
    );
    this.uniformRing = device.createBuffer({ size: this.uniformStage.byteLength, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    void device.lost.then((info) => {
      this.lost = `${info.reason}: ${info.message}`;
    });
    device.onuncapturederror = (ev: GPUUncapturedErrorEvent) => {
      this.errors.push(ev.error.message);
    };
  }

  private async compileAll(load: ShaderLoader): Promise<void> {
    const names = new Set<string>();
    for (const k of this.kernels.values()) for (const s of k.shaders) names.add(s);
    names.add(INDIRECT_ARGS);
    for (const name of names) this.shaders.set(name, await compileShader(this.device, name, load));
  }

  // --- memory ---

  override alloc(shape: Shape, dtype: DType): Tensor {
    this.checkAlive();
    checkShape(shape, 'webgpu.alloc');
    if (!this.dtypes.has(dtype)) fail('UNSUPPORTED_DTYPE', `webgpu: dtype ${dtype} is not supported (supported: ${[...this.dtypes].join(', ')})`);
    const bytes = numel(shape) * DTYPE_BYTES[dtype];
    const max = this.device.limits.maxBufferSize;
    if (bytes > max) fail('OUT_OF_MEMORY', `webgpu: a ${dtype} tensor of ${bytes} bytes exceeds this adapter's maxBufferSize (${max})`);
    return super.alloc(shape, dtype);
  }

  upload(t: Tensor, data: HostArray): void {
    this.checkAlive();
    checkUpload(t, data);
    const h = this.store.handleOf(t);
    const byteOffset = t.offset * DTYPE_BYTES[t.dtype];
    if (byteOffset % 4 !== 0) fail('BAD_ARGUMENT', `webgpu.upload: ${t} starts at byte ${byteOffset}, not a multiple of 4`);
    // writeBuffer takes whole words: a narrow tensor's ragged last word is completed with zeros.
    const bytes: ArrayBufferView = isNarrow(t.dtype) ? wholeWords(encodeFloats(t.dtype, data)) : data;
    this.flush(); // earlier dispatches must see the old contents
    this.device.queue.writeBuffer(h.buffer, byteOffset, bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  zero(t: Tensor): void {
    this.checkAlive();
    const byteOffset = t.offset * DTYPE_BYTES[t.dtype];
    // clearBuffer takes 4-byte multiples; rounding a 2-byte-aligned view out would clear a neighbour's half word.
    if (byteOffset % 4 !== 0 || t.byteSize % 4 !== 0) {
      fail('BAD_ARGUMENT', `webgpu.zero: ${t} spans bytes ${byteOffset}..${byteOffset + t.byteSize}, not on 4-byte boundaries`);
    }
    if (t.byteSize === 0) return;
    this.endPass();
    this.encoder ??= this.device.createCommandEncoder();
    this.encoder.clearBuffer(this.store.handleOf(t).buffer, byteOffset, t.byteSize);
  }

  async download(t: Tensor): Promise<HostArray> {
    this.checkAlive();
    const h = this.store.handleOf(t);
    // Copies take whole words: from the word the view starts in, `lead` bytes before it.
    const byteOffset = t.offset * DTYPE_BYTES[t.dtype];
    const lead = byteOffset % 4;
    const size = Math.ceil((lead + t.byteSize) / 4) * 4;
    const staging = this.stagingPool.take(Math.max(size, 4));
    this.endPass();
    const enc = this.encoder ?? this.device.createCommandEncoder();
    this.encoder = null;
    if (size > 0) enc.copyBufferToBuffer(h.buffer, byteOffset - lead, staging.buffer, 0, size);
    this.submitEncoder(enc);
    try {
      await staging.buffer.mapAsync(GPUMapMode.READ, 0, Math.max(size, 4));
    } catch (e) {
      this.checkAlive();
      throw e;
    }
    this.raiseErrors();
    const raw = staging.buffer.getMappedRange(0, Math.max(size, 4)).slice(0);
    staging.buffer.unmap();
    this.stagingPool.give(staging.buffer, staging.bytes);
    const n = t.size;
    switch (t.dtype) {
      case 'f32': return new Float32Array(raw, 0, n);
      case 'i32': return new Int32Array(raw, 0, n);
      case 'u32': return new Uint32Array(raw, 0, n);
      case 'f16':
      case 'bf16': return decodeFloats(t.dtype, new Uint16Array(raw, lead, n));
      default: return decodeFloats(t.dtype, new Uint8Array(raw, lead, n));
    }
  }

  // --- ops ---

  supports(opName: string): boolean {
    return this.kernels.has(opName);
  }

  run<A>(op: OpDef<A>, args: Readonly<Record<string, Tensor>>, attrs: A): void {
    this.checkAlive();
    const kernel = this.kernels.get(op.name);
    if (!kernel) fail('UNSUPPORTED_OP', `webgpu: no kernel for op '${op.name}'`);
    const floatDtype = validateCall(op, args, attrs);
    if (!this.floatDtypes.has(floatDtype)) fail('UNSUPPORTED_DTYPE', `${op.name}: webgpu kernels compute in f32, got ${floatDtype} tensors; ${floatDtype} ops need --backend cuda or cpu`);
    for (const [name, t] of Object.entries(args)) {
      if (t.backend !== this.name) fail('BAD_ARGUMENT', `${op.name}: argument '${name}' lives on ${t.backend}, not webgpu`);
    }
    const scratch: Tensor[] = [];
    const ctx: KernelContext = {
      dispatch: (spec) => this.dispatch(spec),
      scratch: (shape, dtype) => {
        const t = this.alloc(shape, dtype);
        scratch.push(t);
        return t;
      },
      copy: (src, dst) => this.copy(src, dst),
      zero: (t) => this.zero(t),
      limits: this.device.limits,
      features: this.features,
    };
    try {
      kernel.run(ctx, args, attrs);
    } finally {
      // Queue order makes reuse by later ops safe even before this op's work completes.
      for (const t of scratch) this.free(t);
    }
  }

  /**
   * Every dispatch `fn` makes becomes indirect, its workgroup counts written on the device just
   * before by a one-thread dispatch (shaders/indirect_args.wgsl): zero when the count is at or
   * below the threshold. Buffer copies and zeroes in `fn` still happen.
   */
  protected override conditional(count: Tensor, threshold: number, fn: () => void): void {
    this.indirectArgs ??= this.alloc([3], 'u32');
    this.condition = { count, threshold };
    try {
      fn();
    } finally {
      this.condition = null;
    }
  }

  /** WebGPU replays by re-encoding: dispatches are already batched into few submits. */
  record(fn: () => void): Recording {
    return rerun(fn);
  }

  async sync(): Promise<void> {
    this.checkAlive();
    this.flush();
    await this.device.queue.onSubmittedWorkDone();
    this.checkAlive();
    this.raiseErrors();
  }

  destroy(): void {
    this.flush();
    this.store.destroyAll();
    this.stagingPool.destroyAll();
    this.device.destroy();
  }

  // --- dispatch machinery ---

  private pipelineFor(spec: DispatchSpec): Pipeline {
    const constants = spec.constants ?? {};
    const key = `${spec.shader}:${spec.entry}:${JSON.stringify(constants)}`;
    const hit = this.pipelines.get(key);
    if (hit) return hit;
    const shader = this.shaders.get(spec.shader);
    if (!shader) throw new Error(`webgpu: shader '${spec.shader}' was not declared by any kernel, so it was not compiled`);
    const entry = shader.entries.get(spec.entry);
    if (!entry) fail('SHADER_BINDING', `shaders/${spec.shader}.wgsl has no compute entry point '${spec.entry}' (has ${[...shader.entries.keys()].join(', ')})`);
    const layout = this.device.createBindGroupLayout({
      label: key,
      entries: entry.bindings.map((b) => ({ binding: b.binding, visibility: GPUShaderStage.COMPUTE, buffer: { type: b.kind } })),
    });
    this.device.pushErrorScope('validation');
    const pipeline = this.device.createComputePipeline({
      label: key,
      layout: this.device.createPipelineLayout({ bindGroupLayouts: [layout] }),
      compute: { module: shader.module, entryPoint: spec.entry, constants: { ...constants } },
    });
    void this.device.popErrorScope().then((err) => {
      if (err) this.errors.push(`pipeline shaders/${spec.shader}.wgsl:${spec.entry}: ${err.message}`);
    });
    const p: Pipeline = { pipeline, layout, entry };
    this.pipelines.set(key, p);
    return p;
  }

  private dispatch(spec: DispatchSpec): void {
    const p = this.pipelineFor(spec);
    const where = `shaders/${spec.shader}.wgsl:${spec.entry}`;
    const given = new Set(Object.keys(spec.bindings));
    const entries: GPUBindGroupEntry[] = [];
    for (const b of p.entry.bindings) {
      const value = spec.bindings[b.name];
      given.delete(b.name);
      if (value === undefined) fail('SHADER_BINDING', `${where}: binding '${b.name}' (@binding(${b.binding}), ${b.kind}) was not given`);
      if (b.kind === 'uniform') {
        if (value instanceof Tensor) fail('SHADER_BINDING', `${where}: binding '${b.name}' is a uniform struct; pass its fields, not a tensor`);
        entries.push({ binding: b.binding, resource: { buffer: this.uniformRing, offset: this.packUniform(where, b, value), size: b.size } });
      } else {
        if (!(value instanceof Tensor)) fail('SHADER_BINDING', `${where}: binding '${b.name}' is a storage buffer; pass a tensor`);
        checkElement(where, b, value);
        const h = this.store.handleOf(value);
        const offset = value.offset * DTYPE_BYTES[value.dtype];
        const align = this.device.limits.minStorageBufferOffsetAlignment;
        if (offset % align !== 0) fail('SHADER_BINDING', `${where}: binding '${b.name}' view starts at byte ${offset}, not a multiple of ${align}; align flat-buffer views`);
        // Rounded up to 16 bytes so array<vec4<..>> bindings reach a ragged tail (shaders mask
        // the extra lanes); pool buffers are 256-byte buckets, so this stays inside the buffer and
        // never reaches the next bindable (offset-aligned) view.
        const size = Math.min(Math.max(16, Math.ceil(value.byteSize / 16) * 16), h.bytes - offset);
        entries.push({ binding: b.binding, resource: { buffer: h.buffer, offset, size } });
      }
    }
    if (given.size > 0) fail('SHADER_BINDING', `${where}: no binding named ${[...given].map((g) => `'${g}'`).join(', ')} in the shader (it has ${p.entry.bindings.map((b) => b.name).join(', ')})`);
    const [x, y = 1, z = 1] = spec.workgroups;
    const maxDim = this.device.limits.maxComputeWorkgroupsPerDimension;
    if (x > maxDim || y > maxDim || z > maxDim) throw new Error(`${where}: dispatch ${x}x${y}x${z} exceeds ${maxDim} workgroups per dimension (use grid1d)`);
    if (x * y * z === 0) return;
    const condition = this.condition;
    if (condition) {
      // The counts first (one dispatch of its own, so unconditional), then this dispatch reading
      // them: WebGPU orders a pass's dispatches and their buffer uses.
      this.condition = null;
      try {
        this.dispatch({ shader: INDIRECT_ARGS, entry: 'main', bindings: { params: { threshold: condition.threshold, x, y, z }, count: condition.count, args: this.indirectArgs! }, workgroups: [1] });
      } finally {
        this.condition = condition;
      }
    }
    const bindGroup = this.device.createBindGroup({ layout: p.layout, entries });
    const pass = this.beginPass();
    pass.setPipeline(p.pipeline);
    pass.setBindGroup(0, bindGroup);
    if (condition) pass.dispatchWorkgroupsIndirect(this.store.handleOf(this.indirectArgs!).buffer, this.indirectArgs!.offset * 4);
    else pass.dispatchWorkgroups(x, y, z);
    if (++this.batched >= MAX_BATCH) this.flush();
  }

  private packUniform(where: string, b: ReflectedBinding, values: UniformValues): number {
    if (this.uniformUsed + UNIFORM_SLOT > this.uniformStage.byteLength) this.flush();
    if (b.size > UNIFORM_SLOT) throw new Error(`${where}: uniform '${b.name}' is ${b.size} bytes, over the ${UNIFORM_SLOT}-byte slot`);
    const offset = this.uniformUsed;
    this.uniformUsed += UNIFORM_SLOT;
    const view = new DataView(this.uniformStage, offset, UNIFORM_SLOT);
    const members = b.members!;
    for (const [name, m] of members) {
      const v = values[name];
      if (v === undefined) fail('SHADER_BINDING', `${where}: uniform '${b.name}' field '${name}' was not given`);
      const comps = typeof v === 'number' ? [v] : v;
      if (comps.length !== m.count) fail('SHADER_BINDING', `${where}: uniform field '${name}' has ${m.count} components, got ${comps.length}`);
      comps.forEach((c, i) => {
        const at = m.offset + 4 * i;
        if (m.scalar === 'f32') view.setFloat32(at, c, true);
        else if (m.scalar === 'i32') view.setInt32(at, c, true);
        else if (m.scalar === 'u32') {
          if (!Number.isInteger(c) || c < 0 || c > 0xffffffff) throw new Error(`${where}: uniform field '${name}' = ${c} is not a u32`);
          view.setUint32(at, c, true);
        } else throw new Error(`${where}: uniform field '${name}' has unsupported scalar ${m.scalar}`);
      });
    }
    for (const k of Object.keys(values)) {
      if (!members.has(k)) fail('SHADER_BINDING', `${where}: uniform '${b.name}' has no field '${k}' (fields: ${[...members.keys()].join(', ')})`);
    }
    return offset;
  }

  private copy(src: Tensor, dst: Tensor): void {
    if (src.dtype !== dst.dtype || src.size !== dst.size) throw new Error(`webgpu.copy: ${src} -> ${dst} differ in dtype or size`);
    const so = src.offset * DTYPE_BYTES[src.dtype];
    const dof = dst.offset * DTYPE_BYTES[dst.dtype];
    if (so % 4 !== 0 || dof % 4 !== 0) throw new Error(`webgpu.copy: ${src} -> ${dst} do not start on 4-byte boundaries`);
    const size = Math.ceil(src.byteSize / 4) * 4;
    if (size === 0) return;
    this.endPass();
    this.encoder ??= this.device.createCommandEncoder();
    this.encoder.copyBufferToBuffer(this.store.handleOf(src).buffer, so, this.store.handleOf(dst).buffer, dof, size);
  }

  private beginPass(): GPUComputePassEncoder {
    if (!this.pass) {
      this.encoder ??= this.device.createCommandEncoder();
      this.pass = this.encoder.beginComputePass();
    }
    return this.pass;
  }

  private endPass(): void {
    if (this.pass) {
      this.pass.end();
      this.pass = null;
    }
  }

  /** Submit everything recorded so far (uniforms first, in queue order). */
  private flush(): void {
    this.endPass();
    if (this.encoder) {
      const enc = this.encoder;
      this.encoder = null;
      this.submitEncoder(enc);
    }
  }

  private submitEncoder(enc: GPUCommandEncoder): void {
    if (this.uniformUsed > 0) {
      this.device.queue.writeBuffer(this.uniformRing, 0, this.uniformStage, 0, this.uniformUsed);
      this.uniformUsed = 0;
    }
    this.device.queue.submit([enc.finish()]);
    this.batched = 0;
  }

  private checkAlive(): void {
    if (this.lost !== null) fail('WEBGPU_DEVICE_LOST', `WebGPU device lost (${this.lost}); restart the run (training resumes from its last checkpoint)`);
  }

  private raiseErrors(): void {
    if (this.errors.length === 0) return;
    const msgs = this.errors.splice(0);
    const oom = msgs.some((m) => /out of memory|OutOfMemory/i.test(m));
    throw new MdlmError(oom ? 'OUT_OF_MEMORY' : 'WEBGPU_VALIDATION', `WebGPU reported ${msgs.length} error(s):\n  ${msgs.join('\n  ')}`);
  }
}

type NarrowDType = 'f16' | 'bf16' | 'fp8e4m3' | 'fp8e5m2';

/** Float dtypes stored packed into u32 words: two 16-bit values or four fp8 codes, low first. */
function isNarrow(d: DType): d is NarrowDType {
  return d === 'f16' || d === 'bf16' || d === 'fp8e4m3' || d === 'fp8e5m2';
}

/** The codes' bytes, zero-padded to whole 4-byte words. */
function wholeWords(codes: Uint16Array | Uint8Array): Uint8Array {
  const bytes = new Uint8Array(codes.buffer, codes.byteOffset, codes.byteLength);
  if (bytes.byteLength % 4 === 0) return bytes;
  const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
  padded.set(bytes);
  return padded;
}

const STORAGE_ELEMENT: Record<DType, readonly string[]> = {
  f32: ['f32'], i32: ['i32'], u32: ['u32'], f16: ['u32', 'f16'], bf16: ['u32'], fp8e4m3: ['u32'], fp8e5m2: ['u32'],
};

function checkElement(where: string, b: ReflectedBinding, t: Tensor): void {
  if (!b.element) return;
  if (!STORAGE_ELEMENT[t.dtype].includes(b.element)) {
    fail('SHADER_BINDING', `${where}: binding '${b.name}' holds ${b.element} elements but was given a ${t.dtype} tensor`);
  }
}
