import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One WebGPU device per worker; lavapipe is single-machine, keep the pool small.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default'],
  },
});
