/**
 * cross_entropy_backward and cross_entropy_fused in place (dlogits = the logits tensor) against the
 * same calls out of place, on one backend.
 */
import { expect } from 'vitest';
import type { Backend } from '../../src/backend/backend.js';
import { crossEntropy, crossEntropyBackward, crossEntropyFused } from '../../src/ops/cross_entropy.js';
import { PhiloxStream, RngPurpose } from '../../src/rng/philox.js';
import type { DType } from '../../src/tensor.js';

export async function expectCrossEntropyInPlace(b: Backend, dtype: DType): Promise<void> {
  // 37 rows of 50 (rows·vocab odd: the WebGPU tail pass runs too); some ignored rows.
  const attrs = { rows: 37, vocab: 50 };
  const rng = new PhiloxStream(5, RngPurpose.harness);
  const n = attrs.rows * attrs.vocab;
  const host = Float32Array.from({ length: n }, () => 3 * rng.normal());
  const targets = Int32Array.from({ length: attrs.rows }, (_, r) => (r % 5 === 4 ? -1 : rng.int(attrs.vocab)));
  const t = {
    logits: b.alloc([attrs.rows, attrs.vocab], dtype), targets: b.alloc([attrs.rows], 'i32'), weights: b.alloc([attrs.rows], 'f32'),
    loss: b.alloc([attrs.rows], 'f32'), lse: b.alloc([attrs.rows], 'f32'), dloss: b.alloc([attrs.rows], 'f32'), apart: b.alloc([attrs.rows, attrs.vocab], dtype),
    big: b.alloc([n + 4], dtype),
  };
  b.upload(t.logits, host);
  b.upload(t.targets, targets);
  b.upload(t.weights, Float32Array.from({ length: attrs.rows }, () => 0.5 + rng.uniform()));
  b.upload(t.dloss, new Float32Array(attrs.rows).fill(1 / n));
  b.run(crossEntropy, { logits: t.logits, targets: t.targets, weights: t.weights, loss: t.loss, lse: t.lse }, attrs);
  const args = { targets: t.targets, weights: t.weights, lse: t.lse, dloss: t.dloss };
  b.run(crossEntropyBackward, { logits: t.logits, ...args, dlogits: t.apart }, attrs);
  b.run(crossEntropyBackward, { logits: t.logits, ...args, dlogits: t.logits }, attrs);
  const inPlace = (await b.download(t.logits)) as Float32Array;
  expect(Array.from(inPlace)).toEqual(Array.from((await b.download(t.apart)) as Float32Array));
  expect(inPlace.some((v, i) => v !== host[i])).toBe(true);
  // The fused op: its own loss and lse and the same gradient, in place as out of place.
  const fused = async (dlogits: 'apart' | 'logits') => {
    b.upload(t.logits, host);
    const out = { loss: b.alloc([attrs.rows], 'f32'), lse: b.alloc([attrs.rows], 'f32') };
    b.run(crossEntropyFused, { logits: t.logits, targets: t.targets, weights: t.weights, dloss: t.dloss, ...out, dlogits: t[dlogits] }, attrs);
    const got = { loss: await b.download(out.loss), lse: await b.download(out.lse), dlogits: await b.download(t[dlogits]) };
    Object.values(out).forEach((x) => b.free(x));
    return got;
  };
  const [apart, over] = [await fused('apart'), await fused('logits')];
  expect(Array.from(over.dlogits)).toEqual(Array.from(apart.dlogits));
  expect(Array.from(over.loss)).toEqual(Array.from(apart.loss));
  // Against cross_entropy's: a kernel may sum a row in another order (CUDA: more threads a row).
  const [loss, lse] = [(await b.download(t.loss)) as Float32Array, (await b.download(t.lse)) as Float32Array];
  over.loss.forEach((v, r) => expect(Math.abs(v - loss[r]!), `loss ${r}`).toBeLessThanOrEqual(1e-5 * Math.abs(loss[r]!)));
  over.lse.forEach((v, r) => expect(Math.abs(v - lse[r]!), `lse ${r}`).toBeLessThanOrEqual(1e-6 * Math.abs(lse[r]!)));
  expect(over.dlogits.some((v, i) => v !== host[i])).toBe(true);
  // Any other overlap is still refused.
  const [early, late] = [b.view(t.big, 0, [attrs.rows, attrs.vocab]), b.view(t.big, 4, [attrs.rows, attrs.vocab])];
  expect(() => b.run(crossEntropyBackward, { logits: early, ...args, dlogits: late }, attrs)).toThrow(/output 'dlogits' overlaps argument 'logits'/);
  Object.values(t).forEach((x) => b.free(x));
}
