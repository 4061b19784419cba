/** `mdlm data prepare`: tokenize text into train/val shards (see src/data/prepare.ts). */
import { Command, InvalidArgumentError } from 'commander';
import cliProgress from 'cli-progress';
import { prepareData, displayPath, type PrepareProgress } from '../data/prepare.js';

function parseFraction(v: string): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x < 0 || x >= 1) throw new InvalidArgumentError(`expected a number in [0, 1), got "${v}"`);
  return x;
}

function parseSeed(v: string): number {
  const x = Number(v);
  if (!Number.isSafeInteger(x) || x < 0) throw new InvalidArgumentError(`expected a non-negative integer, got "${v}"`);
  return x;
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 2 ** 20) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 2 ** 30) return `${(n / 2 ** 20).toFixed(1)} MiB`;
  return `${(n / 2 ** 30).toFixed(2)} GiB`;
}

export function dataCommand(): Command {
  const data = new Command('data').description('prepare and inspect training data');
  data
    .command('prepare')
    .description('tokenize text (.txt, .jsonl, or a directory of them; default: the built-in Brown corpus) into train.bin / val.bin shards')
    .option('--input <path>', '.txt file (documents separated by blank lines), .jsonl file, or directory (default: built-in Brown corpus)')
    .option('--field <name>', 'JSONL field holding the text', 'text')
    .requiredOption('--tokenizer <spec>', 'byte | gpt2 | path to a tokenizer.json (or a directory containing one)')
    .requiredOption('--out <dir>', 'output directory')
    .option('--val-fraction <x>', 'expected fraction of documents for val.bin', parseFraction, 0.005)
    .option('--seed <n>', 'seed of the train/val split', parseSeed, 0)
    .option('--no-progress', 'no progress bar')
    .action(async (o: { input?: string; field: string; tokenizer: string; out: string; valFraction: number; seed: number; progress: boolean }) => {
      const showBar = o.progress && process.stderr.isTTY;
      let bar: cliProgress.SingleBar | undefined;
      const onProgress = (p: PrepareProgress) => {
        if (!showBar) return;
        if (!bar) {
          bar = new cliProgress.SingleBar(
            {
              stream: process.stderr,
              format: p.unit === 'bytes' ? ' {bar} {percentage}% | {doneH}/{totalH} | {documents} docs, {tokens} tokens | eta {eta_formatted}' : ' {bar} {percentage}% | {value}/{total} docs | {tokens} tokens | eta {eta_formatted}',
              hideCursor: true,
            },
            cliProgress.Presets.shades_classic,
          );
          bar.start(p.total, 0, { doneH: '0 B', totalH: formatBytes(p.total), documents: 0, tokens: 0 });
        }
        bar.update(p.done, { doneH: formatBytes(p.done), totalH: formatBytes(p.total), documents: p.documents, tokens: p.tokens });
      };
      try {
        const meta = await prepareData({ input: o.input, field: o.field, tokenizer: o.tokenizer, out: o.out, valFraction: o.valFraction, seed: o.seed, onProgress });
        bar?.update(bar.getTotal());
        bar?.stop();
        const out = displayPath(o.out);
        process.stdout.write(
          `wrote ${out}/train.bin: ${meta.train.documents} documents, ${meta.train.tokens} tokens (${meta.train.dtype})\n` +
            `wrote ${out}/val.bin: ${meta.val.documents} documents, ${meta.val.tokens} tokens\n` +
            `tokenizer ${meta.tokenizer.name}: vocab ${meta.tokenizer.vocabSize}, eos ${meta.tokenizer.eosId}, mask ${meta.tokenizer.maskId ?? 'none'}\n`,
        );
      } catch (e) {
        bar?.stop();
        throw e;
      }
    });
  return data;
}
