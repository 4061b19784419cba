/**
 * The environment of the TypeScript side: every variable src/ reads (the MDLM_* debugging switches
 * and the tools it runs), read once, here, when this module loads. Everything else takes the values as parameters, so
 * the core never reads the environment. (The CUDA kernels' switches are cuda/knobs.h; the CUDA
 * build script and the tests read their own variables.) Choices users make are config fields,
 * saved in the checkpoint, not switches here.
 */

export interface Knobs {
  /**
   * MDLM_DAWN_FLAGS: flags for dawn.node (the `webgpu` package) when Node creates its WebGPU
   * instance, whitespace-separated, e.g. `backend=vulkan` to pick Dawn's backend or
   * `enable-dawn-features=disable_robustness,skip_validation` to time WebGPU without its safety
   * checks (Dawn's toggles: src/dawn/native/Toggles.cpp). None by default.
   */
  readonly dawnFlags: readonly string[];
  /** PYTHON: the Python that runs the PyTorch peers of `mdlm bench train` (default python3). */
  readonly python: string;
}

/** MDLM_DAWN_FLAGS's value split on whitespace; none when unset or blank. */
export function parseDawnFlags(value: string | undefined): string[] {
  return (value ?? '').split(/\s+/).filter((f) => f.length > 0);
}

/** The knobs an environment sets. */
export function readKnobs(env: Readonly<Record<string, string | undefined>>): Knobs {
  return { dawnFlags: parseDawnFlags(env.MDLM_DAWN_FLAGS), python: env.PYTHON || 'python3' };
}

/** This process's knobs. */
export const KNOBS: Knobs = readKnobs(process.env);
