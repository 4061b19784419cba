/**
 * Node side of backend selection: the capability probe, and creating a backend by name or 'auto'
 * (the best one that works here). The core never imports this file; a browser passes its own
 * navigator.gpu to WebGpuBackend.create.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { BACKEND_NAMES, type Backend, type BackendName } from '../backend/backend.js';
import { CpuBackend } from '../backend/cpu/cpu.js';
import { type CudaAddon, CudaBackend } from '../backend/cuda/cuda.js';
import { WEBGPU_KERNELS } from '../backend/webgpu/kernels/index.js';
import { type WebGpuAdapterDescription, WebGpuBackend, describeAdapter, requestAdapter } from '../backend/webgpu/webgpu.js';
import { MdlmError, fail } from '../errors.js';
import { KNOBS } from './knobs.js';
import { FP8_SCALING_RECIPES } from '../config/schema.js';

/** What `mdlm probe` says of FP8 training (train.precision fp8) where it is emulated: quantised operands, f32 GEMMs. */
const FP8_EMULATED = `emulated: ${FP8_SCALING_RECIPES.join(', ')} scaling (FP8-quantised operands, f32 GEMMs)`;

export const PACKAGE_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SHADER_DIR = join(PACKAGE_ROOT, 'shaders');
export const CUDA_ADDON = join(PACKAGE_ROOT, 'cuda', 'build', 'Release', 'mdlm_cuda.node');

export type BackendChoice = BackendName | 'auto';

export function loadShaderFile(name: string): string {
  return readFileSync(join(SHADER_DIR, `${name}.wgsl`), 'utf8');
}

export interface BackendProbe {
  readonly name: BackendName;
  readonly available: boolean;
  readonly reason?: string;
  readonly detail?: WebGpuAdapterDescription | Readonly<Record<string, unknown>>;
}

let gpuInstance: GPU | null | undefined;

/** Dawn's GPU object, or null with the reason the npm `webgpu` package could not load. */
export async function nodeGpu(): Promise<{ gpu: GPU | null; reason?: string }> {
  if (gpuInstance !== undefined) return gpuInstance ? { gpu: gpuInstance } : { gpu: null, reason: 'the webgpu package failed to load' };
  // Dawn on Vulkan wants a runtime dir; lavapipe and the Vulkan loader run without one but warn.
  process.env.XDG_RUNTIME_DIR ??= '/tmp';
  try {
    const mod = (await import('webgpu')) as { create: (flags: string[]) => GPU; globals: Record<string, unknown> };
    Object.assign(globalThis, mod.globals);
    gpuInstance = mod.create([...KNOBS.dawnFlags]);
    return { gpu: gpuInstance };
  } catch (e) {
    gpuInstance = null;
    return { gpu: null, reason: `the webgpu package (Dawn) failed to load: ${(e as Error).message}` };
  }
}

const NO_ADAPTER =
  'no WebGPU adapter: Dawn found no Vulkan device. On Linux without a GPU install Mesa lavapipe from ' +
  'bookworm-backports (apt-get install -t bookworm-backports mesa-vulkan-drivers libvulkan1); with a GPU install its Vulkan driver';

export async function probeWebGpu(): Promise<BackendProbe> {
  const { gpu, reason } = await nodeGpu();
  if (!gpu) return { name: 'webgpu', available: false, reason: reason! };
  let adapter: GPUAdapter | null;
  try {
    adapter = await requestAdapter(gpu);
  } catch (e) {
    if (e instanceof MdlmError) {
      const flags = KNOBS.dawnFlags.join(' ');
      return { name: 'webgpu', available: false, reason: flags ? `${e.message} (check MDLM_DAWN_FLAGS='${flags}')` : e.message };
    }
    throw e;
  }
  if (!adapter) return { name: 'webgpu', available: false, reason: NO_ADAPTER };
  return { name: 'webgpu', available: true, detail: { ...describeAdapter(adapter), fp8Training: FP8_EMULATED } };
}

/** The native addon, or why it cannot be had (not built, or it fails to load). */
export function loadCudaAddon(): { addon: CudaAddon | null; reason?: string } {
  if (!existsSync(CUDA_ADDON)) {
    return { addon: null, reason: `the CUDA addon is not built (${CUDA_ADDON} missing); on a machine with the CUDA toolkit run npm run build:cuda` };
  }
  try {
    return { addon: createRequire(import.meta.url)(CUDA_ADDON) as CudaAddon };
  } catch (e) {
    return { addon: null, reason: `the CUDA addon failed to load: ${(e as Error).message}` };
  }
}

export function probeCuda(): BackendProbe {
  const { addon, reason } = loadCudaAddon();
  if (!addon) return { name: 'cuda', available: false, reason: reason! };
  const info = addon.probe();
  const build = { runtime: info.runtime, driver: info.driver, cublasLt: info.cublasLt, cudnn: info.cudnn, nccl: info.nccl, ops: info.ops };
  if (!info.available) return { name: 'cuda', available: false, reason: info.reason ?? 'no CUDA device', detail: build };
  return {
    name: 'cuda',
    available: true,
    detail: {
      device: info.device,
      sm: info.sm,
      memory: `${((info.memoryBytes ?? 0) / 2 ** 30).toFixed(1)} GiB`,
      multiprocessors: info.multiprocessors,
      bf16: info.bf16,
      fp8Training: info.fp8
        ? `${FP8_SCALING_RECIPES.join(', ')} scaling on FP8 tensor cores (blockwise through cuBLASLt's block-scaled GEMM on sm 9.0 with cuBLASLt 12.9+, else a plain kernel)`
        : `no: sm ${info.sm}; FP8 tensor cores need sm 8.9 or newer`,
      ...build,
    },
  };
}

export async function probeAll(): Promise<BackendProbe[]> {
  return [{ name: 'cpu', available: true, detail: { description: new CpuBackend().description, fp8Training: FP8_EMULATED } }, await probeWebGpu(), probeCuda()];
}

/**
 * Whether a WebGPU adapter runs on the CPU (Mesa's lavapipe/llvmpipe, SwiftShader): mdlm's own CPU
 * backend is faster than a shader compiler's generic code on the same cores.
 */
export function isSoftwareAdapter(a: Pick<WebGpuAdapterDescription, 'vendor' | 'architecture' | 'device' | 'description'>): boolean {
  return a.architecture === 'software' || a.vendor === 'mesa' || /llvmpipe|lavapipe|swiftshader/i.test(`${a.device} ${a.description}`);
}

export interface AutoChoice {
  readonly name: BackendName;
  /** Why auto passed over a backend that is available, for the log. */
  readonly note?: string;
}

/**
 * What 'auto' picks: cuda, else a WebGPU adapter that is a real GPU, else the CPU. `probe` is asked
 * for cuda first and for webgpu only when cuda is unavailable.
 */
export async function chooseAutoBackend(probe: (name: 'cuda' | 'webgpu') => BackendProbe | Promise<BackendProbe>): Promise<AutoChoice> {
  if ((await probe('cuda')).available) return { name: 'cuda' };
  const webgpu = await probe('webgpu');
  if (!webgpu.available) return { name: 'cpu' };
  const adapter = webgpu.detail as WebGpuAdapterDescription;
  if (!isSoftwareAdapter(adapter)) return { name: 'webgpu' };
  const what = adapter.description || adapter.device || adapter.vendor;
  return { name: 'cpu', note: `backend auto: cpu, not the WebGPU adapter "${what}": it is a software renderer, slower than the CPU backend (--backend webgpu uses it anyway)` };
}

export function parseBackendChoice(s: string): BackendChoice {
  if (s === 'auto' || (BACKEND_NAMES as readonly string[]).includes(s)) return s as BackendChoice;
  return fail('BAD_ARGUMENT', `unknown backend '${s}'; expected auto, ${BACKEND_NAMES.join(', ')}`);
}

/** A backend by name, or the one 'auto' picks; `log` receives the line saying why auto passed one over. */
/**
 * `localRank`: the process's rank on its node (a job's LOCAL_RANK): CUDA runs it on visible GPU
 * localRank modulo their count, so a node's ranks take a GPU each (and share them when fewer).
 */
export async function createBackend(choice: BackendChoice, log: (line: string) => void = (line) => console.error(line), opts: { localRank?: number } = {}): Promise<Backend> {
  if (choice === 'auto') {
    const auto = await chooseAutoBackend((name) => (name === 'webgpu' ? probeWebGpu() : probeCuda()));
    if (auto.note) log(auto.note);
    return createBackend(auto.name, log, opts);
  }
  if (choice === 'cpu') return new CpuBackend();
  if (choice === 'webgpu') {
    const probe = await probeWebGpu();
    if (!probe.available) fail('BACKEND_UNAVAILABLE', `backend webgpu is unavailable: ${probe.reason}. Use --backend cpu, or run 'mdlm probe' for details`);
    const { gpu } = await nodeGpu();
    return WebGpuBackend.create({ gpu: gpu!, loadShader: loadShaderFile, kernels: WEBGPU_KERNELS });
  }
  const probe = probeCuda();
  if (!probe.available) fail('BACKEND_UNAVAILABLE', `backend cuda is unavailable: ${probe.reason}. Use --backend webgpu or cpu, or run 'mdlm probe'`);
  const addon = loadCudaAddon().addon!;
  if (opts.localRank !== undefined && opts.localRank > 0) addon.useDevice(opts.localRank);
  return new CudaBackend(addon);
}
