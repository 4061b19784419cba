/**
 * Temperature / top-k / top-p (nucleus) sampling from one row of logits — the one implementation
 * every sampler uses. Order of filters as in HF transformers: temperature scales the logits, top-k
 * keeps the k largest, top-p keeps the smallest prefix (by descending probability) whose mass
 * reaches p. Ties are broken by the lower token id, so results never depend on sort stability.
 * Probabilities are computed in float64 with the max subtracted (stable softmax).
 */
import { fail } from '../errors.js';
import type { PhiloxStream } from '../rng/philox.js';

export interface FilterOptions {
  /** 0 = greedy (argmax); > 0 divides the logits. */
  temperature: number;
  /** Keep only the k most likely tokens; 0 = off. */
  topK: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p; 1 = off. In (0, 1]. */
  topP: number;
}

/** Validate filter options once; `where` names the caller in the message. */
export function checkFilterOptions(opts: FilterOptions, where = 'sampling'): void {
  const { temperature, topK, topP } = opts;
  if (typeof temperature !== 'number' || !Number.isFinite(temperature) || temperature < 0) {
    fail('BAD_ARGUMENT', `${where}: temperature is ${JSON.stringify(temperature)}; expected a finite number ≥ 0 (0 = greedy)`);
  }
  if (typeof topK !== 'number' || !Number.isSafeInteger(topK) || topK < 0) {
    fail('BAD_ARGUMENT', `${where}: topK is ${JSON.stringify(topK)}; expected an integer ≥ 0 (0 = off)`);
  }
  if (typeof topP !== 'number' || !(topP > 0 && topP <= 1)) {
    fail('BAD_ARGUMENT', `${where}: topP is ${JSON.stringify(topP)}; expected a number in (0, 1] (1 = off)`);
  }
}

/** NaN counts as −∞ so a broken logit can never be chosen over a real one. */
function val(row: ArrayLike<number>, i: number): number {
  const v = row[i]!;
  return v === v ? v : -Infinity;
}

/** Index of the largest logit, lowest index among ties. Fails if no logit is finite or +∞. */
export function argmax(row: ArrayLike<number>, where = 'sampling'): number {
  let best = -1;
  let bv = -Infinity;
  for (let i = 0; i < row.length; i++) {
    const v = val(row, i);
    if (v > bv) {
      bv = v;
      best = i;
    }
  }
  if (best < 0) fail('BAD_ARGUMENT', `${where}: every logit in the row is −∞ or NaN; nothing can be sampled`);
  return best;
}

/** "a ranks before b": larger logit first, lower id among ties. */
function before(row: ArrayLike<number>, a: number, b: number): boolean {
  const va = val(row, a), vb = val(row, b);
  return va > vb || (va === vb && a < b);
}

/** The k best token ids, best first (a bounded heap: O(V log k)). */
function topKIds(row: ArrayLike<number>, k: number): number[] {
  // Min-heap by rank: heap[0] is the worst of the kept ones.
  const heap: number[] = [];
  const worse = (a: number, b: number) => before(row, b, a); // a ranks after b
  const up = (i: number) => {
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!worse(heap[i]!, heap[p]!)) break;
      [heap[i], heap[p]] = [heap[p]!, heap[i]!];
      i = p;
    }
  };
  const down = (i: number) => {
    for (;;) {
      const l = 2 * i + 1, r = l + 1;
      let m = i;
      if (l < heap.length && worse(heap[l]!, heap[m]!)) m = l;
      if (r < heap.length && worse(heap[r]!, heap[m]!)) m = r;
      if (m === i) return;
      [heap[i], heap[m]] = [heap[m]!, heap[i]!];
      i = m;
    }
  };
  for (let i = 0; i < row.length; i++) {
    if (heap.length < k) {
      heap.push(i);
      up(heap.length - 1);
    } else if (before(row, i, heap[0]!)) {
      heap[0] = i;
      down(0);
    }
  }
  return heap.sort((a, b) => (before(row, a, b) ? -1 : 1));
}

/**
 * The candidate tokens and their probabilities after temperature / top-k / top-p, best first.
 * Exposed for tests and for UIs that show the distribution.
 */
export function filteredDistribution(row: ArrayLike<number>, opts: FilterOptions): { ids: number[]; probs: Float64Array } {
  const V = row.length;
  if (V === 0) fail('BAD_ARGUMENT', 'sampling: the logits row is empty');
  const { temperature, topK, topP } = opts;
  if (temperature === 0) return { ids: [argmax(row)], probs: Float64Array.of(1) };

  const needOrder = topP < 1;
  let ids: number[];
  if (topK > 0 && topK < V) ids = topKIds(row, topK);
  else if (needOrder) ids = Array.from({ length: V }, (_, i) => i).sort((a, b) => (before(row, a, b) ? -1 : 1));
  else ids = Array.from({ length: V }, (_, i) => i);

  // Stable softmax over the candidates at temperature T.
  let max = -Infinity;
  for (const i of ids) max = Math.max(max, val(row, i));
  if (max === -Infinity) fail('BAD_ARGUMENT', 'sampling: every logit in the row is −∞ or NaN; nothing can be sampled');
  const probs = new Float64Array(ids.length);
  let sum = 0;
  for (let j = 0; j < ids.length; j++) {
    const v = val(row, ids[j]!);
    // +∞ logits: all the mass goes to them (equally).
    const p = max === Infinity ? (v === Infinity ? 1 : 0) : Math.exp((v - max) / temperature);
    probs[j] = p;
    sum += p;
  }
  for (let j = 0; j < probs.length; j++) probs[j]! /= sum;

  if (needOrder) {
    // ids are sorted best first; keep the shortest prefix with mass ≥ topP (at least one token).
    let cum = 0;
    let keep = ids.length;
    for (let j = 0; j < ids.length; j++) {
      cum += probs[j]!;
      if (cum >= topP) {
        keep = j + 1;
        break;
      }
    }
    ids = ids.slice(0, keep);
    const kept = probs.slice(0, keep);
    let s = 0;
    for (const p of kept) s += p;
    for (let j = 0; j < kept.length; j++) kept[j]! /= s;
    return { ids, probs: kept };
  }
  return { ids, probs };
}

/**
 * Draw one token id from a row of logits. temperature 0 is argmax and draws nothing from `rng`;
 * otherwise exactly one uniform is drawn, so streams stay aligned across options.
 */
export function sampleFromLogits(row: ArrayLike<number>, opts: FilterOptions, rng: PhiloxStream): number {
  if (opts.temperature === 0) return argmax(row);
  const { ids, probs } = filteredDistribution(row, opts);
  const u = rng.uniform();
  let cum = 0;
  let last = 0;
  for (let j = 0; j < ids.length; j++) {
    if (probs[j]! <= 0) continue;
    last = j;
    cum += probs[j]!;
    if (u < cum) return ids[j]!;
  }
  return ids[last]!; // round-off: u ≥ the summed mass
}
