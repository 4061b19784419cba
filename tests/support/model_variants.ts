import type { ActivationSaving } from '../../src/model/saving.js';

/**
 * Model layouts that take different paths through the layers (config overrides over a small
 * model, and what the model saves): what tests of whole passes run over.
 */
export const MODEL_VARIANTS: readonly [label: string, overrides: Record<string, string>, saving: ActivationSaving][] = [
  ['tied, multi-head', {}, {}],
  ['untied, grouped-query', { 'model.tieEmbeddings': 'false', 'model.nKvHeads': '2' }, {}],
  ['q/k/v biases', { 'model.qkvBias': 'true' }, {}],
  ['q/k norms, grouped-query', { 'model.qkNorm': 'true', 'model.nKvHeads': '1' }, {}],
  ['SwiGLU product recomputed', {}, { recompute: 'swiglu' }],
  ['logits in blocks', { 'model.seqLen': '48' }, { logitChunks: 2 }],
  ['loss rows packed', { 'model.seqLen': '48' }, { packLossRows: true }],
];
