/**
 * What a resumed run must share with the run that saved the checkpoint: the objective (the mask id,
 * the noise schedule and weighting decide what the model learns), the seed (the data order and the
 * masks), the batch shape and the data's tokenizer. Other fields (steps, the learning-rate
 * schedule, eval and save intervals) may change on resume.
 */
import type { TrainConfig } from '../config/schema.js';

const KEPT_ON_RESUME = ['objective', 'train.seed', 'train.batchSize', 'train.gradAccum', 'data.tokenizer'] as const;

/** Dotted path -> value of every leaf (non-object value) under `value`. */
function leaves(value: unknown, path: string, out: Map<string, unknown>): Map<string, unknown> {
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    for (const [k, v] of Object.entries(value)) leaves(v, path ? `${path}.${k}` : k, out);
  } else {
    out.set(path, value);
  }
  return out;
}

function at(cfg: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((v, k) => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), cfg);
}

/** The fields a resume must keep that differ between the saved config and this run's, as "field saved there, now here". */
export function resumeConflicts(saved: unknown, now: TrainConfig): string[] {
  const out: string[] = [];
  for (const root of KEPT_ON_RESUME) {
    const was = leaves(at(saved, root), root, new Map());
    const is = leaves(at(now, root), root, new Map());
    for (const key of new Set([...was.keys(), ...is.keys()])) {
      const a = was.get(key);
      const b = is.get(key);
      // A field the saved config lacks (an older version) takes its default now: not a conflict.
      if (a === undefined) continue;
      if (JSON.stringify(a) !== JSON.stringify(b)) out.push(`${key} ${JSON.stringify(a)} there, ${JSON.stringify(b)} now`);
    }
  }
  return out;
}
