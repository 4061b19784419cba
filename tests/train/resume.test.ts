import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CpuBackend } from '../../src/backend/cpu/cpu.js';
import { resumeConflicts } from '../../src/train/resume.js';
import { runLosses, tinyConfig, tinyRunRoot, tinyTrainer } from '../support/train.js';

describe('resume', () => {
  let root: { root: string; dataDir: string; remove: () => void };
  beforeAll(async () => {
    root = await tinyRunRoot('mdlm-resume-');
  });
  afterAll(() => root.remove());

  it('refuses a checkpoint saved with another objective, seed or batch shape, naming each field; other fields may change', async () => {
    const over = { 'objective.kind': 'mdlm', 'train.steps': '4' };
    await runLosses(tinyConfig(root.root, root.dataDir, 'run', over), new CpuBackend(), { maxSteps: 2 });
    const resume = async (extra: Record<string, string>) => {
      const t = await tinyTrainer(tinyConfig(root.root, root.dataDir, 'run', { ...over, ...extra }), new CpuBackend(), { resume: true, maxSteps: 1 });
      try {
        return await t.run();
      } finally {
        t.destroy();
      }
    };
    await expect(resume({ 'objective.weighting': 'empirical' })).rejects.toThrow(/saved by a run with other settings \(objective\.weighting "elbo" there, "empirical" now\)/);
    await expect(resume({ 'objective.schedule': 'cosine', 'train.seed': '99' })).rejects.toThrow(/objective\.schedule "linear" there, "cosine" now; train\.seed \d+ there, 99 now/);
    await expect(resume({ 'train.batchSize': '4' })).rejects.toThrow(/train\.batchSize 8 there, 4 now/);
    // The learning rate and the step count are this run's to choose.
    expect((await resume({ 'train.lr': '5e-3', 'train.steps': '6' })).step).toBe(3);
  });

  it('takes a field an older checkpoint lacks as no conflict', () => {
    const now = tinyConfig('/tmp', '/tmp/none', 'x');
    const saved = JSON.parse(JSON.stringify(now)) as { objective: Record<string, unknown> };
    delete saved.objective.maskTokenId;
    expect(resumeConflicts(saved, now)).toEqual([]);
    // A checkpoint of a version whose byte [MASK] was 263 is not resumed with today's 257 unasked.
    saved.objective.maskTokenId = 263;
    expect(resumeConflicts(saved, now)).toEqual([`objective.maskTokenId 263 there, ${JSON.stringify(now.objective.maskTokenId)} now`]);
    delete saved.objective.maskTokenId;
    saved.objective.kind = 'ar';
    expect(resumeConflicts(saved, now)).toEqual([`objective.kind "ar" there, ${JSON.stringify(now.objective.kind)} now`]);
  });
});
