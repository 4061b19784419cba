/**
 * The samplers' LogitsFn (src/sampling) over a LlamaModel. The model has fixed [batch, seqLen]
 * shapes; shorter rows are laid at the start of a model row and the rest is filled with padding
 * in an attention segment of its own, so the real tokens' logits are exactly those of the
 * unpadded sequence, with causal and bidirectional attention alike.
 */
import { fail } from '../errors.js';
import type { LogitsFn } from '../sampling/types.js';
import type { LlamaModel } from './llama.js';

/**
 * The model's logits [batch · seqLen, vocab] for `rows` (at most model.batch, each at most seqLen
 * tokens; a missing row is all padding): each row at the start of a model row, the rest padding in
 * an attention segment of its own.
 */
export async function paddedLogits(model: LlamaModel, rows: readonly (ArrayLike<number> | undefined)[], causal: boolean): Promise<Float32Array> {
  const B = model.batch;
  const T = model.cfg.seqLen;
  const inputs = new Int32Array(B * T);
  const targets = new Int32Array(B * T).fill(-1);
  const segIds = new Int32Array(B * T).fill(1);
  const positions = new Int32Array(B * T);
  for (let r = 0; r < B; r++) {
    for (let i = 0; i < T; i++) positions[r * T + i] = i;
    const row = rows[r];
    if (!row) continue;
    inputs.set(row, r * T);
    segIds.fill(0, r * T, r * T + row.length);
  }
  model.setBatch({ inputs, targets, segIds, positions }, causal);
  model.forwardLogits();
  return model.downloadLogits();
}

export function modelLogits(model: LlamaModel, causal: boolean): LogitsFn {
  const B = model.batch;
  const T = model.cfg.seqLen;
  const V = model.cfg.vocabSize;
  return async (tokens, rows, len) => {
    if (rows < 1 || rows > B || len < 1 || len > T || tokens.length !== rows * len) {
      fail('BAD_SHAPE', `model logits: ${tokens.length} tokens as ${rows} rows of ${len}; this model runs at most ${B} rows of at most ${T} tokens`);
    }
    const all = await paddedLogits(model, Array.from({ length: rows }, (_, r) => tokens.subarray(r * len, (r + 1) * len)), causal);
    if (rows === B && len === T) return all;
    const out = new Float32Array(rows * len * V);
    for (let r = 0; r < rows; r++) out.set(all.subarray(r * T * V, (r * T + len) * V), r * len * V);
    return out;
  };
}
