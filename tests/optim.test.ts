/** AdamW's update chunks: what a deferred update runs, in the order the forward reads the parameters. */
import { describe, expect, it } from 'vitest';
import { CpuBackend } from '../src/backend/cpu/cpu.js';
import { resolveConfig } from '../src/config/load.js';
import { LlamaModel } from '../src/model/llama.js';
import { updateChunks } from '../src/optim/adamw.js';

describe('updateChunks', () => {
  for (const [label, over, perLayer] of [
    ['tied head', {}, ['embed']],
    ['untied head, q/k/v biases', { 'model.tieEmbeddings': 'false', 'model.qkvBias': 'true' }, ['embed', 'lm_head']],
  ] as const) {
    it(`tiles the parameter buffers once: the undecayed first, then the embedding, then a chunk per layer (${label})`, () => {
      const cfg = resolveConfig({ preset: 'tiny', overrides: { 'model.dModel': '64', 'model.nLayers': '3', 'model.nHeads': '4', 'model.ffnHidden': '96', 'model.seqLen': '32', ...over } }).model;
      const m = new LlamaModel(new CpuBackend(), cfg, 1, 5);
      const store = m.store;
      const chunks = updateChunks(store, 0.1);
      expect(chunks[0]).toEqual({ offset: store.noDecayRange.offset, size: store.noDecayRange.size, weightDecay: 0 });
      expect(chunks.slice(1).every((c) => c.weightDecay === 0.1)).toBe(true);
      // Embedding, three layers, and the head when it has a weight of its own.
      expect(chunks.length).toBe(1 + 3 + perLayer.length);
      const chunkOf = (name: string) => {
        const p = store.find(name);
        return chunks.findIndex((c) => c.offset <= p.offset && p.offset < c.offset + c.size);
      };
      expect(chunkOf('embed')).toBe(1);
      for (let l = 0; l < 3; l++) {
        for (const w of ['attn.wq', 'attn.wo', 'mlp.w_down']) expect(chunkOf(`layers.${l}.${w}`), `layers.${l}.${w}`).toBe(2 + l);
        expect(chunkOf(`layers.${l}.attn_norm`)).toBe(0);
      }
      if (perLayer.length > 1) expect(chunkOf('lm_head')).toBe(5);
      // Sorted by offset, each starts where the last ended, from 0 to the buffers' end.
      const end = [...chunks].sort((a, b) => a.offset - b.offset).reduce((at, c) => (c.offset === at ? at + c.size : NaN), 0);
      expect(end).toBe(store.value.size);
      m.destroy();
    });
  }
});
