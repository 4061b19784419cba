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
  ['every block recomputed, q/k norms, grouped-query', { 'model.qkNorm': 'true', 'model.nKvHeads': '2' }, { recompute: 'full' }],
  ['logits in blocks', { 'model.seqLen': '48' }, { logitChunks: 2 }],
  ['loss rows packed', { 'model.seqLen': '48' }, { packLossRows: true }],
  ['FP8 blocks, delayed scaling', {}, { fp8: { scaling: 'delayed', historyLen: 4, margin: 0, keepFirst: 0, keepLast: 0 } }],
  ['FP8 blockwise, grouped-query (q/k/v read in parts)', { 'model.nKvHeads': '2' }, { fp8: { scaling: 'blockwise', historyLen: 1, margin: 0, keepFirst: 0, keepLast: 0 } }],
  ['FP8 second block only, q/k/v biases, SwiGLU recomputed', { 'model.qkvBias': 'true' }, { recompute: 'swiglu', fp8: { scaling: 'current', historyLen: 1, margin: 1, keepFirst: 1, keepLast: 0 } }],
];
