/**
 * What a resumed run must share with the run that saved the checkpoint: the objective (the mask id,
 * the noise schedule and weighting decide what the model learns), the seed (the data order and the
 * masks), the batch shape, the data's tokenizer and format, and how conversations fill the rows
 * (sft). Other fields (steps, the learning-rate schedule, eval and save intervals) may change on
 * resume.
 */
import { configLeaves } from '../config/leaves.js';
import type { TrainConfig } from '../config/schema.js';

const KEPT_ON_RESUME = ['objective', 'train.seed', 'train.batchSize', 'train.gradAccum', 'data.tokenizer', 'data.format', 'sft'] as const;

function at(cfg: unknown, path: string): unknown {
  return path.split('.').reduce<unknown>((v, k) => (v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), cfg);
}

/** The fields a resume must keep that differ between the saved config and this run's, as "field saved there, now here". */
export function resumeConflicts(saved: unknown, now: TrainConfig): string[] {
  const out: string[] = [];
  for (const root of KEPT_ON_RESUME) {
    const was = configLeaves(at(saved, root), root);
    const is = configLeaves(at(now, root), root);
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
