/**
 * Named starting points. A preset is a partial config: resolveConfig() applies it first, then the
 * config file, then flag overrides, and the schema fills in everything a preset leaves out.
 *
 * Parameter counts (tied embeddings, from paramCount()):
 *   nano        0.12M   d 64,   2 layers,  4 heads, SwiGLU 192,  seq 64,   byte tokenizer (CPU-class default)
 *   tiny        1.09M   d 128,  4 layers,  4 heads, SwiGLU 512,  seq 128,  byte tokenizer
 *   small      10.7M    d 384,  6 layers,  6 heads, SwiGLU 1024, seq 256,  byte tokenizer (= schema defaults)
 *   llama-124m 123.6M   d 768, 12 layers, 12 heads, SwiGLU 2048, seq 1024, gpt2, vocab 50304
 *   llama-1.3b 1.32B    d 2048, 24 layers, 16 heads, SwiGLU 5504, seq 2048, gpt2, vocab 50304
 *   llama-3b   2.97B    d 3072, 28 layers, 24 heads / 8 KV, SwiGLU 8192, seq 2048, gpt2, vocab 50304 (Llama-3.2-3B's shapes)
 *
 * No preset sets model.vocabSize: it follows the data's tokenizer (src/config/vocab.ts), 264 for
 * byte and 50304 for gpt2, whatever preset the tokenizer is used with.
 */
import type { TrainConfigInput } from './schema.js';

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] };
export type Preset = DeepPartial<TrainConfigInput>;

export const PRESETS = {
  // What `mdlm train` runs without --preset on the CPU or a software WebGPU adapter (lavapipe):
  // ~1 GFLOP/s there, so a model that learns visibly in a few minutes. initStd 0.08: at 0.02 a
  // model this narrow sits on the unigram plateau for hundreds of steps.
  nano: {
    model: { dModel: 64, nLayers: 2, nHeads: 4, ffnHidden: 192, seqLen: 64, initStd: 0.08 },
    data: { tokenizer: 'byte' },
    train: { steps: 300, batchSize: 16, lr: 1e-2, minLr: 1e-3, warmupSteps: 20, evalEvery: 100, evalBatches: 8, saveEvery: 100 },
  },
  tiny: {
    model: { dModel: 128, nLayers: 4, nHeads: 4, ffnHidden: 512, seqLen: 128 },
    data: { tokenizer: 'byte' },
    train: { steps: 1000, batchSize: 32, lr: 2e-3, minLr: 2e-4, warmupSteps: 50, evalEvery: 100, saveEvery: 500 },
  },
  small: {
    model: { dModel: 384, nLayers: 6, nHeads: 6, ffnHidden: 1024, seqLen: 256 },
    data: { tokenizer: 'byte' },
    train: { steps: 2000, batchSize: 32, lr: 1e-3, minLr: 1e-4, warmupSteps: 100 },
  },
  'llama-124m': {
    model: { dModel: 768, nLayers: 12, nHeads: 12, ffnHidden: 2048, seqLen: 1024 },
    data: { tokenizer: 'gpt2' },
    train: { steps: 20000, batchSize: 16, gradAccum: 4, lr: 6e-4, minLr: 6e-5, warmupSteps: 700, evalEvery: 500, saveEvery: 2000 },
  },
  'llama-1.3b': {
    model: { dModel: 2048, nLayers: 24, nHeads: 16, ffnHidden: 5504, seqLen: 2048 },
    data: { tokenizer: 'gpt2' },
    // Logits in two blocks: at this micro-batch in bf16 the run holds less than PyTorch's peak, and
    // it is faster than recomputing the SwiGLU product instead.
    train: { steps: 100000, batchSize: 8, gradAccum: 8, lr: 3e-4, minLr: 3e-5, warmupSteps: 2000, evalEvery: 1000, saveEvery: 2000, logitChunks: 2 },
  },
  'llama-3b': {
    model: { dModel: 3072, nLayers: 28, nHeads: 24, nKvHeads: 8, ffnHidden: 8192, seqLen: 2048 },
    data: { tokenizer: 'gpt2' },
    // Every block recomputed: what makes 4 × 2048 fit on one 80 GB GPU with the f32 master weights and AdamW state.
    train: { steps: 100000, batchSize: 4, gradAccum: 16, lr: 3e-4, minLr: 3e-5, warmupSteps: 2000, evalEvery: 1000, saveEvery: 2000, recompute: 'full' },
  },
} satisfies Record<string, Preset>;

export type PresetName = keyof typeof PRESETS;
export const PRESET_NAMES = Object.keys(PRESETS) as PresetName[];
