/**
 * The configuration of a `mdlm train` run: the config resolved with the tokenizer its data uses
 * (so model.vocabSize and the [MASK] follow it) and, for `--init-from`, the checkpoint's model.
 * Returns the tokenizer the run saves with its checkpoints: the data's, with the [MASK] added
 * where masked diffusion needs one it lacks.
 */
import { type InitFrom, openInitFrom } from '../checkpoint/init_from.js';
import { isPreparedDataset } from '../data/dataset.js';
import { type Tokenizer, loadTokenizer } from '../data/tokenizer.js';
import { type ResolveOptions, mergeConfig, resolveConfig } from './load.js';
import { type DataConfig, DataSchema, type TrainConfig } from './schema.js';

export interface RunConfigOptions extends Omit<ResolveOptions, 'tokenizer' | 'initFrom'> {
  /** `--init-from`: a checkpoint, a run directory or a Hugging Face model directory. */
  initFrom?: string;
}

export interface RunConfig {
  readonly config: TrainConfig;
  /** The data's tokenizer, with the [MASK] where masked diffusion added it: what checkpoints save. */
  readonly tokenizer: Tokenizer;
  /** The --init-from checkpoint, for `initParams`. */
  readonly init?: InitFrom;
}

/** The tokenizer spec of a run's data: a prepared dataset's own (src/train/data.ts opens it so), else data.tokenizer. */
function dataTokenizerSpec(data: DataConfig): string {
  return data.path !== undefined && isPreparedDataset(data.path) ? data.path : data.tokenizer;
}

export async function resolveRunConfig(opts: RunConfigOptions): Promise<RunConfig> {
  const { initFrom, ...rest } = opts;
  const init = initFrom !== undefined ? openInitFrom(initFrom) : undefined;
  const base: ResolveOptions = { ...rest, ...(init ? { initFrom: init } : {}) };
  const data = DataSchema.safeParse(mergeConfig(base).cfg.data ?? {});
  // An invalid data section: the full resolution reports it with every other problem.
  if (!data.success) resolveConfig({ ...base, log: () => {} });
  const dataTokenizer = await loadTokenizer(dataTokenizerSpec(data.data!));
  const config = resolveConfig({ ...base, tokenizer: dataTokenizer });
  const o = config.objective;
  const tokenizer = o.kind === 'mdlm' && dataTokenizer.maskId === undefined && o.maskTokenId === dataTokenizer.vocabSize ? dataTokenizer.withMaskToken() : dataTokenizer;
  return { config, tokenizer, ...(init ? { init } : {}) };
}
