/**
 * The WebGPU backend for tests. Outside CI a machine without an adapter skips the WebGPU tests
 * with a message; in CI (CI=true) WebGPU is required and its absence fails the run.
 */
import type { Backend } from '../../src/backend/backend.js';
import { createBackend, probeWebGpu } from '../../src/runtime/backends.js';

let cached: Promise<Backend | null> | undefined;

export const webgpuRequired = process.env.CI === 'true' || process.env.MDLM_REQUIRE_WEBGPU === '1';

async function open(): Promise<Backend | null> {
  const probe = await probeWebGpu();
  if (!probe.available) {
    if (webgpuRequired) throw new Error(`WebGPU is required in CI but unavailable: ${probe.reason}`);
    console.warn(`[mdlm tests] skipping WebGPU tests: ${probe.reason}`);
    return null;
  }
  return createBackend('webgpu');
}

export function webgpuBackend(): Promise<Backend | null> {
  cached ??= open();
  return cached;
}

/** Resolved once at collection time so tests can use `it.skipIf(!hasWebGpu)`. */
export const hasWebGpu: boolean = await (async () => {
  const probe = await probeWebGpu();
  if (!probe.available && webgpuRequired) throw new Error(`WebGPU is required in CI but unavailable: ${probe.reason}`);
  if (!probe.available) console.warn(`[mdlm tests] skipping WebGPU tests: ${probe.reason}`);
  return probe.available;
})();
