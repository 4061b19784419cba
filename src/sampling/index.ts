export type { IncrementalLogits, LogitsFn } from './types.js';
export { sampleAr, type ArSampleOptions } from './ar.js';
export {
  sampleDiffusion,
  checkDiffusionOptions,
  numTransferTokens,
  type DiffusionSampleOptions,
  type DiffusionStepInfo,
  type Remasking,
} from './diffusion.js';
export { sampleFromLogits, filteredDistribution, checkFilterOptions, argmax, type FilterOptions } from './filter.js';
