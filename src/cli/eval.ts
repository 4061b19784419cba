/**
 * `mdlm eval`: loss and perplexity of a model on data (ar: next-token cross-entropy; mdlm: the
 * ELBO bound at the objective's fixed noise levels — the trainer's eval, src/train/evaluate.ts),
 * and `--save-logits`: one forward on given ids written as safetensors (ids I32 [T], logits
 * F32 [T, vocab]) — what bench/hf_interop.py compares with Hugging Face transformers.
 * `--task FILE.jsonl`: accuracy on a likelihood-scored multiple-choice / cloze task (src/eval/tasks.ts);
 * `--gen-ppl FILE`: generative perplexity and entropy of samples under an AR model (src/eval/genppl.ts).
 */
import { existsSync, statSync } from 'node:fs';
import { Command } from 'commander';
import type { Backend } from '../backend/backend.js';
import { writeSafetensors } from '../checkpoint/safetensors.js';
import { ObjectiveSchema, TrainConfigSchema } from '../config/schema.js';
import { ConversationPlan, evalBatchCount, isMegatronDataset, isPreparedDataset, openPreparedData, openTokenSource, tokenizeText } from '../data/index.js';
import type { TokenSource } from '../data/source.js';
import { fail } from '../errors.js';
import { genPerplexity, readSamplesFile } from '../eval/genppl.js';
import { type CandidateScore, scoreCandidates } from '../eval/score.js';
import { readTaskFile, summarizeTask, taskCandidates } from '../eval/tasks.js';
import { modelLogits } from '../model/logits.js';
import { createBackend, parseBackendChoice } from '../runtime/backends.js';
import { checkWritableFile } from '../runtime/files.js';
import { type Evaluation, evaluateModel } from '../train/evaluate.js';
import { createObjective } from '../train/setup.js';
import { type OpenedModel, buildModel, openModel, requireTokenizer } from './model.js';
import { choiceOption, intOption } from './options.js';

type ObjectiveKind = 'ar' | 'mdlm';

interface EvalFlags {
  model: string;
  data?: string;
  split: 'train' | 'val';
  field: string;
  objective?: ObjectiveKind;
  json?: boolean;
  batches?: number | 'all';
  batchSize?: number;
  seqLen?: number;
  tokenizer?: string;
  backend: string;
  saveLogits?: string;
  ids?: string;
  text?: string;
  task?: string;
  elboSamples: number;
  seed?: number;
  genPpl?: string;
}

export function evalCommand(): Command {
  return new Command('eval')
    .description('Loss and perplexity (ar) or its ELBO bound (mdlm) of a model on data; --save-logits writes the logits of one forward')
    .requiredOption('--model <dir>', "checkpoint directory, a run's --out directory, or a Hugging Face Llama/Qwen model directory")
    .option('--data <path>', 'a .txt/.jsonl file or folder (tokenised with the model\'s tokenizer), a prepared dataset directory, a token shard or a Megatron .bin/.idx prefix')
    .option('--split <name>', 'which split of a prepared dataset directory: val | train', choiceOption('--split', ['val', 'train'] as const), 'val')
    .option('--field <name>', 'JSONL field holding the text', 'text')
    .option('--objective <kind>', "ar | mdlm (default: the checkpoint's; ar for a plain Hugging Face model)", choiceOption('--objective', ['ar', 'mdlm'] as const))
    .option('--batches <n>', "evaluate at most this many batches, or all (default: the run's train.evalBatches, as the trainer's eval; all for a model without a run config)", batchesOption)
    .option('--batch-size <n>', "rows per batch (default: the run's train.batchSize, else 8)", intOption('--batch-size', 1))
    .option('--seq-len <n>', "tokens per row (default: the model's context)", intOption('--seq-len', 1))
    .option('--tokenizer <spec>', 'tokenizer (byte | gpt2 | path) when the model directory has none')
    .option('--backend <name>', 'auto | cpu | webgpu | cuda', 'auto')
    .option('--json', 'print one JSON object on stdout')
    .option('--save-logits <file>', 'run one forward and write ids and logits to this .safetensors file')
    .option('--ids <list>', 'with --save-logits: comma-separated token ids')
    .option('--text <text>', "with --save-logits: text, tokenised with the model's tokenizer")
    .option('--task <file>', 'a JSONL task, one item a line {"context": ..., "choices": [...], "gold": index}: accuracy by log-likelihood (ar) or its ELBO (mdlm)')
    .option('--elbo-samples <n>', 'with --task on an mdlm model: Monte Carlo samples of the ELBO per choice', intOption('--elbo-samples', 1), 32)
    .option('--seed <n>', "with --task on an mdlm model: seed of the ELBO's masks (default: the run's train.seed, else 0)", intOption('--seed', 0))
    .option('--gen-ppl <file>', 'samples (a .jsonl file\'s --field, else one a line) to score under this AR model: generative perplexity and sample entropy')
    .action(async (o: EvalFlags) => {
      if (!o.data && !o.saveLogits && !o.task && !o.genPpl) fail('BAD_ARGUMENT', 'nothing to do: pass --data PATH to evaluate, --task FILE.jsonl, --gen-ppl SAMPLES, and/or --save-logits FILE with --ids or --text');
      if (o.saveLogits && (o.ids === undefined) === (o.text === undefined)) fail('BAD_ARGUMENT', '--save-logits needs exactly one of --ids 1,2,3 or --text TEXT');
      if (!o.saveLogits && (o.ids !== undefined || o.text !== undefined)) fail('BAD_ARGUMENT', '--ids and --text go with --save-logits FILE');
      if (o.saveLogits) checkWritableFile(o.saveLogits, '--save-logits'); // before the model runs
      const m = await openModel(o.model, o.tokenizer, o.objective);
      const objective: ObjectiveKind = o.objective ?? m.objective;
      const logitIds = o.saveLogits ? parseLogitIds(m, o) : undefined;
      const source = o.data ? await openEvalData(m, o) : undefined;
      if (o.genPpl && objective !== 'ar') fail('BAD_ARGUMENT', `--gen-ppl scores samples under an AR model; ${m.loaded.dir} runs as ${objective} (pass an ar checkpoint, or --objective ar)`);
      const task = o.task ? readTaskFile(o.task) : undefined;
      const samples = o.genPpl ? readSamplesFile(o.genPpl, o.field) : undefined;
      const log = (line: string): void => {
        if (!o.json) console.error(line);
      };
      const backend = await createBackend(parseBackendChoice(o.backend), log);
      const report: Record<string, unknown> = { model: m.loaded.dir, objective, backend: backend.name };
      try {
        log(`model: ${m.loaded.dir} (${objective}; d ${m.loaded.model.dModel}, ${m.loaded.model.nLayers} layers, vocab ${m.loaded.model.vocabSize}) on ${backend.description}`);
        if (source) {
          const e = await evaluate(backend, m, objective, source, o, log);
          Object.assign(report, { loss: e.loss, ppl: e.ppl, tokens: e.tokens, batches: e.batches, noise_levels: e.noiseLevels, data: source.path });
          const bound = objective === 'mdlm';
          if (!o.json) console.log(`${bound ? 'ELBO' : 'loss'} ${e.loss.toFixed(4)} nats/token  ppl${bound ? ' ≤' : ''} ${e.ppl.toFixed(3)}  (${e.batches} batches, ${e.tokens} tokens${bound ? `, ${e.noiseLevels} noise levels` : ''})`);
        }
        if (task && o.task) {
          const tok = requireTokenizer(m, '--task');
          const mdlmScoring = objective === 'mdlm';
          const candidates = taskCandidates(task, tok, m.loaded.model.seqLen, o.task, !mdlmScoring);
          const seqLen = Math.max(...candidates.map((c) => c.context.length + c.continuation.length));
          const rows = candidates.length * (mdlmScoring ? o.elboSamples : 1);
          const model = buildModel(backend, m, Math.min(o.batchSize ?? m.loaded.config?.train.batchSize ?? 8, rows), seqLen);
          let scores: CandidateScore[];
          try {
            const seed = o.seed ?? m.loaded.config?.train.seed ?? 0;
            scores = await scoreCandidates(model, candidates, mdlmScoring ? { kind: 'mdlm', maskId: m.maskId, samples: o.elboSamples, seed } : { kind: 'ar' });
          } finally {
            model.destroy();
          }
          const r = summarizeTask(task, scores);
          report.task = {
            file: o.task, items: r.items, acc: r.acc, acc_stderr: r.accStderr, acc_norm: r.accNorm, acc_norm_stderr: r.accNormStderr, chance: r.chance,
            scoring: mdlmScoring ? 'elbo' : 'log-likelihood', ...(mdlmScoring ? { elbo_samples: o.elboSamples, score_stderr_mean: r.meanScoreStderr } : {}),
          };
          const how = mdlmScoring ? `ELBO over ${o.elboSamples} samples a choice, mean standard error of a score ${r.meanScoreStderr.toFixed(3)} nats` : 'log-likelihood';
          if (!o.json) console.log(`task ${o.task}: acc ${r.acc.toFixed(4)} ± ${r.accStderr.toFixed(4)}  acc_norm ${r.accNorm.toFixed(4)} ± ${r.accNormStderr.toFixed(4)}  (${r.items} items, chance ${r.chance.toFixed(4)}; ${how})`);
        }
        if (samples && o.genPpl) {
          const tok = requireTokenizer(m, '--gen-ppl');
          const ids = samples.map((text) => tok.encode(text));
          const seqLen = Math.min(m.loaded.model.seqLen, Math.max(...ids.map((x) => x.length)));
          const model = buildModel(backend, m, Math.min(o.batchSize ?? 8, ids.length), Math.max(seqLen, 2));
          try {
            const g = await genPerplexity(model, ids, o.genPpl);
            report.gen_ppl = { file: o.genPpl, samples: g.samples, tokens: g.tokens, nll: g.nll, gen_ppl: g.genPpl, entropy: g.entropy, truncated: g.truncated };
            if (g.truncated > 0) log(`note: ${g.truncated} samples exceed the model's context of ${m.loaded.model.seqLen} tokens and are scored on their first ${m.loaded.model.seqLen}`);
            if (!o.json) console.log(`gen ppl ${g.genPpl.toFixed(3)} (nll ${g.nll.toFixed(4)} nats/token over ${g.tokens} tokens of ${g.samples} samples)  entropy ${g.entropy.toFixed(4)} nats`);
          } finally {
            model.destroy();
          }
        }
        if (logitIds && o.saveLogits) {
          await saveLogits(backend, m, objective, logitIds, o.saveLogits);
          report.logits_file = o.saveLogits;
          report.logits_tokens = logitIds.length;
          log(`wrote ${o.saveLogits}: ids [${logitIds.length}], logits [${logitIds.length}, ${m.loaded.model.vocabSize}] (${objective === 'ar' ? 'causal' : 'bidirectional'} attention)`);
        }
      } finally {
        backend.destroy();
      }
      if (o.json) console.log(JSON.stringify(report));
    });
}

/** `--batches`: a count ≥ 1, or all. */
function batchesOption(v: string): number | 'all' {
  if (v === 'all') return 'all';
  const x = Number(v);
  if (v.trim() === '' || !Number.isSafeInteger(x) || x < 1) fail('BAD_ARGUMENT', `--batches: expected an integer ≥ 1 or all, got "${v}"`);
  return x;
}

function parseLogitIds(m: OpenedModel, o: EvalFlags): Int32Array {
  const vocab = m.loaded.model.vocabSize;
  let ids: number[];
  if (o.ids !== undefined) {
    ids = o.ids.split(',').map((s) => s.trim()).filter((s) => s !== '').map((s) => {
      const v = Number(s);
      if (!Number.isInteger(v) || v < 0 || v >= vocab) fail('BAD_ARGUMENT', `--ids: "${s}" is not a token id in [0, ${vocab})`);
      return v;
    });
  } else ids = requireTokenizer(m, '--text').encode(o.text!);
  if (ids.length === 0) fail('BAD_ARGUMENT', `--save-logits: no tokens to run (--ids or --text is empty)`);
  if (ids.length > m.loaded.model.seqLen) fail('BAD_ARGUMENT', `--save-logits: ${ids.length} tokens exceed the model's context of ${m.loaded.model.seqLen}`);
  return Int32Array.from(ids);
}

/** The data as a token source: prepared directory (one split), shard / Megatron dataset, or text tokenised here. */
async function openEvalData(m: OpenedModel, o: EvalFlags): Promise<TokenSource> {
  const path = o.data!;
  if (!existsSync(path) && !isMegatronDataset(path)) fail('NOT_FOUND', `--data ${path} does not exist`);
  let source: TokenSource;
  if (isPreparedDataset(path)) {
    const d = await openPreparedData(path);
    const tok = m.tokenizer;
    if (tok && (tok.vocabSize !== d.tokenizer.vocabSize || tok.eosId !== d.tokenizer.eosId)) {
      fail('BAD_CONFIG', `${path} was prepared with the ${d.tokenizer.name} tokenizer (vocab ${d.tokenizer.vocabSize}, EOS ${d.tokenizer.eosId}), the model uses ${tok.name} (vocab ${tok.vocabSize}, EOS ${tok.eosId}); prepare the data with the model's tokenizer`);
    }
    source = o.split === 'val' ? d.val : d.train;
  } else if (isMegatronDataset(path) || (statSync(path).isFile() && path.endsWith('.bin'))) {
    source = openTokenSource(path);
  } else {
    source = await tokenizeText(path, requireTokenizer(m, 'tokenising --data text'), o.field);
  }
  if (source.vocabSize !== undefined && source.vocabSize > m.loaded.model.vocabSize) {
    fail('BAD_CONFIG', `${source.path} holds token ids up to ${source.vocabSize - 1}, beyond the model's vocabulary of ${m.loaded.model.vocabSize}`);
  }
  return source;
}

async function evaluate(backend: Backend, m: OpenedModel, kind: ObjectiveKind, source: TokenSource, o: EvalFlags, log: (line: string) => void): Promise<Evaluation> {
  const run = m.loaded.config;
  const seqLen = o.seqLen ?? m.loaded.model.seqLen;
  if (seqLen > m.loaded.model.seqLen) fail('BAD_ARGUMENT', `--seq-len ${seqLen} exceeds the model's context of ${m.loaded.model.seqLen}`);
  // Chat data as the fine-tuning run evaluated it: rows of whole conversations, the loss on the assistant's tokens.
  const rows = source.lossMask ? { conversations: run?.sft ?? TrainConfigSchema.parse({ objective: { kind } }).sft } : {};
  const windows = rows.conversations ? new ConversationPlan(source, seqLen, rows.conversations).rows : Math.floor((source.length - 1) / seqLen);
  if (windows < 1) fail('BAD_ARGUMENT', `${source.path} holds ${source.length} tokens, fewer than one row of --seq-len ${seqLen} + 1; lower --seq-len or give more data`);
  const batchSize = Math.min(o.batchSize ?? run?.train.batchSize ?? 8, windows);
  const canPack = source.eosId !== undefined || source.documentStarts !== undefined;
  const mode = canPack ? (run?.data.mode ?? 'packed') : 'window';
  // The run's objective settings (schedule, noise levels, seed), so the ELBO is the trainer's.
  const section = run && run.objective.kind === kind ? run.objective : ObjectiveSchema.parse({ kind });
  const objective = createObjective(section, run?.train.seed ?? 0, m.maskId);
  const model = buildModel(backend, m, batchSize, seqLen);
  try {
    const available = evalBatchCount(source, { seqLen, batchSize, ...rows });
    // As many batches as the trainer's eval of this run, unless --batches says otherwise.
    const limit = o.batches ?? run?.train.evalBatches ?? 'all';
    const count = limit === 'all' ? available : Math.min(limit, available);
    const why = o.batches !== undefined ? '--batches' : limit === 'all' ? 'no run config' : "the run's train.evalBatches, as the trainer's eval";
    log(`data: ${source.path}: ${source.length} tokens; batches of ${batchSize} × ${seqLen} (${rows.conversations ? 'conversations' : mode}); ${count} of ${available} batches (${why}; --batches all or a number changes it)`);
    return await evaluateModel(model, objective, source, { seqLen, batchSize, mode, ...rows, maxBatches: count });
  } finally {
    model.destroy();
  }
}

async function saveLogits(backend: Backend, m: OpenedModel, kind: ObjectiveKind, ids: Int32Array, file: string): Promise<void> {
  const model = buildModel(backend, m, 1, ids.length);
  try {
    const logits = await modelLogits(model, kind === 'ar')(ids, 1, ids.length);
    writeSafetensors(file, {
      ids: { dtype: 'I32', shape: [ids.length], data: ids },
      logits: { dtype: 'F32', shape: [ids.length, m.loaded.model.vocabSize], data: logits },
    }, { metadata: { producer: 'mdlm', model: m.loaded.dir, objective: kind } });
  } finally {
    model.destroy();
  }
}
