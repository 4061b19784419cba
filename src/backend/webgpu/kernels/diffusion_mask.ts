import { diffusionMask } from '../../../ops/diffusion_mask.js';
import { RngPurpose, seedKey } from '../../../rng/philox.js';
import { defineKernel, grid1d } from '../kernel.js';

export const diffusionMaskKernel = defineKernel({
  op: diffusionMask,
  shaders: ['diffusion_mask'],
  run(k, { tokens, maskProb, lossWeight, noised, mask, weights }, { batch, seqLen, rowOffset, totalRows, seed, step, rank, maskId, empirical }) {
    const [keyLo, keyHi] = seedKey(seed);
    k.dispatch({
      shader: 'diffusion_mask',
      entry: 'main',
      bindings: {
        params: { batch, seqLen, step, rank, purpose: RngPurpose.mask, keyLo, keyHi, maskId, rowOffset, totalRows },
        tokens: tokens!, maskProb: maskProb!, lossWeight: lossWeight!, noised: noised!, mask: mask!, weights: weights!,
      },
      workgroups: grid1d(batch, 1),
      constants: { EMPIRICAL: empirical ? 1 : 0 },
    });
  },
});
