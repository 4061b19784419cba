/**
 * `mdlm rl`: reinforcement learning with verifiable rewards from a fine-tuned checkpoint, GRPO for
 * autoregressive models (src/rl/grpo_ar.ts). Prompts come from a JSONL file of {"prompt",
 * "answer"} rows, rendered with the checkpoint's chat template as `mdlm chat` renders a user's
 * turn; the reward is built in (`exact-match`, `format:REGEX`) or a module whose default export
 * scores (prompt, completion, answer). The reference of the KL penalty is the starting checkpoint.
 * Each step's metrics (reward mean and std, KL, clip fraction, completion length, loss, grad norm;
 * held-out reward where --eval-prompts is given) go to OUT/metrics.jsonl, and the policy is saved
 * as a checkpoint (every --save-every steps and at the end) that `mdlm chat`, `sample` and `eval`
 * read; its trainer_state.json records the RL settings.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { saveCheckpoint } from '../checkpoint/checkpoint.js';
import { chatTemplateFor } from '../data/chat.js';
import { fail } from '../errors.js';
import { AdamW } from '../optim/adamw.js';
import { type GrpoOptions, GrpoAr, promptsOfStep } from '../rl/grpo_ar.js';
import { parsePrompts, rewardFrom } from '../rl/reward.js';
import { createBackend, parseBackendChoice } from '../runtime/backends.js';
import { METRICS_FILE, openRunDir } from '../train/run_dir.js';
import { buildModel, openModel, requireTokenizer } from './model.js';
import { intOption, numberOption } from './options.js';

interface RlFlags {
  checkpoint: string;
  prompts: string;
  reward: string;
  out: string;
  evalPrompts?: string;
  steps: number;
  groupSize: number;
  promptsPerStep: number;
  maxNewTokens: number;
  temperature: number;
  clip: number;
  beta: number;
  iterations: number;
  lr: number;
  saveEvery: number;
  evalEvery: number;
  seed: number;
  backend: string;
  overwrite?: boolean;
}

export function rlCommand(): Command {
  return new Command('rl')
    .description('Reinforcement learning with verifiable rewards (GRPO, ar checkpoints) from a fine-tuned checkpoint')
    .requiredOption('--checkpoint <dir>', "the starting checkpoint (also the KL penalty's reference), or a run's --out directory")
    .requiredOption('--prompts <file>', 'JSONL prompts: {"prompt": "...", "answer": "..."} per line (answer optional)')
    .requiredOption('--reward <spec>', 'exact-match | format:REGEX | a module path whose default export is (prompt, completion, answer) => number')
    .requiredOption('--out <dir>', 'run directory: metrics.jsonl and checkpoints')
    .option('--eval-prompts <file>', 'held-out prompts: the mean reward of greedy completions, logged at --eval-every and at the end')
    .option('--steps <n>', 'GRPO steps', intOption('--steps', 1), 100)
    .option('--group-size <g>', 'completions sampled per prompt', intOption('--group-size', 2), 8)
    .option('--prompts-per-step <p>', 'prompts a step', intOption('--prompts-per-step', 1), 8)
    .option('--max-new-tokens <n>', 'tokens a completion has at most', intOption('--max-new-tokens', 1), 64)
    .option('--temperature <t>', "rollouts' sampling temperature (> 0)", numberOption('--temperature', 0, Infinity, true), 1)
    .option('--clip <eps>', 'ε of the clipped ratio', numberOption('--clip', 0, 1, true), 0.2)
    .option('--beta <b>', 'KL penalty coefficient (0: no reference model)', numberOption('--beta', 0), 0.01)
    .option('--iterations <mu>', 'optimizer updates on each batch of rollouts', intOption('--iterations', 1), 2)
    .option('--lr <lr>', 'learning rate (constant)', numberOption('--lr', 0, Infinity, true), 1e-5)
    .option('--save-every <n>', 'save a checkpoint every n steps (0: at the end only)', intOption('--save-every', 0), 0)
    .option('--eval-every <n>', 'evaluate --eval-prompts every n steps (0: at the end only)', intOption('--eval-every', 0), 0)
    .option('--seed <n>', 'seed of the prompt order and the rollouts', intOption('--seed', 0), 0)
    .option('--backend <name>', 'auto | cpu | webgpu | cuda', 'auto')
    .option('--overwrite', "replace an earlier run's checkpoints and metrics in --out")
    .action(async (o: RlFlags) => {
      const m = await openModel(o.checkpoint, undefined);
      if (m.objective !== 'ar') fail('BAD_ARGUMENT', `mdlm rl runs GRPO on ar checkpoints; ${m.loaded.dir} is an ${m.objective} model (diffusion RL is not built yet)`);
      const config = m.loaded.config;
      if (!config) fail('BAD_ARGUMENT', `${m.loaded.dir} has no mdlm run config (a Hugging Face model): fine-tune it first (mdlm train --init-from ${m.loaded.dir}) and start RL from that run`);
      const tokenizer = requireTokenizer(m, 'rl');
      const template = chatTemplateFor(tokenizer, `${m.loaded.dir}/tokenizer_config.json`);
      const prompts = parsePrompts(readFileSync(o.prompts, 'utf8'), o.prompts);
      const held = o.evalPrompts !== undefined ? parsePrompts(readFileSync(o.evalPrompts, 'utf8'), o.evalPrompts) : undefined;
      const reward = await rewardFrom(o.reward);
      // Rows as long as the longest prompt plus a completion need, within the model's context.
      const longest = Math.max(...[...prompts, ...(held ?? [])].map((p) => template.encode([{ role: 'user', content: p.prompt }], true, p.where).ids.length));
      const seqLen = Math.min(m.loaded.model.seqLen, longest + o.maxNewTokens);
      const opts: GrpoOptions = {
        groupSize: o.groupSize, promptsPerStep: o.promptsPerStep, maxNewTokens: o.maxNewTokens, temperature: o.temperature, clip: o.clip, beta: o.beta, iterations: o.iterations, seed: o.seed,
      };
      const runDir = openRunDir(o.out, { resume: false, overwrite: o.overwrite ?? false, log: (l) => console.error(l) });
      const backend = await createBackend(parseBackendChoice(o.backend));
      const rows = o.groupSize * o.promptsPerStep;
      const model = buildModel(backend, m, rows, seqLen);
      const reference = o.beta > 0 ? buildModel(backend, m, rows, seqLen) : undefined;
      let grpo: GrpoAr | undefined;
      try {
        const t = config.train;
        const optimizer = new AdamW(model.store, { beta1: t.beta1, beta2: t.beta2, eps: t.adamEps, weightDecay: t.weightDecay, gradClip: t.gradClip });
        grpo = new GrpoAr({ model, optimizer, ...(reference ? { reference } : {}), tokenizer, template, reward }, opts);
        const metrics = join(o.out, METRICS_FILE);
        const save = async (step: number): Promise<string> => {
          optimizer.flush();
          const values = (await backend.download(model.store.value)) as Float32Array;
          const tensors: Record<string, Float32Array> = {};
          for (const p of model.store.list) tensors[p.name] = values.slice(p.offset, p.offset + p.grad.size);
          return saveCheckpoint(o.out, { config: { ...config, out: o.out }, tensors, trainerState: { step, rl: { ...opts, lr: o.lr, reward: o.reward, from: m.loaded.dir } }, tokenizerFiles: tokenizer.files() }, { eosTokenId: tokenizer.eosId });
        };
        for (let s = 0; s < o.steps; s++) {
          const started = performance.now();
          const step = await grpo.step(s, promptsOfStep(prompts, s, o.promptsPerStep, o.seed), o.lr);
          const last = s + 1 === o.steps;
          const evalReward = held && ((o.evalEvery > 0 && (s + 1) % o.evalEvery === 0) || last) ? await grpo.evaluate(held) : undefined;
          const line = { ...step, seconds: (performance.now() - started) / 1000, ...(evalReward !== undefined ? { eval_reward: evalReward } : {}) };
          appendFileSync(metrics, JSON.stringify(line) + '\n');
          console.log(`step ${line.step}: reward ${step.reward_mean.toFixed(3)} ± ${step.reward_std.toFixed(3)}, kl ${step.kl.toFixed(4)}, clip ${step.clip_fraction.toFixed(3)}, length ${step.completion_len.toFixed(1)}${evalReward !== undefined ? `, held-out reward ${evalReward.toFixed(3)}` : ''}`);
          if ((o.saveEvery > 0 && (s + 1) % o.saveEvery === 0) || last) console.log(`saved ${await save(s + 1)}`);
        }
      } finally {
        grpo?.destroy();
        reference?.destroy();
        model.destroy();
        backend.destroy();
        runDir.release();
      }
    });
}
