/** `mdlm data prepare`: tokenize text, or render conversations, into train/val shards (see src/data/prepare.ts). */
import { Command, InvalidArgumentError } from 'commander';
import { DATA_FORMATS, type DataFormat } from '../config/schema.js';
import cliProgress from 'cli-progress';
import { DEFAULT_VAL_FRACTION, prepareData, displayPath, type PrepareProgress } from '../data/prepare.js';
import { DEFAULT_VAL_TOKENS } from '../data/split.js';
import { choiceOption } from './options.js';

function parseFraction(v: string): number {
  const x = Number(v);
  if (!Number.isFinite(x) || x < 0 || x >= 1) throw new InvalidArgumentError(`expected a number in [0, 1), got "${v}"`);
  return x;
}

function parseCount(v: string): number {
  const x = Number(v);
  if (v.trim() === '' || !Number.isSafeInteger(x) || x < 0) throw new InvalidArgumentError(`expected a non-negative integer, got "${v}"`);
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
    .description('tokenize text (a text or JSON Lines file, or a directory of them; default: the built-in Brown corpus), or conversations for fine-tuning (--format chat), into train.bin / val.bin shards')
    .option('--input <path>', 'a UTF-8 text file (documents separated by blank lines), a JSON Lines file (one object per line), or a directory of them (default: built-in Brown corpus)')
    .option('--format <format>', 'tokens: text, every token trained on; chat: JSON Lines of conversations, the assistant\'s tokens marked for the loss', choiceOption('--format', DATA_FORMATS), 'tokens')
    .option('--chat-template <file>', 'chat: a Jinja chat template to render the conversations with (default: the tokenizer\'s chat_template, else the built-in one)')
    .option('--field <name>', 'JSONL field holding the text', 'text')
    .requiredOption('--tokenizer <spec>', 'byte | gpt2 | path to a tokenizer.json (or a directory containing one)')
    .requiredOption('--out <dir>', 'output directory')
    .option('--val-fraction <x>', 'probability that a document goes to val.bin', parseFraction, DEFAULT_VAL_FRACTION)
    .option('--val-tokens <n>', 'least number of tokens in val.bin, up to a tenth of the data (training documents move there until it has them)', parseCount, DEFAULT_VAL_TOKENS)
    .option('--seed <n>', 'seed of the train/val split', parseSeed, 0)
    .option('--no-progress', 'no progress bar')
    .addHelpText(
      'after',
      `
Files are recognised by content: any UTF-8 text without NUL bytes is read; a file is JSON Lines
when its name ends in .jsonl or .ndjson, or (for names other than .txt) when its first non-blank
line is a JSON object. Binary files and invalid UTF-8 are refused with the byte offset; in a
directory, files that start like binary ones are skipped and named.

Split: each document goes to val.bin with probability --val-fraction (a seeded draw per
document). If that leaves val.bin fewer than --val-tokens tokens (at most a tenth of all tokens),
the training documents with the smallest draws move to it until it has them. val.bin always gets
at least one document and train.bin keeps at least one. See docs/DATA_FORMAT.md.

Chat data (--format chat): each line is {"messages": [{"role": "system"|"user"|"assistant",
"content": "..."}, ...]} or {"prompt": "...", "response": "..."} (and an optional "system"),
rendered with the chat template (tokenizer_config.json's chat_template, --chat-template, or the
built-in <|user|> / <|assistant|> one), the assistant's tokens marked as those the loss is on. A
malformed line, an unknown role or a template that fails is an error naming the file and line,
and nothing is written. The template is saved with the tokenizer in --out.`,
    )
    .action(async (o: { input?: string; format: DataFormat; chatTemplate?: string; field: string; tokenizer: string; out: string; valFraction: number; valTokens: number; seed: number; progress: boolean }) => {
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
        const meta = await prepareData({
          input: o.input, format: o.format, ...(o.chatTemplate !== undefined ? { chatTemplate: o.chatTemplate } : {}), field: o.field, tokenizer: o.tokenizer, out: o.out,
          valFraction: o.valFraction, valTokens: o.valTokens, seed: o.seed, onProgress,
        });
        bar?.update(bar.getTotal());
        bar?.stop();
        const skipped = meta.source.skipped ?? [];
        if (skipped.length) process.stderr.write(`skipped ${skipped.length} binary file(s) in ${o.input}: ${skipped.slice(0, 5).join(', ')}${skipped.length > 5 ? ', …' : ''}\n`);
        const out = displayPath(o.out);
        const docs = meta.chat ? 'conversations' : 'documents';
        process.stdout.write(
          `wrote ${out}/train.bin: ${meta.train.documents} ${docs}, ${meta.train.tokens} tokens (${meta.train.dtype})\n` +
            `wrote ${out}/val.bin: ${meta.val.documents} ${docs}, ${meta.val.tokens} tokens\n` +
            `tokenizer ${meta.tokenizer.name}: vocab ${meta.tokenizer.vocabSize}, eos ${meta.tokenizer.eosId}, mask ${meta.tokenizer.maskId ?? 'none'}\n` +
            (meta.chat ? `chat template: ${meta.chat.template}; ${meta.chat.lossTokens} of ${meta.train.tokens + meta.val.tokens} tokens are the assistant's (in the loss)\n` : ''),
        );
      } catch (e) {
        bar?.stop();
        throw e;
      }
    });
  return data;
}
