import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One WebGPU device per worker; lavapipe is single-machine, keep the pool small.
    pool: 'forks',
    maxWorkers: 2,
    // Concurrent tests (the warp emulator's single-threaded processes in tests/cuda_build.test.ts)
    // run at most one per core: more at once finish no sooner and stretch each test's time.
    maxConcurrency: Math.min(5, availableParallelism()),
    reporters: ['default'],
  },
});
