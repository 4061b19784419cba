/**
 * fp8_scale_update: the delayed recipe's step-end update over a table of sites (src/ops/fp8.ts):
 * for each site the scale becomes pow2Scale(max of its amax history) (kept when that is zero or
 * not finite), scaleInv its inverse, and the history rolls by one (history[0] = 0 for the next
 * step's amax, the oldest value dropped).
 */
import { type Fp8Format, inversePow2, metaLength, pow2Scale, requireFormat } from './fp8.js';
import { badAttr, defineOp, requireDims } from './op.js';

export interface Fp8ScaleUpdateAttrs {
  readonly sites: number;
  readonly historyLen: number;
  readonly format: Fp8Format;
  readonly margin: number;
}

/** The update on host arrays (in place), shared with the emulated paths. */
export function fp8ScaleUpdateReference(meta: Float64Array | Float32Array, { sites, historyLen, format, margin }: Fp8ScaleUpdateAttrs): void {
  const len = metaLength(historyLen);
  for (let s = 0; s < sites; s++) {
    const o = s * len;
    let amax = 0;
    for (let i = 0; i < historyLen; i++) if (meta[o + i]! > amax) amax = meta[o + i]!;
    const scale = pow2Scale(amax, format, margin, meta[o + historyLen]!);
    for (let i = historyLen - 1; i > 0; i--) meta[o + i] = meta[o + i - 1]!;
    meta[o] = 0;
    meta[o + historyLen] = scale;
    meta[o + historyLen + 1] = inversePow2(scale);
  }
}

export const fp8ScaleUpdate = defineOp<Fp8ScaleUpdateAttrs>({
  name: 'fp8_scale_update',
  summary: 'per site of meta [sites, historyLen + 2]: scale = pow2Scale(max(history)), scaleInv = 1/scale, history rolled with history[0] = 0',
  args: [{ name: 'meta', role: 'inout', dtype: 'f32' }],
  validate(attrs) {
    requireDims('fp8_scale_update', attrs, ['sites', 'historyLen']);
    requireFormat('fp8_scale_update', 'format', attrs.format);
    if (!Number.isInteger(attrs.margin) || attrs.margin < 0 || attrs.margin > 32) badAttr('fp8_scale_update', 'margin', attrs.margin, 'expected an integer in [0, 32]');
  },
  shapes: ({ sites, historyLen }) => ({ meta: [sites * metaLength(historyLen)] }),
  reference({ meta }, attrs) {
    fp8ScaleUpdateReference(meta as Float64Array, attrs);
  },
  cases: (scale) =>
    scale === 'test'
      ? [
          { label: 'e4m3 5 sites history 16', attrs: { sites: 5, historyLen: 16, format: 'e4m3' as const, margin: 0 } },
          { label: 'e5m2 300 sites history 1 margin 1', attrs: { sites: 300, historyLen: 1, format: 'e5m2' as const, margin: 1 } },
        ]
      : [{ label: 'e4m3 1024 sites history 1024', attrs: { sites: 1024, historyLen: 1024, format: 'e4m3' as const, margin: 0 } }],
  sample(rng, { sites, historyLen }) {
    // Amaxes over many binades; some sites all zero (the scale stays). tests/ops/fp8.test.ts covers
    // an infinite amax (the parity check's relative error has no meaning for infinities).
    const len = metaLength(historyLen);
    const meta = new Float64Array(sites * len);
    for (let s = 0; s < sites; s++) {
      const kind = s % 7;
      for (let i = 0; i < historyLen; i++) meta[s * len + i] = kind === 0 ? 0 : Math.fround(rng.uniform() * 2 ** (Math.floor(rng.uniform() * 60) - 30));
      const k = Math.floor(rng.uniform() * 20) - 10;
      meta[s * len + historyLen] = 2 ** k;
      meta[s * len + historyLen + 1] = 2 ** -k;
    }
    return { meta };
  },
  tolerance: { f32: 0 },
});
